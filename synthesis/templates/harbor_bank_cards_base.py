"""Shared pieces of the Harbor Bank card templates: the documents' readings, constant lookups in the
entity graph, record builders, the template class and its registry (``TEMPLATES``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import date
from typing import Any

from ..records import Plan
from . import BaseTemplate, Chain, Const, Customer, Draft, SynthContext, new_customer, slug, unlock

TIERS = ("standard", "preferred", "private")
TIER_DOC = {
    "standard": "standard_banking_benefits",
    "preferred": "preferred_banking_benefits",
    "private": "private_client_benefits",
}
TIER_NAME = {"standard": "Standard", "preferred": "Preferred", "private": "Private"}
CHECKING = {
    "everyday_checking": "Everyday Checking",
    "premier_checking": "Premier Checking",
    "student_checking": "Student Checking",
}
# The values the documents state, used only when the entity graph lacks a constant (ctx.missing says so).
CARD_FEE = {"damaged": {"standard": 500, "preferred": 0, "private": 0}, "lost": dict.fromkeys(TIERS, 0)}
SHIP_FEE = {"standard": dict.fromkeys(TIERS, 0), "expedited": {"standard": 2500, "preferred": 1000, "private": 0}}
LIMIT_MAX = {"standard": 250_000, "preferred": 500_000, "private": 1_000_000}
# Scenarios are designed around these readings (amounts near the threshold, trips longer than the maximum);
# the chain is computed from the graph's values, so a changed constant changes the chain, not the scenario.
LIMIT_MIN, CREDIT_THRESHOLD, WINDOW, TRAVEL_MAX = 10_000, 10_000, 60, 90
FEE_DOC, CREDIT_DOC, LIMIT_DOC = "fee_schedule_2025", "dispute_provisional_credit", "debit_card_daily_limits"
CARD_ROW = {"damaged": "Damaged card", "lost": "Lost or stolen card", "stolen": "Lost or stolen card"}
SHIP_ROW = {"standard": "Standard delivery (5-7 business days)", "expedited": "Expedited delivery (2 business days)"}
CREDIT_SECTION = "How much provisional credit"
HANDOFF_DOC = "procedure_transfer_to_human"
HANDOFF_ROW = {
    "fraud_or_security": "The customer reports an account takeover, identity theft or someone else controlling "
    "their online banking",
    "legal_or_estate": "The account holder has died, or the matter concerns an estate, a court order or another "
    "legal process",
    "customer_requests_human": "The customer insists on speaking to a person after you have tried to help",
}
MERCHANTS = (
    "Harbor Market",
    "Seacoast Hardware",
    "Blue Gull Cafe",
    "Granite State Outfitters",
    "Lakeside Gear Co",
    "Oakline Furniture",
    "StreamBox",
    "Pacific Tire & Auto",
    "Bluewater Grill",
    "QuickMart Fuel",
    "Elite Electronics Online",
    "Night Owl Taxi",
    "Portside Pharmacy",
    "Northwind Books",
    "Cobalt Fitness",
    "Riverbend Florist",
    "Saltmarsh Bakery",
    "Tidewater Hotels",
    "Lighthouse Cinema",
    "Maple & Co Home",
    "Coastline Airlines",
    "Mariner Pet Supply",
    "Summit Sports",
    "Beacon Electronics",
    "Old Port Wine Shop",
)
COUNTRIES = (
    "Japan",
    "France",
    "Italy",
    "Portugal",
    "Mexico",
    "Canada",
    "Spain",
    "Greece",
    "Iceland",
    "Ireland",
    "Germany",
    "Brazil",
    "Australia",
    "Thailand",
    "Morocco",
    "Norway",
    "Chile",
    "Vietnam",
    "Kenya",
    "Peru",
)
US_PLACES = ("California", "Florida", "Hawaii", "Texas", "Colorado", "Alaska", "New York City", "Chicago")
REASON_STORY = {
    "lost": (
        "I've lost my debit card and I'm sure it's gone for good",
        "my debit card is lost, I've searched everywhere",
    ),
    "stolen": ("someone took my debit card out of my bag", "my wallet was pickpocketed with my debit card in it"),
    "damaged": ("my debit card snapped in half", "the chip on my debit card stopped working"),
}
CLAIMS_DOC = "claims_promises_and_prior_approvals"
LIMIT_DOCS = ["procedure_daily_card_limits", LIMIT_DOC]


# --- small helpers -----------------------------------------------------------------------------------------
def money(cents: int) -> str:
    """``$1,200`` or ``$12.50``."""
    whole, part = divmod(abs(cents), 100)
    return f"{'-' if cents < 0 else ''}${whole:,}" + (f".{part:02d}" if part else "")


def fact(key: str) -> dict[str, Any]:
    return {"kind": "fact", "key": key}


def out(i: int) -> dict[str, Any]:
    return {"kind": "output", "action": i}


def lit(why: str) -> dict[str, Any]:
    return {"kind": "literal", "why": why}


def rule(cs: list[Const], value: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "rule", "ids": [c.id for c in cs], "value": value}


def rng_of(plan: Plan) -> random.Random:
    return random.Random(f"{plan.id}:{plan.template}:{plan.seed}:{plan.outcome}:{plan.failure_mode}")


def key_tier(plan: Plan) -> str | None:
    """The tier a plan's rule keys or persona ask for (a path part equal to a tier name)."""
    for k in plan.rule_keys:
        for part in k.split("/")[1:]:
            if part in TIERS:
                return part
    t = plan.persona.get("tier")
    return t if t in TIERS else None


