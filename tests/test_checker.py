import random

import pytest

from tau_env import Task, ToolContext, check_domain, check_task, tool
from tau_env.checker import domain_problems, task_problems
from tau_env.error import CheckError
from tests.conftest import DOCS, TASKS, TOOLS, make_domain


def _task(**kw):
    base = {"id": "t", "scenario": {"requests": ["hi"]}}
    base.update(kw)
    return Task.model_validate(base)


def test_valid_domain_passes(domain):
    check_domain(domain)
    check_task(domain, "restock")


@pytest.mark.parametrize(
    "task,needle",
    [
        (_task(actions=[{"name": "nope"}]), "no tool named 'nope'"),
        (_task(actions=[{"name": "add_stok"}]), "no tool named 'add_stok'. Did you mean \"add_stock\"?"),
        (
            _task(actions=[{"name": "unlock_tool", "arguments": {"tool_name": "secret_restock_1235"}}]),
            "action 0 (unlock_tool): tool_name 'secret_restock_1235' names no discoverable or hand-over tool. "
            'Did you mean "secret_restock_1234"?',
        ),
        (
            _task(actions=[{"name": "hand_over_tool", "arguments": {"tool_name": "get_item"}}]),
            "tool_name 'get_item' names no discoverable or hand-over tool.",
        ),
        (_task(actions=[{"name": "confirm_in_app", "arguments": {"code": "x"}}]), "is a user tool but the requestor"),
        (
            _task(
                actions=[
                    {"name": "transfer_to_human", "arguments": {"summary": "s"}},
                    {"name": "get_item", "arguments": {"item_id": "widget"}},
                ]
            ),
            "must be the last action",
        ),
        (_task(required_documents=["ghost"], expect_no_change=True), "required document 'ghost' does not exist"),
        (
            _task(actions=[{"name": "add_stock", "arguments": {"item_id": "widget", "qty": -1}}]),
            "failed in the reference replay: Error: qty must be positive.",
        ),
        (_task(actions=[{"name": "get_item", "arguments": {"item_id": "widget"}}]), "leave the database unchanged"),
        (
            _task(expect_no_change=True, actions=[{"name": "add_stock", "arguments": {"item_id": "widget", "qty": 1}}]),
            "expect_no_change is set but",
        ),
        (
            _task(actions=[{"name": "secret_restock_1234", "arguments": {"item_id": "widget"}}]),
            "Unknown tool 'secret_restock_1234'",
        ),  # not unlocked first
    ],
)
def test_broken_tasks_are_reported(task, needle):
    d = make_domain(tasks=[task])
    problems = task_problems(d, task)
    assert any(needle in p for p in problems), problems
    with pytest.raises(CheckError, match="fails its checks"):
        check_task(d, task)


def test_nondeterministic_tool_is_caught():
    @tool(kind="write")
    def jitter(ctx: ToolContext) -> str:
        """Write a random number (a bug: tools must be deterministic)."""
        ctx.conn.execute("INSERT INTO log VALUES (?, ?)", (str(random.random()), "x"))
        return "ok"

    task = _task(actions=[{"name": "jitter"}])
    d = make_domain(tools=[*TOOLS, jitter], tasks=[task])
    assert any("not deterministic" in p for p in task_problems(d, task))


def test_user_action_without_hand_over_is_caught():
    task = _task(actions=[{"name": "confirm_in_app", "arguments": {"code": "Z"}, "requestor": "user"}])
    d = make_domain(tasks=[task])
    assert any(
        "failed in the reference replay: Error: Unknown tool 'confirm_in_app'" in p for p in task_problems(d, task)
    )


def test_failed_oracle_play_is_reported(domain, monkeypatch):
    from tau_env import users

    monkeypatch.setattr(
        users.ScriptedUser, "__call__", lambda self, obs: {"role": "assistant", "content": "bye ###STOP###"}
    )
    problems = task_problems(domain, domain.task("restock"))
    assert problems == [
        "the oracle agent with the scripted user scored 0.0 (ended by user_stop); differing tables: ['items', 'log']."
    ]


def test_undocumented_discoverable_tool_is_reported():
    d = make_domain(documents=[x for x in DOCS if x.id != "restock_policy"])
    problems = domain_problems(d)
    assert any("'secret_restock_1234' is not named in any document" in p for p in problems["<domain>"])
    with pytest.raises(CheckError, match="secret_restock_1234"):
        check_domain(d)


def test_play_can_be_skipped(domain):
    assert domain_problems(domain, play=False) == {}
    assert domain_problems(domain, task_ids=[TASKS[0].id]) == {}


def test_tau3_reference_calling_a_missing_discoverable_tool_is_reported():
    """tau3 answers a call to an unknown discoverable tool with an ordinary output, so only the name check sees it."""
    from tau_env.tasks import Action
    from tests.conftest import TAU3_DATA as data
    from tests.conftest import require_shared

    require_shared(data)
    from tau_env.domains import tau3_banking

    d = tau3_banking.load(str(data))
    assert domain_problems(d, play=False) == {}  # the benchmark's own tasks name only existing tools
    task = next(t for t in d.tasks if any(a.name == "call_discoverable_agent_tool" for a in t.actions))
    bad = task.model_copy(deep=True)
    i, a = next((i, a) for i, a in enumerate(bad.actions) if a.name == "call_discoverable_agent_tool")
    real = a.arguments["agent_tool_name"]
    a.arguments["agent_tool_name"] = real[:-1] + ("0" if real[-1] != "0" else "1")
    bad.actions.append(Action(name="give_discoverable_user_tool", arguments={"discoverable_tool_name": real}))
    problems = task_problems(d, bad, play=False)
    assert problems == [
        f"action {i} (call_discoverable_agent_tool): agent_tool_name {a.arguments['agent_tool_name']!r} names no "
        f'discoverable agent tool. Did you mean "{real}"?',
        f"action {len(bad.actions) - 1} (give_discoverable_user_tool): discoverable_tool_name {real!r} names no "
        "discoverable user tool.",
    ]
