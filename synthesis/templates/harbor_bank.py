"""Harbor Bank's task templates: opening and closing accounts, transfers, contact details,
overdraft protection, wires (with the in-app approval), mobile check deposits and fee refunds.

Each template builds a fresh customer whose records make the plan's rule decisive, and computes the
reference chain from the entity graph's constants (:meth:`SynthContext.const`) and those records.
Card, dispute, limit, travel and hand-off templates are in ``harbor_bank_cards.py``.
"""

from __future__ import annotations

import random
import re
from typing import Any

from ..records import Plan
from . import (
    BaseTemplate,
    Chain,
    Const,
    Customer,
    Draft,
    SynthContext,
    hand_over,
    identity_prefix,
    new_customer,
    unlock,
)

TIERS = ("standard", "preferred", "private")
PRODUCT_NAMES = {
    "everyday_checking": "Everyday Checking",
    "premier_checking": "Premier Checking",
    "student_checking": "Student Checking",
    "basic_savings": "Basic Savings",
    "high_yield_savings": "High-Yield Savings",
    "cd_12_month": "12-Month CD",
}
#: Minimum opening deposits as the product pages state them (the entity graph's values win).
MIN_DEPOSIT = {
    "everyday_checking": 2_500,
    "premier_checking": 100_000,
    "student_checking": 1_000,
    "basic_savings": 2_500,
    "high_yield_savings": 50_000,
    "cd_12_month": 250_000,
}
WIRE_FEE = {"standard": 3_000, "preferred": 1_500, "private": 0}
WIRE_MAX = {"standard": 1_000_000, "preferred": 2_500_000, "private": 10_000_000}
DEPOSIT_LIMIT = {"standard": 250_000, "preferred": 1_000_000, "private": 5_000_000}
REFUNDS_PER_YEAR = {"standard": 1, "preferred": 2, "private": None}
TIER_DOC = {
    "standard": "standard_banking_benefits",
    "preferred": "preferred_banking_benefits",
    "private": "private_client_benefits",
}
TIER_NAME = {"standard": "Standard", "preferred": "Preferred", "private": "Private"}


def money(cents: int) -> str:
    """``$1,200`` or ``$12.50``."""
    whole, part = divmod(abs(cents), 100)
    return f"{'-' if cents < 0 else ''}${whole:,}" + (f".{part:02d}" if part else "")


def rng_of(plan: Plan) -> random.Random:
    return random.Random(f"{plan.template}:{plan.seed}")


def tier_of(plan: Plan, rng: random.Random, allowed: tuple[str, ...] = TIERS) -> str:
    t = plan.persona.get("tier")
    return t if t in allowed else rng.choice(allowed)


def lit(why: str) -> dict[str, Any]:
    return {"kind": "literal", "why": why}


def fact(key: str) -> dict[str, Any]:
    return {"kind": "fact", "key": key}


def out(i: int) -> dict[str, Any]:
    return {"kind": "output", "action": i}


def cval(*cs: Const) -> dict[str, Any]:
    return {"kind": "constant", "ids": [c.id for c in cs], "op": "value"}


def rule(cs: list[Const], value: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "rule", "ids": [c.id for c in cs], "value": value}


def db(table: str, key: dict[str, Any], column: str) -> dict[str, Any]:
    return {"kind": "db", "table": table, "key": key, "column": column}


def persona(plan: Plan, cust: Customer, rng: random.Random, **extra: Any) -> dict[str, Any]:
    from . import JOBS

    p = {
        "name": cust.name,
        "occupation": rng.choice(JOBS),
        "temperament": plan.persona.get("temperament", "polite"),
        "verbosity": plan.persona.get("verbosity", "brief"),
        "tier": cust.tier,
    }
    p.update(extra)
    return p


def finish(
    plan: Plan,
    ctx: SynthContext,
    cust: Customer,
    chain: Chain,
    rng: random.Random,
    *,
    asks: list[dict[str, Any]],
    docs: list[str],
    decisive: list[Const],
    query: str,
    facts: dict[str, str] | None = None,
    lookups: list[str] | None = None,
    hint: str = "",
    unknown: list[str] | None = None,
    description: str = "",
    tags: list[str] | None = None,
) -> Draft:
    """A draft from a built chain; ``expect_no_change`` holds exactly when nothing is written."""
    f = cust.facts()
    f.update(facts or {})
    return Draft(
        initial_state=cust.state(),
        actions=chain.actions,
        derivations=chain.derivations,
        facts=f,
        asks=asks,
        persona=persona(plan, cust, rng),
        expect_no_change=not chain.writes(ctx.domain),
        required_documents=list(dict.fromkeys(docs)),
        intent_query=query,
        decisive=list(dict.fromkeys(c.id for c in decisive)),
        unknown=unknown or [],
        instructions_hint=hint,
        lookups=[x for x in (lookups or []) if x],
        tags=tags or [],
        description=description,
    )


def min_deposit(ctx: SynthContext, product: str) -> Const:
    return ctx.const(f"product_{product}", MIN_DEPOSIT[product], section="At a glance", label="Minimum opening deposit")


def wire_fee(ctx: SynthContext, tier: str) -> Const:
    return ctx.const("fee_schedule_2025", WIRE_FEE[tier], section="Wires", row="Outgoing domestic wire", column=tier)


def wire_max(ctx: SynthContext, tier: str) -> Const:
    return ctx.const(
        "wire_transfer_limits",
        WIRE_MAX[tier],
        row=tier,
        column="Daily maximum for domestic wires",
        heading="Wire Transfer Limits",
    )


def deposit_limit(ctx: SynthContext, tier: str) -> Const:
    return ctx.const(
        "mobile_deposit_limits",
        DEPOSIT_LIMIT[tier],
        row=tier,
        column="Largest check accepted in the app",
        heading="Mobile Deposit Limits",
    )


