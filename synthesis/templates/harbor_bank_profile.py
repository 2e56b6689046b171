"""Harbor Bank templates: contact details and overdraft protection (merged in ``harbor_bank.TEMPLATES``)."""

from __future__ import annotations

import re
from typing import Any

from ..records import Plan
from . import BaseTemplate, Chain, Draft, SynthContext, identity_prefix, new_customer, unlock
from .harbor_bank_base import (
    cval,
    fact,
    finish,
    min_deposit,
    money,
    out,
    product_code,
    rng_of,
    round_amount,
    rule,
    tier_of,
)

#: The formats the contact procedure writes out, per field (its examples).
FORMATS = {"phone": "555-123-4567", "email": "name@example.com", "address": "14 Pier Road, Portsmouth, NH 03801"}


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
    rule_keys = ("procedure_contact_details_update/formats/phone~2", "procedure_contact_details_update/formats/address")

    def instantiate(self, plan: Plan, ctx: SynthContext) -> Draft:
        from . import STREETS, TOWNS

        rng = rng_of(plan)
        cell = (plan.outcome, plan.failure_mode)
        cust = new_customer(plan, ctx, rng, tier=tier_of(plan, rng))
        cust.account("everyday_checking", rng.randint(5, 300) * 10_000)
        fields = rng.sample(("email", "phone", "address"), rng.choice((1, 1, 2)))
        if cell == ("success", "multi_doc") and "phone" not in fields:
            fields = ["phone", *fields[:1]]
        for k in ("phone", "address"):  # a field whose format rule the plan wants decisive
            if k not in fields and any(f"/formats/{k}" in key for key in plan.rule_keys):
                fields = [*fields[:1], k]
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
        fmt = {k: ctx.find("procedure_contact_details_update", FORMATS[k], section="Formats") for k in fields}
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
        for k in new:  # asked for a value, the customer gives it as the procedure writes it
            facts[f"new {k}"] = new[k]
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
    rule_keys = ("product_basic_savings/at_a_glance/minimum_opening_deposit",)

    def cell_for_rule(self, rule_id: str) -> tuple[str, str | None] | None:
        """The savings minimum decides only when a Basic Savings is opened first (implicit order)."""
        return ("success", "implicit_order") if rule_id in self.rule_keys else None

    def instantiate(self, plan: Plan, ctx: SynthContext) -> Draft:
        rng = rng_of(plan)
        cell = (plan.outcome, plan.failure_mode)
        cust = new_customer(plan, ctx, rng, tier=tier_of(plan, rng))
        chk = cust.account(
            rng.choice(("everyday_checking", "student_checking")) if rng.random() < 0.2 else "everyday_checking",
            rng.randint(5, 300) * 10_000,
        )
        docs = ["procedure_overdraft_protection"]
        decisive = [ctx.find("procedure_overdraft_protection", "basic_savings, high_yield_savings")]
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
            decisive += [m, product_code(ctx, "basic_savings")]
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
                    "product": cval(product_code(ctx, "basic_savings")),
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


TEMPLATES: dict[str, BaseTemplate] = {t.name: t for t in (UpdateContact(), LinkOverdraft())}
