"""The generic templates (synthesis/templates/generic*.py): any domain's write tools become verified tasks.

Harbor Bank (shipped) exercises the tau_env layout; tau3-banking (the shared data) the benchmark layout,
its dispatcher-called discoverable tools, and leakage against its 97 evaluation tasks.
"""

from __future__ import annotations

import json
import random
import re
import warnings

import pytest
from tau_env.synthesis.errors import SynthesisError
from tau_env.synthesis.records import Plan, chain_signature
from tau_env.synthesis.templates import IdAllocator, SynthContext, generic
from tau_env.synthesis.templates.generic import fact_key
from tau_env.synthesis.templates.generic_ask import (
    customer_goal,
    describe_record,
    detail,
    looked_up,
    nonsense,
    rule_value,
)
from tau_env.synthesis.templates.generic_db import DBView, clone_customer, identity_kind
from tau_env.synthesis.templates.generic_tools import Mechanics, literals

import tau_env
from tests.conftest import TAU3_DATA, needs_shared


@pytest.fixture(scope="module")
def harbor():
    return tau_env.registry.load_domain("harbor-bank-v0")


@pytest.fixture(scope="module")
def tau3():
    from tests.conftest import require_shared

    require_shared(TAU3_DATA)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tau_env.registry.load_domain("tau3-banking", data_dir=str(TAU3_DATA))


def _args(action) -> dict:
    """An action's arguments, with a dispatcher's JSON ``arguments`` opened."""
    args = dict(action.arguments)
    if isinstance(args.get("arguments"), str):
        args.update(json.loads(args.pop("arguments")))
    return args


# --- pieces -------------------------------------------------------------------------------------------
def test_literals_reads_listed_values_and_skips_prose():
    assert literals("Must be one of: 'retention_offer', 'loyalty_benefit', 'other'")[:3] == [
        "retention_offer",
        "loyalty_benefit",
        "other",
    ]
    assert set(literals("Shipping speed: STANDARD, EXPEDITED, or RUSH")) == {"STANDARD", "EXPEDITED", "RUSH"}
    assert "NOT" not in literals("This does NOT order a card")
    assert "YYYY" not in literals("Date, format MM/DD/YYYY")
    assert "SAV" not in literals("Account SAV-1b60 is closed")  # an id's prefix is no value


def test_identity_kinds():
    assert identity_kind("full_name") == identity_kind("name") == "name"
    assert identity_kind("phone_number") == "phone"
    assert identity_kind("phone_last4") is None  # a derived value, matched by its words
    assert identity_kind("date_of_birth") == "dob"
    assert identity_kind("shipping_address") == "address"
    assert identity_kind("merchant_name") is None


def test_clone_has_fresh_ids_and_no_donor_identity(harbor):
    view = DBView.of(harbor)
    assert (view.customer_table, view.customer_key) == ("customers", "customer_id")
    donor = view.customers()[0]
    owned = view.owned_rows(donor)
    cid, ident, rows = clone_customer(view, donor, "t1", random.Random(0))
    old_ids = {rid for rs in owned.values() for rid in rs}
    new_ids = {rid for rs in rows.values() for rid in rs}
    assert cid != donor and not (old_ids & new_ids)
    assert {t: len(r) for t, r in rows.items()} == {t: len(r) for t, r in owned.items()}
    donor_row = owned["customers"][donor]
    text = json.dumps(rows)
    for col in ("full_name", "email", "phone", "address", "date_of_birth"):
        assert donor_row[col] not in text
    assert rows["customers"][cid]["full_name"] == ident.name
    assert all(r["customer_id"] == cid for r in rows["accounts"].values())
    # another tag, other ids
    cid2, _, _ = clone_customer(view, donor, "t2", random.Random(0))
    assert cid2 != cid