def round_amount(rng: random.Random, lo: int, hi: int, step: int = 5_000) -> int:
    """A round amount in [lo, hi] (cents), a multiple of ``step`` when possible."""
    lo_k, hi_k = -(-lo // step), hi // step
    if lo_k > hi_k:
        return rng.randint(lo, hi)
    return rng.randint(lo_k, hi_k) * step


# --- open_account_2291 --------------------------------------------------------------------------------------
class OpenAccount(BaseTemplate):
    name = "open_account"
    intent = "open a new account"
    tools = ("open_account_2291",)
    supported = (
        ("success", None),
        ("success", "multi_doc"),
        ("success", "implicit_order"),
        ("success", "contradicting_claim"),
        ("success", "underspecified"),
        ("refusal", None),
        ("refusal", "multi_doc"),
        ("refusal", "contradicting_claim"),
        ("clarification", None),
    )
    rule_keys = tuple(f"product_{p}/at_a_glance/minimum_opening_deposit" for p in MIN_DEPOSIT)

    def instantiate(self, plan: Plan, ctx: SynthContext) -> Draft:
        rng = rng_of(plan)
        cell = (plan.outcome, plan.failure_mode)
        chain = Chain()
        docs = ["procedure_opening_accounts"]
        decisive: list[Const] = []
        facts: dict[str, str] = {}
        claims: dict[str, str] = {}
        hint = ""
        if cell == ("success", "implicit_order"):  # HYS needs an open checking account: open checking first
            cust = new_customer(plan, ctx, rng, tier=tier_of(plan, rng))
            sav = cust.account("basic_savings", rng.randint(40, 200) * 10_000)
            m_chk, m_hys = min_deposit(ctx, "everyday_checking"), min_deposit(ctx, "high_yield_savings")
            dep_chk = round_amount(rng, m_chk.value, 50_000, 2_500)
            dep_hys = round_amount(rng, m_hys.value, min(sav["balance_cents"] - dep_chk, m_hys.value * 8), 10_000)
            identity_prefix(chain, cust)
            la = chain.add("list_accounts", {"customer_id": cust.id}, {"customer_id": out(0)})
            unlock(chain, "open_account_2291", "procedure_opening_accounts")
            for prod, dep, c in (("everyday_checking", dep_chk, m_chk), ("high_yield_savings", dep_hys, m_hys)):
                chain.add(
                    "open_account_2291",
                    {
                        "customer_id": cust.id,
                        "product": prod,
                        "initial_deposit_cents": dep,
                        "funding_account_id": sav["account_id"],
                    },
                    {
                        "customer_id": out(0),
                        "product": lit(f"product code of {PRODUCT_NAMES[prod]} in procedure_opening_accounts"),
                        "initial_deposit_cents": rule([c], fact("opening deposits")),
                        "funding_account_id": out(la),
                    },
                )
            docs += ["product_high_yield_savings", "product_everyday_checking"]
            decisive += [m_chk, m_hys]
            facts = {"savings account id": sav["account_id"], "opening deposits": f"{money(dep_hys)}"}
            hint = (
                f"If the agent says you need a checking account first, ask for an Everyday Checking account "
                f"funded with {money(dep_chk)} from your savings, then the High-Yield Savings."
            )
            asks = [
                {
                    "intent": "open_account",
                    "say": {"product": "High-Yield Savings", "amount": money(dep_hys), "funding": "my savings account"},
                }
            ]
            return finish(
                plan,
                ctx,
                cust,
                chain,
                rng,
                asks=asks,
                docs=docs,
                decisive=decisive,
                facts=facts,
                hint=hint,
                query="open high-yield savings account requires checking account",
                description="HYS requires an open checking account: open Everyday Checking first.",
            )
        # one product; the cell decides which and whether it is allowed
        tier = tier_of(plan, rng)
        age = None
        offered = None  # an amount below the minimum the customer first offers
        refuse_why = ""
        if cell in (("success", "multi_doc"), ("refusal", "multi_doc")):
            product = rng.choice(("premier_checking", "student_checking"))
            ok = cell[0] == "success"
            if product == "premier_checking":
                tier = rng.choice(("preferred", "private")) if ok else "standard"
                docs += ["product_premier_checking", TIER_DOC[tier]]
                decisive.append(
                    ctx.const(
                        "product_premier_checking", "preferred, private", section="Eligibility", label="Eligible tiers"
                    )
                )
                refuse_why = "Premier Checking needs the Preferred or Private tier"
            else:
                age = rng.randint(17, 24) if ok else rng.choice((25, 25, 26, 31))
                docs += ["product_student_checking"]
                decisive.append(
                    ctx.const("product_student_checking", "17-24", section="Eligibility", label="Eligible ages")
                )
                refuse_why = "Student Checking is for customers aged 17 to 24"
        elif cell == ("refusal", None):
            product = "high_yield_savings"
            refuse_why = "at most 2 open High-Yield Savings accounts"
            docs.append("product_high_yield_savings")
            decisive.append(
                ctx.const(
                    "product_high_yield_savings",
                    2,
                    section="Eligibility and limits",
                    label="Maximum open High-Yield Savings accounts",
                )
            )
        elif cell in (("success", "contradicting_claim"), ("refusal", "contradicting_claim")):
            tier = "standard"
            product = "premier_checking"
            claims = {"tier": rng.choice(("Preferred", "Private"))}
            docs += ["product_premier_checking", "claims_promises_and_prior_approvals", "standard_banking_benefits"]
            decisive.append(
                ctx.const(
                    "product_premier_checking", "preferred, private", section="Eligibility", label="Eligible tiers"
                )
            )
            refuse_why = "the profile says Standard"
        elif cell == ("success", "underspecified"):
            product = rng.choice(("high_yield_savings", "cd_12_month"))
            docs.append(f"product_{product}")
        else:  # success/None, clarification/None
            product = rng.choice(tuple(p for p in MIN_DEPOSIT if p != "premier_checking") + ("premier_checking",))
            if product == "premier_checking":
                tier = rng.choice(("preferred", "private"))
                docs += ["product_premier_checking"]
            elif product == "student_checking":
                age = rng.randint(17, 24)
                docs.append("product_student_checking")
            else:
                docs.append(f"product_{product}")
        cust = new_customer(plan, ctx, rng, tier=tier, age=age)
        chk = cust.account("everyday_checking", rng.randint(30, 400) * 10_000)
        fund = chk
        if product in ("high_yield_savings", "cd_12_month") and rng.random() < 0.5:
            fund = cust.account("basic_savings", rng.randint(60, 500) * 10_000)
        if cell == ("refusal", None):
            for _ in range(2):
                cust.account("high_yield_savings", rng.randint(10, 300) * 10_000)
        m = min_deposit(ctx, product)
        decisive.append(m)
        deposit = round_amount(rng, m.value, min(fund["balance_cents"], m.value * 6 + 50_000), 2_500)
        if plan.outcome == "success" and plan.failure_mode is None and rng.random() < 0.4 and m.value >= 5_000:
            offered = round_amount(rng, m.value // 2, m.value - 1_000, 1_000)  # below the minimum: open at it
            deposit = m.value
        refused = plan.outcome == "refusal"
        identity_prefix(chain, cust)
        la = chain.add("list_accounts", {"customer_id": cust.id}, {"customer_id": out(0)})
        opened = product
        if cell == ("success", "contradicting_claim"):
            opened = "everyday_checking"  # the customer takes the alternative once refused
            m2 = min_deposit(ctx, opened)
            decisive.append(m2)
            deposit = max(deposit, m2.value)
            hint = "When the agent says Premier Checking is not available to you, open Everyday Checking instead."
        if not refused:
            unlock(chain, "open_account_2291", "procedure_opening_accounts")
            dep_from = fact("opening deposit") if offered is None else rule([m], lit("the minimum opening deposit"))
            chain.add(
                "open_account_2291",
                {
                    "customer_id": cust.id,
                    "product": opened,
                    "initial_deposit_cents": deposit,
                    "funding_account_id": fund["account_id"],
                },
                {
                    "customer_id": out(0),
                    "product": lit(f"product code of {PRODUCT_NAMES[opened]} in procedure_opening_accounts"),
                    "initial_deposit_cents": dep_from,
                    "funding_account_id": out(la),
                },
            )
        fund_name = "checking account" if fund is chk else "savings account"
        facts = {f"{fund_name} id": fund["account_id"], "opening deposit": money(offered or deposit)}
        say: dict[str, Any] = {
            "product": PRODUCT_NAMES[product],
            "amount": money(offered or deposit),
            "funding": f"my {fund_name}",
        }
        if plan.outcome == "clarification":
            say.pop("amount")
            hint = f"Give the opening deposit ({money(deposit)}) only when the agent asks how much to deposit."
        if plan.failure_mode == "underspecified":
            say["product"] = None
            say["need"] = (
                "a savings account with the best variable rate for money I use with my checking"
                if product == "high_yield_savings"
                else "a fixed-rate deposit for a year"
            )
        if offered is not None:
            hint = f"If the agent says the minimum is more than {money(offered)}, agree to deposit exactly the minimum."
        if refused:
            hint = f"If the agent refuses ({refuse_why}), accept it and do not ask for anything else."
        asks = [{"intent": "open_account", "say": say, "claims": claims}]
        return finish(
            plan,
            ctx,
            cust,
            chain,
            rng,
            asks=asks,
            docs=docs,
            decisive=decisive,
            facts=facts,
            hint=hint,
            lookups=[money(m.value)] if offered is not None or refused else [],
            query=f"open {PRODUCT_NAMES[product]} account eligibility minimum opening deposit",
            description=f"Open {PRODUCT_NAMES[product]}: {plan.outcome} ({refuse_why or 'eligible'}).",
        )


# --- close_account_8837 -------------------------------------------------------------------------------------
REASONS = (
    "moving abroad",
    "too many accounts",
    "switching banks",
    "no longer needed",
    "consolidating accounts",
    "moving to another city",
    "fees too high",
    "rarely use it",
)


class CloseAccount(BaseTemplate):
    name = "close_account"
    intent = "close an account"
    tools = ("close_account_8837", "transfer_funds")
    supported = (
        ("success", None),
        ("success", "implicit_order"),
        ("success", "multi_doc"),
        ("refusal", None),
        ("refusal", "multi_doc"),
        ("refusal", "contradicting_claim"),
        ("clarification", None),
    )
    rule_keys = ("product_cd_12_month/before_maturity/cannot_be_closed_before_maturity",)

    def instantiate(self, plan: Plan, ctx: SynthContext) -> Draft:
        rng = rng_of(plan)
        cell = (plan.outcome, plan.failure_mode)
        cust = new_customer(plan, ctx, rng, tier=tier_of(plan, rng))
        chk = cust.account("everyday_checking", rng.randint(5, 300) * 10_000 + rng.randint(0, 99))
        docs, decisive, claims = ["procedure_closing_accounts"], [], {}
        reason = rng.choice(REASONS)
        kind = {
            ("success", "multi_doc"): "cd_matured",
            ("refusal", "multi_doc"): "cd_young",
            ("refusal", None): rng.choice(("pending", "dispute")),
            ("refusal", "contradicting_claim"): "pending",
        }.get(cell, "plain")
        if kind.startswith("cd"):
            acct = cust.account(
                "cd_12_month",
                rng.randint(25, 200) * 10_000,
                opened_days_ago=rng.randint(380, 900) if kind == "cd_matured" else rng.randint(30, 350),
            )
            docs.append("product_cd_12_month")
            decisive.append(
                ctx.const("product_cd_12_month", "12 months", section="At a glance", label="Term and maturity")
            )
        else:
            prod = rng.choice(("basic_savings", "high_yield_savings", "everyday_checking"))
            bal = (
                0
                if cell in (("success", None), ("clarification", None))
                else rng.randint(1, 9000) * 100 + rng.randint(0, 99)
            )
            acct = cust.account(prod, bal)
        if rng.random() < 0.5:
            cust.txn(acct, "Interest payment", rng.randint(1, 900), "interest", days_ago=rng.randint(3, 40))
        if kind == "pending":
            amt = rng.randint(50, 1500) * 100
            cust.txn(
                acct,
                f"Mobile check deposit #{rng.randint(1000, 9999)}",
                amt,
                "deposit",
                days_ago=rng.randint(0, 2),
                status="pending",
            )
            if cell[1] == "contradicting_claim":
                claims = {"text": "My last check deposit has already cleared, so there is nothing pending."}
                docs.append("claims_promises_and_prior_approvals")
        if kind == "dispute":
            t = cust.txn(
                acct,
                rng.choice(("Coffee Corner", "Bayside Books", "Metro Fuel")),
                -rng.randint(5, 200) * 100,
                "purchase",
                days_ago=rng.randint(5, 30),
                status="disputed",
            )
            cust.add_row(
                "disputes",
                {
                    "dispute_id": cust.ids.next("DSP-"),
                    "txn_id": t["txn_id"],
                    "customer_id": cust.id,
                    "reason": "not_received",
                    "status": "open",
                    "provisional_credit_cents": 0,
                    "opened_on": cust.day(3),
                },
            )
        chain = Chain()
        identity_prefix(chain, cust, get_customer=False)
        la = chain.add("list_accounts", {"customer_id": cust.id}, {"customer_id": out(0)})
        aid = acct["account_id"]
        if not kind.startswith("cd"):
            chain.add("list_transactions", {"account_id": aid}, {"account_id": out(la)})
        facts = {"reason for closing": reason, f"{PRODUCT_NAMES[acct['product']]} account id": aid}
        hint = f"If asked why you are closing it, say exactly: {reason}."
        if plan.outcome == "success" or plan.outcome == "clarification":
            if acct["balance_cents"]:
                chain.add(
                    "transfer_funds",
                    {"from_account_id": aid, "to_account_id": chk["account_id"], "amount_cents": acct["balance_cents"]},
                    {
                        "from_account_id": out(la),
                        "to_account_id": fact("account for the remaining balance"),
                        "amount_cents": db("accounts", {"account_id": aid}, "balance_cents"),
                    },
                )
                facts["account for the remaining balance"] = chk["account_id"]
                hint += f" Any money left should go to your checking account {chk['account_id']}."
            unlock(chain, "close_account_8837", "procedure_closing_accounts")
            chain.add(
                "close_account_8837",
                {"account_id": aid, "reason": reason},
                {"account_id": out(la), "reason": fact("reason for closing")},
            )
        else:
            hint += " If the agent says the account cannot be closed yet, accept it."
        say = {
            "account": PRODUCT_NAMES[acct["product"]] + " account",
            "reason_text": None if plan.outcome == "clarification" else f"The reason: {reason}.",
        }
        if acct["balance_cents"] and plan.outcome == "success":
            say["reason_text"] = f"I'm closing it because: {reason}. Put what's left into my checking account."
        return finish(
            plan,
            ctx,
            cust,
            chain,
            rng,
            asks=[{"intent": "close_account", "say": say, "claims": claims}],
            docs=docs,
            decisive=decisive,
            facts=facts,
            hint=hint,
            lookups=[money(acct["balance_cents"])] if acct["balance_cents"] else [],
            query="close account zero balance pending transaction dispute certificate of deposit maturity",
            description=f"Close {acct['product']} ({kind}): {plan.outcome}.",
        )


# --- transfer_funds -----------------------------------------------------------------------------------------
class TransferFunds(BaseTemplate):
    name = "transfer_funds"
    intent = "move money between my own accounts"
    tools = ("transfer_funds",)
    supported = (
        ("success", None),
        ("success", "underspecified"),
        ("success", "multi_doc"),
        ("refusal", "multi_doc"),
        ("refusal", "contradicting_claim"),
        ("clarification", None),
    )
    rule_keys = ("product_cd_12_month/before_maturity/no_withdrawals_and_no_transfers_out",)

    def instantiate(self, plan: Plan, ctx: SynthContext) -> Draft:
        rng = rng_of(plan)
        cell = (plan.outcome, plan.failure_mode)
        cust = new_customer(plan, ctx, rng, tier=tier_of(plan, rng))
        chk = cust.account(
            rng.choice(("everyday_checking", "premier_checking")) if cust.tier != "standard" else "everyday_checking",
            rng.randint(2, 300) * 10_000,
        )
        docs, decisive, claims, lookups = ["product_basic_savings"], [], {}, []
        if cell[1] in ("multi_doc", "contradicting_claim"):
            matured = cell[0] == "success"
            src = cust.account(
                "cd_12_month",
                rng.randint(25, 200) * 10_000,
                opened_days_ago=rng.randint(370, 800) if matured else rng.randint(20, 330),
            )
            docs = ["product_cd_12_month"]
            decisive.append(
                ctx.const(
                    "product_cd_12_month",
                    "no transfers out before maturity",
                    section="Before maturity",
                    label="Transfers out",
                )
            )
            if cell[1] == "contradicting_claim":
                claims = {"text": "My CD has already matured, so the money is free to move."}
                docs.append("claims_promises_and_prior_approvals")
            src_name, dst, dst_name = "CD", chk, "checking account"
        else:
            src = cust.account(
                rng.choice(("basic_savings", "high_yield_savings")), rng.randint(5, 400) * 10_000 + rng.randint(0, 99)
            )
            src_name = "savings account"
            dst, dst_name = chk, "checking account"
            if rng.random() < 0.5:
                src, dst, src_name, dst_name = chk, src, "checking account", "savings account"
        whole = cell == ("success", "underspecified") or (cell == ("success", "multi_doc") and rng.random() < 0.5)
        amount = src["balance_cents"] if whole else round_amount(rng, 5_000, src["balance_cents"], 5_000)
        chain = Chain()
        identity_prefix(chain, cust, get_customer=False)
        la = chain.add("list_accounts", {"customer_id": cust.id}, {"customer_id": out(0)})
        facts = {f"{src_name} id": src["account_id"], f"{dst_name} id": dst["account_id"]}
        if plan.outcome != "refusal":
            adv = db("accounts", {"account_id": src["account_id"]}, "balance_cents") if whole else fact("amount")
            chain.add(
                "transfer_funds",
                {"from_account_id": src["account_id"], "to_account_id": dst["account_id"], "amount_cents": amount},
                {"from_account_id": out(la), "to_account_id": out(la), "amount_cents": adv},
            )
        if not whole:
            facts["amount"] = money(amount)
        else:
            lookups.append(money(amount))
        say = {
            "src": src_name,
            "dst": dst_name,
            "amount": None if whole or plan.outcome == "clarification" else money(amount),
            "all_text": "everything" if whole else None,
        }
        hint = "If the agent says the money cannot be moved yet, accept it." if plan.outcome == "refusal" else ""
        if whole:
            hint = "You want the whole balance moved; you do not know the exact amount."
        return finish(
            plan,
            ctx,
            cust,
            chain,
            rng,
            asks=[{"intent": "transfer", "say": say, "claims": claims}],
            docs=docs,
            decisive=decisive,
            facts=facts,
            hint=hint,
            lookups=lookups,
            unknown=["balance"] if whole else [],
            query="transfer money between own accounts certificate of deposit maturity",
            description=f"Transfer from {src['product']}: {plan.outcome}.",
        )


# --- update_contact_info ------------------------------------------------------------------------------------
class UpdateContact(BaseTemplate):
    name = "update_contact"
    intent = "update my contact details"
    tools = ("update_contact_info",)
    supported = (
        ("success", None),
        ("success", "multi_doc"),
        ("refusal", "contradicting_claim"),
        ("clarification", None),
    )
    rule_keys = ("procedure_contact_details_update/formats/phone", "procedure_contact_details_update/formats/email")

    def instantiate(self, plan: Plan, ctx: SynthContext) -> Draft:
        from . import STREETS, TOWNS

        rng = rng_of(plan)
        cell = (plan.outcome, plan.failure_mode)
        cust = new_customer(plan, ctx, rng, tier=tier_of(plan, rng))
        cust.account("everyday_checking", rng.randint(5, 300) * 10_000)
        fields = rng.sample(("email", "phone", "address"), rng.choice((1, 1, 2)))
        if cell == ("success", "multi_doc") and "phone" not in fields:
            fields = ["phone", *fields[:1]]
        new: dict[str, str] = {}
        spoken: dict[str, str] = {}
        first, last = cust.name.lower().split()
        if "email" in fields:
            host = rng.choice(("example.com", "example.org"))
            e = f"{first}.{last}.{rng.choice(('home', 'mail', 'new', 'pm'))}@{host}"
            new["email"], spoken["email"] = e, e.title() if rng.random() < 0.5 else e
        if "phone" in fields:
            a, b, c = rng.randint(200, 989), rng.randint(200, 989), rng.randint(0, 9999)
            new["phone"] = f"{a}-{b}-{c:04d}"
            spoken["phone"] = rng.choice((f"({a}) {b} {c:04d}", f"{a}.{b}.{c:04d}", f"{a} {b} {c:04d}", new["phone"]))
        if "address" in fields:
            town, st, z = rng.choice(TOWNS)
            new["address"] = f"{rng.randint(1, 300)} {rng.choice(STREETS)}, {town}, {st} {z}"
            spoken["address"] = new["address"]
        docs = ["procedure_contact_details_update", "procedure_identity_verification"]
        fmt = {
            k: ctx.const("procedure_contact_details_update", k, section="Formats", label=k.capitalize())
            for k in fields
            if k != "address"
        }
        chain = Chain()
        facts: dict[str, str] = {}
        hint = ""
        if cell == ("refusal", "contradicting_claim"):  # the phone digits the caller gives do not match
            wrong = f"{(int(cust.last4) + rng.randint(1, 9998)) % 10000:04d}"
            chain.add(
                "find_customer",
                {"full_name": cust.name, "date_of_birth": cust.dob},
                {"full_name": fact("full name"), "date_of_birth": fact("date of birth")},
            )
            d = finish(
                plan,
                ctx,
                cust,
                chain,
                rng,
                asks=[
                    {
                        "intent": "update_contact",
                        "say": {"fields": " and ".join(fields), "new_text": "; ".join(spoken.values())},
                        "claims": {"text": "I'm the account holder, and I know my details."},
                    }
                ],
                docs=docs,
                decisive=[],
                hint="The only phone digits you know are the ones in your facts. If "
                "verification fails, say you will visit a branch.",
                unknown=["other phone number"],
                query="identity verification failed change contact details",
                description="Verification fails (wrong phone digits): nothing may change.",
            )
            d.facts["phone"] = wrong
            return d
        identity_prefix(chain, cust, get_customer=False)
        args = {"customer_id": cust.id, **new}
        der: dict[str, Any] = {"customer_id": out(0)}
        for k in new:
            facts[f"new {k}"] = spoken[k]
            der[k] = rule([fmt[k]], fact(f"new {k}")) if k in fmt else fact(f"new {k}")
        chain.add("update_contact_info", args, der)
        say = {
            "fields": " and ".join(f.replace("phone", "phone number") for f in fields),
            "new_text": None
            if plan.outcome == "clarification"
            else "The new " + "; the new ".join(f"{k} is {spoken[k]}" for k in new) + ".",
        }
        if plan.outcome == "clarification":
            hint = "Give the new details only when the agent asks for them."
        return finish(
            plan,
            ctx,
            cust,
            chain,
            rng,
            asks=[{"intent": "update_contact", "say": say}],
            docs=docs,
            decisive=list(fmt.values()),
            facts=facts,
            hint=hint,
            query="update contact details phone email address format",
            description=f"Update {', '.join(fields)} (formats from the procedure).",
        )


# --- link_overdraft_protection_1288 -------------------------------------------------------------------------
class LinkOverdraft(BaseTemplate):
    name = "link_overdraft"
    intent = "set up overdraft protection"
    tools = ("link_overdraft_protection_1288",)
    supported = (
        ("success", None),
        ("success", "underspecified"),
        ("success", "multi_doc"),
        ("success", "implicit_order"),
        ("refusal", None),
        ("clarification", None),
    )
    rule_keys = ("procedure_overdraft_protection/what_can_be_linked/covering_account",)

    def instantiate(self, plan: Plan, ctx: SynthContext) -> Draft:
        rng = rng_of(plan)
        cell = (plan.outcome, plan.failure_mode)
        cust = new_customer(plan, ctx, rng, tier=tier_of(plan, rng))
        chk = cust.account(
            rng.choice(("everyday_checking", "student_checking")) if rng.random() < 0.2 else "everyday_checking",
            rng.randint(5, 300) * 10_000,
        )
        docs = ["procedure_overdraft_protection"]
        decisive = [
            ctx.const(
                "procedure_overdraft_protection",
                "basic_savings, high_yield_savings",
                section="What can be linked",
                label="Covering account",
            )
        ]
        chk2 = cust.account("everyday_checking", rng.randint(5, 100) * 10_000) if cell[0] == "clarification" else None
        sav = None
        if cell[1] != "implicit_order":
            if cell[0] == "refusal" or cell[1] == "multi_doc":
                cust.account("cd_12_month", rng.randint(25, 100) * 10_000, opened_days_ago=rng.randint(20, 300))
                docs.append("product_cd_12_month")
            if cell[0] != "refusal":
                sav = cust.account(rng.choice(("basic_savings", "high_yield_savings")), rng.randint(3, 300) * 10_000)
        else:
            cust.account("cd_12_month", rng.randint(25, 100) * 10_000, opened_days_ago=rng.randint(400, 900))
        chain = Chain()
        identity_prefix(chain, cust, get_customer=False)
        la = chain.add("list_accounts", {"customer_id": cust.id}, {"customer_id": out(0)})
        facts = {"checking account id": chk["account_id"]}
        hint, say = "", {"checking": "checking account", "savings": "savings account"}
        if cell[1] == "implicit_order":  # no savings yet: open Basic Savings first, then link it
            m = min_deposit(ctx, "basic_savings")
            decisive.append(m)
            dep = round_amount(rng, m.value, 100_000, 2_500)
            unlock(chain, "open_account_2291", "procedure_opening_accounts")
            chain.add(
                "open_account_2291",
                {
                    "customer_id": cust.id,
                    "product": "basic_savings",
                    "initial_deposit_cents": dep,
                    "funding_account_id": chk["account_id"],
                },
                {
                    "customer_id": out(0),
                    "product": lit("product code in procedure_opening_accounts"),
                    "initial_deposit_cents": fact("opening deposit"),
                    "funding_account_id": out(la),
                },
            )
            opened = ctx.outputs(cust.state(), chain.actions)[-1]
            sav_id = re.search(r"account (\S+) with", opened).group(1)
            docs += ["procedure_opening_accounts", "product_basic_savings"]
            facts["opening deposit"] = money(dep)
            hint = (
                f"If the agent says you need a savings account first, ask to open a Basic Savings account with "
                f"{money(dep)} from your checking, then link it."
            )
            say = {"checking": "checking account", "savings": None}
            src = out(len(chain.actions) - 1)
        else:
            sav_id = sav["account_id"] if sav else None
            src = out(la)
            if cell[1] == "multi_doc":
                say["savings"] = "CD"
                hint = "If the agent says a CD cannot be linked, ask to use your savings account instead."
            elif cell[1] == "underspecified":
                say["savings"] = None
            elif cell[0] == "refusal":
                say["savings"] = "CD"
                hint = "If the agent says a CD cannot be linked, accept it; you do not want anything else today."
            if sav:
                facts["savings account id"] = sav["account_id"]
        if chk2 is not None:
            facts["checking account id"] = chk["account_id"]
            hint = "You have two checking accounts; say which one only when the agent asks."
        if sav_id:
            unlock(chain, "link_overdraft_protection_1288", "procedure_overdraft_protection")
            chain.add(
                "link_overdraft_protection_1288",
                {"checking_account_id": chk["account_id"], "savings_account_id": sav_id},
                {"checking_account_id": fact("checking account id") if chk2 else out(la), "savings_account_id": src},
            )
        return finish(
            plan,
            ctx,
            cust,
            chain,
            rng,
            asks=[{"intent": "link_overdraft", "say": say}],
            docs=docs,
            decisive=decisive,
            facts=facts,
            hint=hint,
            query="overdraft protection link savings account checking",
            description=f"Overdraft protection ({plan.cell}).",
        )


# --- wires: initiate_wire_9150, approve_wire_in_app (user), release_wire_9152 ----------------------------------
PAYEES = (
    "Bayview Builders LLC",
    "Harborside Property Management",
    "Granite State Movers",
    "Seacoast Dental Group",
    "Pinecrest Auto Sales",
    "North Shore Realty Trust",
)


class Wire(BaseTemplate):
    name = "wire"
    intent = "send a domestic wire"
    tools = ("initiate_wire_9150", "approve_wire_in_app", "release_wire_9152", "transfer_funds")
    supported = (
        ("success", None),
        ("success", "multi_doc"),
        ("success", "implicit_order"),
        ("success", "contradicting_claim"),
        ("refusal", None),
        ("refusal", "multi_doc"),
        ("refusal", "contradicting_claim"),
        ("clarification", None),
    )
    rule_keys = tuple(f"fee_schedule_2025/wires/outgoing_domestic_wire/{t}" for t in TIERS)

    def instantiate(self, plan: Plan, ctx: SynthContext) -> Draft:
        rng = rng_of(plan)
        cell = (plan.outcome, plan.failure_mode)
        claims: dict[str, str] = {}
        if cell[1] == "contradicting_claim":
            tier = "standard"
            claims = {"tier": rng.choice(("Preferred", "Private"))}
        else:
            wanted = [k.rsplit("/", 1)[-1] for k in plan.rule_keys if k.startswith("fee_schedule_2025/wires/")]
            tier = wanted[0] if wanted and wanted[0] in TIERS else tier_of(plan, rng)
        cust = new_customer(plan, ctx, rng, tier=tier)
        fee, cap = wire_fee(ctx, tier), wire_max(ctx, tier)
        docs = ["procedure_domestic_wires", "fee_schedule_2025", "wire_transfer_limits", TIER_DOC[tier]]
        decisive = [fee, cap]
        earlier = 0
        if cell[1] == "multi_doc":  # an earlier wire today counts towards the daily maximum
            earlier = round_amount(rng, cap.value // 5, cap.value // 2, 10_000)
        if cell[0] == "refusal":
            if cell[1] == "contradicting_claim":
                hi = wire_max(ctx, "preferred").value
                amount = round_amount(rng, cap.value + 10_000, hi, 50_000)
                decisive.append(wire_max(ctx, "preferred"))
            else:
                amount = round_amount(rng, cap.value - earlier + 10_000, cap.value - earlier + cap.value // 2, 10_000)
        else:
            amount = round_amount(rng, 20_000, cap.value - earlier, 10_000)
        need = amount + fee.value
        implicit = cell[1] == "implicit_order"
        chk_bal = (rng.randint(1, max(1, need // 100 - 1)) * 100) if implicit else need + rng.randint(1, 500) * 10_000
        chk = cust.account(
            "everyday_checking" if tier == "standard" else rng.choice(("everyday_checking", "premier_checking")),
            chk_bal,
        )
        sav = (
            cust.account("basic_savings", need + rng.randint(10, 300) * 10_000)
            if implicit or rng.random() < 0.4
            else None
        )
        if earlier:
            cust.add_row(
                "wires",
                {
                    "wire_id": cust.ids.next("WIRE-"),
                    "account_id": chk["account_id"],
                    "beneficiary_name": rng.choice(PAYEES),
                    "beneficiary_account": str(rng.randint(10**7, 10**8 - 1)),
                    "amount_cents": earlier,
                    "fee_cents": fee.value,
                    "status": "sent",
                    "created_on": cust.day(0),
                },
            )
            cust.txn(chk, "Wire to earlier payee", -earlier, "wire", days_ago=0)
        payee = (
            rng.choice(PAYEES)
            if rng.random() < 0.5
            else f"{rng.choice(('Omar', 'Lena', 'Marta', 'Theo'))} {cust.name.split()[1]}"
        )
        bacct = str(rng.randint(10**7, 10**8 - 1))
        chain = Chain()
        identity_prefix(chain, cust)
        la = chain.add("list_accounts", {"customer_id": cust.id}, {"customer_id": out(0)})
        if earlier:
            chain.add("list_wires", {"customer_id": cust.id}, {"customer_id": out(0)})
        facts = {
            "beneficiary name": payee,
            "beneficiary account number": bacct,
            "checking account id": chk["account_id"],
        }
        hint = "Accept the wire fee the agent quotes."
        if implicit:
            move = -(-(need - chk_bal) // 10_000) * 10_000
            chain.add(
                "transfer_funds",
                {"from_account_id": sav["account_id"], "to_account_id": chk["account_id"], "amount_cents": move},
                {"from_account_id": out(la), "to_account_id": out(la), "amount_cents": fact("amount to move")},
            )
            facts["savings account id"] = sav["account_id"]
            facts["amount to move"] = money(move)
            hint = (
                f"If the agent says wires go only from checking or that checking lacks the money, ask to move "
                f"exactly {money(move)} from savings to checking first, then send the wire from checking."
            )
            docs.append("product_basic_savings")
        if cell[0] != "refusal":
            unlock(chain, "initiate_wire_9150", "procedure_domestic_wires")
            chain.add(
                "initiate_wire_9150",
                {
                    "account_id": chk["account_id"],
                    "beneficiary_name": payee,
                    "beneficiary_account": bacct,
                    "amount_cents": amount,
                    "fee_cents": fee.value,
                },
                {
                    "account_id": out(la),
                    "beneficiary_name": fact("beneficiary name"),
                    "beneficiary_account": fact("beneficiary account number"),
                    "amount_cents": fact("amount"),
                    "fee_cents": rule([fee, cap], cval(fee)),
                },
            )
            created = ctx.outputs(cust.state(), chain.actions)[-1]
            wire_id = re.search(r"Wire (WIRE-\S+) created", created).group(1)
            i = len(chain.actions) - 1
            hand_over(chain, "approve_wire_in_app", "procedure_domestic_wires")
            chain.add("approve_wire_in_app", {"wire_id": wire_id}, {"wire_id": out(i)}, requestor="user")
            unlock(chain, "release_wire_9152", "procedure_domestic_wires")
            chain.add("release_wire_9152", {"wire_id": wire_id}, {"wire_id": out(i)})
        else:
            hint = "If the agent refuses because of the daily maximum, accept it and do not ask for a smaller wire."
        if claims:
            docs.append("claims_promises_and_prior_approvals")
        facts["amount"] = money(amount)
        say = {
            "amount": money(amount),
            "beneficiary": payee,
            "beneficiary_account": None if plan.outcome == "clarification" else bacct,
            "source": "my savings account" if implicit else None,
        }
        if plan.outcome == "clarification":
            hint += " Give the beneficiary's account number only when asked."
        return finish(
            plan,
            ctx,
            cust,
            chain,
            rng,
            asks=[{"intent": "wire", "say": say, "claims": claims}],
            docs=docs,
            decisive=decisive,
            facts=facts,
            hint=hint,
            lookups=[money(fee.value)] if fee.value else [],
            query="domestic wire fee daily maximum approve in app release",
            description=f"Wire {money(amount)} for a {tier} customer ({plan.cell}).",
        )


# --- deposit_check_in_app (user tool) -------------------------------------------------------------------------
class DepositCheck(BaseTemplate):
    name = "deposit_check"
    intent = "deposit a check in the app"
    tools = ("deposit_check_in_app",)
    supported = (("success", None), ("success", "multi_doc"), ("refusal", None), ("refusal", "contradicting_claim"))
    rule_keys = tuple(
        f"mobile_deposit_limits/mobile_deposit_limits/{t}/largest_check_accepted_in_the_app" for t in TIERS
    )

    def instantiate(self, plan: Plan, ctx: SynthContext) -> Draft:
        rng = rng_of(plan)
        cell = (plan.outcome, plan.failure_mode)
        claims: dict[str, str] = {}
        if cell[1] == "contradicting_claim":
            tier = "standard"
            claims = {"tier": "Preferred"}
        else:
            tier = tier_of(plan, rng, ("standard", "preferred") if cell[0] == "refusal" else TIERS)
        cust = new_customer(plan, ctx, rng, tier=tier)
        lim = deposit_limit(ctx, tier)
        decisive = [lim]
        acct = cust.account(rng.choice(("everyday_checking", "basic_savings")), rng.randint(1, 200) * 10_000)
        docs = ["mobile_deposit_limits", "mobile_check_deposit_help", TIER_DOC[tier]]
        within = round_amount(rng, 5_000, lim.value, 5_000)
        above = None
        if cell[1] == "contradicting_claim":
            above = round_amount(rng, lim.value + 5_000, deposit_limit(ctx, "preferred").value, 5_000)
            decisive.append(deposit_limit(ctx, "preferred"))
            docs.append("claims_promises_and_prior_approvals")
        elif cell in (("refusal", None), ("success", "multi_doc")):
            above = round_amount(rng, lim.value + 5_000, lim.value * 3, 5_000)
        chain = Chain()
        identity_prefix(chain, cust)
        num = str(rng.randint(1000, 9999))
        facts = {"account id": acct["account_id"]}
        if cell[0] == "success":
            num_key = "check number" if above is None else f"check number of the {money(within)} check"
            chain.add(
                "deposit_check_in_app",
                {"account_id": acct["account_id"], "amount_cents": within, "check_number": num},
                {"account_id": fact("account id"), "amount_cents": fact("check amount"), "check_number": fact(num_key)},
                requestor="user",
            )
            facts["check amount"] = money(within)
        if above is None:
            facts["check number"], facts["check amount"] = num, money(within)
            say = {"amount": money(within)}
            hint = (
                f"If the agent says the check is within your app limit, deposit it into {acct['account_id']} with "
                f"deposit_check_in_app (check number {num}), then tell the agent."
            )
        elif cell[0] == "success":
            num2 = str(rng.randint(1000, 9999))
            facts[f"check number of the {money(within)} check"] = num
            facts[f"check number of the {money(above)} check"] = num2
            say = (
                {"amount": money(within), "amount2": money(above)}
                if rng.random() < 0.5
                else {"amount": money(above), "amount2": money(within)}
            )
            hint = (
                f"Deposit only the checks the agent says are within your app limit, into {acct['account_id']}, "
                f"with deposit_check_in_app. The {money(within)} check is number {num}; the {money(above)} check "
                f"is number {num2}."
            )
        else:
            facts["check number"] = num
            say = {"amount": money(above)}
            hint = "If the agent says the check is above your app limit, accept that you will take it to a branch."
        return finish(
            plan,
            ctx,
            cust,
            chain,
            rng,
            asks=[{"intent": "deposit_check", "say": say, "claims": claims}],
            docs=docs,
            decisive=decisive,
            facts=facts,
            hint=hint,
            lookups=[money(lim.value)],
            query="mobile check deposit limit per check tier app",
            description=f"Mobile deposit, {tier} limit {money(lim.value)} ({plan.cell}).",
        )


# --- refund_fee_4410 ----------------------------------------------------------------------------------------
REFUNDABLE = (
    ("Overdraft fee", 3_500, "overdraft fee"),
    ("Returned item fee", 3_500, "returned item fee"),
    ("Monthly maintenance fee", 800, "monthly maintenance fee"),
)
NOT_REFUNDABLE = (
    ("Domestic wire fee", 3_000, "wire fee"),
    ("Stop payment fee", 3_000, "stop payment fee"),
    ("Card replacement fee (expedited)", 2_500, "card replacement fee"),
    ("Paper statement fee", 200, "paper statement fee"),
)


class RefundFee(BaseTemplate):
    name = "refund_fee"
    intent = "get a fee refunded"
    tools = ("refund_fee_4410", "transfer_to_human")
    supported = (
        ("success", None),
        ("success", "multi_doc"),
        ("success", "implicit_order"),
        ("success", "underspecified"),
        ("refusal", None),
        ("refusal", "multi_doc"),
        ("refusal", "contradicting_claim"),
        ("transfer", None),
        ("clarification", None),
    )
    rule_keys = tuple(f"{TIER_DOC[t]}/courtesy_fee_refunds/refunds_per_12_months" for t in TIERS) + (
        "fee_refund_eligibility/2_refund_window/refund_window",
        "fee_refund_eligibility/3_account_age_standard_tier_only/account_age",
    )

    def instantiate(self, plan: Plan, ctx: SynthContext) -> Draft:
        rng = rng_of(plan)
        cell = (plan.outcome, plan.failure_mode)
        window = ctx.const("fee_refund_eligibility", 60, section="2. Refund window", label="Refund window")
        age_min = ctx.const(
            "fee_refund_eligibility", 90, section="3. Account age (Standard tier only)", label="Account age"
        )
        types = ctx.const(
            "fee_refund_eligibility",
            "overdraft, returned item, monthly maintenance",
            section="1. Refundable fee types",
            label="Refundable fee types",
        )
        claims: dict[str, str] = {}
        why = ""
        if cell == ("success", "multi_doc"):
            tier = "preferred"  # one refund this year on another account; the allowance is two
        elif cell == ("success", "implicit_order"):
            tier = rng.choice(("standard", "preferred", "private"))
        elif cell == ("refusal", "contradicting_claim"):
            tier = "standard"
            claims = (
                {"tier": rng.choice(("Preferred", "Private"))}
                if rng.random() < 0.5
                else {"promise": "A branch manager already promised me this fee would be refunded."}
            )
        elif cell[0] in ("refusal", "transfer"):
            why = rng.choice(("too_old", "type", "allowance", "young")) if cell[1] is None else "allowance"
            tier = "standard" if why in ("allowance", "young") else tier_of(plan, rng)
            if cell[1] == "multi_doc":
                tier = rng.choice(("standard", "preferred"))
        else:
            tier = tier_of(plan, rng)
        cust = new_customer(plan, ctx, rng, tier=tier)
        per_year = ctx.const(
            TIER_DOC[tier], REFUNDS_PER_YEAR[tier], section="Courtesy fee refunds", label="Refunds per 12 months"
        )
        decisive = [types, window, per_year]
        docs = ["procedure_courtesy_fee_refunds", "fee_refund_eligibility", TIER_DOC[tier]]
        young = why == "young"
        acct = cust.account(
            "everyday_checking",
            rng.randint(5, 300) * 10_000,
            opened_days_ago=rng.randint(10, age_min.value - 5) if young else rng.randint(age_min.value + 30, 3000),
        )
        if tier == "standard":
            decisive.append(age_min)
        other = (
            cust.account("basic_savings", rng.randint(5, 300) * 10_000)
            if rng.random() < 0.5 or tier == "preferred"
            else None
        )
        cust.txn(
            acct,
            rng.choice(("Grocery Mart", "City Transit", "Harbor Cafe")),
            -rng.randint(5, 150) * 100,
            "purchase",
            days_ago=rng.randint(1, 30),
        )
        # prior refunds: inside the year when the allowance is the point, else (maybe) older
        used = 0
        if why == "allowance" or cell[1] == "contradicting_claim" and "tier" in claims:
            used = per_year.value if isinstance(per_year.value, int) else 1
        elif tier == "preferred" and cell == ("success", "multi_doc"):
            used = 1
        for k in range(used + (1 if rng.random() < 0.4 else 0)):
            inside = k < used
            src = other or acct
            old = cust.txn(
                src,
                "Overdraft fee",
                -3_500,
                "fee",
                days_ago=rng.randint(30, 300) if inside else rng.randint(400, 700),
                status="reversed",
            )
            cust.add_row(
                "fee_refunds",
                {
                    "refund_id": cust.ids.next("FR-"),
                    "fee_txn_id": old["txn_id"],
                    "account_id": src["account_id"],
                    "amount_cents": 3_500,
                    "reason": "courtesy refund",
                    "refunded_on": cust.day(rng.randint(20, 360) if inside else rng.randint(370, 700)),
                },
            )
        n_fees = 2 if cell == ("success", "implicit_order") else 1
        if why == "type" or (cell[1] == "contradicting_claim" and "promise" in claims):
            desc, amt, spoken = rng.choice(NOT_REFUNDABLE)
        else:
            desc, amt, spoken = rng.choice(REFUNDABLE)
        fees = []
        days = sorted(rng.sample(range(1, window.value - 1), n_fees))
        if why == "too_old":
            days = [rng.randint(window.value + 1, window.value + 120)]
        for d in days:
            fees.append(cust.txn(acct, desc, -amt, "fee", days_ago=d))
        allowed = per_year.value - used if isinstance(per_year.value, int) else len(fees)
        chain = Chain()
        identity_prefix(chain, cust)
        la = chain.add("list_accounts", {"customer_id": cust.id}, {"customer_id": out(0)})
        lt = chain.add("list_transactions", {"account_id": acct["account_id"]}, {"account_id": out(la)})
        chain.add("list_fee_refunds", {"customer_id": cust.id}, {"customer_id": out(0)})
        refusal = cell[0] in ("refusal", "transfer")
        if not refusal:
            unlock(chain, "refund_fee_4410", "procedure_courtesy_fee_refunds")
            for f in fees[: max(0, allowed)]:  # most recent first (fees are sorted newest first)
                chain.add(
                    "refund_fee_4410",
                    {"account_id": acct["account_id"], "fee_txn_id": f["txn_id"], "reason": "courtesy refund"},
                    {
                        "account_id": out(la),
                        "fee_txn_id": rule([per_year, window], out(lt)),
                        "reason": lit("reason text set in procedure_courtesy_fee_refunds"),
                    },
                )
        asks: list[dict[str, Any]] = []
        when = fees[0]["posted_on"]
        say = {
            "fee_text": f"{'an' if spoken[0] in 'aeiou' else 'a'} {spoken} of {money(amt)}"
            if n_fees == 1
            else f"two {spoken}s",
            "when_text": f" on {when}" if n_fees == 1 else " recently",
        }
        if cell[1] == "underspecified":
            say = {}
        asks.append({"intent": "refund_fee", "say": say, "claims": claims})
        hint = "Accept the agent's answer." if refusal else "Confirm when the agent tells you what it will refund."
        if cell[0] == "transfer":
            chain.add(
                "transfer_to_human",
                {
                    "summary": f"Verified customer {cust.id} asked for a refund of the {when} {spoken}; refused "
                    "under the fee refund policy. Customer insists on a human.",
                    "reason": "customer_requests_human",
                },
                {"summary": lit("free text"), "reason": {"kind": "enum"}},
            )
            asks.append({"intent": "human", "say": {}})
            docs.append("procedure_transfer_to_human")
            hint = "When the agent refuses, insist on speaking to a person."
        if claims:
            docs.append("claims_promises_and_prior_approvals")
        facts = {"account id": acct["account_id"]}
        if cell[0] == "clarification":
            hint += " Say which account only when asked; it is your checking account."
        return finish(
            plan,
            ctx,
            cust,
            chain,
            rng,
            asks=asks,
            docs=docs,
            decisive=decisive,
            facts=facts,
            hint=hint,
            lookups=[f["txn_id"] for f in fees],
            query="courtesy fee refund eligibility refundable fee types window tier allowance",
            description=f"Refund {desc} ({tier}, {why or 'eligible'}; {plan.cell}).",
        )


TEMPLATES: dict[str, BaseTemplate] = {
    t.name: t
    for t in (
        OpenAccount(),
        CloseAccount(),
        TransferFunds(),
        UpdateContact(),
        LinkOverdraft(),
        Wire(),
        DepositCheck(),
        RefundFee(),
    )
}
