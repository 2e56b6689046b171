"""Harbor Bank's task templates: opening and closing accounts and transfers between own accounts.

Each template builds a fresh customer whose records make the plan's rule decisive, and computes the
reference chain from the entity graph's constants and those records. The other templates live in
``harbor_bank_profile.py`` (contact details, overdraft protection), ``harbor_bank_payments.py``
(wires, mobile check deposits, fee refunds) and ``harbor_bank_cards.py`` (cards, disputes, limits,
travel, hand-offs); :data:`TEMPLATES` merges all but the cards (``templates_for`` adds those).
"""

from __future__ import annotations

from typing import Any

from ..records import Plan
from . import BaseTemplate, Chain, Const, Draft, SynthContext, identity_prefix, new_customer, slug, unlock
from .harbor_bank_base import *  # noqa: F403
from .harbor_bank_base import (
    MIN_DEPOSIT,
    PRODUCT_NAMES,
    TIER_DOC,
    cd_term,
    cval,
    db,
    fact,
    finish,
    min_deposit,
    money,
    out,
    premier_tiers,
    product_code,
    rng_of,
    round_amount,
    rule,
    student_ages,
    tier_of,
    wanted_product,
)


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
    rule_keys = tuple(f"product_{p}/at_a_glance/minimum_opening_deposit" for p in MIN_DEPOSIT) + tuple(
        f"procedure_opening_accounts/product_codes/{slug(PRODUCT_NAMES[p])}/code" for p in MIN_DEPOSIT
    )

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
                        "product": cval(product_code(ctx, prod)),
                        "initial_deposit_cents": rule([c], fact(f"{PRODUCT_NAMES[prod]} opening deposit")),
                        "funding_account_id": out(la),
                    },
                )
            docs += ["product_high_yield_savings", "product_everyday_checking"]
            decisive += [m_chk, m_hys, product_code(ctx, "everyday_checking"), product_code(ctx, "high_yield_savings")]
            facts = {
                "savings account id": sav["account_id"],
                "High-Yield Savings opening deposit": money(dep_hys),
                "Everyday Checking opening deposit": money(dep_chk),
            }
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
                decisive.append(premier_tiers(ctx))
                refuse_why = "Premier Checking needs the Preferred or Private tier"
            else:
                age = rng.randint(17, 24) if ok else rng.choice((25, 25, 26, 31))
                docs += ["product_student_checking"]
                decisive += student_ages(ctx)
                refuse_why = "Student Checking is for customers aged 17 to 24"
        elif cell == ("refusal", None):
            product = "high_yield_savings"
            refuse_why = "at most 2 open High-Yield Savings accounts"
            docs.append("product_high_yield_savings")
            decisive.append(ctx.find("product_high_yield_savings", 2, section="Eligibility and limits"))
        elif cell in (("success", "contradicting_claim"), ("refusal", "contradicting_claim")):
            tier = "standard"
            product = "premier_checking"
            claims = {"tier": rng.choice(("Preferred", "Private"))}
            docs += ["product_premier_checking", "claims_promises_and_prior_approvals", "standard_banking_benefits"]
            decisive.append(premier_tiers(ctx))
            refuse_why = "the profile says Standard"
        elif cell == ("success", "underspecified"):
            product = wanted_product(plan, ("high_yield_savings", "cd_12_month")) or rng.choice(
                ("high_yield_savings", "cd_12_month")
            )
            docs.append(f"product_{product}")
        else:  # success/None, clarification/None
            product = wanted_product(plan, tuple(MIN_DEPOSIT)) or rng.choice(tuple(MIN_DEPOSIT))
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
            decisive.append(product_code(ctx, opened))
            unlock(chain, "open_account_2291", "procedure_opening_accounts")
            dep_from = fact("opening deposit") if offered is None else rule([m], cval(m))
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
                    "product": cval(product_code(ctx, opened)),
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
    rule_keys = (
        "product_cd_12_month/at_a_glance/term_and_maturity",
        "procedure_closing_accounts/closures_that_must_be_refused/cd_before_maturity_date",
    )
    calls = {
        ("success", None): ("close_account_8837",),  # a zero balance: nothing to move first
        ("clarification", None): ("close_account_8837",),
    }

    def cell_for_rule(self, rule_id: str) -> tuple[str, str | None] | None:
        """The CD's maturity decides only the CD cells."""
        return ("refusal", "multi_doc") if rule_id in self.rule_keys else None

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
            decisive += [cd_term(ctx), ctx.find("procedure_closing_accounts", 12, words="cd before maturity")]
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
    rule_keys = ("product_cd_12_month/at_a_glance/term_and_maturity",)

    def cell_for_rule(self, rule_id: str) -> tuple[str, str | None] | None:
        """The CD's maturity decides only the CD cells."""
        return ("refusal", "multi_doc") if rule_id in self.rule_keys else None

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
            decisive.append(cd_term(ctx))
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


def _all() -> dict[str, BaseTemplate]:
    from .harbor_bank_payments import TEMPLATES as PAYMENTS
    from .harbor_bank_profile import TEMPLATES as PROFILE

    own = {t.name: t for t in (OpenAccount(), CloseAccount(), TransferFunds())}
    return {**own, **PROFILE, **PAYMENTS}


TEMPLATES: dict[str, BaseTemplate] = _all()
