"""The typed contracts consumers build on: the policy protocols, TerminationReason, TauEnv's declared
state, the Domain's prompt hook and cache fields, and call_tool / active_tools on a live episode."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import typing
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pettingzoo import AECEnv

import tau_env
from tau_env import (
    AsyncPolicy,
    Domain,
    EpisodeResult,
    NoopAgent,
    OracleAgent,
    Policy,
    RandomAgent,
    ScriptedUser,
    TauEnv,
    TeacherAgent,
    TerminationReason,
    call,
    say,
)
from tau_env.error import ClosedEnvError, InvalidOptionError, ResetNeeded, UsageError
from tau_env.harness.metrics import compute_metrics
from tau_env.harness.results import check_record
from tau_env.llm import ChatClient, LLMAgent, LLMUser
from tau_env.policy import SupportsDescribe, SupportsUsage, is_async_policy
from tau_env.sft import EXCLUDED_ENDINGS, record_problem, select
from tests.conftest import make_domain

# --- the policy protocols ------------------------------------------------------------------------
BUILT_IN = [OracleAgent, TeacherAgent, NoopAgent, RandomAgent, ScriptedUser]


@pytest.mark.parametrize("cls", BUILT_IN)
def test_built_in_policies_are_synchronous_policies(cls):
    p = cls()
    assert isinstance(p, Policy) and not isinstance(p, AsyncPolicy) and not is_async_policy(p)
    assert issubclass(cls, Policy)  # declared, not only structural


@pytest.mark.parametrize("cls", [LLMAgent, LLMUser])
def test_llm_policies_are_async_policies_with_usage_and_description(cls):
    p = cls(ChatClient(model="m", base_url="http://127.0.0.1:9"))
    assert isinstance(p, AsyncPolicy) and is_async_policy(p)
    assert isinstance(p, SupportsUsage) and isinstance(p, SupportsDescribe)
    assert p.describe()["policy"] == cls.__name__
    with pytest.raises(UsageError, match=rf"^{cls.__name__} is asynchronous: run it with tau_env.aevaluate"):
        p({"messages": [], "tools": []})


def test_protocols_are_structural():
    class Mine:  # no inheritance: having the methods is enough
        def __call__(self, obs):
            return say("hi")

        def reset(self, task=None, seed=None):
            pass

    class MineAsync:
        async def aact(self, obs):
            return say("hi")

        def reset(self, task=None, seed=None):
            pass

    assert isinstance(Mine(), Policy) and not isinstance(Mine(), AsyncPolicy)
    assert isinstance(MineAsync(), AsyncPolicy) and not isinstance(MineAsync(), Policy)

    def bare(obs):  # a plain function is accepted by the harness, but is not a Policy (no reset)
        return say("hi")

    assert not isinstance(bare, Policy)


async def _async_fn(obs):
    return say("hi")


class _AsyncCall:
    async def __call__(self, obs):
        return say("hi")

    async def act(self, obs):
        return say("hi")

    def act_sync(self, obs):
        return say("hi")


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (_async_fn, True),
        (_AsyncCall(), True),
        (_AsyncCall().act, True),  # an async bound method
        (functools.partial(_async_fn), True),
        (_AsyncCall().act_sync, False),
        (lambda obs: say("hi"), False),
        (OracleAgent(), False),
        (42, False),  # not a policy at all: not async either
    ],
)
def test_is_async_policy(policy, expected):
    assert is_async_policy(policy) is expected


def test_evaluate_runs_an_async_bound_method_policy(domain):
    # evaluate hands async policies (by the one rule of is_async_policy) to aevaluate
    run = tau_env.evaluate(lambda: TauEnv(domain), _AsyncCall().act, ScriptedUser, task_ids=["nothing"])
    assert [r.termination_reason for r in run.results] == [TerminationReason.USER_STOP]


def test_harness_type_hints_resolve():
    from tau_env.harness import episode, run

    for fn in (episode.run_episode, episode.arun_episode, run.evaluate, run.aevaluate):
        hints = typing.get_type_hints(fn)
        assert "agent" in hints and "user" in hints


# --- TerminationReason ---------------------------------------------------------------------------
def test_termination_reasons_are_the_recorded_strings():
    assert {r.name: r.value for r in TerminationReason} == {
        "USER_STOP": "user_stop",
        "TRANSFER": "transfer",
        "OUT_OF_SCOPE": "out_of_scope",
        "MAX_STEPS": "max_steps",
        "LOOP": "loop",
        "INFRASTRUCTURE_ERROR": "infrastructure_error",
    }
    for r in TerminationReason:
        assert r == r.value and str(r) == r.value and f"{r}" == r.value and hash(r) == hash(r.value)
        assert json.dumps(r) == json.dumps(r.value) and json.dumps({r: 1}) == json.dumps({r.value: 1})
    assert EXCLUDED_ENDINGS == {"loop", "max_steps", "infrastructure_error"}


@pytest.mark.parametrize(
    ("actions", "reason", "truncated"),
    [
        ([say("bye ###STOP###")], TerminationReason.USER_STOP, False),
        ([say("###TRANSFER###")], TerminationReason.TRANSFER, False),
        ([say("###OUT-OF-SCOPE###")], TerminationReason.OUT_OF_SCOPE, False),
        ([say("hi"), call("transfer_to_human", summary="x")], TerminationReason.TRANSFER, False),
        ([say("hi"), say("a"), say("b")], TerminationReason.MAX_STEPS, True),
    ],
)
def test_env_ends_with_a_termination_reason_member(domain, actions, reason, truncated):
    with TauEnv(domain, max_steps=3) as env:
        env.reset(options={"task_id": "nothing"})
        for a in actions:
            env.step(a)
        assert env.termination_reason is reason
        assert all(i["termination_reason"] is reason for i in env.infos.values())
        assert all(env.truncations.values()) is truncated


def test_end_episode_reasons(env):
    env.reset(options={"task_id": "nothing"})
    env.end_episode("loop")  # a member's value becomes the member
    assert env.termination_reason is TerminationReason.LOOP
    env.reset(options={"task_id": "nothing"})
    env.end_episode("judge_gave_up")  # a caller's own reason is kept as given
    assert type(env.termination_reason) is str and env.termination_reason == "judge_gave_up"


def test_results_hold_plain_strings_and_read_back_as_members(domain, tmp_path):
    out = tmp_path / "run"
    run = tau_env.evaluate(lambda: TauEnv(domain), OracleAgent, ScriptedUser, out_dir=out)
    assert {r.termination_reason for r in run.results} == {TerminationReason.USER_STOP}
    lines = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert {ln["termination_reason"] for ln in lines} == {"user_stop"}
    assert all(check_record(ln) is None and record_problem(ln) is None for ln in lines)  # both validators
    assert {type(EpisodeResult(**ln).termination_reason) for ln in lines} == {TerminationReason}
    # resuming reads them back: nothing runs again
    again = tau_env.evaluate(lambda: TauEnv(domain), OracleAgent, ScriptedUser, out_dir=out)
    assert [r.termination_reason for r in again.results] == [r.termination_reason for r in run.results]
    # metrics.json and the metrics dict: plain strings as keys
    assert [type(k) for k in run.metrics["terminations"]] == [str]
    assert json.loads((out / "metrics.json").read_text())["terminations"] == {"user_stop": len(lines)}


def test_episode_result_normalises_known_reasons_only():
    kw = dict(task_id="t", trial=0, seed=0, reward=0.0, steps=1, tool_calls=0, tool_errors=0, grade={}, events=[])
    assert EpisodeResult(termination_reason="loop", **kw).termination_reason is TerminationReason.LOOP
    own = EpisodeResult(termination_reason="mine", **kw).termination_reason
    assert type(own) is str and own == "mine"
    assert EpisodeResult(termination_reason=None, **kw).termination_reason is None
    m = compute_metrics([EpisodeResult(termination_reason=r, **kw) for r in ("loop", "mine", "infrastructure_error")])
    assert m["terminations"] == {"loop": 1, "mine": 1, "infrastructure_error": 1} and m["episodes"] == 2


def test_sft_select_excludes_by_plain_string_or_member():
    eps = [{"reward": 1.0, "termination_reason": r} for r in ("loop", TerminationReason.MAX_STEPS, "user_stop", None)]
    assert [e["termination_reason"] for e in select(eps)] == ["user_stop", None]


# --- TauEnv's declared state -------------------------------------------------------------------
def test_tau_env_is_a_typed_aec_env():
    assert issubclass(TauEnv, AECEnv)
    assert typing.get_args(TauEnv.__orig_bases__[0])[0] is str
    hints = typing.get_type_hints(TauEnv)  # every declared annotation resolves
    for name in ("task", "trajectory", "termination_reason", "grade_result", "episode_reward", "agents", "infos"):
        assert name in hints


def test_every_declared_attribute_is_documented():
    doc = TauEnv.__doc__
    section = doc[doc.index("Attributes:") :]
    for name in TauEnv.__annotations__:
        assert re.search(rf"^\s+{name}: \S", section, re.M), f"TauEnv.{name} is declared but not documented"


@pytest.mark.parametrize("attr", ["task", "trajectory", "termination_reason", "grade_result", "episode_reward"])
def test_declared_episode_attributes_still_need_reset(domain, attr):
    env = TauEnv(domain)
    assert not hasattr(env, attr)
    with pytest.raises(ResetNeeded, match=rf"^Call reset\(\) before reading env\.{attr}\.$"):
        getattr(env, attr)
    env.reset()
    getattr(env, attr)


# --- Domain: the prompt hook and the cache fields -----------------------------------------------
def test_prompt_depends_on_task_is_declared_with_a_default():
    from tau_env.domains.tau3_banking import Tau3Domain

    assert Domain.prompt_depends_on_task is False and Tau3Domain.prompt_depends_on_task is True
    assert "prompt_depends_on_task" not in {f.name for f in dataclasses.fields(Domain)}  # a class hook


class _StaticPrompt(Domain):
    """Records every prompt it builds."""

    def system_prompt(self, retrieval=None, task=None):
        self.__dict__.setdefault("built", []).append(task.id if task else None)
        return f"prompt for {task.id if task else None}"


class _PerTaskPrompt(_StaticPrompt):
    prompt_depends_on_task = True


@pytest.mark.parametrize(("cls", "built"), [(_StaticPrompt, [None]), (_PerTaskPrompt, [None, "restock", "confirm"])])
def test_prompt_depends_on_task_decides_when_the_prompt_is_built(cls, built):
    base = make_domain()
    d = cls(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base) if f.init})
    with TauEnv(d) as env:
        for t in ("restock", "confirm"):
            env.reset(options={"task_id": t})
            prompt = env.observe("agent")["messages"][0]["content"]
            assert prompt == (f"prompt for {t}" if cls.prompt_depends_on_task else "prompt for None")
    assert d.built == built


def test_domain_cache_fields_are_not_arguments_repr_or_equality():
    flags = {f.name: (f.init, f.repr, f.compare) for f in dataclasses.fields(Domain) if f.name.startswith("_")}
    assert flags == {"_images": (False, False, False), "_toolboxes": (False, False, False)}
    with pytest.raises(TypeError, match="unexpected keyword argument '_toolboxes'"):
        make_domain(_toolboxes={})
    a, b = make_domain(), make_domain()
    a.toolbox("grep")
    a.image(a.task("confirm"))  # fills both caches of a only
    assert a._toolboxes and a._images and not b._images
    assert "_toolboxes" not in repr(a) and "_images" not in repr(a)


# --- call_tool and active_tools --------------------------------------------------------------------
def test_call_tool_and_active_tools_misuse(domain):
    env = TauEnv(domain)
    with pytest.raises(ResetNeeded, match=r"^Call reset\(\) before call_tool\(\)\.$"):
        env.call_tool("agent", "get_item", {"item_id": "widget"})
    with pytest.raises(ResetNeeded, match=r"^Call reset\(\) before active_tools\(\)\.$"):
        env.active_tools("agent")
    env.reset(options={"task_id": "restock"})
    d0, steps = env.db_digest(), env.num_steps
    with pytest.raises(InvalidOptionError, match=r"^Unknown seat 'agnet'; the seats are \['agent', 'user'\]\.$"):
        env.call_tool("agnet", "get_item", {"item_id": "widget"})
    with pytest.raises(InvalidOptionError, match=r"^Unknown seat None"):
        env.active_tools(None)
    with pytest.raises(InvalidOptionError, match=r"^call_tool needs a tool name \(a str\), got 3\.$"):
        env.call_tool("agent", 3, {})
    with pytest.raises(InvalidOptionError, match=r"^call_tool needs the arguments as a dict \(or None\), got '\{"):
        env.call_tool("agent", "get_item", '{"item_id": "widget"}')
    assert env.db_digest() == d0 and env.num_steps == steps
    env.close()
    with pytest.raises(ClosedEnvError, match=r"^This env is closed; call_tool\(\) cannot run\."):
        env.call_tool("agent", "get_item", {"item_id": "widget"})
    with pytest.raises(ClosedEnvError, match=r"^This env is closed; active_tools\(\) cannot run\."):
        env.active_tools("agent")


def test_call_tool_is_not_a_step(env):
    env.reset(options={"task_id": "restock"})
    before = (env.num_steps, list(env.trajectory), env.agent_selection, env.observe("agent"), env.observe("user"))
    r = env.call_tool("agent", "add_stock", MappingProxyType({"item_id": "widget", "qty": 2}))
    assert not r.error and r.wrote and r.content == "ok"
    assert env.call_tool("agent", "get_item", {"item_id": "widget"}).content == "widget: 5"
    after = (env.num_steps, list(env.trajectory), env.agent_selection, env.observe("agent"), env.observe("user"))
    assert after == before
    # a tool that ends the episode says so, and does not end it
    r = env.call_tool("agent", "transfer_to_human", {"summary": "x"})
    assert r.ends_episode and env.termination_reason is None and not any(env.terminations.values())
    # the model's mistakes are results, as in a step; arguments None means none
    assert env.call_tool("agent", "get_item", None).error
    assert "Unknown tool 'nope'" in env.call_tool("agent", "nope", {}).content


def test_call_tool_on_a_finished_episode_reads_its_final_state(env):
    env.reset(options={"task_id": "nothing"})
    env.step(say("###STOP###"))
    grade = env.grade_result
    assert env.call_tool("agent", "get_item", {"item_id": "widget"}).content == "widget: 3"
    assert env.grade_result is grade


def test_active_tools_is_a_read_only_copy(env):
    env.reset(options={"task_id": "restock"})
    tools = env.active_tools("agent")
    assert isinstance(tools, frozenset) and "secret_restock_1234" not in tools
    assert env.active_tools("agent") == set(t["function"]["name"] for t in env.observe("agent")["tools"])
    env.call_tool("agent", "unlock_tool", {"tool_name": "secret_restock_1234"})
    assert "secret_restock_1234" in env.active_tools("agent") and "secret_restock_1234" not in tools
    assert "confirm_in_app" not in env.active_tools("user")
    env.call_tool("agent", "hand_over_tool", {"tool_name": "confirm_in_app"})
    assert "confirm_in_app" in env.active_tools("user")


def test_call_tool_with_strict_tools_reraises_and_changes_nothing(domain):
    with TauEnv(domain, strict_tools=True) as env:
        env.reset(options={"task_id": "restock"})
        d0, active = env.db_digest(), env.active_tools("agent")
        with pytest.raises(KeyError):
            env.call_tool("agent", "buggy_write", {"item_id": "widget"})
        assert env.db_digest() == d0 and env.active_tools("agent") == active and env.num_steps == 0
        assert not env.call_tool("agent", "add_stock", {"item_id": "widget", "qty": 1}).error


_SEATED_CALLS = st.sampled_from(
    [
        ("agent", "get_item", {"item_id": "widget"}),
        ("agent", "get_item", {"item_id": "nope"}),
        ("agent", "get_item", {}),
        ("agent", "add_stock", {"item_id": "widget", "qty": 4}),
        ("agent", "add_stock", {"item_id": "widget", "qty": -1}),
        ("agent", "add_stock", {"item_id": "widget", "qty": "many"}),
        ("agent", "sneaky_read", {"item_id": "widget"}),
        ("agent", "half_write", {"item_id": "widget"}),
        ("agent", "buggy_write", {"item_id": "widget"}),
        ("agent", "unlock_tool", {"tool_name": "secret_restock_1234"}),
        ("agent", "unlock_tool", {"tool_name": "get_item"}),
        ("agent", "secret_restock_1234", {"item_id": "widget"}),
        ("agent", "hand_over_tool", {"tool_name": "confirm_in_app"}),
        ("agent", "confirm_in_app", {"code": "A"}),
        ("user", "confirm_in_app", {"code": "B"}),
        ("user", "get_item", {"item_id": "widget"}),
        ("agent", "no_such_tool", {"x": 1}),
        ("agent", "search_documents", {"query": "restock"}),
    ]
)
_TINY = make_domain(max_steps=10_000)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=st.lists(_SEATED_CALLS, min_size=1, max_size=12))
def test_call_tool_runs_a_call_exactly_as_a_step_does(calls):
    """The same calls through call_tool and through step: the same results, database and active tools."""
    with TauEnv(_TINY) as hook, TauEnv(_TINY) as stepped:
        for e in (hook, stepped):
            e.reset(options={"task_id": "restock"})
        for seat, name, args in calls:
            direct = hook.call_tool(seat, name, args)
            if stepped.agent_selection != seat:
                stepped.step(say("your turn"))  # pass the turn: text changes no state
            stepped.step(call(name, **args))
            (rec,) = stepped.trajectory[-1]["tool_results"]
            assert (direct.content, direct.error) == (rec["content"], rec["error"])
        assert hook.db_digest() == stepped.db_digest()
        assert all(hook.active_tools(s) == stepped.active_tools(s) for s in ("agent", "user"))
        assert hook.num_steps == 0


def test_readme_policy_example_is_a_policy(domain):
    """The README's policy example, as written, satisfies the protocol and plays an episode."""
    from pathlib import Path

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    code = re.search(r"```python\n(class Parrot:.*?)```", readme, re.S).group(1)
    scope: dict = {"tau_env": tau_env}
    exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - our own README
    parrot = scope["Parrot"]()
    assert isinstance(parrot, Policy)
    with TauEnv(domain) as env:
        r = tau_env.run_episode(env, parrot, ScriptedUser(), "nothing")
    assert r.termination_reason is TerminationReason.USER_STOP and parrot.n >= 1


def test_an_action_performed_by_someone_else_is_not_played_again_by_the_oracle():
    env = tau_env.make("harbor-bank-v0")
    env.reset(seed=0, options={"task_id": "travel_notice_simple"})
    agent = tau_env.OracleAgent()
    agent.reset(env.task)
    first, second = env.task.actions[0], env.task.actions[1]
    assert not agent.performed(second.name, {**second.arguments, "extra": 1})  # other arguments: not it
    assert not agent.performed("no_such_tool", second.arguments)
    assert agent.performed(second.name, dict(second.arguments))
    assert not agent.performed(second.name, second.arguments)  # once only
    played = [agent({"messages": []})["tool_calls"][0]["function"]["name"] for _ in range(2)]
    assert played == [first.name, env.task.actions[2].name]  # the second one is skipped