def pick_tier(plan: Plan, rng: random.Random, allowed: tuple[str, ...] = TIERS) -> str:
    t = key_tier(plan)
    return t if t in allowed else rng.choice(allowed)


def graph_of(ctx: SynthContext) -> Any:
    """The context's entity graph (``ctx.graph`` builds the domain's on first use)."""
    return getattr(ctx, "graph", ctx.entity_graph)


def wanted(plan: Plan, cs: list[Const]) -> Const | None:
    """The one of ``cs`` the plan wants decisive, if any."""
    return next((c for c in cs if c.id in plan.rule_keys), None)


def by_id(ctx: SynthContext, cid: str, fallback: Any) -> Const:
    """A constant by its id; the fallback (recorded in ``ctx.missing``) when the graph lacks it."""
    g = graph_of(ctx)
    if g is not None:
        try:
            c = g.by_id(cid)
            return Const(c.id, c.value, c.doc)
        except KeyError as e:
            ctx.missing[cid] = str(e)[:200]
    else:
        ctx.missing.setdefault(cid, "no entity graph")
    return Const(cid, fallback, cid.split("/", 1)[0], found=False)


def find(ctx: SynthContext, doc: str, fallback_id: str, fallback: Any, pred: Callable[[Any], bool]) -> Const:
    """The first constant of ``doc`` that ``pred`` accepts (prose constants have generated labels)."""
    g = graph_of(ctx)
    if g is not None:
        for c in g.constants:
            if c.doc == doc and pred(c):
                return Const(c.id, c.value, c.doc)
        ctx.missing[fallback_id] = f"no constant of {doc!r} matches"
    else:
        ctx.missing.setdefault(fallback_id, "no entity graph")
    return Const(fallback_id, fallback, doc, found=False)


def card_fee(ctx: SynthContext, reason: str, tier: str) -> Const:
    return ctx.const(
        FEE_DOC,
        CARD_FEE["damaged" if reason == "damaged" else "lost"][tier],
        section="Debit card replacement",
        row=CARD_ROW[reason],
        column=tier,
    )


def ship_fee(ctx: SynthContext, shipping: str, tier: str) -> Const:
    return ctx.const(
        FEE_DOC, SHIP_FEE[shipping][tier], section="Debit card replacement", row=SHIP_ROW[shipping], column=tier
    )


