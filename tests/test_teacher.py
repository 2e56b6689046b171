"""TeacherAgent: the oracle's reference actions, after asking the customer for every fact they use.

Its episodes are SFT data; the property that matters is that no tool call carries a customer
fact the conversation had not shown when the call was made, while the reward stays the oracle's.
"""

from __future__ import annotations

import functools
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tau_env
from tau_env import OracleAgent, ScriptedUser, TeacherAgent
from tau_env.cli import main
from tau_env.error import InvalidOptionError
from tau_env.messages import say

ENV = "harbor-bank-v0"


@pytest.fixture(scope="module")
def shipped():
    env = tau_env.make(ENV, retrieval="none")
    try:
        return list(env.unwrapped.domain.tasks)
    finally:
        env.close()


def scalars(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from scalars(v)
    elif isinstance(value, list):
        for v in value:
            yield from scalars(v)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def leaks(record, facts):
    """(tool, value) of every call argument equal to a fact value not yet in a user or tool message."""
    fact_values = set(facts.values())
    seen, out = [], []
    for m in record["agent_view"]["messages"]:
        if m["role"] in ("user", "tool"):
            seen.append(str(m.get("content") or ""))
        for c in m.get("tool_calls") or [] if m["role"] == "assistant" else []:
            for v in scalars(json.loads(c["function"]["arguments"])):
                shown = any(re.search(rf"(?<![0-9A-Za-z]){re.escape(v)}(?![0-9A-Za-z])", s) for s in seen)
                if v in fact_values and not shown:
                    out.append((c["function"]["name"], v))
    return out


def run(agent, user=ScriptedUser, tasks=None, max_steps=60):
    kw = {"tasks": tasks} if tasks is not None else {}
    return tau_env.evaluate(ENV, agent, user, retrieval="none", max_steps=max_steps, **kw)


def test_every_shipped_task_keeps_the_oracles_reward_without_using_an_unseen_fact(shipped):
    oracle = {r.task_id: r.reward for r in run(OracleAgent).results}
    teacher = run(TeacherAgent).results
    assert {r.task_id: r.reward for r in teacher} == oracle
    assert all(v == 1.0 for v in oracle.values())
    by_id = {t.id: t for t in shipped}
    asked = 0
    for r in teacher:
        rec = r.to_dict()
        assert leaks(rec, by_id[r.task_id].scenario.facts) == [], r.task_id
        asked += sum("could you tell me your" in (m.get("content") or "") for m in rec["agent_view"]["messages"])
    # the oracle's own episodes do use unseen facts: the property above is not vacuous
    oracle_leaks = [leaks(r.to_dict(), by_id[r.task_id].scenario.facts) for r in run(OracleAgent).results]
    assert sum(map(bool, oracle_leaks)) > len(shipped) // 2
    assert asked >= len(shipped)


def test_it_asks_for_the_identity_then_uses_the_answers():
    (r,) = tau_env.evaluate(
        ENV, TeacherAgent, ScriptedUser, task_ids=["travel_notice_simple"], retrieval="none"
    ).results
    msgs = r.to_dict()["agent_view"]["messages"]
    roles = [(m["role"], m.get("content") or "", m.get("tool_calls")) for m in msgs if m["role"] != "system"]
    # greeting, request, question, answer, find_customer with the answered values
    assert roles[2][1] == "Before I go on, could you tell me your full name and date of birth?"
    assert roles[3][1] == "My full name is Priya Natarajan. My date of birth is 1984-02-07."
    call = roles[4][2][0]["function"]
    assert call["name"] == "find_customer"
    assert json.loads(call["arguments"]) == {"full_name": "Priya Natarajan", "date_of_birth": "1984-02-07"}
    # the phone digits are asked for only when verify_identity needs them
    assert roles[6][1] == "Before I go on, could you tell me your phone?"
    assert r.reward == 1.0


def test_values_found_in_tool_results_are_not_asked_for(shipped):
    # lost_card_standard_shipping declares 'customer id' as a fact too; find_customer shows it first
    (r,) = run(TeacherAgent, tasks=[t for t in shipped if t.id == "lost_card_standard_shipping"]).results
    said = " ".join(m.get("content") or "" for m in r.to_dict()["agent_view"]["messages"] if m["role"] == "assistant")
    assert "customer id" not in said and "card last 4 digits" not in said
    assert r.reward == 1.0


def unseen_tool_names(record):
    """(meta tool, name) of every call naming a tool (a ``*tool_name`` argument) that no earlier tool
    result showed."""
    seen, out = [], []
    for m in record["agent_view"]["messages"]:
        if m["role"] == "tool":
            seen.append(str(m.get("content") or ""))
        for c in m.get("tool_calls") or [] if m["role"] == "assistant" else []:
            for k, v in json.loads(c["function"]["arguments"]).items():
                if k.endswith("tool_name") and not any(re.search(rf"(?<![\w]){re.escape(v)}(?![\w])", s) for s in seen):
                    out.append((c["function"]["name"], v))
    return out


def unseen_app_tools(record, task):
    """Names of the user's app tools the agent asked the user to use before any tool result showed them."""
    names = {a.name for a in task.actions if a.requestor == "user"}
    seen, out = [], []
    for m in record["agent_view"]["messages"]:
        if m["role"] == "tool":
            seen.append(str(m.get("content") or ""))
        if m["role"] == "assistant" and m.get("content"):
            for n in names:
                if n in m["content"] and not any(n in s for s in seen):
                    out.append(n)
    return out


@pytest.mark.parametrize("lookup", ["early", "before_use"])
@pytest.mark.parametrize("retrieval", ["grep", "bm25"])
def test_with_a_knowledge_tool_every_tool_name_is_looked_up_before_it_is_used(shipped, retrieval, lookup):
    kw = {"retrieval": retrieval, "max_steps": 60}
    oracle = tau_env.evaluate(ENV, OracleAgent, ScriptedUser, **kw).results
    teacher = tau_env.evaluate(ENV, functools.partial(TeacherAgent, lookup=lookup), ScriptedUser, **kw).results
    by_id = {t.id: t for t in shipped}
    assert {r.task_id: r.reward for r in teacher} == {r.task_id: r.reward for r in oracle}
    lookups = 0
    for r in teacher:
        rec = r.to_dict()
        assert unseen_tool_names(rec) == [], r.task_id
        assert unseen_app_tools(rec, by_id[r.task_id]) == [], r.task_id
        calls = [c["function"] for m in rec["agent_view"]["messages"] for c in m.get("tool_calls") or []]
        lookups += sum(c["name"] in TeacherAgent.LOOKUP_TOOLS for c in calls)
        # one lookup per name at most, and only with the configuration's own tool
        names = [c["name"] for c in calls if c["name"] in TeacherAgent.LOOKUP_TOOLS]
        assert set(names) <= {"grep_documents" if retrieval == "grep" else "search_documents"}
        queries = [json.loads(c["arguments"]) for c in calls if c["name"] in TeacherAgent.LOOKUP_TOOLS]
        assert len(queries) == len({json.dumps(q) for q in queries}), r.task_id
    # the oracle's episodes do name tools no result showed: the property above is not vacuous
    assert sum(bool(unseen_tool_names(r.to_dict())) for r in oracle) >= 10
    assert sum(bool(unseen_app_tools(r.to_dict(), by_id[r.task_id])) for r in oracle) >= 2
    assert lookups >= 10


@pytest.mark.parametrize("lookup", ["early", "before_use"])
def test_the_lookup_uses_the_words_of_the_name_not_its_number(lookup):
    (r,) = tau_env.evaluate(
        ENV, TeacherAgent(lookup=lookup), ScriptedUser, task_ids=["travel_notice_simple"], retrieval="grep"
    ).results
    msgs = r.to_dict()["agent_view"]["messages"]
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for m in msgs for c in m.get("tool_calls") or []
    ]
    i = calls.index(("grep_documents", {"pattern": "set_travel_notice"}))
    j = calls.index(("unlock_tool", {"tool_name": "set_travel_notice_3012"}))
    # before_use: right before the unlock, after the identity check; early: the first thing done,
    # the unlock right after it, both before the identity check
    assert (i, j) == ((0, 1) if lookup == "early" else (2, 3))
    if lookup == "early":
        agent_turns = [m for m in msgs if m["role"] == "assistant"][1:]  # after the greeting
        assert [t["tool_calls"][0]["function"]["name"] for t in agent_turns[:2]] == ["grep_documents", "unlock_tool"]
        assert "could you tell me" in agent_turns[2]["content"]
    results = [m["content"] for m in msgs if m["role"] == "tool"]
    assert any("set_travel_notice_3012" in c for c in results)
    assert r.reward == 1.0


