"""Harbor Bank templates' shared pieces: product and tier tables, derivation helpers, ``finish``.

The values in the tables are what the documents state, as the templates' authors read them; the
entity graph's constants win wherever it has them (:meth:`SynthContext.const` / :meth:`SynthContext.find`).
"""

from __future__ import annotations

import random
from typing import Any

from ..records import Plan
from . import (
    Chain,
    Const,
    Customer,
    Draft,
    SynthContext,
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