def limit_max(ctx: SynthContext, tier: str) -> Const:
    return ctx.const(
        LIMIT_DOC, LIMIT_MAX[tier], row=tier, column="Maximum daily spending limit", heading="Debit Card Daily Limits"
    )


def limit_min(ctx: SynthContext, procedure: bool = False) -> Const:
    """The lowest daily limit, as Debit Card Daily Limits states it or as the agents' procedure does."""
    if procedure:
        doc = "procedure_daily_card_limits"
        return find(ctx, doc, f"{doc}/rules/lowest_daily_limit", LIMIT_MIN,
                    lambda c: c.unit == "cents" and "lowest" in c.attributes.get("label", "").lower())  # fmt: skip
    return find(ctx, LIMIT_DOC, f"{LIMIT_DOC}/debit_card_daily_limits/minimum_limit", LIMIT_MIN,
                lambda c: c.unit == "cents" and "minimum" in c.attributes.get("label", "").lower())  # fmt: skip


def dispute_windows(ctx: SynthContext, rng: random.Random | None = None, plan: Plan | None = None) -> list[Const]:
    """The dispute window as ``procedure_card_disputes`` states it: posted "within the last N days", or
    "on or after the date N days before today" (one rule stated twice; ``rng`` picks the statement a task
    goes by, so each decides some tasks).
    """
    doc = "procedure_card_disputes"
    g = graph_of(ctx)
    fid = f"{doc}/what_can_be_disputed/within_the_last_days"
    if g is not None:
        cs = [
            Const(c.id, c.value, c.doc)
            for c in g.constants
            if c.doc == doc
            and c.unit == "days"
            and (c.attributes.get("section", "").lower() == "what can be disputed" or "-day window" in c.text)
        ]
        if cs:
            if plan is not None and wanted(plan, cs) is not None:
                return [wanted(plan, cs)]
            return [rng.choice(cs)] if rng is not None else cs
        ctx.missing[fid] = f"no constant of {doc!r} matches"
    else:
        ctx.missing.setdefault(fid, "no entity graph")
    return [Const(fid, WINDOW, doc, found=False)]


def within(window: list[Const], days: int) -> bool:
    """Whether a purchase posted ``days`` ago may be disputed."""
    return all(days <= w.value for w in window)


def age(cust: Customer, txn: dict[str, Any]) -> int:
    return (cust.today - date.fromisoformat(txn["posted_on"])).days


def travel_max(ctx: SynthContext) -> Const:
    doc = "procedure_travel_notices"
    return find(
        ctx,
        doc,
        f"{doc}/rules/maximum_length",
        TRAVEL_MAX,
        lambda c: c.unit == "days" and "maximum" in c.attributes.get("label", "").lower(),
    )


def travel_rules(
    ctx: SynthContext, rng: random.Random | None = None, plan: Plan | None = None
) -> tuple[Const, Const | None, Const | None]:
    """The travel-notice rules: the maximum length, the end offset of a clamped notice ("end_date =
    start_date + N days", stated on the same line) and the maximum counted from today when the customer
    is already abroad (None where the graph has no such constant).
    """
    mx = travel_max(ctx)
    g, doc = graph_of(ctx), "procedure_travel_notices"
    if g is None or not mx.found:
        return mx, None, None
    line = g.by_id(mx.id).line
    days = [c for c in g.constants if c.doc == doc and c.unit == "days"]
    same = [c for c in days if c.line == line]
    if rng is not None and len(same) >= 3:  # "Maximum length: 90 days" and "the first 90 days only": one rule
        pick = rng.choice(same[:-1])
        if plan is not None and any(c.id in plan.rule_keys for c in same[:-1]):
            pick = next(c for c in same[:-1] if c.id in plan.rule_keys)
        mx = Const(pick.id, pick.value, doc)
    offset = Const(same[-1].id, same[-1].value, doc) if len(same) >= 3 else None
    abroad = next((Const(c.id, c.value, doc) for c in days if c.line != line and "abroad" in c.text.lower()), None)
    return mx, offset, abroad