def test_early_lookups_and_their_unlocks_come_first_and_once_per_name(shipped):
    """Every shipped task: the agent's first actions after the request are the lookups, each
    specialised tool unlocked right after the lookup that showed its name; none later."""
    teacher = tau_env.evaluate(ENV, TeacherAgent, ScriptedUser, retrieval="grep", max_steps=60).results
    looked = unlocked = 0
    for r in teacher:
        msgs = r.to_dict()["agent_view"]["messages"]
        turns = [(k, m) for k, m in enumerate(msgs) if m["role"] == "assistant"][1:]
        names = [(m.get("tool_calls") or [{"function": {"name": None}}])[0]["function"]["name"] for _, m in turns]
        n = next((i for i, x in enumerate(names) if x not in ("grep_documents", "unlock_tool")), len(names))
        assert "grep_documents" not in names[n:], r.task_id
        for i in range(n):
            if names[i] == "unlock_tool":  # right after the lookup whose result shows the name
                k, m = turns[i]
                tool = json.loads(m["tool_calls"][0]["function"]["arguments"])["tool_name"]
                assert names[i - 1] == "grep_documents" and tool in msgs[k - 1]["content"], r.task_id
                unlocked += 1
        looked += names[:n].count("grep_documents")
        patterns = [json.loads(m["tool_calls"][0]["function"]["arguments"]).get("pattern") for _, m in turns[:n]]
        patterns = [p for p in patterns if p]
        assert len(patterns) == len(set(patterns)), r.task_id
        assert r.reward == 1.0, r.task_id
    assert looked >= 20 and unlocked >= 15