def test_mechanics_found_by_shape(harbor):
    m = Mechanics.of(harbor)
    assert (m.unlock, m.call, m.give, m.user_call, m.verifier) == (
        "unlock_tool",
        None,
        "hand_over_tool",
        None,
        "verify_identity",
    )
    writes = set(m.write_tools())
    assert {"lock_card", "open_account_2291", "approve_wire_in_app"} <= writes
    assert not writes & {"verify_identity", "transfer_to_human", "get_customer", "unlock_tool"}
    steps = m.reach("open_account_2291", {"customer_id": "C-1"})
    assert [(s[0], s[2]) for s in steps] == [("unlock_tool", "agent"), ("open_account_2291", "agent")]
    steps = m.reach("approve_wire_in_app", {"wire_id": "W-1"})
    assert [(s[0], s[2]) for s in steps] == [("hand_over_tool", "agent"), ("approve_wire_in_app", "user")]


# --- Harbor Bank: the tau_env layout ---------------------------------------------------------------------
def test_harbor_generic_tasks_pass_check(harbor):
    tasks, stats = generic.synthesize(harbor, 32, seed=3)
    assert stats["tried"] == 32
    assert stats["verified"] >= 20, stats["failures"]
    assert stats["distinct_tools"] >= 10
    assert len({chain_signature(t) for t in tasks}) == len(tasks)
    assert generic.leakage(tasks, harbor.tasks) == []
    seed_customers = {r["customer_id"] for r in harbor.seed["customers"]}
    for t in tasks[:12]:
        tau_env.check_task(harbor.with_tasks([t]), t, play=True)  # independently of synthesize's own check
        new = [r["customer_id"] for r in t.initial_state["customers"]]
        assert new and not set(new) & seed_customers
        derivs = t.metadata["synthesis"]["derivations"]
        assert len(derivs) == len(t.actions)
        for a, d in zip(t.actions, derivs, strict=True):
            assert set(a.arguments) <= set(d), (a.name, a.arguments, d)


def test_generic_is_seeded(harbor):
    a, _ = generic.synthesize(harbor, 12, seed=5)
    b, _ = generic.synthesize(harbor, 12, seed=5)
    c, _ = generic.synthesize(harbor, 12, seed=6)
    assert [t.model_dump() for t in a] == [t.model_dump() for t in b]
    assert {chain_signature(t) for t in a}.isdisjoint({chain_signature(t) for t in c})


def test_instantiate_gives_a_draft_with_derivations(harbor):
    tpls = generic.templates(harbor)
    tpl = tpls["generic:lock_card"]
    ctx = SynthContext(harbor, ids=IdAllocator("r1"), rng=random.Random(0))
    draft = tpl.instantiate(Plan(id="p-0-1", template=tpl.name, intent=tpl.intent, tools=["lock_card"]), ctx)
    names = [a.name for a in draft.actions]
    assert names[-1] == "lock_card" and "verify_identity" in names
    assert names.index("verify_identity") < names.index("lock_card")
    assert {"full name", "date of birth"} <= set(draft.facts)
    card = draft.actions[-1].arguments["card_id"]
    assert card in {r["card_id"] for r in draft.initial_state["cards"]}
    assert draft.derivations[-1]["card_id"]["kind"] in ("output", "db")


# --- tau3-banking: the benchmark layout, and the evaluation set ------------------------------------------
def _benchmark_people(domain) -> set[str]:
    out = set()
    for t in domain.tasks:
        out |= set(((t.metadata.get("agent_data") or {}).get("users") or {}).get("data", {}))
        for a in t.actions:
            uid = _args(a).get("user_id")
            if uid:
                out.add(str(uid))
    return out


