"""tau3-banking: badly typed, empty and zero arguments take the benchmark's paths (issue 8).

A reference model of the benchmark's rules (its source, sierra-research/tau2-bench
``banking_knowledge/tools.py``), table-driven for two classes of rule, checked with hypothesis
against tau_env's output, error flag and whole final database (log rows included):

- the required-parameters guard ``if not a or not b ...``: any falsy guarded value returns the
  tool's guard text, and (the tool being WRITE) the discovery-log row is still written;
- ids joined with ``":".join``: a non-string part raises ``TypeError: sequence item <i>: expected
  str instance, <type> found``, reported as ``Error: Invalid arguments: ...`` with no log row through
  ``call_discoverable_agent_tool``, or as an environment error for a base user tool; nothing is written.

Not covered here (see docs/tau3_banking.md, defects): the other discoverable tools' typed paths.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tau_env.domains.tau3_banking.toolkit import H
from tests.conftest import TAU3_DATA as DATA
from tests.conftest import needs_tau3_data

pytestmark = needs_tau3_data
TASK = "task_036"

FALSY = st.sampled_from(["", 0.0, False, None, [], {}])
ODD = st.sampled_from(["", 0.0, 1.5, True, False, None, [], [1.0], {}, {"a": [None]}, "x", "ok"])
NON_STR = st.sampled_from([True, 1.0, 2.5, [], ["a"], {"a": 1.0}, [[]]])

#: tool -> (params checked for truthiness, params checked against None, the guard's text).
GUARDS = {
    "open_bank_account_4821": (("user_id", "account_type", "account_class"), (), "Error: Missing required parameters."),
    "log_credit_card_closure_reason_4521": (
        ("credit_card_account_id", "user_id", "closure_reason"),
        (),
        "Error: Missing required parameters.",
    ),
    "close_credit_card_account_7834": (
        ("credit_card_account_id", "user_id"),
        (),
        "Error: Missing required parameters (credit_card_account_id, user_id).",
    ),
    "close_debit_card_4721": (
        ("card_id", "reason"),
        (),
        "Error: Missing required parameters. Required: card_id, reason.",
    ),
    "apply_checking_account_credit_5829": (
        ("account_id", "credit_type"),
        ("amount",),
        "Error: Missing required parameters.",
    ),
    "apply_savings_account_credit_6831": (
        ("account_id", "credit_type"),
        ("amount",),
        "Error: Missing required parameters.",
    ),
    "change_debit_card_pin_6285": (
        ("card_id", "current_pin", "new_pin"),
        (),
        "Error: Missing required parameters. Required: card_id, current_pin, new_pin.",
    ),
    "deny_credit_limit_increase_5848": (
        ("credit_card_account_id", "user_id", "denial_reason"),
        (),
        "Error: Missing required parameters.",
    ),
    "submit_interest_discrepancy_report_7294": (
        ("account_id", "user_id"),
        ("expected_apy", "actual_apy", "amount_difference"),
        "Error: Missing required parameters.",
    ),
    "apply_statement_credit_8472": (
        ("user_id", "credit_card_account_id", "reason"),
        ("amount",),
        "Error: Missing required parameters (user_id, credit_card_account_id, amount, reason).",
    ),
}


@pytest.fixture(scope="module")
def domain():
    from tau_env.domains import tau3_banking

    return tau3_banking.load(str(DATA))


def _episode(domain):
    task = domain.task(TASK)
    db = domain.start_db(task)
    box = domain.toolbox("all")
    ctx = domain.context(db, task, box)
    ctx.active["user"] = {*ctx.active["user"], "submit_referral", "submit_transaction"}  # as a task offering them
    return db, lambda seat, name, **args: box.call(ctx, seat, name, args)


def _log_row(name):
    return H(f"agent_discoverable_tool:{name}", 16), {"tool_name": name, "status": "CALLED"}


def _type_name(v):
    return type(v).__name__


def _changes(before, after):
    return {t: {k: v for k, v in after[t]["data"].items() if before[t]["data"].get(k) != v} for t in after} | {}


def _only(changes):
    return {t: rows for t, rows in changes.items() if rows}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), name=st.sampled_from(sorted(GUARDS)))
def test_a_falsy_required_value_returns_the_guard_text_and_logs_the_call(domain, data, name):
    truthy, none_only, text = GUARDS[name]
    args = {p: data.draw(ODD, label=p) for p in truthy + none_only}
    # make the guard fire: one truthiness-checked value falsy, or one None-checked value None
    victim = data.draw(st.sampled_from(truthy + none_only), label="victim")
    args[victim] = data.draw(FALSY) if victim in truthy else None
    db, call = _episode(domain)
    before = domain.export_db(db)
    call("agent", "unlock_discoverable_agent_tool", agent_tool_name=name)
    res = call("agent", "call_discoverable_agent_tool", agent_tool_name=name, arguments=json.dumps(args))
    assert (res.content, res.error) == (text, False)
    rid, row = _log_row(name)
    assert _only(_changes(before, domain.export_db(db))) == {"agent_discoverable_tools": {rid: row}}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user_id=NON_STR, account_type=st.one_of(NON_STR, st.just("checking")))
def test_submit_referral_with_a_non_string_part_raises_the_joins_error(domain, user_id, account_type):
    db, call = _episode(domain)
    before = domain.export_db(db)
    res = call("user", "submit_referral", user_id=user_id, account_type=account_type)
    bad = 1 if not isinstance(user_id, str) else 2
    found = user_id if bad == 1 else account_type
    assert (res.content, res.error) == (
        f"Error: sequence item {bad}: expected str instance, {_type_name(found)} found",
        True,
    )
    assert domain.export_db(db) == before


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(part=st.sampled_from(["user_id", "merchant_name", "category"]), value=NON_STR)
def test_submit_transaction_with_a_non_string_part_writes_nothing(domain, part, value):
    db, call = _episode(domain)
    before = domain.export_db(db)
    args = {"user_id": "u1", "credit_card_type": "Gold Rewards Card", "merchant_name": "M", "amount": 10.0}
    args["category"] = "Dining"
    args[part] = value
    res = call("user", "submit_transaction", **args)
    index = {"user_id": 1, "merchant_name": 3, "category": 5}[part]
    expected = f"Error: sequence item {index}: expected str instance, {_type_name(value)} found"
    assert (res.content, res.error) == (expected, True)
    assert domain.export_db(db) == before


def test_submit_transaction_formats_the_amount_before_joining(domain):
    db, call = _episode(domain)
    res = call("user", "submit_transaction", user_id=1, credit_card_type="Gold Rewards Card", merchant_name="M",
               amount="12", category="Dining")  # fmt: skip
    assert (res.content, res.error) == ("Error: Unknown format code 'f' for object of type 'str'", True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user_id=NON_STR)
def test_statement_credit_with_a_non_string_user_is_invalid_arguments_without_log(domain, user_id):
    db, call = _episode(domain)
    card = next(iter(domain.export_db(db)["credit_card_accounts"]["data"]))
    before = domain.export_db(db)
    name = "apply_statement_credit_8472"
    args = {"user_id": user_id, "credit_card_account_id": card, "amount": 5, "reason": "other"}
    call("agent", "unlock_discoverable_agent_tool", agent_tool_name=name)
    res = call("agent", "call_discoverable_agent_tool", agent_tool_name=name, arguments=json.dumps(args))
    if not user_id:  # an empty list is falsy: the guard answers first
        assert res.content == GUARDS[name][2]
        return
    expected = f"Error: Invalid arguments: sequence item 1: expected str instance, {_type_name(user_id)} found"
    assert (res.content, res.error) == (expected, False)
    assert domain.export_db(db) == before


def test_a_list_credit_type_is_an_invalid_credit_type_not_unhashable(domain):
    db, call = _episode(domain)
    acct = next(k for k, r in domain.export_db(db)["accounts"]["data"].items() if r.get("class") == "checking")
    name = "apply_checking_account_credit_5829"
    call("agent", "unlock_discoverable_agent_tool", agent_tool_name=name)
    args = json.dumps({"account_id": acct, "amount": 5, "credit_type": ["fee_refund"]})
    res = call("agent", "call_discoverable_agent_tool", agent_tool_name=name, arguments=args)
    assert res.content == "Error: Invalid credit_type. Must be one of: ['rebate_credit', 'fee_refund']"


def test_deposit_check_names_the_bad_amount(domain):
    db, call = _episode(domain)
    call("agent", "give_discoverable_user_tool", discoverable_tool_name="deposit_check_3847")
    args = json.dumps({"account_id": "a", "check_amount": "ten"})
    res = call("user", "call_discoverable_user_tool", discoverable_tool_name="deposit_check_3847", arguments=args)
    assert res.content == "Error: Invalid check amount 'ten'. Must be a number."