def test_an_app_tool_the_user_must_use_is_looked_up_before_it_is_named():
    (r,) = tau_env.evaluate(
        ENV, TeacherAgent, ScriptedUser, task_ids=["mobile_deposit_preferred"], retrieval="grep"
    ).results
    msgs = r.to_dict()["agent_view"]["messages"]
    first = next(m for m in msgs if m["role"] == "assistant" and m.get("tool_calls"))
    assert json.loads(first["tool_calls"][0]["function"]["arguments"]) == {"pattern": "deposit_check_in_app"}
    said = next(
        i for i, m in enumerate(msgs) if m["role"] == "assistant" and "deposit_check_in_app" in (m.get("content") or "")
    )
    shown = next(i for i, m in enumerate(msgs) if m["role"] == "tool" and "deposit_check_in_app" in m["content"])
    assert shown < said and r.reward == 1.0


def test_an_unknown_lookup_mode_is_refused():
    with pytest.raises(InvalidOptionError, match="lookup"):
        TeacherAgent(lookup="later")


def test_without_a_knowledge_tool_nothing_is_looked_up(shipped):
    for r in run(TeacherAgent).results:
        msgs = r.to_dict()["agent_view"]["messages"]
        assert not any(
            c["function"]["name"] in TeacherAgent.LOOKUP_TOOLS for m in msgs for c in m.get("tool_calls") or []
        )


class SilentUser(ScriptedUser):
    """Answers every question with something unhelpful."""

    def __call__(self, obs):
        last = (obs["messages"] or [{}])[-1]
        if self._n and last.get("role") == "user" and "could you tell me" in (last.get("content") or ""):
            self._n += 1
            return say("I'd rather not say.")
        return super().__call__(obs)