def credit_rule(ctx: SynthContext, tier: str) -> list[Const]:
    """The provisional-credit constants of a tier: a full-amount category, or a threshold and the else-value."""
    base = f"{CREDIT_DOC}/how_much_provisional_credit/{tier}/provisional_credit"
    if tier != "standard":
        return [by_id(ctx, base, "full purchase amount, immediately")]
    return [by_id(ctx, base, CREDIT_THRESHOLD), by_id(ctx, base + "~2", 0)]


def credit_for(cs: list[Const], amount: int) -> tuple[int, list[Const]]:
    """The provisional credit of a purchase of ``amount`` cents and the constants that decided it."""
    first = cs[0]
    if isinstance(first.value, (int, float)) and not isinstance(first.value, bool):
        if amount <= first.value:
            return amount, [first]
        other = cs[1].value if len(cs) > 1 and isinstance(cs[1].value, int) else 0
        return min(other, amount), cs[:2]
    return (amount if "full" in str(first.value).lower() else 0), [first]


def code_of(c: Const, fallback: str) -> str:
    """The code a categorical constant names (its first word, back-quotes and punctuation stripped)."""
    words = str(c.value).strip().strip("`").split()
    return words[0].strip("`,.;") if words else fallback


def handoff_reason(ctx: SynthContext, reason: str, source: tuple[str, str] | None = None) -> tuple[str, Const]:
    """The reason code for a situation: from the hand-off table, or from ``source`` (doc, label word),
    the document that handles the situation and names the code itself.
    """
    if source is not None:
        doc, word = source
        c = find(
            ctx, doc, f"{doc}/{word}", reason, lambda c: c.unit == "category" and word in slug(c.id.split("/")[-1])
        )
    else:
        c = ctx.const(
            HANDOFF_DOC,
            reason,
            section="When to transfer, and the reason to use",
            row=HANDOFF_ROW[reason],
            column="Reason",
        )
    return code_of(c, reason), c


def dispute_code(ctx: SynthContext, reason: str) -> Const:
    """The reason code ``procedure_card_disputes`` lists for a dispute reason."""
    doc = "procedure_card_disputes"
    return find(
        ctx,
        doc,
        f"{doc}/dispute_reasons/{reason}",
        reason,
        lambda c: (
            c.unit == "category"
            and c.id.split("/")[1] == "dispute_reasons"
            and slug(c.attributes.get("label", "")) == reason
        ),
    )


def theft_code(ctx: SynthContext) -> Const:
    """The reason code for purchases made with a stolen card (``procedure_card_replacement``)."""
    doc = "procedure_card_replacement"
    return find(
        ctx,
        doc,
        f"{doc}/stolen_cards/dispute_reason",
        "unauthorized",
        lambda c: c.unit == "category" and "stolen" in c.id.split("/")[1],
    )


def persona(plan: Plan, cust: Customer, rng: random.Random, **extra: Any) -> dict[str, Any]:
    from . import JOBS

    p = {
        "name": cust.name,
        "occupation": rng.choice(JOBS),
        "temperament": plan.persona.get("temperament", rng.choice(("polite", "hurried", "anxious", "calm"))),
        "verbosity": plan.persona.get("verbosity", "brief"),
        "tier": cust.tier,
    }
    p.update(extra)
    return p


def checking(cust: Customer, rng: random.Random, product: str | None = None) -> dict[str, Any]:
    product = product or rng.choice(("everyday_checking", "everyday_checking", "premier_checking", "student_checking"))
    return cust.account(product, rng.randint(20, 900) * 1_000)


