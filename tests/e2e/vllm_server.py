"""Start vLLM (CPU) from the end-to-end venv on 127.0.0.1, wait for it, and stop it: the e2e tests' server."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

E2E = Path(os.environ.get("TAU_ENV_E2E_DIR", "/nonexistent"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def vllm(args: list[str], *, log_name: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """vLLM serving ``E2E/smollm2`` with ``args`` added; yields its API root (``http://127.0.0.1:PORT/v1``).

    Skips the test when ``tests/e2e/setup_vllm_cpu.sh`` has not prepared ``TAU_ENV_E2E_DIR``.
    """
    python, model = E2E / "venv" / "bin" / "python", E2E / "smollm2"
    if not (python.exists() and (model / "config.json").exists()):
        pytest.skip("run tests/e2e/setup_vllm_cpu.sh DIR and set TAU_ENV_E2E_DIR=DIR")
    port = _free_port()
    full_env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_CPU_KVCACHE_SPACE": "2",
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        **(env or {}),
    }
    cmd = [str(python), "-m", "vllm.entrypoints.launchers.api_server.entry", "--model", str(model)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--enforce-eager", *args]
    log_path = E2E / log_name
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, env=full_env, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.time() + 600
            while time.time() < deadline:
                if proc.poll() is not None:
                    pytest.fail(f"vLLM exited with {proc.returncode}; see {log_path}")
                try:
                    with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    time.sleep(2)
            else:
                pytest.fail(f"vLLM did not become healthy in 10 minutes; see {log_path}")
            yield f"{url}/v1"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
