"""200 concurrent sessions on loopback through the real openenv-core client: no cross-talk (each
session's final database is its own episode's) and the env's reward in every one.
"""

from __future__ import annotations

import asyncio

import pytest

import tau_env
from tau_env import OracleAgent, ScriptedUser, run_episode

pytest.importorskip("fastapi")
pytest.importorskip("openenv.core")

from tau_env.adapters.openenv import BackgroundServer, ServeLimits, create_app  # noqa: E402
from tau_env.adapters.openenv_client import TauEnvClient  # noqa: E402

N = 200


def expected_outcomes(env_id, plan):
    env = tau_env.make(env_id)
    out = {}
    for task_id, seed in set(plan):
        r = run_episode(env, OracleAgent(), ScriptedUser(), task_id, seed=seed)
        out[task_id, seed] = (r.reward, env.db_digest(), r.steps)
    return out


async def one(url, domain, task_id, seed, start):
    agent = OracleAgent()
    agent.reset(task=domain.task(task_id), seed=seed)
    client = TauEnvClient(url, message_timeout_s=120)
    await client.connect()
    try:
        await start.wait()  # every session is open before any plays: all 200 live at once
        result = await client.reset(task_id=task_id, seed=seed)
        while not result.done:
            result = await client.step(agent(result.observation))
            await asyncio.sleep(0)
        state = await client.state()
        return result.reward, state["db_digest"], state["step_count"], state["session_id"]
    finally:
        await client.close()


def test_200_concurrent_sessions_without_cross_talk():
    env_id = "harbor-bank-v0"
    domain = tau_env.make(env_id).domain
    tasks = [t.id for t in domain.tasks]
    plan = [(tasks[i % len(tasks)], i % 3) for i in range(N)]
    expected = expected_outcomes(env_id, plan)
    app = create_app(env_id, limits=ServeLimits(max_sessions=N))

    async def main(url):
        start = asyncio.Event()
        runs = [asyncio.create_task(one(url, domain, t, s, start)) for t, s in plan]
        for _ in range(3000):  # wait until all are connected (the server counts them)
            if len(app.sessions.live) == N:
                break
            await asyncio.sleep(0.01)
        assert len(app.sessions.live) == N
        start.set()
        return await asyncio.gather(*runs)

    with BackgroundServer(app) as url:
        results = asyncio.run(main(url))
    assert len({sid for *_, sid in results}) == N
    for (task_id, seed), (reward, digest, steps, _) in zip(plan, results):
        assert (reward, digest, steps) == expected[task_id, seed], task_id
