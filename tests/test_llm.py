"""LLM policies through ChatClient (the default lean transport; the openai one where named), over real HTTP,
against a scripted loopback server."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tau_env import TauEnv, aevaluate, arun_episode  # noqa: E402
from tau_env.llm import ChatClient, LLMAgent, LLMUser, ResponseCache, Sampling, parse_text_tool_calls  # noqa: E402
from tau_env.testing import FakeOpenAI, Reply, own_turns, seat_of, text, tool  # noqa: E402
from tests.conftest import make_domain  # noqa: E402


def restock_script(agent_replies=None):
    """The tiny domain's 'restock' task played well by both seats (greeting is the agent's turn 1)."""
    agent_replies = agent_replies or {
        1: tool("unlock_tool", {"tool_name": "secret_restock_1234"}),
        2: tool("secret_restock_1234", {"item_id": "widget"}),
    }

    def script(req):
        n = own_turns(req)
        if seat_of(req) == "user":
            return text("Please restock the widget.") if n == 0 else text("Thanks! ###STOP###")
        return agent_replies.get(n, text("All done."))

    return script


def policies(url, retries=3, timeout=10, cache=None, backend="http"):
    agent = LLMAgent(ChatClient("agent-m", url, retries=retries, backoff=0.01, timeout=timeout, backend=backend))
    user = LLMUser(ChatClient("user-m", url, backoff=0.01, cache=cache, backend=backend))
    return agent, user


@pytest.mark.parametrize("backend", ["http", "openai"])
def test_scores_an_episode_and_counts_tokens(backend):
    if backend == "openai":
        pytest.importorskip("openai")
    with FakeOpenAI(restock_script()) as server:
        agent, user = policies(server.url, backend=backend)
        r = asyncio.run(arun_episode(TauEnv(make_domain()), agent, user, "restock", seed=7))
    assert r.reward == 1.0 and r.termination_reason == "user_stop"
    assert r.usage["agent"]["requests"] == 3 and r.usage["agent"]["prompt_tokens"] == 30
    agent_reqs = [q for q in server.requests if seat_of(q) == "agent"]
    assert all(q["seed"] == 7 and q["model"] == "agent-m" and q["tool_choice"] == "auto" for q in agent_reqs)
    assert {t["function"]["name"] for t in agent_reqs[1]["tools"]} >= {"unlock_tool", "get_item"}
    # the user simulator saw the scenario prompt and never the agent's tool calls
    user_reqs = [q for q in server.requests if seat_of(q) == "user"]
    assert all(m["role"] != "tool" for q in user_reqs for m in q["messages"])


def test_malformed_and_printed_tool_calls_are_the_models_business():
    script = restock_script(
        {
            1: tool("unlock_tool", "{not json"),
            2: text(
                '<tool_call>{"name": "unlock_tool", "arguments": {"tool_name": "secret_restock_1234"}}</tool_call>'
            ),
            3: tool("secret_restock_1234", {"item_id": "widget"}),
        }
    )
    with FakeOpenAI(script) as server:
        agent, user = policies(server.url)
        env = TauEnv(make_domain())
        r = asyncio.run(arun_episode(env, agent, user, "restock"))
    results = [res for ev in r.events for res in ev.get("tool_results", [])]
    assert results[0]["error"] and "not valid JSON" in results[0]["content"]
    assert not results[1]["error"] and results[1]["name"] == "unlock_tool"  # parsed from the text
    assert r.reward == 1.0


def test_parse_text_tool_calls_edge_cases():
    rest, calls = parse_text_tool_calls('Sure. <tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>')
    assert rest == "Sure." and calls[0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
    rest, calls = parse_text_tool_calls("<tool_call>{oops</tool_call>")
    assert rest is None and calls[0]["function"] == {"name": "", "arguments": "{oops"}  # env reports it


def test_transient_500s_are_retried():
    failures = {"n": 0}
    inner = restock_script()

    def script(req):
        if seat_of(req) == "agent" and failures["n"] < 2:
            failures["n"] += 1
            return Reply(status=500)
        return inner(req)

    with FakeOpenAI(script) as server:
        agent, user = policies(server.url)
        r = asyncio.run(arun_episode(TauEnv(make_domain()), agent, user, "restock"))
    assert r.reward == 1.0 and failures["n"] == 2


def test_a_dead_server_is_an_infrastructure_error_not_a_model_failure(tmp_path):
    def script(req):
        return Reply(status=503) if seat_of(req) == "agent" else restock_script()(req)

    with FakeOpenAI(script) as server:
        agent, user = policies(server.url, retries=1)
        run = asyncio.run(
            aevaluate(
                lambda: TauEnv(make_domain()),
                agent,
                user,
                task_ids=["restock", "nothing"],
                out_dir=tmp_path / "run",
                episode_retries=1,
            )
        )
    reasons = {r.task_id: r.termination_reason for r in run.results}
    assert reasons == {"restock": "infrastructure_error", "nothing": "infrastructure_error"}
    assert run.metrics["infrastructure_errors"] == 2 and run.metrics["episodes"] == 0
    assert all("503" in r.error for r in run.results)
    agent_calls = [q for q in server.requests if seat_of(q) == "agent"]
    assert len(agent_calls) == 2 * 2 * 2  # 2 tasks x 2 episode attempts x (1 + 1 retry)


def test_timeouts_are_infrastructure_errors():
    def script(req):
        return text("late", delay=2.0) if seat_of(req) == "agent" else restock_script()(req)

    with FakeOpenAI(script) as server:
        agent, user = policies(server.url, retries=0, timeout=0.3)
        started = time.perf_counter()
        run = asyncio.run(
            aevaluate(lambda: TauEnv(make_domain()), agent, user, task_ids=["restock"], episode_retries=0)
        )
    assert run.results[0].termination_reason == "infrastructure_error"
    assert "Timeout" in run.results[0].error and time.perf_counter() - started < 2.0


def test_the_loop_rule():
    script = restock_script({n: tool("get_item", {"item_id": "widget"}, call_id=f"c{n}") for n in range(1, 50)})
    with FakeOpenAI(script) as server:
        agent, user = policies(server.url)
        r = asyncio.run(arun_episode(TauEnv(make_domain()), agent, user, "restock", loop_limit=4))
    assert r.termination_reason == "loop" and r.reward == 0.0 and r.steps == 1 + 4


def test_response_cache_replays_the_user(tmp_path):
    cache = ResponseCache(tmp_path / "cache.sqlite")
    with FakeOpenAI(restock_script()) as server:
        for _ in range(2):
            agent, user = policies(server.url, cache=cache)
            r = asyncio.run(arun_episode(TauEnv(make_domain()), agent, user, "restock", seed=3))
            assert r.reward == 1.0
    user_requests = [q for q in server.requests if seat_of(q) == "user"]
    assert len(user_requests) == 2  # the second episode's user turns all came from the cache
    assert cache.hits == 2 and user.usage.cached == 2


def test_sampling_settings_reach_the_server():
    with FakeOpenAI(restock_script()) as server:
        client = ChatClient(
            "m", server.url, sampling=Sampling(temperature=0.7, max_tokens=64, top_p=0.9), tool_choice="required"
        )
        agent = LLMAgent(client)
        agent.reset(seed=5)
        asyncio.run(
            agent.aact(
                {
                    "messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "hi"}],
                    "tools": [
                        {
                            "type": "function",
                            "function": {
                                "name": "f",
                                "description": "",
                                "parameters": {"type": "object", "properties": {}},
                            },
                        }
                    ],
                }
            )
        )
    q = server.requests[0]
    assert (q["temperature"], q["max_tokens"], q["top_p"], q["seed"], q["tool_choice"]) == (0.7, 64, 0.9, 5, "required")


RESUME_SCRIPT = textwrap.dedent("""
    import asyncio, sys
    sys.path.insert(0, {root!r})
    from tau_env import TauEnv, aevaluate
    from tau_env.llm import ChatClient, LLMAgent, LLMUser
    from tests.conftest import make_domain
    url, out = sys.argv[1], sys.argv[2]
    agent = LLMAgent(ChatClient("a", url, backoff=0.01))
    user = LLMUser(ChatClient("u", url, backoff=0.01))
    run = asyncio.run(aevaluate(lambda: TauEnv(make_domain()), agent, user, trials=6, concurrency=2, out_dir=out))
    print(run.metrics["episodes"])
