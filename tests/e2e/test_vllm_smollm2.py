"""End to end with only real parts: vLLM (CPU) serving SmolLM2-135M-Instruct in both seats.

Slow (minutes). Needs the environment prepared by ``tests/e2e/setup_vllm_cpu.sh DIR`` and
``TAU_ENV_E2E_DIR=DIR``; ``.ci/run`` does both. The test starts the server on 127.0.0.1 itself,
runs ``tau-env eval`` against it on a few Harbor Bank tasks, and checks that the run completes
with full metrics, whatever the model scores.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.vllm_server import vllm

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def vllm_server():
    tools = [
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--chat-template",
        str(HERE / "smollm2_tools.jinja"),
    ]
    with vllm(["--served-model-name", "smollm2", *tools, "--max-model-len", "8192"], log_name="vllm-server.log") as url:
        yield url


def test_real_model_in_both_seats_completes_with_full_metrics(vllm_server, tmp_path):
    out = tmp_path / "run"
    tasks = ["lost_card_standard_shipping", "travel_notice_simple"]
    cmd = [
        sys.executable,
        "-m",
        "tau_env.cli",
        "eval",
        "--domain",
        "harbor-bank-v0",
        "--agent-model",
        "smollm2",
        "--agent-base-url",
        vllm_server,
        "--user-model",
        "smollm2",
        "--user-base-url",
        vllm_server,
        "--max-steps",
        "8",
        "--max-tokens",
        "48",
        "--timeout",
        "300",
        "--concurrency",
        "2",
        "--quiet",
        "--retrieval",
        "none",
        "--no-cache",
        "--out",
        str(out),
    ]
    for t in tasks:
        cmd += ["--task", t]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["episodes"] == len(tasks) and metrics["infrastructure_errors"] == 0
    assert {"pass@1", "pass@1_se", "pass^k", "terminations", "mean_prompt_tokens", "time_to_done_s"} <= metrics.keys()
    assert metrics["mean_prompt_tokens"] > 0
    records = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(r["task_id"] for r in records) == sorted(tasks)
    assert all(r["steps"] > 0 and r["usage"]["agent"]["requests"] > 0 for r in records)
    config = json.loads((out / "config.json").read_text())
    assert config["agent"]["model"] == "smollm2" and "user_prompt_version" in config
    assert (out / "report.html").exists() and (out / "summary.txt").exists()