def new_card(
    cust: Customer, acct: dict[str, Any], rng: random.Random, status: str = "active", limit: int | None = None
):
    """A card with a last-four distinct from the customer's other cards."""
    if limit is None:
        limit = rng.choice((50_000, 100_000, 150_000, 200_000))
    row = cust.card(acct, status=status, limit=limit)
    while row["last4"] in {c["last4"] for c in cust.cards if c is not row}:
        row["last4"] = f"{rng.randint(0, 9999):04d}"
    return row


def replaced(cust: Customer, rng: random.Random, old: dict[str, Any], acct: dict[str, Any]) -> dict[str, Any]:
    """A replacement already ordered for ``old`` (active), with its card order row."""
    new = new_card(cust, acct, rng, limit=old["daily_limit_cents"])
    new["replaces"] = old["card_id"]
    new["issued_on"] = cust.day(rng.randint(1, 4))
    cust.add_row(
        "card_orders",
        {
            "order_id": cust.ids.next("ORD-"),
            "old_card_id": old["card_id"],
            "new_card_id": new["card_id"],
            "customer_id": cust.id,
            "reason": old["status"] if old["status"] in ("lost", "stolen") else "damaged",
            "shipping": "standard",
            "fee_cents": 0,
            "ordered_on": new["issued_on"],
        },
    )
    return new


def list_cards(chain: Chain, cust: Customer) -> int:
    return chain.add("list_cards", {"customer_id": cust.id}, {"customer_id": out(0)})


def list_accounts(chain: Chain, cust: Customer) -> int:
    return chain.add("list_accounts", {"customer_id": cust.id}, {"customer_id": out(0)})


def list_txns(chain: Chain, acct: dict[str, Any], src: int) -> int:
    return chain.add("list_transactions", {"account_id": acct["account_id"]}, {"account_id": out(src)})


def ask(
    intent: str, text: str, say: dict[str, Any] | None = None, claims: dict[str, Any] | None = None, *alts: str
) -> dict[str, Any]:
    """A request hint: ``text`` (and ``alts``) are this template's phrasings; the wording backend adds the
    claims. Every ``say`` field is optional for the phrasings (they are already written into the text).
    """
    say = dict(say or {})
    return {
        "intent": intent,
        "say": say,
        "claims": dict(claims or {}),
        "patterns": [text, *alts],
        "optional": sorted(say),
    }


class Built:
    """What a template body returns to :meth:`CardTemplate.instantiate`."""

    def __init__(
        self,
        cust: Customer | None,
        chain: Chain,
        asks: list[dict[str, Any]],
        docs: list[str],
        query: str,
        decisive: list[Const] = (),
        facts: dict[str, str] | None = None,
        hint: str = "",
        unknown: list[str] | None = None,
        lookups: list[str] | None = None,
        tags: list[str] | None = None,
        description: str = "",
        identity: bool = True,
        persona: dict[str, Any] | None = None,
    ) -> None:
        self.cust, self.chain, self.asks, self.docs, self.query = cust, chain, asks, docs, query
        self.decisive, self.facts, self.hint, self.unknown = list(decisive), facts or {}, hint, unknown or []
        self.lookups, self.tags, self.description, self.identity = lookups or [], tags or [], description, identity
        self.persona = persona