""")


def test_resume_after_a_kill_loses_nothing(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script_file = tmp_path / "run.py"
    script_file.write_text(RESUME_SCRIPT.format(root=root))
    out = tmp_path / "out"
    slow = restock_script()

    def script(req):
        reply = slow(req)
        reply.delay = 0.05
        return reply

    with FakeOpenAI(script) as server:
        proc = subprocess.Popen(
            [sys.executable, str(script_file), server.url, str(out)],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        traj = out / "trajectories.jsonl"
        deadline = time.time() + 60
        while time.time() < deadline and (not traj.exists() or traj.read_text().count("\n") < 4):
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with open(traj, "a") as f:
            f.write('{"task_id": "restock", "trial": 5, "tor')  # a line torn by the kill
        first = [json.loads(x) for x in traj.read_text().splitlines()[:-1]]
        assert 4 <= len(first) < 18
        done = subprocess.run(
            [sys.executable, str(script_file), server.url, str(out)],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    lines = traj.read_text().splitlines()
    records = [json.loads(x) for x in lines]  # every line is whole JSON
    keys = [(r["task_id"], r["trial"]) for r in records]
    assert len(keys) == len(set(keys)) == 18  # 3 tasks x 6 trials, none twice
    assert keys[: len(first)] == [(r["task_id"], r["trial"]) for r in first]  # finished episodes kept as they were
    assert json.loads((out / "metrics.json").read_text())["episodes"] == 18


def test_ray_backend_with_llm_policies(tmp_path):
    ray = pytest.importorskip("ray")
    from tau_env.harness.ray_backend import ray_evaluate

    with FakeOpenAI(restock_script()) as server:
        agent, user = policies(server.url, cache=ResponseCache(tmp_path / "c.sqlite"))
        local = asyncio.run(aevaluate(lambda: TauEnv(make_domain()), agent, user, trials=2, concurrency=3))
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            dist = ray_evaluate(lambda: TauEnv(make_domain()), agent, user, trials=2, concurrency=3, chunk_size=2)
        finally:
            ray.shutdown()
    assert [(r.task_id, r.trial, r.reward, r.termination_reason) for r in dist.results] == [
        (r.task_id, r.trial, r.reward, r.termination_reason) for r in local.results
    ]
    assert dist.metrics["pass@1"] == local.metrics["pass@1"]