@needs_shared(TAU3_DATA)
def test_tau3_sample_verified_over_30_tools_without_leakage(tau3):
    tasks, stats = generic.synthesize(tau3, 40, seed=11)
    assert stats["templates"] >= 30
    assert stats["distinct_tools"] >= 30, stats["failures"]
    assert stats["verified"] >= 34, stats["failures"]
    for t in tasks:
        tau_env.check_task(tau3.with_tasks([t]), t, play=True)
    # no leakage: no benchmark chain, customer or record id
    assert generic.leakage(tasks, tau3.tasks) == []
    bench_sigs = {chain_signature(t) for t in tau3.tasks}
    assert not {chain_signature(t) for t in tasks} & bench_sigs
    people = _benchmark_people(tau3)
    seed_users = set(tau3.db_json["users"]["data"])
    for t in tasks:
        users = set(t.metadata["agent_data"]["users"]["data"])
        assert len(users) == 1 and not users & people and not users & seed_users
        (uid,) = users
        assert all(_args(a).get("user_id", uid) == uid for a in t.actions)
        if any(a.requestor == "user" for a in t.actions):
            assert set(t.metadata["user_tools"]) == {a.name for a in t.actions if a.requestor == "user"}


@needs_shared(TAU3_DATA)
def test_tau3_discoverable_chain_shape(tau3):
    tpls = generic.templates(tau3)
    tpl = tpls["generic:freeze_debit_card_3892"]
    ctx = SynthContext(tau3, ids=IdAllocator("r2"), rng=random.Random(0))
    d = tpl.instantiate(Plan(id="p-0-7", template=tpl.name, intent=tpl.intent), ctx)
    names = [a.name for a in d.actions]
    assert names[-2:] == ["unlock_discoverable_agent_tool", "call_discoverable_agent_tool"]
    assert d.actions[-1].arguments["agent_tool_name"] == "freeze_debit_card_3892"
    assert names.index("log_verification") < names.index("call_discoverable_agent_tool")
    verify = d.actions[names.index("log_verification")].arguments
    user = next(iter(d.metadata["agent_data"]["users"]["data"].values()))
    assert {k: verify[k] for k in ("name", "email", "phone_number", "date_of_birth", "address")} == {
        k: user[k] for k in ("name", "email", "phone_number", "date_of_birth", "address")
    }
    card = json.loads(d.actions[-1].arguments["arguments"])["card_id"]
    assert card in d.metadata["agent_data"]["debit_cards"]["data"]
    assert d.derivations[-1]["arguments"]["kind"] == "json"
    assert d.required_documents and all(tau3.kb.get(doc) for doc in d.required_documents)


@pytest.mark.slow
@needs_shared(TAU3_DATA)
def test_tau3_300_verified_tasks(tau3):
    tasks, stats = generic.synthesize(tau3, 340, seed=0)
    assert stats["verified"] >= 300, stats["failures"]
    assert stats["distinct_tools"] >= 30
    assert len({chain_signature(t) for t in tasks}) == len(tasks)
    assert generic.leakage(tasks, tau3.tasks) == []


# --- second pass: tools the pipeline rejected every time, and argument quality --------------------------
@pytest.fixture(scope="module")
def tau3_tpls(tau3):
    return generic.templates(tau3)


def _verified(tau3, tpls, tool: str, n: int = 2) -> list:
    """``n`` tasks of ``tool``'s template through the synthesizer, each passing the verifier (oracle play too)."""
    import asyncio

    from tau_env.synthesis.synthesizer import synthesize
    from tau_env.synthesis.verify import verify

    tpl = tpls[f"generic:{tool}"]
    ctx = SynthContext(tau3, ids=IdAllocator(f"t-{tool}"), rng=random.Random(0))
    out = []
    for i in range(n):
        plan = Plan(id=f"p-{tool[-4:]}-{i}", template=tpl.name, intent=tpl.intent, tools=[tool], seed=i)
        task = asyncio.run(synthesize(plan, ctx))
        assert verify(task, tau3) == [], (tool, i)
        out.append(task)
    return out


def _call(task) -> tuple[dict, dict]:
    """The write call's arguments (a dispatcher's JSON opened) and their derivations."""
    der = task.metadata["synthesis"]["derivations"][-1]
    return _args(task.actions[-1]), der.get("arguments", {}).get("fields", der)