class CardTemplate(BaseTemplate):
    """A template whose body is a function ``(template, plan, ctx, rng) -> Built``."""

    def __init__(
        self, name: str, intent: str, tools: tuple[str, ...], supported, rule_keys, body, routes=(), calls=None
    ):
        self.name, self.intent, self.tools = name, intent, tools
        self.supported, self.rule_keys, self.body = tuple(supported), tuple(rule_keys), body
        #: (document, word in the id, cell): constants whose ids the graph words (prose lines), so not
        #: in ``rule_keys``, that a plan of ``cell`` makes decisive when it wants them.
        self.routes = tuple(routes)
        self.calls = dict(calls or {})

    def _route(self, rule_id: str) -> tuple[str, str | None] | None:
        for doc, word, cell in self.routes:  # a word ending in "$" must end the id
            hit = rule_id.endswith(word[:-1]) if word.endswith("$") else word in rule_id
            if rule_id.startswith(doc + "/") and hit:
                return cell
        return None

    def covers(self, rule_id: str) -> bool:
        """Whether a plan of this template can make ``rule_id`` decisive."""
        return rule_id in self.rule_keys or self._route(rule_id) is not None

    def cell_for_rule(self, rule_id: str) -> tuple[str, str | None] | None:
        """The cell whose plans make ``rule_id`` decisive (None: any success cell)."""
        return self._route(rule_id)

    def instantiate(self, plan: Plan, ctx: SynthContext) -> Draft:
        if (plan.outcome, plan.failure_mode) not in self.supported:
            raise ValueError(
                f"template {self.name!r} supports the cells {self.supported}, "
                f"not ({plan.outcome!r}, {plan.failure_mode!r}); plan {plan.id!r} asks for it."
            )
        rng = rng_of(plan)
        b: Built = self.body(plan, ctx, rng)
        facts: dict[str, str] = b.cust.facts() if (b.cust is not None and b.identity) else {}
        facts.update(b.facts)
        return Draft(
            initial_state=b.cust.state(),
            actions=b.chain.actions,
            derivations=b.chain.derivations,
            facts=facts,
            asks=b.asks,
            persona=b.persona or persona(plan, b.cust, rng),
            expect_no_change=not b.chain.writes(ctx.domain),
            required_documents=list(dict.fromkeys(b.docs)),
            intent_query=b.query + (" promise already approved claimed tier" if CLAIMS_DOC in b.docs else ""),
            decisive=list(dict.fromkeys(c.id for c in b.decisive if c.found)),
            unknown=b.unknown,
            instructions_hint=b.hint,
            lookups=[x for x in b.lookups if x],
            tags=list(dict.fromkeys(["card", *b.tags])),
            description=b.description,
        )


TEMPLATES: dict[str, CardTemplate] = {}


def template(name: str, intent: str, tools: tuple[str, ...], supported, rule_keys=(), routes=(), calls=None):
    def deco(body):
        TEMPLATES[name] = CardTemplate(name, intent, tools, supported, rule_keys, body, routes, calls)
        return body

    return deco


def rk(doc: str, section: str, row: str, column: str) -> str:
    return f"{doc}/{slug(section)}/{slug(row)}/{slug(column)}"


FEE_KEYS = tuple(
    rk(FEE_DOC, "Debit card replacement", r, t) for r in ("Damaged card", "Lost or stolen card") for t in TIERS
) + tuple(rk(FEE_DOC, "Debit card replacement", SHIP_ROW[s], t) for s in ("standard", "expedited") for t in TIERS)
LIMIT_KEYS = tuple(rk(LIMIT_DOC, "Debit Card Daily Limits", t, "Maximum daily spending limit") for t in TIERS)
CREDIT_KEYS = tuple(f"{CREDIT_DOC}/how_much_provisional_credit/{t}/provisional_credit" for t in TIERS) + (
    f"{CREDIT_DOC}/how_much_provisional_credit/standard/provisional_credit~2",
)
HANDOFF_KEYS = tuple(
    rk(HANDOFF_DOC, "When to transfer, and the reason to use", r, "Reason") for r in HANDOFF_ROW.values()
)


def card_choice(plan: Plan, rng: random.Random) -> tuple[str | None, str | None]:
    """The replacement reason family and delivery speed the plan's fee keys ask for."""
    reason = shipping = None
    for k in plan.rule_keys:
        if "/damaged_card/" in k:
            reason = "damaged"
        elif "/lost_or_stolen_card/" in k:
            reason = rng.choice(("lost", "stolen"))
        elif "/expedited_delivery" in k:
            shipping = "expedited"
        elif "/standard_delivery" in k:
            shipping = "standard"
    return reason, shipping


