"""tau_env.adapters.verifiers_env against the real ``verifiers`` package (0.3.x, its classic API).

verifiers' pins clash with ours (it would change openai in our venv), so it lives in a venv of its
own: ``python -m venv DIR && DIR/bin/pip install 'verifiers>=0.3.1,<0.4' && DIR/bin/pip install -e .``
and ``TAU_ENV_VERIFIERS_PYTHON=DIR/bin/python``. The tests run their verifiers side there, in a
subprocess (the worker below), and skip without it, unless verifiers' classic API is importable
here. Each worker starts a scripted OpenAI-compatible model on loopback (``tau_env.testing.FakeOpenAI``),
loads the environment by name with ``verifiers.load_environment``, evaluates it, and replays the
very same agent messages through tau_env directly to compare.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tau_env.adapters import verifiers_env
from tau_env.adapters.errors import AdapterError

ROOT = Path(__file__).resolve().parents[2]
TASKS = ["travel_notice_simple", "lost_card_standard_shipping", "open_cd_minimum"]


def _here_has_verifiers() -> bool:
    if importlib.util.find_spec("verifiers") is None:
        return False
    try:
        verifiers_env._vf()
    except AdapterError:
        return False
    return True


def _python() -> str | None:
    configured = os.environ.get("TAU_ENV_VERIFIERS_PYTHON")
    if configured:
        return configured
    return sys.executable if _here_has_verifiers() else None


# The verifiers side, run in the verifiers venv: prints one JSON object.
WORKER = r"""
import asyncio, copy, json, os, subprocess, sys, tempfile
from pathlib import Path
import verifiers as vf
from openai import AsyncOpenAI
import tau_env
from tau_env.harness import episode_seed
from tau_env.llm import ChatClient, LLMUser
from tau_env.testing import FakeOpenAI, Reply, seat_of, text, tool

os.environ.setdefault("OPENAI_API_KEY", "unused")
cfg, mode, plans, server = {}, None, {}, None


def opening(messages):
    return next(m["content"] for m in messages if m["role"] == "user")


def make_plans(task_ids):  # the oracle's agent messages per task, keyed by the user's opening line
    plans = {}
    for tid in task_ids:
        env = tau_env.make("harbor-bank-v0")
        r = tau_env.run_episode(env, tau_env.OracleAgent(), tau_env.ScriptedUser(), tid, seed=episode_seed(0, tid, 0))
        assert r.reward == 1.0
        msgs = [ev["message"] for ev in r.events if ev["seat"] == "agent"]
        key = opening(r.agent_view["messages"])
        assert key not in plans, "two tasks open alike: the script cannot tell them apart"
        plans[key] = [{k: m[k] for k in ("role", "content", "tool_calls") if k in m} for m in msgs]
    return plans


def user_line(req):
    if cfg.get("user_fails"):
        return Reply(status=500)
    n = sum(m["role"] == "assistant" for m in req["messages"])
    return text("Hi, I would like a travel notice for Japan." if n == 0 else "Thanks. ###STOP###")


def agent_move(messages):
    i = next(i for i, m in enumerate(messages) if m["role"] == "user")
    n = sum(m["role"] == "assistant" for m in messages[i:])
    if mode == "garbage":
        if n < 2:  # an unknown tool, then a known one with arguments that are not JSON: error results
            return tool("drop_everything", {"x": n}, call_id=f"g{n}") if n == 0 else tool("find_customer", "{not json")
        return text("I like turtles.")
    return Reply(copy.deepcopy(plans[messages[i]["content"]][n]))


seen_tools = {}  # (opening, turn) -> the tools sent with the agent's request


def script(req):
    if seat_of(req) == "user":
        return user_line(req)
    ms = req["messages"]
    i = next(i for i, m in enumerate(ms) if m["role"] == "user")
    turn = sum(m["role"] == "assistant" for m in ms[i:])
    seen_tools[json.dumps([ms[i]["content"], turn])] = [t["function"] for t in req.get("tools") or []]
    return agent_move(ms)


def canon(messages):
    out = []
    for m in messages:
        m = m if isinstance(m, dict) else m.model_dump()
        calls = []
        for tc in m.get("tool_calls") or []:
            tc = json.loads(tc) if isinstance(tc, str) else tc
            fn = tc.get("function", tc)
            calls.append([tc.get("id"), fn["name"], fn["arguments"]])
        out.append({"role": m["role"], "content": m.get("content") or "", "tool_calls": calls,
                    "tool_call_id": m.get("tool_call_id")})
    return out


def user_policy():
    return LLMUser(ChatClient("user-sim", server.url, retries=0)) if cfg.get("llm_user") else tau_env.ScriptedUser()