def _rows(task, table: str) -> dict:
    return task.metadata["agent_data"].get(table, {}).get("data", {})


@needs_shared(TAU3_DATA)
def test_tau3_activation_expiry_is_what_the_customer_reads(tau3, tau3_tpls):
    for tool in ("activate_debit_card_8291", "activate_debit_card_8293"):
        for task in _verified(tau3, tau3_tpls, tool):
            args, der = _call(task)
            card = _rows(task, "debit_cards")[args["card_id"]]
            m, _, y = card["expiration_date"].split("/")
            assert args["expiration_date"] == f"{m}/{y[2:]}"  # MM/YY of the stored MM/DD/YYYY
            assert der["expiration_date"] == {"kind": "fact", "key": "expiration date"}
            assert task.scenario.facts["expiration date"] == args["expiration_date"]


@needs_shared(TAU3_DATA)
def test_tau3_close_account_cites_the_procedure_for_its_account(tau3, tau3_tpls):
    for task in _verified(tau3, tau3_tpls, "close_bank_account_7392"):
        args, _ = _call(task)
        (doc,) = task.required_documents
        text = tau3.kb.get(doc).text
        assert "close_bank_account_7392" in text
        assert _rows(task, "accounts")[args["account_id"]]["level"].lower() in text.lower()
        query = task.metadata["synthesis"]["intent_query"]
        assert doc in {h.doc_id for h in tau3.kb.search(query, k=10, method="bm25")}


@needs_shared(TAU3_DATA)
def test_tau3_debit_dispute_is_not_made_while_no_document_constant_decides_the_liability(tau3, tau3_tpls):
    # customer_max_liability_amount depends on the reporting timing (Reg E); no single constant of the
    # tool's document states it, so the combination is not synthesized (a rejection, never a guess)
    tpl = tau3_tpls["generic:file_debit_card_transaction_dispute_6281"]
    ctx = SynthContext(tau3, ids=IdAllocator("t-6281"), rng=random.Random(0))
    plan = Plan(id="p-6281-0", template=tpl.name, intent=tpl.intent, tools=[tpl.tool])
    with pytest.raises(SynthesisError):
        tpl.instantiate(plan, ctx)
    assert any("liability" in k for k in tpl.failures)


@needs_shared(TAU3_DATA)
def test_tau3_fraud_alert_card_has_the_block_the_documents_name(tau3, tau3_tpls):
    for task in _verified(tau3, tau3_tpls, "clear_debit_card_fraud_alert_4892"):
        args, _ = _call(task)
        card = _rows(task, "debit_cards")[args["card_id"]]
        flag = {"velocity_clear": "velocity_blocked", "customer_verified": "fraud_alert_active"}[args["reason"]]
        assert card[flag] is True
        assert any(flag in (d.text or "") for d in tau3.documents)


@needs_shared(TAU3_DATA)
def test_tau3_clone_cards_get_fresh_last4_and_cvv(tau3):
    view = DBView.of(tau3)
    donor = next(c for c in view.customers() if view.owned_rows(c).get("debit_cards"))
    old = list(view.owned_rows(donor)["debit_cards"].values())
    _, _, rows = clone_customer(view, donor, "fresh", random.Random(1))
    new = list(rows["debit_cards"].values())
    assert len(new) == len(old)
    for a, b in zip(old, new, strict=True):
        assert b["last_4_digits"] != a["last_4_digits"] and len(b["last_4_digits"]) == 4
        assert b["cvv"] != a["cvv"] and b["cvv"].isdigit() and len(b["cvv"]) == 3


@needs_shared(TAU3_DATA)
def test_tau3_account_class_is_a_level_of_the_type(tau3, tau3_tpls):
    accounts = tau3.db_json["accounts"]["data"].values()
    levels: dict[str, set] = {}
    for r in accounts:
        levels.setdefault(r["level"], set()).add(r["class"].rstrip("s"))
    for task in _verified(tau3, tau3_tpls, "open_bank_account_4821"):
        args, _ = _call(task)
        assert args["account_class"] in levels  # a full class name ('Blue Account'), not 'checking'
        assert args["account_type"].rstrip("s") in levels[args["account_class"]]  # a level of the chosen type
    # (submit_transaction, whose merchant names were checked here, is no customer's support request any more)