def test_a_user_who_does_not_answer_is_asked_once_per_fact_and_the_episode_ends(shipped):
    results = run(TeacherAgent, user=SilentUser, max_steps=200).results
    for r in results:
        rec = r.to_dict()
        questions = [
            m["content"] for m in rec["agent_view"]["messages"] if "could you tell me" in (m.get("content") or "")
        ]
        assert len(questions) == len(set(questions)), r.task_id
        assert r.termination_reason != "max_steps", r.task_id


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fact_order_and_unused_facts_change_nothing_but_the_wording(shipped, data):
    task = data.draw(st.sampled_from(shipped))
    facts = dict(task.scenario.facts)
    keys = data.draw(st.permutations(list(facts)))
    extra = data.draw(
        st.dictionaries(
            st.sampled_from(["favourite colour", "pet name", "employer", "mother maiden name"]),
            st.from_regex(r"[A-Z][a-z]{3,8}-[0-9]{5}", fullmatch=True),
            max_size=2,
        )
    )
    scenario = task.scenario.model_copy(update={"facts": {**{k: facts[k] for k in keys}, **extra}})
    changed = task.model_copy(update={"scenario": scenario})
    (r,) = run(TeacherAgent, tasks=[changed]).results
    rec = r.to_dict()
    assert r.reward == 1.0
    assert leaks(rec, scenario.facts) == []
    said = " ".join(m.get("content") or "" for m in rec["agent_view"]["messages"] if m["role"] == "assistant")
    assert not any(k in said for k in extra)  # facts no action uses are never asked for


def test_cli_teacher_episodes_export_as_sft_examples(tmp_path, capsys):
    out = tmp_path / "teacher"
    args = ["eval", "--quiet", "--agent", "teacher", "--out", str(out), "--task", "found_card_unlock"]
    assert main(args) == 0
    assert main(["export-sft", str(out), "--jsonl", str(tmp_path / "sft.jsonl")]) == 0
    (ex,) = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text().splitlines()]
    trained = [m for m, t in zip(ex["messages"], ex["train"]) if t]
    assert trained[0]["content"].startswith("Before I go on, could you tell me your full name")
    assert json.loads((out / "config.json").read_text())["agent"] == {
        "agent": "tau_env.agents.TeacherAgent",
        "lookup": "early",
    }


MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October"]
MONTHS += ["November", "December"]


def say_date(d, form, year):
    """``d`` in words, one of several forms a customer uses (``year`` None: left out)."""
    suffix = "th" if 10 <= d.day % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(d.day % 10, "th")
    month = MONTHS[d.month - 1]
    text = {
        "month_day": f"{month} {d.day}",
        "month_ordinal": f"{month} {d.day}{suffix}",
        "abbrev": f"{month[:3]}. {d.day}",
        "day_month": f"{d.day} {month}",
        "the_ordinal_of": f"the {d.day}{suffix} of {month}",
    }[form]
    if year is None:
        return text
    return f"{text}, {year}" if form in ("month_day", "month_ordinal", "abbrev") else f"{text} {year}"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    form=st.sampled_from(["month_day", "month_ordinal", "abbrev", "day_month", "the_ordinal_of"]),
    with_year=st.booleans(),
    wrong=st.sampled_from([None, "year", "day"]),
)
def test_dates_the_customer_said_in_words_are_not_asked_for_again(shipped, form, with_year, wrong):
    # travel_notice_simple with its dates as facts and said in words, as a customer says them;
    # said with another year or another day, the ISO fact was not given and is asked for
    from datetime import date

    task = next(t for t in shipped if t.id == "travel_notice_simple")
    start, end = date(2025, 6, 20), date(2025, 7, 5)
    year = 2024 if wrong == "year" else (2025 if with_year else None)
    said_start = start.replace(day=21) if wrong == "day" else start
    request = f"I'm travelling to Japan from {say_date(said_start, form, year)} to {say_date(end, form, year)}."
    facts = {**task.scenario.facts, "start date": "2025-06-20", "end date": "2025-07-05"}
    scenario = task.scenario.model_copy(update={"requests": [request], "facts": facts})
    (r,) = run(TeacherAgent, tasks=[task.model_copy(update={"scenario": scenario})]).results
    rec = r.to_dict()
    asked = " ".join(m.get("content") or "" for m in rec["agent_view"]["messages"] if m["role"] == "assistant")
    assert r.reward == 1.0
    assert ("start date" in asked) == (wrong is not None)
    assert ("end date" in asked) == (wrong == "year")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(form=st.sampled_from(["month_day", "month_ordinal", "abbrev", "day_month", "the_ordinal_of"]))