def run_one(c):
    global cfg, mode, plans, server
    cfg, mode = c, c["mode"]
    task_ids, env_args = c["task_ids"], dict(c.get("env_args", {}))
    plans = make_plans(task_ids) if mode == "oracle" else {}
    report = {"rollouts": [], "tools": {}}
    with FakeOpenAI(script) as server:
        if cfg.get("llm_user"):
            env_args["user"] = {"model": "user-sim", "base_url": server.url, "retries": 0}
        if cfg.get("cli"):
            out_dir = Path(tempfile.mkdtemp())
            cmd = [sys.executable, "-m", "verifiers.legacy.scripts.eval", "tau_env.adapters.verifiers_env",
                   "-a", json.dumps({"task_ids": task_ids, **env_args}), "-b", server.url, "-k", "OPENAI_API_KEY",
                   "-m", "scripted", "-n", str(len(task_ids)), "-r", "1", "-s", "-d", "-o", str(out_dir),
                   "-C", "tau_termination_reason"]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, proc.stderr[-3000:]
            outputs = [json.loads(line) for p in out_dir.rglob("results.jsonl") for line in p.read_text().splitlines()]
        else:
            env = vf.load_environment("tau_env.adapters.verifiers_env", task_ids=task_ids, **env_args)
            assert isinstance(env, vf.MultiTurnEnv) and len(env.get_eval_dataset()) == len(task_ids)
            client = vf.OpenAIChatCompletionsClient(AsyncOpenAI(base_url=server.url, api_key="unused"))
            outputs = env.evaluate_sync(client, model="scripted", num_examples=len(task_ids),
                                        rollouts_per_example=cfg.get("rollouts", 1),
                                        state_columns=["tau_termination_reason"])["outputs"]
        report["tools"] = dict(seen_tools)
        seen_tools.clear()
        for o in outputs:
            info = o["info"] if isinstance(o["info"], dict) else json.loads(o["info"])
            direct_env = tau_env.make("harbor-bank-v0", **{k: v for k, v in env_args.items() if k == "max_steps"})
            direct_tools = {}

            def agent(obs):
                ms = obs["messages"]
                i = next(i for i, m in enumerate(ms) if m["role"] == "user")
                key = json.dumps([ms[i]["content"], sum(m["role"] == "assistant" for m in ms[i:])])
                direct_tools[key] = [t["function"] for t in obs["tools"]]
                return agent_move(obs["messages"]).message

            play = tau_env.arun_episode(direct_env, agent, user_policy(), info["task_id"], seed=info["seed"])
            try:
                r = asyncio.run(play)
            except tau_env.InfrastructureError as e:
                report["rollouts"].append({"task_id": info["task_id"], "reward": o["reward"], "error": o.get("error"),
                                           "reason": o.get("tau_termination_reason"), "direct_error": type(e).__name__})
                continue
            report["rollouts"].append({
                "task_id": info["task_id"], "reward": o["reward"], "reason": o.get("tau_termination_reason"),
                "error": o.get("error"), "stop": o.get("stop_condition"),
                "conversation": canon(list(o["prompt"]) + list(o["completion"])),
                "direct": {"reward": r.reward, "reason": str(r.termination_reason),
                           "conversation": canon(r.agent_view["messages"]), "tools": direct_tools},
            })
    return report