# --- third pass: grounded, answerable requests ------------------------------------------------------------
def test_customer_goal_speaks_as_the_customer():
    assert customer_goal("Order a new debit card for a customer's checking account.") == (
        "order a new debit card for my checking account"
    )
    assert customer_goal("Change the email address for a user.") == "change my email address"
    assert customer_goal("Change a debit card PIN when the customer knows their current PIN.") == (
        "change a debit card pin when I know my current pin"
    )
    assert "NEW" not in customer_goal("Activate a NEW debit card for a customer. Use ONLY for first-time cards.")


def test_details_name_the_arguments_meaning_never_bare_values():
    spec = {"type": "string", "description": "Shipping speed: STANDARD, EXPEDITED, or RUSH"}
    assert detail("delivery_option", spec, "EXPEDITED") == "expedited delivery"
    assert detail("card_design", {"type": "string"}, "PREMIUM") == "premium card design"
    assert detail("new_pin", {"type": "string"}, "4821") == "the new pin should be 4821"
    assert detail("amount", {"type": "number"}, 250.0) == "the amount is $250.00"
    gloss = "The type of credit: 'rebate_credit' for missing rebates, 'fee_refund' for incorrect fee charges"
    assert detail("credit_type", {"type": "string", "description": gloss}, "fee_refund") == "incorrect fee charges"


def test_fees_rates_and_limits_are_looked_up_not_said():
    assert looked_up("delivery_fee", {"type": "number"})
    assert looked_up("expected_apy", {"type": "number"})
    assert looked_up("new_credit_limit", {"type": "integer", "description": "The new total credit limit"})
    assert not looked_up("new_limit", {"type": "integer", "description": "The requested new temporary limit"})
    assert not looked_up("amount", {"type": "number", "description": "The amount to transfer in USD"})


def test_records_are_told_apart_by_what_the_customer_knows():
    rows = {
        "users": {"u1": {"user_id": "u1", "name": "A B"}},
        "accounts": {
            "a1": {"account_id": "a1", "user_id": "u1", "class": "checking", "level": "Blue Account"},
            "a2": {"account_id": "a2", "user_id": "u1", "class": "checking", "level": "Green Account"},
            "a3": {"account_id": "a3", "user_id": "u1", "class": "savings", "level": "Gold Saver Account"},
        },
        "transactions": {
            f"t{i}": {"transaction_id": f"t{i}", "account_id": "a1", "merchant_name": m, "date": d, "amount": a}
            for i, (m, d, a) in enumerate([("Costco", "10/02/2025", -56.1), ("Costco", "10/09/2025", -12.0)])
        },
    }
    ids = {"u1", "a1", "a2", "a3", "t0", "t1"}
    assert describe_record("accounts", "a2", rows, ids) == "my Green Account (checking)"
    assert describe_record("accounts", "a3", rows, ids) == "my savings account"
    text = describe_record("transactions", "t1", rows, ids)
    assert "Costco" in text and "10/09/2025" in text and "$12.00" in text
    rows["accounts"]["a4"] = dict(rows["accounts"]["a2"], account_id="a4")  # a twin: nothing tells them apart
    assert describe_record("accounts", "a2", rows, ids | {"a4"}) is None


def test_nonsense_combinations_are_recognised():
    ps = {"expected_apy": {}, "actual_apy": {}, "source_account_id": {}, "destination_account_id": {}}
    assert nonsense(ps, {"expected_apy": 4.0, "actual_apy": 4.0})
    assert not nonsense(ps, {"expected_apy": 4.0, "actual_apy": 3.5})
    assert nonsense(ps, {"source_account_id": "a", "destination_account_id": "a"})