def customer_with_cards(plan, ctx, rng, tier, n_cards: int = 1, target_status: str = "active", two_accounts=False):
    """A customer with ``n_cards`` cards; the target (first) has ``target_status``; returns (cust, target, accts)."""
    cust = new_customer(plan, ctx, rng, tier=tier)
    products = rng.sample(list(CHECKING), 2) if two_accounts else [None]
    accts = [checking(cust, rng, p) for p in products]
    limits = [x for x in (50_000, 100_000, 150_000, 200_000, 250_000) if x <= LIMIT_MAX[tier] // 2 or x <= 100_000]
    target = new_card(
        cust, accts[-1] if two_accounts else accts[0], rng, status=target_status, limit=rng.choice(limits)
    )
    for _ in range(n_cards - 1):
        acct = accts[0] if two_accounts else accts[0]
        new_card(cust, acct, rng, status=rng.choice(("active", "active", "cancelled")), limit=rng.choice(limits))
    if rng.random() < 0.3:  # an old, already replaced card in the history
        old = new_card(cust, accts[0], rng, status="cancelled", limit=rng.choice(limits))
        old["issued_on"] = cust.day(rng.randint(900, 1500))
    return cust, target, accts


# --- replace_card_5120 ---------------------------------------------------------------------------------------
REPLACE = "replace_card_5120"
REPLACE_DOCS = ["procedure_card_replacement", FEE_DOC]


def replace_step(
    ctx,
    chain: Chain,
    card: dict[str, Any],
    tier: str,
    reason: str,
    shipping: str,
    src: int,
    reason_from: dict[str, Any],
    shipping_from: dict[str, Any],
) -> tuple[int, list[Const]]:
    """Unlock + replace_card_5120 with fee = card fee + shipping fee, and the reason and delivery codes
    the procedure names; returns (fee, the constants that decided the call).
    """
    cf, sf = card_fee(ctx, reason, tier), ship_fee(ctx, shipping, tier)
    fee = cf.value + sf.value
    codes = replace_codes(ctx)
    rc, sc = codes[reason], codes[shipping]
    unlock(chain, REPLACE, "procedure_card_replacement")
    chain.add(
        REPLACE,
        {
            "card_id": card["card_id"],
            "reason": code_of(rc, reason),
            "shipping": code_of(sc, shipping),
            "fee_cents": fee,
        },
        {
            "card_id": out(src),
            "reason": rule([rc], reason_from) if rc.found else reason_from,
            "shipping": rule([sc], shipping_from) if sc.found else shipping_from,
            "fee_cents": {"kind": "constant", "ids": [cf.id, sf.id], "op": "sum"},
        },
    )
    return fee, [cf, sf, *(c for c in (rc, sc) if c.found)]


REPLACE_CODES = ("lost", "stolen", "damaged", "standard", "expedited")


def replace_codes(ctx: SynthContext) -> dict[str, Const]:
    """The reason and delivery codes step 4 of ``procedure_card_replacement`` names, in its order
    (``lost``, ``stolen``, ``damaged``, ``standard``, ``expedited``); not-found codes where it names others.
    """
    doc, g = "procedure_card_replacement", graph_of(ctx)
    found = []
    if g is not None:
        found = [c for c in g.constants if c.doc == doc and c.unit == "category" and "replace_card_5120" in c.text]
    if len(found) == len(REPLACE_CODES):
        return {code: Const(c.id, c.value, doc) for code, c in zip(REPLACE_CODES, found, strict=True)}
    ctx.missing.setdefault(f"{doc}/steps/codes", f"expected {len(REPLACE_CODES)} codes on the replace_card_5120 step")
    return {code: Const(f"{doc}/steps/{code}", code, doc, found=False) for code in REPLACE_CODES}


def ship_words(shipping: str, rng: random.Random) -> str:
    if shipping == "expedited":
        return rng.choice(("as fast as possible", "by express delivery", "with the 2-day delivery"))
    return rng.choice(("regular delivery is fine", "standard shipping is fine", "no rush on the delivery"))
