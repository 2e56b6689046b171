"""The harness at scale: 1,000 episodes in flight in one process against slow model servers.

A scripted OpenAI-compatible server (``tau_env.testing.FakeOpenAI``) runs in a separate process
and answers every request after a fixed latency. Each episode makes a fixed number of model
requests one after another, so its ideal duration is (requests per episode) x latency, and with
every episode in flight the whole run's ideal is the slowest episode's. We report the harness's
own CPU time per env step (the server's CPU is in the other process) and the time to finish
against that ideal.

    python benchmarks/harness_scale.py [--episodes 1000] [--latency 0.5]

Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import resource
import sys
import time

AGENT_TURNS = 4  # three tool calls and a closing message
USER_TURNS = 2  # the opening request and the goodbye


def serve(port_q: mp.Queue, latency: float) -> None:
    from tau_env.testing import FakeOpenAI

    def delayed(req):
        reply = script(req)
        reply.delay = latency
        return reply

    with FakeOpenAI(delayed) as server:
        port_q.put(server.url)
        while True:
            time.sleep(3600)


def script(req):
    from tau_env.testing import own_turns, seat_of, text, tool

    n = own_turns(req)
    if seat_of(req) == "user":
        return text("I need help with my account." if n == 0 else "Thanks! ###STOP###")
    if n <= AGENT_TURNS - 1:  # the greeting is the agent's first turn
        return tool("get_current_time", {}, call_id=f"c{n}")
    return text("Done. Anything else?")


class StubClient:
    """An in-process stand-in for a model server: waits ``latency`` on the event loop, then answers.

    With it, the process's CPU time is the harness's own (env, policies, scheduling), without an
    HTTP client's."""

    def __init__(self, latency: float):
        self.latency = latency

    def describe(self) -> dict:
        return {"model": "stub", "latency": self.latency}

    async def complete(self, messages, tools=None, seed=None, usage=None) -> dict:
        await asyncio.sleep(self.latency)
        return script({"messages": messages}).message


def measure(url: str | None, episodes: int, latency: float) -> dict:
    import tau_env
    from tau_env.llm import ChatClient, LLMAgent, LLMUser

    domain = tau_env.registry.load_domain("harbor-bank-v0")
    trials = -(-episodes // len(domain.tasks))
    if url is None:
        agent, user = LLMAgent(StubClient(latency)), LLMUser(StubClient(latency))
    else:
        agent = LLMAgent(ChatClient("agent", url, timeout=600, retries=0))
        user = LLMUser(ChatClient("user", url, timeout=600, retries=0))
    cpu0, t0 = time.process_time(), time.perf_counter()
    run = asyncio.run(
        tau_env.aevaluate(
            "harbor-bank-v0", agent, user, trials=trials, concurrency=trials * len(domain.tasks), episode_retries=0
        )
    )
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    steps = sum(r.steps for r in run.results)
    ideal = (AGENT_TURNS + USER_TURNS) * latency
    return {
        "episodes": len(run.results),
        "steps": steps,
        "cpu_per_step_ms": round(cpu / steps * 1000, 4),
        "wall_s": round(wall, 3),
        "ideal_s": ideal,
        "overhead_pct": round((wall / ideal - 1) * 100, 2),
        "infrastructure_errors": run.metrics["infrastructure_errors"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--latency", type=float, default=0.5, help="seconds per model request")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # two sockets per episode in flight
    stub = measure(None, args.episodes, args.latency)
    q: mp.Queue = mp.Queue()
    proc = mp.Process(target=serve, args=(q, args.latency), daemon=True)
    proc.start()
    http = measure(q.get(timeout=60), args.episodes, args.latency)
    proc.terminate()
    print(
        f"harness at scale: {stub['episodes']} episodes in flight in one process, {args.latency * 1000:.0f} ms "
        "per model request, 6 requests per episode"
    )
    print(f"{'client':<34}{'steps':>7}{'CPU/step':>12}{'finish':>9}{'ideal':>8}{'vs ideal':>10}{'infra':>7}")
    for name, m in (("in-process stub (harness only)", stub), ("openai client over HTTP", http)):
        print(
            f"{name:<34}{m['steps']:>7}{m['cpu_per_step_ms']:>10.3f}ms{m['wall_s']:>8.2f}s{m['ideal_s']:>7.2f}s"
            f"{m['overhead_pct']:>9.1f}%{m['infrastructure_errors']:>7}"
        )
    print(
        json.dumps(
            {
                "latency_s": args.latency,
                "harness_only": stub,
                "over_http": http,
                "cpu_per_step_ms": stub["cpu_per_step_ms"],
                "overhead_pct": stub["overhead_pct"],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