@needs_shared(TAU3_DATA)
def test_tau3_card_fees_come_from_the_tier_rules(tau3):
    from tau_env.synthesis.derive import entity_graph_of

    graph = entity_graph_of(tau3)
    docs = [d.id for d in tau3.documents if "order_debit_card_5739" in (d.text or "")]
    opts = {"delivery_option": ["STANDARD", "EXPEDITED", "RUSH"], "card_design": ["CLASSIC", "PREMIUM", "CUSTOM"]}
    args = {"delivery_option": "EXPEDITED", "card_design": "PREMIUM"}
    mid = ["Green Account", "checking"]  # the documents: MID TIER (Blue Account, Green Account (checking))
    assert rule_value(graph, tau3, docs, "delivery_fee", args, opts, mid)[0] == 15.0
    assert rule_value(graph, tau3, docs, "design_fee", args, opts, mid)[0] == 10.0
    elite = ["Bluest Account", "checking"]
    assert rule_value(graph, tau3, docs, "design_fee", args, opts, elite)[0] == 0.0
    with pytest.raises(LookupError):  # entry tier: no expedited shipping at all
        rule_value(graph, tau3, docs, "delivery_fee", args, opts, ["Light Blue Account", "checking"])
    with pytest.raises(LookupError):  # a record the documents place in no tier
        rule_value(graph, tau3, docs, "design_fee", args, opts, ["Unheard-of Account"])


@needs_shared(TAU3_DATA)
def test_tau3_requests_are_the_customers_and_fees_are_decisive(tau3, tau3_tpls):
    from tau_env.synthesis.verify import verify

    for tool in ("order_debit_card_5739", "close_bank_account_7392", "file_credit_card_transaction_dispute_4829"):
        tasks = []
        tpl = tau3_tpls[f"generic:{tool}"]
        ctx = SynthContext(tau3, ids=IdAllocator(f"q-{tool}"), rng=random.Random(0))
        for i in range(6):
            try:
                tasks.append(_synth(tpl, ctx, i))
            except SynthesisError:
                continue
            if len(tasks) == 2:
                break
        assert tasks, tool
        for task in tasks:
            assert verify(task, tau3) == [], tool
            req = task.scenario.requests[0]
            assert "customer's" not in req and "; " not in req, req
            assert not re.search(r"\(([^()]*; )+[^()]*\)", req), req  # no list of bare values
            args, der = _call(task)
            prov = task.metadata["synthesis"]
            for p, v in args.items():
                if p == "excess_replacement_fee":  # "if applicable": a conditional fee, 0 for a first order
                    assert v == 0 and der[p]["kind"] == "literal"
                elif looked_up(p, {}) and not isinstance(v, bool):
                    assert der[p]["kind"] == "rule" and der[p]["ids"][0] in prov["decisive"], (p, der[p])
                    assert fact_key(p) not in task.scenario.facts
            if tool == "file_credit_card_transaction_dispute_4829":  # which transaction: merchant, date, amount
                txn = _rows(task, "credit_card_transaction_history")[args["transaction_id"]]
                assert txn["merchant_name"] in req and txn["transaction_date"] in req, req


def _synth(tpl, ctx, i):
    import asyncio

    from tau_env.synthesis.synthesizer import synthesize

    plan = Plan(id=f"p-{tpl.tool[-4:]}-{i}", template=tpl.name, intent=tpl.intent, tools=[tpl.tool], seed=i)
    return asyncio.run(synthesize(plan, ctx))


@needs_shared(TAU3_DATA)
def test_tau3_no_template_for_what_no_customer_asks_support(tau3, tau3_tpls):
    # submit_transaction is the customer's own purchase, run alone and named by no document
    assert "generic:submit_transaction" not in tau3_tpls
    assert "generic:order_debit_card_5739" in tau3_tpls and "generic:change_user_email" in tau3_tpls
