"""tau-env serve against the in-process env: steps/s and step latency (p50/p99).

    python benchmarks/serve.py           # ~1 min on 2 cores
    python benchmarks/serve.py --quick   # smoke run: every row, a few episodes (seconds)

A step is one agent action and the scripted user's turns that follow it (what one ``step`` of the
Gymnasium view and one OpenEnv ``step`` do). The oracle plays harbor-bank-v0's tasks in turn. Rows:
the in-process Gymnasium view; the server over WebSocket with openenv-core's client (1 and C
concurrent sessions); the server over HTTP (requests, one keep-alive session). Needs the ``openenv`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import json_line, machine, print_table, stats  # noqa: E402
from tau_env.adapters.gym import TauGymEnv  # noqa: E402
from tau_env.adapters.openenv import SESSION_HEADER, BackgroundServer, ServeLimits, create_app  # noqa: E402
from tau_env.adapters.openenv_client import TauEnvClient  # noqa: E402  (openenv-core: imported before timing)

import tau_env  # noqa: E402

ENV_ID = "harbor-bank-v0"


def plan(n: int) -> list[str]:
    tasks = [t.id for t in tau_env.make(ENV_ID).domain.tasks]
    return [tasks[i % len(tasks)] for i in range(n)]


def in_process(tasks: list[str]) -> tuple[list[int], float]:
    env, agent, lat = TauGymEnv(ENV_ID), tau_env.OracleAgent(), []
    t0 = time.perf_counter()
    for task_id in tasks:
        obs, _ = env.reset(seed=0, options={"task_id": task_id})
        agent.reset(task=env.env.task)
        done = False
        while not done:
            a = agent(obs)
            s = time.perf_counter_ns()
            obs, _, term, trunc, _ = env.step(a)
            lat.append(time.perf_counter_ns() - s)
            done = term or trunc
    return lat, time.perf_counter() - t0


async def ws_session(url: str, tasks: list[str], lat: list[int]) -> None:
    domain = tau_env.make(ENV_ID).domain
    agent = tau_env.OracleAgent()
    async with TauEnvClient(url) as client:
        for task_id in tasks:
            r = await client.reset(task_id=task_id, seed=0)
            agent.reset(task=domain.task(task_id))
            while not r.done:
                a = agent(r.observation)
                s = time.perf_counter_ns()
                r = await client.step(a)
                lat.append(time.perf_counter_ns() - s)


def over_ws(url: str, tasks: list[str], clients: int) -> tuple[list[int], float]:
    lat: list[int] = []

    async def main() -> None:
        await asyncio.gather(*(ws_session(url, tasks[i::clients], lat) for i in range(clients)))

    t0 = time.perf_counter()
    asyncio.run(main())
    return lat, time.perf_counter() - t0


def over_http(url: str, tasks: list[str]) -> tuple[list[int], float]:
    import requests

    domain, agent, lat = tau_env.make(ENV_ID).domain, tau_env.OracleAgent(), []
    t0 = time.perf_counter()
    with requests.Session() as http:
        sid = None
        for task_id in tasks:
            head = {SESSION_HEADER: sid} if sid else {}
            r = http.post(f"{url}/reset", json={"task_id": task_id, "seed": 0}, headers=head, timeout=60)
            sid = r.headers[SESSION_HEADER]
            out: dict[str, Any] = r.json()
            agent.reset(task=domain.task(task_id))
            while not out["done"]:
                a = agent(out["observation"])
                s = time.perf_counter_ns()
                out = http.post(f"{url}/step", json={"action": a}, headers={SESSION_HEADER: sid}, timeout=60).json()
                lat.append(time.perf_counter_ns() - s)
    return lat, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=300, help="episodes per row (default 300)")
    ap.add_argument("--clients", type=int, default=32, help="concurrent WebSocket sessions of the last row (32)")
    ap.add_argument("--quick", action="store_true", help="smoke run: every row, tiny sizes, figures meaningless")
    args = ap.parse_args()
    n = 6 if args.quick else args.episodes
    clients = 3 if args.quick else args.clients
    tasks = plan(n)
    rows, fig = [], {"quick": args.quick, "episodes": n, "clients": clients, "machine": machine()}
    app = create_app(ENV_ID, limits=ServeLimits(max_sessions=max(256, clients)))
    with BackgroundServer(app) as url:
        for name, fn in [
            ("in-process (gym view)", lambda: in_process(tasks)),
            ("server, WebSocket, 1 session", lambda: over_ws(url, tasks, 1)),
            (f"server, WebSocket, {clients} sessions", lambda: over_ws(url, tasks, clients)),
            ("server, HTTP, 1 session", lambda: over_http(url, tasks)),
        ]:
            lat, wall = fn()
            p50, p99 = stats(lat, "ms")
            rows.append((name, len(lat), len(lat) / wall, p50, p99))
            fig[name] = {"steps": len(lat), "steps_per_s": len(lat) / wall, "p50_ms": p50, "p99_ms": p99}
    print_table(["row", "steps", "steps/s", "p50 ms", "p99 ms"], rows)
    if args.quick:
        print("[--quick: a smoke run, not measurements]")
    print(json_line(fig))


if __name__ == "__main__":
    main()
