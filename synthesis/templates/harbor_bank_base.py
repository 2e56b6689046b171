"""Harbor Bank templates' shared pieces: product and tier tables, derivation helpers, ``finish``.

The values in the tables are what the documents state, as the templates' authors read them; the
entity graph's constants win wherever it has them (:meth:`SynthContext.const` / :meth:`SynthContext.find`).
"""

from __future__ import annotations

import random
import re
from typing import Any

from ..records import Plan
from . import (
    Chain,
    Const,
    Customer,
    Draft,
    SynthContext,
    slug,
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


def cval(c: Const, otherwise: dict[str, Any] | None = None) -> dict[str, Any]:
    """The constant's value; ``otherwise`` (a literal by default) when the entity graph lacks it."""
    if c.found:
        return {"kind": "constant", "ids": [c.id], "op": "value"}
    return otherwise or lit(f"the value {c.value!r} that {c.doc} states")


def rule(cs: list[Const], value: dict[str, Any]) -> dict[str, Any]:
    """``value`` decided by the constants ``cs`` (those the entity graph has; none: ``value`` itself)."""
    ids = [c.id for c in cs if c.found]
    return {"kind": "rule", "ids": ids, "value": value} if ids else value


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
    docs = list(dict.fromkeys(docs))
    return Draft(
        initial_state=cust.state(),
        actions=chain.actions,
        derivations=chain.derivations,
        facts=f,
        asks=asks,
        persona=persona(plan, cust, rng),
        expect_no_change=not chain.writes(ctx.domain),
        required_documents=docs,
        intent_query=finding_query(ctx, query, docs),
        decisive=list(dict.fromkeys(c.id for c in decisive if c.found)),
        unknown=unknown or [],
        instructions_hint=hint,
        lookups=[x for x in (lookups or []) if x],
        tags=tags or [],
        description=description,
    )


#: What a document is about, in a customer's or agent's search words (else its title is used).
TOPICS = {
    "claims_promises_and_prior_approvals": "customer claims a promise, an exception or an already approved request",
    "standard_banking_benefits": "Standard tier banking benefits",
    "preferred_banking_benefits": "Preferred tier banking benefits",
    "private_client_benefits": "Private client tier benefits",
}


def finding_query(ctx: SynthContext, query: str, docs: list[str], depth: int = 10) -> str:
    """``query``, with what each required document is about added until the domain's BM25 search
    finds every one of ``docs`` in its top ``depth`` (the verifier's test), as far as words can.
    """
    kb = getattr(ctx.domain, "kb", None)
    if kb is None or not docs:
        return query
    titles = {d.id: d.title for d in ctx.domain.documents}

    def missing(q: str) -> list[str]:
        hits = {h.doc_id for h in kb.search(q, k=depth, method="bm25")}
        return [d for d in docs if d not in hits]

    for _ in range(len(docs)):
        gone = missing(query)
        if not gone:
            break
        about = TOPICS.get(gone[0]) or re.sub(r"^Internal:\s*", "", titles.get(gone[0], gone[0].replace("_", " ")))
        query = f"{query}; {re.sub(r'[^A-Za-z0-9 ,-]+', '', about).strip()}"
    return query


def min_deposit(ctx: SynthContext, product: str) -> Const:
    return ctx.const(f"product_{product}", MIN_DEPOSIT[product], section="At a glance", label="Minimum opening deposit")


def product_code(ctx: SynthContext, product: str) -> Const:
    """The product's code in the opening procedure's table (the ``product`` argument of open_account_2291)."""
    return ctx.find("procedure_opening_accounts", product, section="Product codes")


def premier_tiers(ctx: SynthContext) -> Const:
    """Premier Checking's eligible tiers (a prose rule: the entity graph may lack it)."""
    return ctx.find("product_premier_checking", "preferred, private", section="Eligibility")


def student_ages(ctx: SynthContext) -> list[Const]:
    """Student Checking's age bounds: 17 and 24 inclusive."""
    return [ctx.find("product_student_checking", a, section="Eligibility", words="aged") for a in (17, 24)]


def cd_term(ctx: SynthContext) -> Const:
    """The 12-Month CD's term: it matures 12 months after opening (no transfers out or closing before)."""
    return ctx.find("product_cd_12_month", 12, section="At a glance", words="term and maturity")


def wanted_product(plan: Plan, allowed: tuple[str, ...]) -> str | None:
    """The product a plan's rule keys name (its page's constant or its code), if one of ``allowed``."""
    for key in plan.rule_keys:
        for p in allowed:
            if key.startswith(f"product_{p}/") or f"/{slug(PRODUCT_NAMES[p])}/" in key or f"/{p}/" in key:
                return p
    return None


def wanted_tier(plan: Plan, allowed: tuple[str, ...] = TIERS) -> str | None:
    """The tier a plan's rule keys name (a per-tier table cell or benefits page), if one of ``allowed``."""
    for key in plan.rule_keys:
        parts = key.split("/")
        for t in allowed:
            if t in parts or parts[0] == TIER_DOC[t]:
                return t
    return None


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
