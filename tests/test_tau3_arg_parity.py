"""tau3-banking: badly typed, empty and zero arguments take the benchmark's paths (issue 8).

A reference model of the benchmark's rules (its source, sierra-research/tau2-bench
``banking_knowledge/tools.py``), table-driven for two classes of rule, checked with hypothesis
against tau_env's output, error flag and whole final database (log rows included):

- the required-parameters guard ``if not a or not b ...``: any falsy guarded value returns the
  tool's guard text, and (the tool being WRITE) the discovery-log row is still written;
- ids joined with ``":".join``: a non-string part raises ``TypeError: sequence item <i>: expected
  str instance, <type> found``, reported as ``Error: Invalid arguments: ...`` with no log row through
  ``call_discoverable_agent_tool``, or as an environment error for a base user tool; nothing is written.

- single-parameter guards and the error texts of the tools aligned by a differential fuzz against
  the benchmark's code (FIRST_GUARDS, TEXTS): text, error flag and the rows changed (the log row
  for write tools; none when the tool raises on an unhashable id).
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


# --- single-parameter guards and the texts of the tools aligned by differential fuzzing ------------
#: tool -> (the parameter its first guard checks for truthiness, the guard's text, the other arguments).
FIRST_GUARDS = {
    "get_all_user_accounts_by_user_id_3847": ("user_id", "Error: Missing required parameter: user_id", {}),
    "get_debit_dispute_status_7483": ("user_id", "Error: Missing required parameter: user_id", {}),
    "get_bank_account_transactions_9173": ("account_id", "Error: Missing required parameter: account_id", {}),
    "get_pending_replacement_orders_5765": (
        "credit_card_account_id",
        "Error: Missing required parameter: credit_card_account_id",
        {},
    ),
    "get_closure_reason_history_8293": (
        "credit_card_account_id",
        "Error: Missing required parameter: credit_card_account_id",
        {},
    ),
    "get_credit_limit_increase_history_4829": (
        "credit_card_account_id",
        "Error: Missing required parameter: credit_card_account_id",
        {},
    ),
    "get_debit_cards_by_account_id_7823": ("account_id", "Error: Missing required parameter 'account_id'.", {}),
    "get_atm_deposit_images_8473": ("transaction_id", "Error: Missing required parameter: transaction_id", {}),
    "freeze_debit_card_3892": ("card_id", "Error: Missing required parameter: card_id.", {}),
    "unfreeze_debit_card_3893": ("card_id", "Error: Missing required parameter: card_id.", {}),
    "set_debit_card_recurring_block_7382": (
        "card_id",
        "Error: Missing required parameter: card_id",
        {"block_recurring": True},
    ),
    "request_temporary_debit_card_limit_increase_8374": (
        "card_id",
        "Error: Missing required parameter: card_id.",
        {"limit_type": "atm", "new_limit": 900},
    ),
}


def _discover(domain, call, db, name, args):
    """Unlock and call a discoverable agent tool; its output, error flag and the rows it changed."""
    call("agent", "unlock_discoverable_agent_tool", agent_tool_name=name)
    before = domain.export_db(db)
    res = call("agent", "call_discoverable_agent_tool", agent_tool_name=name, arguments=json.dumps(args))
    return res.content, res.error, _only(_changes(before, domain.export_db(db)))


def _logged(domain, name):
    """The log row a call of ``name`` writes in TASK: write tools always, read tools if allow-listed."""
    from tau_env.domains.tau3_banking import interface

    allow = domain.task(TASK).metadata.get("read_log_allowlist", ())
    if interface.DISCOVERABLE_AGENT[name]["kind"] == "write" or name in allow:
        rid, row = _log_row(name)
        return {"agent_discoverable_tools": {rid: row}}
    return {}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(FIRST_GUARDS)), value=FALSY)
def test_a_falsy_first_parameter_returns_the_guard_text(domain, name, value):
    param, text, rest = FIRST_GUARDS[name]
    db, call = _episode(domain)
    assert _discover(domain, call, db, name, {param: value, **rest}) == (text, False, _logged(domain, name))


def _row(domain, db, table, pred):
    return next((k, r) for k, r in domain.export_db(db)[table]["data"].items() if pred(r))


#: (tool, arguments, the benchmark's text): error texts, fixed by the benchmark's rules.
TEXTS = [
    # a zero or list amount is not "missing" (the guard tests None), it fails the number check
    (
        "transfer_funds_between_bank_accounts_7291",
        {"source_account_id": "a", "destination_account_id": "b", "amount": []},
        "Error: Invalid amount '[]'. Must be a number.",
    ),
    (
        "transfer_funds_between_bank_accounts_7291",
        {"source_account_id": "a", "destination_account_id": "b", "amount": 0},
        "Error: Transfer amount must be positive.",
    ),
    (
        "pay_credit_card_from_checking_9182",
        {"user_id": "u", "checking_account_id": "c", "credit_card_account_id": "cc", "amount": False},
        "Error: Payment amount must be a positive number.",
    ),
    (
        "pay_credit_card_from_checking_9182",
        {"user_id": "u", "checking_account_id": "c", "credit_card_account_id": "cc", "amount": []},
        "Error: Invalid payment amount. Must be a positive number.",
    ),
    # approve: a zero limit goes on to the lookups; an unhashable id is the dict's TypeError
    (
        "approve_credit_limit_increase_5847",
        {"credit_card_account_id": "nope", "user_id": "u", "new_credit_limit": 0},
        "Error: Credit card account 'nope' not found.",
    ),
    (
        "approve_credit_limit_increase_5847",
        {"credit_card_account_id": {"a": 1}, "user_id": "u", "new_credit_limit": False},
        "Error: Invalid arguments: unhashable type: 'dict'",
    ),
    (
        "approve_credit_limit_increase_5847",
        {"credit_card_account_id": "cc", "user_id": "u", "new_credit_limit": None},
        "Error: Missing required parameters.",
    ),
    (
        "order_debit_card_5739",
        {
            "account_id": "a",
            "user_id": "u",
            "delivery_option": "DRONE",
            "delivery_fee": 0,
            "card_design": "CLASSIC",
            "design_fee": 0,
            "shipping_address": "x",
        },
        "Error: Invalid delivery_option. Must be one of: ['STANDARD', 'EXPEDITED', 'RUSH']",
    ),  # fmt: skip
    (
        "order_debit_card_5739",
        {
            "account_id": "a",
            "user_id": "u",
            "delivery_option": "rush",
            "delivery_fee": 0,
            "card_design": "gold",
            "design_fee": 0,
            "shipping_address": "x",
        },
        "Error: Invalid card_design. Must be one of: ['CLASSIC', 'PREMIUM', 'CUSTOM']",
    ),  # fmt: skip
    (  # a null fee is missing, not "must be a number"
        "order_debit_card_5739",
        {
            "account_id": "a",
            "user_id": "u",
            "delivery_option": "RUSH",
            "delivery_fee": None,
            "card_design": "CLASSIC",
            "design_fee": 0,
            "shipping_address": "x",
        },
        "Error: Missing required parameters. Required: account_id, user_id, delivery_option, delivery_fee, "
        "card_design, design_fee, shipping_address.",
    ),  # fmt: skip
    (
        "request_temporary_debit_card_limit_increase_8374",
        {"card_id": "c", "limit_type": "atm", "new_limit": {}},
        "Error: new_limit must be an integer, got '{}'.",
    ),
    (
        "request_temporary_debit_card_limit_increase_8374",
        {"card_id": "c", "limit_type": "atm", "new_limit": False},
        "Error: new_limit must be a positive amount.",
    ),
    (
        "request_temporary_debit_card_limit_increase_8374",
        {"card_id": "c", "limit_type": "atm", "new_limit": 2.5},
        "Error: new_limit must be an integer, got '2.5'.",
    ),
    (
        "set_debit_card_recurring_block_7382",
        {"card_id": {}, "block_recurring": True},
        "Error: Missing required parameter: card_id",
    ),
    ("unfreeze_debit_card_3893", {"card_id": []}, "Error: Missing required parameter: card_id."),
    ("freeze_debit_card_3892", {"card_id": ["x"]}, "Error: Invalid arguments: unhashable type: 'list'"),
]
_DISPUTE = {
    "transaction_id": "t", "account_id": "a", "card_id": "c", "user_id": "u", "dispute_category": "duplicate_charge",
    "transaction_date": "11/01/2025", "discovery_date": "11/02/2025", "disputed_amount": 10.0,
    "transaction_type": "pin_purchase", "card_in_possession": True, "pin_compromised": "no",
    "contacted_merchant": False, "police_report_filed": False, "written_statement_provided": False,
    "provisional_credit_eligible": False, "customer_max_liability_amount": 0.0, "card_action": "keep_active",
}  # fmt: skip
TEXTS += [
    (
        "file_debit_card_transaction_dispute_6281",
        {**_DISPUTE, "dispute_category": "other"},
        "Error: Invalid dispute_category. Must be one of: ['unauthorized_transaction', 'atm_cash_discrepancy', "
        "'atm_deposit_not_credited', 'duplicate_charge', 'incorrect_amount', 'goods_services_not_received', "
        "'recurring_charge_after_cancellation', 'card_present_fraud', 'card_not_present_fraud']",
    ),
    (
        "file_debit_card_transaction_dispute_6281",
        {**_DISPUTE, "card_action": "shred"},
        "Error: Invalid card_action. Must be one of: ['keep_active', 'freeze_pending_investigation', "
        "'close_and_reissue']",
    ),
    (
        "file_debit_card_transaction_dispute_6281",
        {**_DISPUTE, "pin_compromised": "maybe"},
        "Error: Invalid pin_compromised. Must be one of: ['yes_shared', 'yes_observed', 'no', 'unknown']",
    ),
    (
        "file_debit_card_transaction_dispute_6281",
        {**_DISPUTE, "customer_max_liability_amount": None},
        "Error: customer_max_liability_amount is required.",
    ),
    (
        "file_debit_card_transaction_dispute_6281",
        {**_DISPUTE, "police_report_filed": None},
        "Error: card_in_possession, contacted_merchant, police_report_filed, and written_statement_provided are "
        "required boolean fields.",
    ),
    (
        "file_debit_card_transaction_dispute_6281",
        {**_DISPUTE, "disputed_amount": -1.0},
        "Error: disputed_amount must be a positive number.",
    ),
]


@pytest.mark.parametrize(("name", "args", "text"), TEXTS, ids=[f"{t[0]}-{i}" for i, t in enumerate(TEXTS)])
def test_error_texts_are_the_benchmarks(domain, name, args, text):
    db, call = _episode(domain)
    content, error, changed = _discover(domain, call, db, name, args)
    # the unhashable-id TypeError is raised before the tool runs its body: no log row, as in the benchmark
    logged = {} if content.startswith("Error: Invalid arguments") else _logged(domain, name)
    assert (content, error, changed) == (text, False, logged)
