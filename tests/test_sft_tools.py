"""The tools an SFT example is trained with: those the agent had at the episode's start
(``tau_env.sft.initial_tools``), also when the example is cut (``tau_env.sft.truncate``). An
episode record keeps its last tools, unlocked ones included; a tool left in the prompt before its
unlock shows the model the name its lookup is for."""

from __future__ import annotations

import copy
import json

from hypothesis import given
from hypothesis import strategies as st

import tau_env
from tau_env.sft import initial_tools, to_example, truncate


def tool(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}


def unlock(name: object, raw: str | None = None) -> dict:
    args = raw if raw is not None else json.dumps({"tool_name": name})
    call = {"id": "c", "type": "function", "function": {"name": "unlock_tool", "arguments": args}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def test_an_unlocked_tool_is_not_among_the_initial_ones_of_a_real_episode():
    r = tau_env.run_episode(
        tau_env.make("harbor-bank-v0"), tau_env.OracleAgent(), tau_env.ScriptedUser(), task_id="travel_notice_simple"
    )
    ex = to_example(r.to_dict())
    names = [t["function"]["name"] for t in ex["tools"]]
    assert "set_travel_notice_3012" in names  # the record keeps the last tools
    start = [t["function"]["name"] for t in initial_tools(ex)]
    assert start == [n for n in names if n != "set_travel_notice_3012"]  # the rest, in order
    first = next(i for i, t in enumerate(ex["train"]) if t)
    cut = truncate(ex, first + 1)
    assert cut["tools"] == initial_tools(ex)  # the cut lost the unlock call, not the start's tools
    assert cut["messages"] == ex["messages"][: first + 1] and cut["train"] == ex["train"][: first + 1]
    # the naive cut would keep the tool: its own initial tools still hold it
    assert "set_travel_notice_3012" in [t["function"]["name"] for t in initial_tools({**cut, "tools": ex["tools"]})]


def test_malformed_unlock_calls_and_tools_are_kept_not_fatal():
    msgs = [
        unlock(None, raw="{not json"),
        unlock(None, raw='["a list"]'),
        unlock(["unhashable"]),
        {"role": "assistant", "tool_calls": ["not a dict", {"function": "nor this"}]},
        "not a message",
    ]
    tools = [tool("a"), "a string", {"function": {"no": "name"}}, {"name": "plain"}]
    assert initial_tools({"messages": msgs, "tools": tools}) == tools
    assert initial_tools({"messages": [unlock("plain")], "tools": tools}) == tools[:3]
    assert initial_tools({"messages": [], "tools": None}) == []


names = st.sampled_from(["a", "b", "c", "d", "e"])


@given(
    st.lists(names, unique=True, max_size=5),
    st.lists(st.one_of(names.map(unlock), st.just({"role": "user", "content": "x"})), max_size=8),
    st.integers(0, 10),
)
def test_truncate_keeps_the_start_tools_at_any_cut_and_leaves_the_example_alone(have, messages, end):
    ex = {"task_id": "t", "messages": messages, "train": [m["role"] == "assistant" for m in messages]}
    ex["tools"] = [tool(n) for n in have]
    before = copy.deepcopy(ex)
    calls = [m["tool_calls"][0]["function"]["arguments"] for m in messages if m["role"] == "assistant"]
    unlocked = {json.loads(a)["tool_name"] for a in calls}
    start = initial_tools(ex)
    assert [t["function"]["name"] for t in start] == [n for n in have if n not in unlocked]
    cut = truncate(ex, end)
    assert cut["tools"] == start
    assert cut["messages"] == messages[:end] and cut["train"] == ex["train"][:end] and cut["task_id"] == "t"
    assert initial_tools(cut) == start  # cutting again changes nothing
    assert ex == before