def test_a_date_said_without_its_year_is_not_taken_for_a_date_of_birth(shipped, form):
    # Priya Natarajan's date of birth is 1984-02-07; a trip from "February 7th" is this year's
    from datetime import date

    task = next(t for t in shipped if t.id == "travel_notice_simple")
    request = f"I'm travelling to Japan from {say_date(date(2025, 2, 7), form, None)} for a week."
    scenario = task.scenario.model_copy(update={"requests": [request]})
    (r,) = run(TeacherAgent, tasks=[task.model_copy(update={"scenario": scenario})]).results
    rec = r.to_dict()
    asked = " ".join(m.get("content") or "" for m in rec["agent_view"]["messages"] if m["role"] == "assistant")
    assert "date of birth" in asked
    assert leaks(rec, scenario.facts) == []
    assert r.reward == 1.0


def agent_calls(rec):
    return [c["function"]["name"] for m in rec["agent_view"]["messages"] for c in m.get("tool_calls") or []]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    form=st.sampled_from(["month_day", "month_ordinal", "abbrev", "day_month", "the_ordinal_of"]),
    start_year=st.booleans(),
    end_year=st.booleans(),
    retrieval=st.sampled_from(["none", "grep"]),
)
def test_a_date_said_without_its_year_is_written_after_a_look_at_the_clock(
    shipped, form, start_year, end_year, retrieval
):
    # the year the teacher writes for "June 20th" comes from get_current_time's result, shown in
    # the conversation by one call right before the write; with both years said it needs no clock
    from datetime import date

    task = next(t for t in shipped if t.id == "travel_notice_simple")
    start, end = date(2025, 6, 20), date(2025, 7, 5)
    said = (say_date(start, form, 2025 if start_year else None), say_date(end, form, 2025 if end_year else None))
    scenario = task.scenario.model_copy(update={"requests": [f"I'm travelling to Japan from {said[0]} to {said[1]}."]})
    changed = task.model_copy(update={"scenario": scenario})
    (r,) = tau_env.evaluate(ENV, TeacherAgent, ScriptedUser, tasks=[changed], retrieval=retrieval).results
    rec = r.to_dict()
    calls = agent_calls(rec)
    assert r.reward == 1.0
    if start_year and end_year:
        assert "get_current_time" not in calls
        return
    assert calls.count("get_current_time") == 1
    assert calls[calls.index("get_current_time") + 1] == "set_travel_notice_3012"
    msgs = rec["agent_view"]["messages"]
    i = next(
        i
        for i, m in enumerate(msgs)
        if any(c["function"]["name"] == "get_current_time" for c in m.get("tool_calls") or [])
    )
    assert msgs[i + 1]["role"] == "tool" and msgs[i + 1]["content"].startswith("2025-")


class WithoutClock(TeacherAgent):
    """The teacher on an agent seat that is not offered get_current_time."""

    def __call__(self, obs):
        tools = [t for t in obs.get("tools") or [] if (t.get("function") or {}).get("name") != "get_current_time"]
        return super().__call__({**obs, "tools": tools})


def test_the_clock_is_called_once_and_only_when_offered(shipped):
    # a chain that calls get_current_time itself (a trip already begun) gets no second call; a
    # seat without the tool gets the reference's write with no clock call
    task = next(t for t in shipped if t.id == "travel_notice_simple")
    actions = list(task.actions)
    clock = actions[0].model_copy(update={"name": "get_current_time", "arguments": {}})
    with_clock = task.model_copy(update={"actions": [*actions[:2], clock, *actions[2:]]})
    (r,) = tau_env.evaluate(ENV, TeacherAgent, ScriptedUser, tasks=[with_clock]).results
    assert r.reward == 1.0 and agent_calls(r.to_dict()).count("get_current_time") == 1
    (r,) = tau_env.evaluate(ENV, WithoutClock, ScriptedUser, tasks=[task]).results
    assert r.reward == 1.0 and "get_current_time" not in agent_calls(r.to_dict())
