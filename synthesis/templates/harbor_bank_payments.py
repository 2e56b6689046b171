"""Harbor Bank templates: domestic wires (with the in-app approval), mobile check deposits and fee
refunds (merged in ``harbor_bank.TEMPLATES``).
"""

from __future__ import annotations

import re
from datetime import date
from typing import Any

from ..records import Plan
from . import (
    BaseTemplate,
    Chain,
    Draft,
    SynthContext,
    date_speaker,
    hand_over,
    identity_prefix,
    new_customer,
    slug,
    unlock,
)
from .harbor_bank_base import (
    TIER_DOC,
    TIERS,
    cval,
    deposit_limit,
    fact,
    finish,
    lit,
    money,
    out,
    rng_of,
    round_amount,
    rule,
    tier_of,
    wanted_tier,
    wire_fee,
    wire_max,
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
    calls = {  # money moves from savings first only when checking lacks it (implicit order)
        (o, f): ("initiate_wire_9150", "approve_wire_in_app", "release_wire_9152")
        for o, f in (
            ("success", None),
            ("success", "multi_doc"),
            ("success", "contradicting_claim"),
            ("clarification", None),
        )
    }
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
    rule_keys = tuple(f"fee_schedule_2025/wires/outgoing_domestic_wire/{t}" for t in TIERS) + tuple(
        f"wire_transfer_limits/wire_transfer_limits/{t}/daily_maximum_for_domestic_wires" for t in TIERS
    )

    def instantiate(self, plan: Plan, ctx: SynthContext) -> Draft:
        rng = rng_of(plan)
        cell = (plan.outcome, plan.failure_mode)
        claims: dict[str, str] = {}
        if cell[1] == "contradicting_claim":
            tier = "standard"
            claims = {"tier": rng.choice(("Preferred", "Private"))}
        else:
            tier = wanted_tier(plan) or tier_of(plan, rng)
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
            allowed = ("standard", "preferred") if cell[0] == "refusal" else TIERS
            tier = wanted_tier(plan, allowed) or tier_of(plan, rng, allowed)
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
#: Fees as (transaction description, amount, spoken name, fee schedule section, words of its row).
REFUNDABLE = (
    ("Overdraft fee", 3_500, "overdraft fee", "Account activity fees", "overdraft fee"),
    ("Returned item fee", 3_500, "returned item fee", "Account activity fees", "returned item nsf"),
    ("Monthly maintenance fee", 800, "monthly maintenance fee", "Monthly maintenance fees", "everyday checking"),
)
NOT_REFUNDABLE = (
    ("Domestic wire fee", 3_000, "wire fee", "Wires", "outgoing domestic standard"),
    ("Stop payment fee", 3_000, "stop payment fee", "Account activity fees", "stop payment"),
    ("Card replacement fee (expedited)", 2_500, "card replacement fee", "Debit card replacement", "expedited"),
    ("Paper statement fee", 200, "paper statement fee", "Account activity fees", "paper statement"),
)
#: Refundable fee types as the eligibility page lists them (transaction descriptions).
REFUNDABLE_TYPES = ("Overdraft fee", "Returned item fee", "Monthly maintenance fee")
#: Courtesy refunds per rolling 12 months as each tier's benefits page states it.
PER_YEAR_TEXT = {"standard": 1, "preferred": 2, "private": "unlimited"}


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
    rule_keys = (
        "standard_banking_benefits/courtesy_fee_refunds/standard_customers_receive_one",
        "preferred_banking_benefits/courtesy_fee_refunds/preferred_customers_receive_two",
        "private_client_benefits/courtesy_fee_refunds/limit_number_courtesy",
        "fee_refund_eligibility/2_refund_window/have_posted_within_last",
        "fee_refund_eligibility/3_account_age_standard_tier_only/fee_charged_have_open",
        "fee_schedule_2025/account_activity_fees/stop_payment_fee",
        "fee_schedule_2025/account_activity_fees/paper_statement_fee",
    )

    def cell_for_rule(self, rule_id: str) -> tuple[str, str | None] | None:
        """A fee that is never refundable is decisive in a refusal; the rest in a refund."""
        if any(slug(f[4]) in rule_id for f in NOT_REFUNDABLE) and rule_id.startswith("fee_schedule_2025/"):
            return ("refusal", None)
        return None

    def instantiate(self, plan: Plan, ctx: SynthContext) -> Draft:
        rng = rng_of(plan)
        cell = (plan.outcome, plan.failure_mode)
        window = ctx.find("fee_refund_eligibility", 60, section="2. Refund window")
        age_min = ctx.find("fee_refund_eligibility", 90, section="3. Account age (Standard tier only)")
        types = {d: ctx.find("fee_refund_eligibility", d, section="1. Refundable fee types") for d in REFUNDABLE_TYPES}
        fee_key = next((k for k in plan.rule_keys if k.startswith("fee_schedule_2025/")), None)
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
            if fee_key and cell[1] is None and any(slug(f[4]) in fee_key for f in NOT_REFUNDABLE):
                why = "type"
            tier = "standard" if why in ("allowance", "young") else tier_of(plan, rng)
            if cell[1] == "multi_doc":
                tier = rng.choice(("standard", "preferred"))
        else:
            tier = wanted_tier(plan) or tier_of(plan, rng)
        cust = new_customer(plan, ctx, rng, tier=tier)
        per_year = ctx.find(TIER_DOC[tier], PER_YEAR_TEXT[tier], section="Courtesy fee refunds")
        decisive = [window, per_year]
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
            pool = [f for f in NOT_REFUNDABLE if fee_key and slug(f[4]) in fee_key] or NOT_REFUNDABLE
            desc, amt, spoken, sec, words = rng.choice(pool)
            decisive += list(types.values())  # the list of refundable types leaves this one out
        else:
            desc, amt, spoken, sec, words = rng.choice(REFUNDABLE)
            decisive.append(types[desc])
        decisive.append(ctx.find("fee_schedule_2025", amt, section=sec, words=words))
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
            "when_text": f" on {date_speaker(plan)(date.fromisoformat(when), ctx.today)}"
            if n_fees == 1
            else " recently",
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


TEMPLATES: dict[str, BaseTemplate] = {t.name: t for t in (Wire(), DepositCheck(), RefundFee())}
