"""tau3-banking: a tool that raises after writing keeps its write, as in the benchmark.

tau2-bench's banking tools write straight into an in-memory dict and nothing rolls back: its
``call_discoverable_*_tool`` turn a ``TypeError`` into ``Error: Invalid arguments ...`` (returned
as an ordinary output, after the write), and its environment turns any other exception into an
error observation (after the write too). See docs/tau3_banking.md, "Where the benchmark's own
data is defective". Reads ../shared/data (skipped where absent; failed under CI).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import TAU3_DATA as DATA
from tests.conftest import needs_tau3_data

pytestmark = needs_tau3_data
DISPUTE = "file_credit_card_transaction_dispute_4829"


@pytest.fixture(scope="module")
def domain():
    from tau_env.domains import tau3_banking

    return tau3_banking.load(str(DATA))


def _episode(domain, task_id):
    task = domain.task(task_id)
    db = domain.start_db(task)
    box = domain.toolbox("all")
    ctx = domain.context(db, task, box)
    return db, lambda seat, name, **args: box.call(ctx, seat, name, args)


def _dispute_args(domain, **change):
    """task_031's reference dispute call, with some arguments changed."""
    ref = next(
        a
        for a in domain.task("task_031").actions
        if a.name == "call_discoverable_agent_tool" and a.arguments["agent_tool_name"] == DISPUTE
    )
    return json.dumps({**json.loads(ref.arguments["arguments"]), **change})


def test_dispute_with_a_list_refund_amount_keeps_its_row(domain):
    db, call = _episode(domain, "task_031")
    call("agent", "unlock_discoverable_agent_tool", agent_tool_name=DISPUTE)
    args = _dispute_args(domain, resolution_requested="partial_refund", partial_refund_amount=[5])
    res = call("agent", "call_discoverable_agent_tool", agent_tool_name=DISPUTE, arguments=args)
    assert (res.content, res.error) == (
        "Error: Invalid arguments: unsupported format string passed to list.__format__",
        False,
    )
    final = domain.export_db(db)
    (row,) = [r for r in final["transaction_disputes"]["data"].values() if r["transaction_id"] == "txn_adea68821a1d"]
    assert row["partial_refund_amount"] == [5.0] and row["status"] == "SUBMITTED"  # the write stays
    assert not any(r["tool_name"] == DISPUTE for r in final["agent_discoverable_tools"]["data"].values())  # no log row


def test_partial_refund_of_zero_is_filed_as_in_the_benchmark(domain):
    """The benchmark asks for an amount only when it is None (0 is filed, without an amount line)."""
    db, call = _episode(domain, "task_031")
    call("agent", "unlock_discoverable_agent_tool", agent_tool_name=DISPUTE)
    args = _dispute_args(domain, resolution_requested="partial_refund", partial_refund_amount=0)
    res = call("agent", "call_discoverable_agent_tool", agent_tool_name=DISPUTE, arguments=args)
    assert res.content.startswith("Credit card transaction dispute filed successfully.") and not res.error
    assert "Partial Refund Amount" not in res.content


def test_user_tool_with_a_list_id_keeps_its_call_log(domain):
    """A list id makes the benchmark's dict lookup raise TypeError after the call was logged."""
    db, call = _episode(domain, "task_055")
    call("agent", "give_discoverable_user_tool", discoverable_tool_name="deposit_check_3847")
    before = domain.export_db(db)["user_discoverable_tool_calls"]["data"]
    res = call(
        "user",
        "call_discoverable_user_tool",
        discoverable_tool_name="deposit_check_3847",
        arguments='{"account_id": ["7e48bf3b0589cfad"], "check_amount": 1500}',
    )
    assert (res.content, res.error) == (
        "Error: Invalid arguments for tool 'deposit_check_3847': unhashable type: 'list'",
        False,
    )
    after = domain.export_db(db)["user_discoverable_tool_calls"]["data"]
    assert len(after) == len(before) + 1  # the call-log row stays, as in the benchmark
    res = call(
        "user",
        "call_discoverable_user_tool",
        discoverable_tool_name="deposit_check_3847",
        arguments='{"account_id": 7, "check_amount": 1500}',
    )
    assert res.content == "Error: Account '7.0' not found."  # a number id finds nothing, as a dict lookup


def test_dispute_with_a_text_refund_amount_keeps_its_row_as_in_the_benchmark(domain):
    """A ValueError (not a TypeError) escapes call_discoverable_agent_tool: an error, but the row stays."""
    db, call = _episode(domain, "task_031")
    call("agent", "unlock_discoverable_agent_tool", agent_tool_name=DISPUTE)
    args = _dispute_args(domain, partial_refund_amount="5 dollars")
    res = call("agent", "call_discoverable_agent_tool", agent_tool_name=DISPUTE, arguments=args)
    assert (res.content, res.error) == ("Error: Unknown format code 'f' for object of type 'str'", True)
    rows = domain.export_db(db)["transaction_disputes"]["data"].values()
    assert any(r["transaction_id"] == "txn_adea68821a1d" for r in rows)
