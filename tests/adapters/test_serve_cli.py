"""``tau-env serve`` as a user runs it: a real process on loopback, played by the OpenEnv client."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("openenv")
pytest.importorskip("fastapi")

from tau_env.adapters.openenv_client import TauEnvClient  # noqa: E402

import tau_env  # noqa: E402
from tau_env import OracleAgent, ScriptedUser, run_episode  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def play(url: str, task_id: str, token: str | None = None):
    agent = OracleAgent()
    agent.reset(task=tau_env.make("harbor-bank-v0").domain.task(task_id))
    async with TauEnvClient(url, token=token) as client:
        result = await client.reset(task_id=task_id, seed=3)
        while not result.done:
            result = await client.step(agent(result.observation))
        return result


@pytest.mark.parametrize("token", [None, "s3cret-token-0123456789abcdef"])
def test_the_command_serves_episodes_with_the_envs_reward(tmp_path, token):
    port = free_port()
    env = (
        {**os.environ, "TAU_ENV_SERVE_TOKEN": token}
        if token
        else {k: v for k, v in os.environ.items() if k != "TAU_ENV_SERVE_TOKEN"}
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tau_env.cli", "serve", "harbor-bank-v0", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read()
                time.sleep(0.1)
        result = asyncio.run(play(url, "travel_notice_simple", token))
        expected = run_episode(
            tau_env.make("harbor-bank-v0"), OracleAgent(), ScriptedUser(), "travel_notice_simple", seed=3
        )
        assert result.reward == expected.reward == 1.0
        if token:  # the same server refuses a client without the token
            with pytest.raises(Exception):  # noqa: B017  (the client's own error type for a refused handshake)
                asyncio.run(play(url, "travel_notice_simple", None))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()