print("REPORT" + json.dumps([run_one(c) for c in json.loads(sys.argv[1])]))
"""


def run_worker(*cfgs: dict) -> list[dict]:
    """Run ``cfgs`` (each one evaluation and its direct replays) in one worker in the verifiers venv."""
    python = _python()
    if python is None:
        pytest.skip("verifiers>=0.3.1,<0.4 is not here: set TAU_ENV_VERIFIERS_PYTHON to its venv's python")
    env = {**os.environ, "VF_LOG_LEVEL": "WARNING", "PYTHONPATH": ""}
    proc = subprocess.run(
        [python, "-c", WORKER, json.dumps(cfgs)], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("REPORT"))
    reports = json.loads(line[len("REPORT") :])
    for cfg, report in zip(cfgs, reports, strict=True):
        report["task_ids"] = cfg["task_ids"] * cfg.get("rollouts", 1)
    return reports


RUNS = {
    "oracle": {"mode": "oracle", "task_ids": TASKS, "rollouts": 2},  # a group of 2 per task, run concurrently
    "garbage": {"mode": "garbage", "task_ids": TASKS[:2]},
    "llm_user": {"mode": "garbage", "task_ids": TASKS[:1], "llm_user": True},
    "cut": {"mode": "oracle", "task_ids": TASKS[:1], "env_args": {"max_turns": 2}},
    "user_fails": {"mode": "garbage", "task_ids": TASKS[:1], "llm_user": True, "user_fails": True},
}


@pytest.fixture(scope="module")
def reports() -> dict[str, dict]:
    """All the evaluations at once (one worker: verifiers' import is paid once)."""
    return dict(zip(RUNS, run_worker(*RUNS.values()), strict=True))


def _check_same_as_direct(report: dict, expect_reward: float) -> None:
    assert sorted(r["task_id"] for r in report["rollouts"]) == sorted(report["task_ids"])
    for r in report["rollouts"]:
        d = r["direct"]
        assert r["error"] is None
        assert r["reward"] == d["reward"] == expect_reward, r["task_id"]
        assert r["reason"] == d["reason"]
        assert r["conversation"] == d["conversation"]  # the very same chat, message for message
        for key, tools in d["tools"].items():  # each request carried the agent's active tools then
            assert report["tools"][key] == tools


def test_oracle_played_through_verifiers_scores_as_tau_env_does(reports):
    report = reports["oracle"]
    _check_same_as_direct(report, 1.0)
    for r in report["rollouts"]:
        assert r["reason"] == "user_stop" and r["stop"] == "has_final_env_response"
    # the toolset grew in the episode (unlock_tool): later requests carried tools the first did not
    first = {t["name"] for k, v in report["tools"].items() if json.loads(k)[1] == 0 for t in v}
    every = {t["name"] for v in report["tools"].values() for t in v}
    assert "set_travel_notice_3012" in every - first


def test_a_garbage_model_gets_zero_as_in_tau_env(reports):
    report = reports["garbage"]
    _check_same_as_direct(report, 0.0)
    for r in report["rollouts"]:
        assert sum(m["role"] == "tool" and m["content"].startswith("Error") for m in r["conversation"]) == 2


def test_an_llm_user_plays_inside(reports):
    report = reports["llm_user"]
    _check_same_as_direct(report, 0.0)
    (r,) = report["rollouts"]
    assert r["reason"] == "user_stop"
    assert r["conversation"][2]["content"] == "Hi, I would like a travel notice for Japan."  # the LLM user's line


def test_an_episode_verifiers_cuts_short_scores_zero(reports):
    (r,) = reports["cut"]["rollouts"]  # max_turns=2 stops the oracle before the end: the episode is cancelled
    assert r["reward"] == 0.0 and r["stop"] == "max_turns_reached" and r["reason"].startswith("unfinished")
    assert sum(m["role"] == "assistant" for m in r["conversation"]) == 3  # the greeting and two turns


def test_a_failing_user_simulator_is_a_verifiers_infra_error(reports):
    (r,) = reports["user_fails"]["rollouts"]
    assert r["direct_error"] == "InfrastructureError"  # tau_env's own loop raises it...
    assert r["error"]["error"] == "InfraError" and r["reward"] == 0.0  # ...verifiers records it on the rollout
    assert r["reason"] == "unfinished (has_error)"


@pytest.mark.slow
def test_vf_eval_loads_it_by_name():
    (report,) = run_worker({"mode": "oracle", "task_ids": TASKS[:2], "cli": True})
    _check_same_as_direct(report, 1.0)


# --- without verifiers --------------------------------------------------------------------------


def test_importing_the_adapter_does_not_import_verifiers():
    code = "import sys, tau_env.adapters.verifiers_env; assert 'verifiers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_missing_or_wrong_verifiers_names_the_extra(monkeypatch):
    if importlib.util.find_spec("verifiers") is None:
        with pytest.raises(AdapterError, match=r"tau-env\[verifiers\]"):
            verifiers_env.load_environment()
    monkeypatch.setattr(verifiers_env, "require", lambda *a: object())
    for found in ("0.4.0", "0.2.1"):
        monkeypatch.setattr(verifiers_env, "version", lambda _name, found=found: found)
        with pytest.raises(AdapterError, match=r"verifiers>=0.3.1,<0.4.*" + found.replace(".", r"\.")):
            verifiers_env.load_environment()


def test_message_and_tool_translation():
    vf_msg = {
        "role": "assistant",
        "content": [{"type": "text", "text": "one "}, {"type": "text", "text": "two"}],
        "tool_calls": [{"id": "a", "name": "f", "arguments": '{"x": 1}'}],
    }
    assert verifiers_env.to_tau_message(vf_msg) == {
        "role": "assistant",
        "content": "one two",
        "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}],
    }
    schema = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}
    assert verifiers_env.to_tool_defs([schema]) == [{"name": "f", "description": "d", "parameters": {"type": "object"}}]
