"""The harness at scale: 1,000 episodes in flight in one process against slow model servers.

A scripted OpenAI-compatible server (``tau_env.testing.FakeOpenAI``) runs in a separate process
and answers every request after a fixed latency. Each episode makes a fixed number of model
requests one after another, so its ideal duration is (requests per episode) x latency, and with
every episode in flight the whole run's ideal is the slowest episode's. Three clients, one after
another in the same run: an in-process stub (the process's CPU is then the harness's own), the
default ``ChatClient`` (the lean HTTP/1.1 client) and ``ChatClient(backend="openai")``, both over
real HTTP. We report the process's CPU time per env step (one model request each; the server's CPU
is in the other process), the client's share of it (minus the stub's), and the time to finish
against the ideal.

    python benchmarks/harness_scale.py [--episodes 1000] [--latency 0.5] [--quick]

Prints a table, then one JSON line. ``--quick`` is a smoke run of a few seconds (63 episodes,
50 ms per request).
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

    with FakeOpenAI(delayed, keep_requests=False) as server:
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


def measure(client: str, url: str | None, episodes: int, latency: float) -> dict:
    import tau_env
    from tau_env.llm import ChatClient, LLMAgent, LLMUser

    domain = tau_env.registry.load_domain("harbor-bank-v0")
    trials = -(-episodes // len(domain.tasks))
    if client == "stub":
        agent, user = LLMAgent(StubClient(latency)), LLMUser(StubClient(latency))
    else:
        agent = LLMAgent(ChatClient("agent", url, timeout=600, retries=0, backend=client))
        user = LLMUser(ChatClient("user", url, timeout=600, retries=0, backend=client))
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
        "requests": sum(u.get("requests", 0) for r in run.results for u in r.usage.values()) or steps,
        "cpu_s": round(cpu, 3),
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
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    args = ap.parse_args()
    if args.quick:
        args.episodes, args.latency = 63, 0.05
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # two sockets per episode in flight
    # The server's process starts first, from a fresh interpreter ("spawn"): it holds none of this
    # process's objects (a fork after the stub's run would copy that run's heap into the server).
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=serve, args=(q, args.latency), daemon=True)
    proc.start()
    try:
        url = q.get(timeout=60)
        measure("stub", None, 1, 0.001)  # warm up (imports, caches) so that the first row pays for nothing extra
        stub = measure("stub", None, args.episodes, args.latency)
        lean = measure("http", url, args.episodes, args.latency)
        sdk = measure("openai", url, args.episodes, args.latency)
    finally:
        proc.terminate()
        proc.join()
    for m in (lean, sdk):  # the client's own CPU per request: what it adds to the harness's
        m["client_cpu_per_request_ms"] = round((m["cpu_s"] - stub["cpu_s"]) / m["requests"] * 1000, 4)
    print(
        f"harness at scale: {stub['episodes']} episodes in flight in one process, {args.latency * 1000:.0f} ms "
        "per model request, 6 requests per episode"
    )
    print(
        f"{'client':<34}{'steps':>7}{'CPU/step':>12}{'client/req':>12}{'finish':>9}{'ideal':>8}{'vs ideal':>10}"
        f"{'infra':>7}"
    )
    rows = (
        ("in-process stub (harness only)", stub),
        ("ChatClient over HTTP (lean)", lean),
        ("ChatClient(backend='openai')", sdk),
    )
    for name, m in rows:
        client = f"{m['client_cpu_per_request_ms']:>10.3f}ms" if "client_cpu_per_request_ms" in m else f"{'-':>12}"
        print(
            f"{name:<34}{m['steps']:>7}{m['cpu_per_step_ms']:>10.3f}ms{client}{m['wall_s']:>8.2f}s"
            f"{m['ideal_s']:>7.2f}s{m['overhead_pct']:>9.1f}%{m['infrastructure_errors']:>7}"
        )
    print(
        json.dumps(
            {
                "latency_s": args.latency,
                "harness_only": stub,
                "over_http": lean,
                "over_http_openai": sdk,
                "cpu_per_step_ms": stub["cpu_per_step_ms"],
                "overhead_pct": stub["overhead_pct"],
                "http_cpu_per_step_ms": lean["cpu_per_step_ms"],
                "http_overhead_pct": lean["overhead_pct"],
                "openai_cpu_per_step_ms": sdk["cpu_per_step_ms"],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
