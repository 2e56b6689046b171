"""Harbor Bank's card templates: lock, unlock, replace, dispute, daily limit, travel notice and hand-offs.

Every template builds a fresh customer (run-unique ids) whose cards and purchases make the plan's rule
decisive, then computes the reference chain from the entity graph's constants (card and shipping fees
of ``fee_schedule_2025``, provisional credit of ``dispute_provisional_credit``, tier maxima and the
minimum of ``debit_card_daily_limits``, the 60-day dispute window, the 90-day travel notice, the
hand-off reasons of ``procedure_transfer_to_human``) and those records. Each argument carries a
derivation (``records.py``); each draft lists the constants that decided it.

Each template supports the (outcome, failure mode) cells in its ``supported``; the plan's
``rule_keys`` (a tier, a card-fee row, a delivery speed) steer the choices so that the wanted
constant is the one that decides.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import date, timedelta
from typing import Any

from ..records import Plan
from . import BaseTemplate, Chain, Const, Customer, Draft, SynthContext, identity_prefix, new_customer, slug, unlock

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


# --- lock_card / unlock_card ---------------------------------------------------------------------------------
LOCK_DOCS = ["card_controls_lock_unlock", "debit_card_lost_stolen_damaged_faq"]


@template(
    "lock_card",
    "lock a misplaced debit card",
    ("lock_card",),
    [("success", None), ("success", "underspecified"), ("success", "contradicting_claim")],
)
def _lock(plan: Plan, ctx: SynthContext, rng: random.Random) -> Built:
    fm = plan.failure_mode
    cust, card, accts = customer_with_cards(
        plan, ctx, rng, pick_tier(plan, rng), rng.randint(1, 3), two_accounts=fm == "underspecified"
    )
    chain, facts, unknown, say, claims = Chain(), {}, [], {}, {}
    identity_prefix(chain, cust, get_customer=False)
    where = rng.choice(("at the gym", "on the bus", "at a restaurant", "somewhere in the house", "at work"))
    text = f"I can't find my debit card, I think I left it {where}. Can you lock it until I find it?"
    if fm == "underspecified":
        list_accounts(chain, cust)
        product = CHECKING[accts[-1]["product"]]
        say["card"] = f"the card of my {product} account"
        unknown = ["card last 4 digits"]
        text = f"I can't find the debit card of my {product} account. Please lock it; I don't know its number."
    else:
        facts["card last 4 digits"] = card["last4"]
    if fm == "contradicting_claim":
        claims["already_locked"] = "I already locked it in the app yesterday, but I'm not sure it worked."
        text = "I misplaced my debit card. Please make sure it is locked."
    lc = list_cards(chain, cust)
    chain.add("lock_card", {"card_id": card["card_id"]}, {"card_id": out(lc)})
    return Built(
        cust,
        chain,
        [ask("lock_card", text, say, claims)],
        LOCK_DOCS,
        "lock misplaced debit card temporarily",
        facts=facts,
        unknown=unknown,
        hint="You want the card locked, not replaced.",
        tags=["lock"],
        description=f"Lock the active card {card['card_id']} ({fm or 'plain'}).",
    )


def _gone_card(plan, ctx, rng, status: str):
    """A customer whose card (the target) was already reported ``status``; a replacement is active."""
    cust, card, accts = customer_with_cards(plan, ctx, rng, pick_tier(plan, rng), 1, target_status=status)
    card["issued_on"] = cust.day(rng.randint(200, 800))
    replaced(cust, rng, card, accts[0])
    return cust, card


@template(
    "lock_card_refusal",
    "lock a card that was already reported lost or stolen",
    (),
    [("refusal", None), ("refusal", "contradicting_claim")],
)
def _lock_refused(plan, ctx, rng) -> Built:
    status = rng.choice(("lost", "stolen"))
    cust, card = _gone_card(plan, ctx, rng, status)
    chain, claims = Chain(), {}
    identity_prefix(chain, cust, get_customer=False)
    list_cards(chain, cust)
    text = f"Please lock my debit card ending {card['last4']}. I don't want anyone using it."
    if plan.failure_mode == "contradicting_claim":
        claims["status"] = "It's still active, I used it yesterday."
    return Built(
        cust,
        chain,
        [ask("lock_card", text, {"card_last4": card["last4"]}, claims)],
        LOCK_DOCS,
        "lock card already reported lost stolen replaced",
        facts={"card last 4 digits": card["last4"]},
        hint=f"You only mean the card ending {card['last4']}. If the agent says it was already reported "
        f"{status} and replaced, accept that.",
        tags=["lock", "refusal"],
        description=f"The card was already reported {status}: only an active card can be locked.",
    )


@template(
    "unlock_card",
    "unlock a card the customer found again",
    ("unlock_card",),
    [("success", None), ("success", "multi_doc"), ("success", "underspecified")],
)
def _unlock(plan, ctx, rng) -> Built:
    fm = plan.failure_mode
    cust, card, _ = customer_with_cards(plan, ctx, rng, pick_tier(plan, rng), rng.randint(1, 3), "locked")
    chain, facts, unknown, docs = Chain(), {}, [], list(LOCK_DOCS)
    identity_prefix(chain, cust, get_customer=False)
    text = "I locked my debit card when I couldn't find it, but I found it again. Please unlock it."
    if fm == "underspecified":
        unknown = ["card last 4 digits"]
        text = "I found the debit card I had locked. Can you unlock it? I don't have the number to hand."
    else:
        facts["card last 4 digits"] = card["last4"]
    if fm == "multi_doc":
        docs = ["card_controls_lock_unlock", "procedure_card_replacement"]
        text = (
            "I locked my debit card last week because I couldn't find it, but it turned up in my coat. "
            "Do I have to order a new one and pay a fee? I'd rather just use it again."
        )
    lc = list_cards(chain, cust)
    chain.add("unlock_card", {"card_id": card["card_id"]}, {"card_id": out(lc)})
    return Built(
        cust,
        chain,
        [ask("unlock_card", text)],
        docs,
        "found locked card unlock no replacement fee",
        facts=facts,
        unknown=unknown,
        hint="You do not want a replacement if you can keep using the card.",
        tags=["unlock"],
        description=f"Unlock the locked card {card['card_id']} ({fm or 'plain'}).",
    )


@template(
    "unlock_card_refusal",
    "unlock a card that was reported lost or stolen",
    (),
    [("refusal", None), ("refusal", "contradicting_claim")],
)
def _unlock_refused(plan, ctx, rng) -> Built:
    status = rng.choice(("lost", "stolen"))
    cust, card = _gone_card(plan, ctx, rng, status)
    chain, claims = Chain(), {}
    identity_prefix(chain, cust, get_customer=False)
    list_cards(chain, cust)
    text = f"I reported my debit card ending {card['last4']} {status}, but I found it. Can you unlock it?"
    if plan.failure_mode == "contradicting_claim":
        claims["status"] = "I only locked it myself, I never reported it."
        text = f"I found my debit card ending {card['last4']}. Please unlock it."
    return Built(
        cust,
        chain,
        [ask("unlock_card", text, {"card_last4": card["last4"]}, claims)],
        ["card_controls_lock_unlock", "procedure_card_replacement"],
        "unlock card reported lost stolen never unlocked",
        facts={"card last 4 digits": card["last4"]},
        hint="If the agent explains that the card cannot be unlocked and a new card is on its way, accept.",
        tags=["unlock", "refusal"],
        description=f"The card is {status}: a card reported {status} can never be unlocked.",
    )


@template("unlock_card_clarify", "unlock one of several locked cards", ("unlock_card",), [("clarification", None)])
def _unlock_clarify(plan, ctx, rng) -> Built:
    cust, card, accts = customer_with_cards(plan, ctx, rng, pick_tier(plan, rng), 1, "locked")
    other = new_card(cust, accts[0], rng, status="locked")
    chain = Chain()
    identity_prefix(chain, cust, get_customer=False)
    lc = list_cards(chain, cust)
    chain.add("unlock_card", {"card_id": card["card_id"]}, {"card_id": out(lc)})
    return Built(
        cust,
        chain,
        [ask("unlock_card", "I found my debit card again, can you unlock it please?")],
        LOCK_DOCS,
        "unlock found debit card",
        facts={"card last 4 digits": card["last4"]},
        hint=f"Only the card ending {card['last4']} was found; the one ending {other['last4']} stays locked.",
        tags=["unlock", "clarification"],
        description="Two locked cards: the agent must ask which one was found.",
    )


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


@template(
    "replace_card",
    "replace a lost, stolen or damaged debit card",
    (REPLACE,),
    [
        ("success", None),
        ("success", "multi_doc"),
        ("success", "contradicting_claim"),
        ("success", "underspecified"),
        ("clarification", None),
    ],
    FEE_KEYS,
)
def _replace(plan, ctx, rng) -> Built:
    fm = plan.failure_mode
    want_reason, want_ship = card_choice(plan, rng)
    reason = want_reason or rng.choice(("lost", "stolen", "damaged"))
    shipping = want_ship or rng.choice(("standard", "expedited"))
    tier = pick_tier(plan, rng)
    claims: dict[str, Any] = {}
    if fm == "contradicting_claim":  # claims a better tier than the profile's; the profile's fee applies
        tier = pick_tier(plan, rng, ("standard", "preferred"))
        shipping = "expedited"
        claims["tier"] = TIER_NAME[rng.choice([t for t in TIERS if TIERS.index(t) > TIERS.index(tier)])]
    status = "locked" if reason == "lost" and rng.random() < 0.4 else "active"
    cust, card, accts = customer_with_cards(
        plan, ctx, rng, tier, rng.randint(1, 2), status, two_accounts=fm == "underspecified"
    )
    chain, facts, unknown, say = Chain(), {}, [], {"reason": reason}
    identity_prefix(chain, cust)
    docs = [*REPLACE_DOCS, "customer_tiers_overview"]
    story = rng.choice(REASON_STORY[reason])
    text = f"Hi, {story}. I need a replacement card, {ship_words(shipping, rng)}."
    if fm == "underspecified":
        list_accounts(chain, cust)
        product = CHECKING[accts[-1]["product"]]
        text = f"Hi, {story}: the card of my {product} account. Please send a new one, {ship_words(shipping, rng)}."
        unknown = ["card last 4 digits"]
    else:
        facts["card last 4 digits"] = card["last4"]
    if fm == "multi_doc":
        docs.append(TIER_DOC[tier])
    if fm == "contradicting_claim":
        docs += [CLAIMS_DOC]
    if plan.outcome == "clarification":
        text = f"Hi, {story}. Can you send me a replacement card?"
        facts["shipping"] = "expedited" if shipping == "expedited" else "standard"
    else:
        say["shipping"] = shipping
    lc = list_cards(chain, cust)
    ship_from = fact("shipping")
    fee, cs = replace_step(
        ctx,
        chain,
        card,
        tier,
        reason,
        shipping,
        lc,
        lit(f"the reason procedure_card_replacement gives for: {story}") if fm == "multi_doc" else fact("reason"),
        ship_from,
    )
    facts.setdefault("shipping", shipping)
    facts["reason"] = reason
    return Built(
        cust,
        chain,
        [ask("replace_card", text, say, claims)],
        docs,
        f"replace {reason} debit card {shipping} delivery fee by tier",
        decisive=cs,
        facts=facts,
        unknown=unknown,
        lookups=[money(fee)] if fee else [],
        hint=f"You want {shipping} delivery. Accept the fee the agent quotes after checking your profile.",
        tags=["replacement", "fee_by_tier"],
        description=f"{TIER_NAME[tier]} tier, {reason} card, {shipping} delivery: fee {fee} cents.",
    )


@template(
    "replace_card_refusal",
    "replace a card that was already replaced",
    (),
    [("refusal", None), ("refusal", "contradicting_claim")],
)
def _replace_refused(plan, ctx, rng) -> Built:
    status = rng.choice(("lost", "stolen"))
    cust, card = _gone_card(plan, ctx, rng, status)
    chain, claims = Chain(), {}
    identity_prefix(chain, cust, get_customer=False)
    list_cards(chain, cust)
    text = f"I need a replacement for my debit card ending {card['last4']}, it's {status}."
    if plan.failure_mode == "contradicting_claim":
        claims["status"] = "Nobody has ordered a replacement for it yet."
    return Built(
        cust,
        chain,
        [ask("replace_card", text, {"card_last4": card["last4"]}, claims)],
        ["procedure_card_replacement", "card_controls_lock_unlock"],
        "replace card already reported lost stolen new card on its way",
        facts={"card last 4 digits": card["last4"], "shipping": "standard"},
        hint="If the agent says a replacement is already on its way, accept that and order nothing else.",
        tags=["replacement", "refusal"],
        description=f"The card ending {card['last4']} was already reported {status} and replaced.",
    )


# --- file_dispute_6604 ---------------------------------------------------------------------------------------
DISPUTE = "file_dispute_6604"
DISPUTE_DOCS = ["procedure_card_disputes", CREDIT_DOC]
STORY = {
    "unauthorized": "I didn't make",
    "not_received": "for an order that never arrived",
    "wrong_amount": "that is more than I agreed to pay",
}


def amount_for(rng: random.Random, threshold: int, around: bool = False, above: bool | None = None) -> int:
    """A purchase amount in cents; ``around``: close to the standard tier's threshold (at it, just under
    or over); ``above``: over the threshold (True), at or under it (False), either (None).
    """
    t = max(threshold, 200)
    under = (t, max(100, t - rng.randint(1, 2000))) if around else (rng.randint(100, t),)
    over = (t + rng.randint(1, 2000), t + rng.randint(5000, 40000)) if around else (rng.randint(t + 1, t * 8),)
    pool = over if above else under if above is False else under + over
    return rng.choice(pool)


def wants_above(plan: Plan) -> bool | None:
    """True when the plan wants the standard tier's else-value (no credit above the threshold) decisive."""
    return True if any(k.endswith("/standard/provisional_credit~2") for k in plan.rule_keys) else None


def purchase(cust: Customer, acct, rng, merchant: str, amount: int, days_ago: int, status: str = "posted"):
    return cust.txn(acct, merchant, -amount, "purchase", days_ago=days_ago, status=status)


def noise(cust: Customer, acct, rng, n: int, window: int, avoid: set[str]) -> None:
    """Other transactions of the account: the customer's own purchases, a deposit, a fee."""
    for _ in range(n):
        m = rng.choice([x for x in MERCHANTS if x not in avoid])
        purchase(cust, acct, rng, m, rng.randint(300, 30000), rng.randint(1, window - 1))
    if rng.random() < 0.5:
        cust.txn(acct, "Payroll deposit", rng.randint(100, 400) * 1000, "deposit", days_ago=rng.randint(1, 30))


def dispute_step(ctx, chain: Chain, txn, reason: str, credit: int, cs: list[Const], src: int, code=None) -> Const:
    """Unlock is the caller's; the reason is the code the documents name (``code`` or the dispute reasons list)."""
    inner = fact("dispute reason") if code is None else lit("the reason code the document names for this case")
    code = code or dispute_code(ctx, reason)
    chain.add(
        DISPUTE,
        {"txn_id": txn["txn_id"], "reason": code_of(code, reason), "provisional_credit_cents": credit},
        {
            "txn_id": out(src),
            "reason": rule([code], inner),
            "provisional_credit_cents": rule(cs, out(src) if credit else lit("no provisional credit")),
        },
    )
    return code


def dispute_customer(plan, ctx, rng, tier, two_accounts=False):
    cust = new_customer(plan, ctx, rng, tier=tier)
    products = rng.sample(list(CHECKING), 2) if two_accounts else [None]
    accts = [checking(cust, rng, p) for p in products]
    for a in accts:
        new_card(cust, a, rng)
    return cust, accts


@template(
    "file_dispute",
    "dispute a debit card purchase",
    (DISPUTE,),
    [("success", None), ("success", "multi_doc"), ("success", "contradicting_claim"), ("success", "underspecified")],
    CREDIT_KEYS,
    routes=[
        ("procedure_card_disputes", "dispute_reasons/duplicate$", ("success", "multi_doc")),
        *(("procedure_card_disputes", f"dispute_reasons/{r}$", ("success", None)) for r in STORY),
    ],
)
def _dispute(plan, ctx, rng) -> Built:
    fm = plan.failure_mode
    tier = "standard" if fm in ("multi_doc", "contradicting_claim") else pick_tier(plan, rng)
    if key_tier(plan) and fm != "contradicting_claim":
        tier = key_tier(plan)
    window = dispute_windows(ctx, rng, plan)
    cs = credit_rule(ctx, tier)
    threshold = CREDIT_THRESHOLD  # the scenario is designed around the document's reading
    cust, accts = dispute_customer(plan, ctx, rng, tier, two_accounts=fm == "underspecified")
    acct = accts[-1]
    merchant = rng.choice(MERCHANTS)
    claims: dict[str, Any] = {}
    docs = [*DISPUTE_DOCS]
    if fm == "multi_doc":  # a duplicate charge near the threshold: dispute the later one (or the higher id)
        reason = "duplicate"
        amount = amount_for(rng, threshold, around=True, above=wants_above(plan))
        d1 = rng.randint(3, max(4, WINDOW - 5))
        gap = rng.choice((0, 0, 1, 2, 3))
        first = purchase(cust, acct, rng, merchant, amount, d1)
        second = purchase(cust, acct, rng, merchant, amount, d1 - gap)
        while len(second["txn_id"]) != len(first["txn_id"]):
            second["txn_id"] = cust.ids.next("T-")
        target = second  # posted later, or the same day with the higher id
        text = f"{merchant} charged me twice, {money(amount)} each time. Please dispute the extra charge."
        if gap == 0 and rng.random() < 0.5:  # the later-created row first in the list: only the id decides
            first["txn_id"], second["txn_id"] = second["txn_id"], first["txn_id"]
            target = first
        docs.append("customer_tiers_overview")
    else:
        reason = rng.choice(tuple(STORY))
        for r in STORY:
            if any(k.startswith("procedure_card_disputes/dispute_reasons/" + r) for k in plan.rule_keys):
                reason = r
        if fm == "contradicting_claim":  # claims a better tier; the standard rule gives no credit above it
            amount = rng.randint(max(threshold, 200) + 1, max(threshold, 200) * 6)
            claims["tier"] = rng.choice(("Preferred", "Private"))
            docs += [CLAIMS_DOC, "customer_tiers_overview"]
        else:
            amount = amount_for(rng, threshold, above=wants_above(plan))
        target = purchase(cust, acct, rng, merchant, amount, rng.randint(1, WINDOW - 1))
        text = (
            f"There's a {money(amount)} charge from {merchant} on my debit card {STORY[reason]}. I want to dispute it."
        )
        if fm == "underspecified":
            text = f"I want to dispute a charge from {merchant} {STORY[reason]}. I'm not sure which account it hit."
    noise(cust, acct, rng, rng.randint(1, 3), WINDOW, {merchant})
    if fm == "underspecified":
        noise(cust, accts[0], rng, rng.randint(1, 3), WINDOW, {merchant})
    chain = Chain()
    identity_prefix(chain, cust)
    la = list_accounts(chain, cust)
    src = list_txns(chain, accts[0], la)
    if acct is not accts[0]:
        src = list_txns(chain, acct, la)
    credit, used = credit_for(cs, amount)
    if within(window, age(cust, target)):  # always, unless a constant changed
        unlock(chain, DISPUTE, "procedure_card_disputes")
        used = [*used, dispute_step(ctx, chain, target, reason, credit, used, src)]
    say = {"merchant": merchant, "amount": money(amount), "reason": reason}
    if fm == "underspecified":
        say.pop("amount")
    return Built(
        cust,
        chain,
        [ask("file_dispute", text, say, claims)],
        docs,
        "dispute debit card purchase provisional credit tier",
        decisive=used,
        facts={"dispute reason": reason},
        hint="Accept the provisional credit the agent explains, even if it is nothing for now.",
        tags=["dispute", "provisional_credit"] + (["duplicate"] if reason == "duplicate" else []),
        description=f"{TIER_NAME[tier]} tier disputes {money(amount)} ({reason}): credit {credit} cents.",
    )


@template(
    "file_dispute_multi",
    "dispute several debit card purchases",
    (DISPUTE,),
    [("success", None), ("success", "multi_doc")],
    CREDIT_KEYS,
    routes=[
        ("procedure_card_disputes", "what_can_be_disputed", ("success", "multi_doc")),
        ("procedure_card_disputes", "steps/check", ("success", "multi_doc")),
    ],
)
def _dispute_multi(plan, ctx, rng) -> Built:
    tier = pick_tier(plan, rng)
    window = dispute_windows(ctx, rng, plan)
    cs = credit_rule(ctx, tier)
    threshold = CREDIT_THRESHOLD  # the scenario is designed around the document's reading
    cust, (acct,) = dispute_customer(plan, ctx, rng, tier)
    reason = rng.choice(tuple(STORY))
    merchants = rng.sample(MERCHANTS, 3)
    n = rng.randint(2, 3)
    too_old = plan.failure_mode == "multi_doc"
    items = []
    for i, m in enumerate(merchants[:n]):
        amount = amount_for(rng, threshold, above=wants_above(plan))
        if too_old and i == 0:
            days = WINDOW + rng.randint(1, 40)
        else:
            days = WINDOW if (too_old and rng.random() < 0.3) else rng.randint(1, WINDOW - 1)
        items.append((purchase(cust, acct, rng, m, amount, days), m, amount, days))
    noise(cust, acct, rng, rng.randint(0, 2), WINDOW, set(merchants))
    chain = Chain()
    identity_prefix(chain, cust)
    la = list_accounts(chain, cust)
    src = list_txns(chain, acct, la)
    unlock(chain, DISPUTE, "procedure_card_disputes")
    decisive: list[Const] = [*window] if too_old else []
    for txn, _, amount, days in items:
        if not within(window, days):
            continue
        credit, used = credit_for(cs, amount)
        decisive += used
        decisive.append(dispute_step(ctx, chain, txn, reason, credit, used, src))
    listed = ", ".join(f"{m} for {money(a)}" + (f" ({cust.day(d)})" if too_old else "") for _, m, a, d in items)
    text = f"I want to dispute these debit card charges {STORY[reason]}: {listed}."
    return Built(
        cust,
        chain,
        [ask("file_dispute", text, {"purchases": listed, "reason": reason})],
        [*DISPUTE_DOCS],
        "dispute several purchases 60 days window provisional credit",
        decisive=decisive,
        facts={"dispute reason": reason},
        hint="Accept it if one of the purchases cannot be disputed.",
        tags=["dispute", "multi_purchase"],
        description=f"{n} purchases ({TIER_NAME[tier]}); {'one outside the window' if too_old else 'all ok'}.",
    )


@template(
    "file_dispute_refusal",
    "dispute a transaction the policy does not allow",
    (),
    [("refusal", None), ("refusal", "contradicting_claim")],
    routes=[
        ("procedure_card_disputes", "what_can_be_disputed", ("refusal", None)),
        ("procedure_card_disputes", "steps/check", ("refusal", None)),
    ],
)
def _dispute_refused(plan, ctx, rng) -> Built:
    tier = pick_tier(plan, rng)
    window = dispute_windows(ctx, rng, plan)
    cs = credit_rule(ctx, tier)
    cust, (acct,) = dispute_customer(plan, ctx, rng, tier)
    kind = rng.choice(("disputed", "not_purchase", "pending", "too_old"))
    if wanted(plan, window):
        kind = "too_old"
    merchant = rng.choice(MERCHANTS)
    amount = rng.randint(1000, 60000)
    days, claims, decisive = rng.randint(1, WINDOW - 1), {}, []
    reason = rng.choice(tuple(STORY))
    what = f"the {money(amount)} charge from {merchant}"
    if kind == "too_old":
        days = WINDOW + rng.randint(1, 60)
        decisive = [*window]
        if plan.failure_mode == "contradicting_claim":
            claims["date"] = "I only bought it last week."
    if kind == "not_purchase":
        merchant, category = rng.choice(
            (
                ("Monthly maintenance fee", "fee"),
                ("Overdraft fee", "fee"),
                ("Transfer to savings", "transfer"),
                ("Wire to J. Moss", "wire"),
            )
        )
        amount = {"fee": rng.choice((800, 3500, 3000)), "transfer": amount, "wire": amount}[category]
        txn = cust.txn(acct, merchant, -amount, category, days_ago=days)
        what = f"the {money(amount)} '{merchant}' charge"
        reason = "unauthorized"
        if plan.failure_mode == "contradicting_claim":
            claims["category"] = "It was a card purchase."
    else:
        txn = purchase(cust, acct, rng, merchant, amount, days, "pending" if kind == "pending" else "posted")
    if kind == "disputed":
        txn["status"] = "disputed"
        cust.add_row(
            "disputes",
            {
                "dispute_id": cust.ids.next("DSP-"),
                "txn_id": txn["txn_id"],
                "customer_id": cust.id,
                "reason": reason,
                "status": "open",
                "provisional_credit_cents": 0,
                "opened_on": cust.day(max(0, days - 1)),
            },
        )
        if plan.failure_mode == "contradicting_claim":
            claims["history"] = "I have never disputed it before."
    noise(cust, acct, rng, rng.randint(1, 3), WINDOW, {merchant})
    chain = Chain()
    identity_prefix(chain, cust, get_customer=kind == "too_old")
    la = list_accounts(chain, cust)
    src = list_txns(chain, acct, la)
    eligible = txn["category"] == "purchase" and txn["status"] == "posted" and within(window, days)
    if eligible:  # only when a constant changed: the rule then allows it
        credit, used = credit_for(cs, amount)
        unlock(chain, DISPUTE, "procedure_card_disputes")
        decisive.append(dispute_step(ctx, chain, txn, reason, credit, used, src))
    text = f"I want to dispute {what} {STORY[reason]}."
    return Built(
        cust,
        chain,
        [ask("file_dispute", text, {"merchant": merchant, "amount": money(amount)}, claims)],
        ["procedure_card_disputes", *([CLAIMS_DOC] if claims else [])],
        "which transactions can be disputed posted purchase 60 days",
        decisive=decisive,
        facts={"dispute reason": reason},
        hint="If the agent explains why it cannot be disputed, accept and ask for nothing else.",
        tags=["dispute", "refusal", kind],
        description=f"Not disputable: {kind}.",
    )


@template(
    "stolen_card_disputes",
    "replace a stolen card and dispute the purchases the thief made",
    (REPLACE, DISPUTE),
    [("success", "implicit_order"), ("success", "multi_doc")],
    FEE_KEYS + CREDIT_KEYS,
    routes=[("procedure_card_replacement", "stolen", ("success", "multi_doc"))],
)
def _stolen(plan, ctx, rng) -> Built:
    tier = pick_tier(plan, rng)
    shipping = card_choice(plan, rng)[1] or rng.choice(("standard", "expedited"))
    window = dispute_windows(ctx, rng, plan)
    cs = credit_rule(ctx, tier)
    threshold = CREDIT_THRESHOLD  # the scenario is designed around the document's reading
    cust, card, accts = customer_with_cards(plan, ctx, rng, tier, 1)
    acct = accts[0]
    merchants = rng.sample(MERCHANTS, 4)
    theirs = [
        (m, amount_for(rng, threshold, above=wants_above(plan)), rng.randint(0, 3))
        for m in merchants[: rng.randint(1, 2)]
    ]
    mine = merchants[2 : 2 + rng.randint(1, 2)]
    bad = [purchase(cust, acct, rng, m, a, d) for m, a, d in theirs]
    for m in mine:
        purchase(cust, acct, rng, m, rng.randint(500, 9000), rng.randint(0, 4))
    noise(cust, acct, rng, rng.randint(0, 2), WINDOW, set(merchants))
    chain = Chain()
    identity_prefix(chain, cust)
    lc = list_cards(chain, cust)
    fee, decisive = replace_step(
        ctx,
        chain,
        card,
        tier,
        "stolen",
        shipping,
        lc,
        lit("a card taken by someone else is stolen (procedure_card_replacement)"),
        fact("shipping"),
    )
    src = list_txns(chain, acct, lc)
    unlock(chain, DISPUTE, "procedure_card_disputes")
    for txn, (_, amount, _) in zip(bad, theirs, strict=True):
        if not within(window, age(cust, txn)):  # only when a constant changed
            continue
        credit, used = credit_for(cs, amount)
        decisive += used
        decisive.append(dispute_step(ctx, chain, txn, "unauthorized", credit, used, src, theft_code(ctx)))
    listed = " and ".join(f"{m} for {money(a)}" for m, a, _ in theirs)
    ok = " and ".join(mine)
    theft = f"Someone stole my debit card. Please block it and send me a new one, {ship_words(shipping, rng)}."
    charges = f"There are charges I didn't make: {listed}. The {ok} {'one is' if len(mine) == 1 else 'ones are'} mine."
    asks = [
        ask("replace_card", theft, {"reason": "stolen", "shipping": shipping}),
        ask("file_dispute", charges, {"purchases": listed}),
    ]
    if plan.failure_mode == "implicit_order":  # told the other way round: the procedure replaces first
        asks = [
            ask("file_dispute", f"{charges} I think my stolen debit card was used.", {"purchases": listed}),
            ask("replace_card", theft, {"reason": "stolen", "shipping": shipping}),
        ]
    return Built(
        cust,
        chain,
        asks,
        [*REPLACE_DOCS, *DISPUTE_DOCS],
        "stolen debit card replacement unrecognised purchases dispute unauthorized",
        decisive=decisive,
        facts={"card last 4 digits": card["last4"], "shipping": shipping},
        hint=f"Only {listed} are not yours.",
        tags=["replacement", "dispute", "multi_request"],
        description=f"Stolen card ({TIER_NAME[tier]}): replace ({fee} cents), dispute {len(bad)}.",
    )


# --- change_daily_limit_7745 ---------------------------------------------------------------------------------
LIMIT = "change_daily_limit_7745"


def limit_request(rng: random.Random, current: int, mx: int, above: bool) -> int:
    """A requested limit in whole hundreds of dollars: above the tier maximum, or between current and it."""
    if above:
        return mx + rng.randint(1, 20) * 50_000
    lo = current // 10_000 + 1
    return rng.randint(lo, max(lo, mx // 10_000)) * 10_000


def limit_step(chain: Chain, card, new: int, src: int, frm: dict[str, Any]) -> None:
    unlock(chain, LIMIT, "procedure_daily_card_limits")
    chain.add(
        LIMIT, {"card_id": card["card_id"], "new_limit_cents": new}, {"card_id": out(src), "new_limit_cents": frm}
    )


@template(
    "change_daily_limit",
    "change a debit card's daily spending limit",
    (LIMIT,),
    [
        ("success", None),
        ("success", "multi_doc"),
        ("success", "contradicting_claim"),
        ("success", "underspecified"),
        ("clarification", None),
    ],
    LIMIT_KEYS,
)
def _limit(plan, ctx, rng) -> Built:
    fm = plan.failure_mode
    tier = pick_tier(plan, rng, ("standard", "preferred")) if fm == "contradicting_claim" else pick_tier(plan, rng)
    mx = limit_max(ctx, tier)
    n = 2 if plan.outcome == "clarification" else rng.randint(1, 2)
    cust, card, accts = customer_with_cards(plan, ctx, rng, tier, n, two_accounts=fm == "underspecified")
    if plan.outcome == "clarification":
        cust.cards[1]["status"] = "active"
    above = fm in ("multi_doc", "contradicting_claim")
    req = limit_request(rng, card["daily_limit_cents"], LIMIT_MAX[tier], above)
    chain, facts, unknown, claims, docs = Chain(), {}, [], {}, [*LIMIT_DOCS]
    identity_prefix(chain, cust)
    which = "my debit card"
    if fm == "underspecified":
        list_accounts(chain, cust)
        which = f"the debit card of my {CHECKING[accts[-1]['product']]} account"
        unknown = ["card last 4 digits"]
    else:
        facts["card last 4 digits"] = card["last4"]
    lc = list_cards(chain, cust)
    new, frm = req, fact("requested limit")
    if req > mx.value:
        new, frm = mx.value, {"kind": "constant", "ids": [mx.id], "op": "value"}
    limit_step(chain, card, new, lc, frm)
    text = f"Please raise the daily spending limit on {which} to {money(req)}."
    if plan.outcome == "clarification":
        text = f"Can you change the daily spending limit on my card to {money(req)}?"
    if fm == "contradicting_claim":
        if rng.random() < 0.5:
            claims["promise"] = f"My relationship manager already approved {money(req)}."
        else:
            claims["tier"] = TIER_NAME[TIERS[TIERS.index(tier) + 1]]
        docs.append(CLAIMS_DOC)
    facts["requested limit"] = money(req)
    return Built(
        cust,
        chain,
        [ask("change_daily_limit", text, {"amount": money(req)}, claims)],
        docs,
        "daily card spending limit tier maximum",
        decisive=[mx],
        facts=facts,
        unknown=unknown,
        lookups=[money(mx.value)] if above else [],
        hint="If the agent offers the maximum your tier allows instead, accept it.",
        tags=["limit"],
        description=f"{TIER_NAME[tier]} asks {money(req)} (max {money(mx.value)}): set {money(new)}.",
    )


@template(
    "change_daily_limit_refusal",
    "change a daily limit beyond what the policy allows",
    (),
    [("refusal", None), ("refusal", "multi_doc"), ("refusal", "contradicting_claim")],
    LIMIT_KEYS,
    routes=[
        ("debit_card_daily_limits", "minimum", ("refusal", "multi_doc")),
        ("procedure_daily_card_limits", "lowest", ("refusal", "multi_doc")),
    ],
)
def _limit_refused(plan, ctx, rng) -> Built:
    tier = pick_tier(plan, rng)
    procedure = plan.seed % 2 == 1
    if any(k.startswith("procedure_daily_card_limits/") for k in plan.rule_keys):
        procedure = True
    elif any(k.startswith(LIMIT_DOC + "/") and "minimum" in k for k in plan.rule_keys):
        procedure = False
    mx, mn = limit_max(ctx, tier), limit_min(ctx, procedure=procedure)
    cust, card, _ = customer_with_cards(plan, ctx, rng, tier, rng.randint(1, 2))
    below = plan.failure_mode == "multi_doc"  # the minimum: stated in the limits page and in the procedure
    req = (
        rng.randint(1, max(1, LIMIT_MIN // 1000 - 1)) * 1000 if below else limit_request(rng, 0, LIMIT_MAX[tier], True)
    )
    chain, claims = Chain(), {}
    identity_prefix(chain, cust)
    lc = list_cards(chain, cust)
    if mn.value <= req <= mx.value:  # only when a constant changed: the request is then allowed
        limit_step(chain, card, req, lc, fact("requested limit"))
    text = f"I want the daily spending limit on my debit card set to {money(req)}."
    if plan.failure_mode == "contradicting_claim":
        claims["promise"] = "A colleague already approved it for me."
    return Built(
        cust,
        chain,
        [ask("change_daily_limit", text, {"amount": money(req)}, claims)],
        [*LIMIT_DOCS, *([CLAIMS_DOC] if claims else [])],
        "daily card limit minimum maximum tier",
        decisive=[mn if below else mx],
        facts={"card last 4 digits": card["last4"], "requested limit": money(req)},
        hint=f"You want exactly {money(req)}; if that is not possible, decline any other amount and keep "
        "the current limit.",
        tags=["limit", "refusal"],
        description=f"{money(req)} is {'below the minimum' if below else 'above the tier maximum'}; "
        "the customer declines the alternative.",
    )


@template(
    "unlock_and_raise_limit",
    "raise a locked card's limit and unlock it",
    ("unlock_card", LIMIT),
    [("success", "implicit_order")],
    LIMIT_KEYS,
)
def _unlock_raise(plan, ctx, rng) -> Built:
    tier = pick_tier(plan, rng)
    mx = limit_max(ctx, tier)
    cust, card, _ = customer_with_cards(plan, ctx, rng, tier, rng.randint(1, 2), "locked")
    req = limit_request(rng, card["daily_limit_cents"], LIMIT_MAX[tier], rng.random() < 0.3)
    chain = Chain()
    identity_prefix(chain, cust)
    lc = list_cards(chain, cust)
    chain.add("unlock_card", {"card_id": card["card_id"]}, {"card_id": out(lc)})
    new, frm = (
        (req, fact("requested limit"))
        if req <= mx.value
        else (mx.value, {"kind": "constant", "ids": [mx.id], "op": "value"})
    )
    limit_step(chain, card, new, lc, frm)
    asks = [
        ask(
            "change_daily_limit",
            f"Please raise the daily limit on my debit card to {money(req)}.",
            {"amount": money(req)},
        ),
        ask(
            "unlock_card",
            "Oh, and I had locked that card while I couldn't find it, but it's back in my wallet: "
            "please unlock it too.",
        ),
    ]
    return Built(
        cust,
        chain,
        asks,
        [*LIMIT_DOCS, "card_controls_lock_unlock"],
        "locked card daily limit change unlock first",
        decisive=[mx],
        facts={"card last 4 digits": card["last4"], "requested limit": money(req)},
        hint="If offered the maximum your tier allows, accept it.",
        tags=["limit", "unlock", "multi_request"],
        description="A locked card's limit can change only once it is unlocked: unlock first.",
    )


# --- set_travel_notice_3012 ----------------------------------------------------------------------------------
TRAVEL = "set_travel_notice_3012"


def nice(d: date) -> str:
    return f"{d.strftime('%B')} {d.day}, {d.year}"


@template(
    "set_travel_notice",
    "set a travel notice for a trip abroad",
    (TRAVEL,),
    [("success", None), ("success", "multi_doc"), ("success", "contradicting_claim"), ("clarification", None)],
    routes=[
        ("procedure_travel_notices", "maximum_length", ("success", "contradicting_claim")),
        ("procedure_travel_notices", "last_day", ("success", "multi_doc")),
    ],
)
def _travel(plan, ctx, rng) -> Built:
    fm = plan.failure_mode
    mx, offset, abroad = travel_rules(ctx, rng, plan)
    want_abroad = abroad is not None and abroad.id in plan.rule_keys
    cust = new_customer(plan, ctx, rng, tier=pick_tier(plan, rng))
    new_card(cust, checking(cust, rng), rng)
    today = ctx.today
    places = rng.sample(COUNTRIES, rng.choice((1, 1, 1, 2, 3)))
    dest = ", ".join(places)
    kind = "plain"
    start = today + timedelta(days=rng.randint(2, 60))
    end = start + timedelta(days=rng.randint(3, 40))
    if fm in ("multi_doc", "contradicting_claim"):
        kind = "abroad" if fm == "multi_doc" and (rng.random() < 0.4 or want_abroad) else "long"
        if kind == "long":
            end = start + timedelta(days=TRAVEL_MAX + rng.randint(0, 120))
        else:
            start = today - timedelta(days=rng.randint(1, 14))
            far = rng.random() < 0.4 or want_abroad
            end = today + timedelta(days=rng.randint(TRAVEL_MAX + 5, 150) if far else rng.randint(2, 45))
    chain, decisive, claims = Chain(), [], {}
    identity_prefix(chain, cust, get_customer=False)
    s_from, e_from, s_set, e_set = fact("start date"), fact("end date"), start, end
    if start < today:
        t = chain.add("get_current_time", {})
        s_set, s_from = today, out(t)
    if start < today and abroad is not None:  # the maximum counted from today
        if (e_set - today).days + 1 > abroad.value:
            e_set = today + timedelta(days=abroad.value - 1)
            e_from = rule([abroad], lit(f"today + {abroad.value - 1} days"))
            decisive.append(abroad)
    elif (e_set - s_set).days + 1 > mx.value:
        n = offset.value if offset is not None else mx.value - 1
        e_set = s_set + timedelta(days=n)
        e_from = rule([mx, *([offset] if offset else [])], lit(f"start date + {n} days"))
        decisive += [mx, *([offset] if offset else [])]
    unlock(chain, TRAVEL, "procedure_travel_notices")
    chain.add(
        TRAVEL,
        {"customer_id": cust.id, "destination": dest, "start_date": s_set.isoformat(), "end_date": e_set.isoformat()},
        {"customer_id": out(0), "destination": fact("destination"), "start_date": s_from, "end_date": e_from},
    )
    where = " and then ".join(places) if len(places) > 1 else dest
    span = f"from {nice(start)} to {nice(end)}"
    text = f"I'm travelling to {where} {span}. Can you make sure my debit card works there?"
    if kind == "abroad":
        text = (
            f"I'm in {where} right now: I arrived on {nice(start)} and I'm back on {nice(end)}. My card was "
            "declined at a shop. Can you add a travel notice?"
        )
    if fm == "contradicting_claim":
        claims["promise"] = "A colleague told me one notice can cover my whole trip."
    facts = {"destination": dest, "start date": start.isoformat(), "end date": end.isoformat(), "travel dates": span}
    if plan.outcome == "clarification":
        text = f"I'm going to {where} soon and I want my debit card to work there. Can you set that up?"
    docs = ["procedure_travel_notices"] + (["using_your_debit_card_abroad"] if kind != "plain" else [])
    if claims:
        docs.append(CLAIMS_DOC)
    say = {"destination": dest} if plan.outcome == "clarification" else {"destination": dest, "dates": span}
    return Built(
        cust,
        chain,
        [ask("set_travel_notice", text, say, claims)],
        docs,
        "travel notice abroad maximum 90 days start date",
        decisive=decisive,
        facts=facts,
        hint="Accept a notice for the first part of the trip if the agent explains the limit.",
        tags=["travel", kind],
        description=f"Travel notice {dest} {s_set}..{e_set} ({kind}).",
    )


@template("set_travel_notice_refusal", "a travel notice the policy does not set", (), [("refusal", None)])
def _travel_refused(plan, ctx, rng) -> Built:
    cust = new_customer(plan, ctx, rng, tier=pick_tier(plan, rng))
    new_card(cust, checking(cust, rng), rng)
    start = ctx.today + timedelta(days=rng.randint(2, 50))
    end = start + timedelta(days=rng.randint(3, 20))
    chain = Chain()
    place = rng.choice(US_PLACES)
    identity_prefix(chain, cust, get_customer=False)
    text = f"I'm going to {place} from {nice(start)} to {nice(end)}. Please put a travel notice on my debit card."
    return Built(
        cust,
        chain,
        [ask("set_travel_notice", text, {"destination": place})],
        ["procedure_travel_notices"],
        "travel notice domestic trip united states",
        facts={"destination": place},
        hint="If the agent says no notice is needed for a trip within the United States, accept.",
        tags=["travel", "refusal", "domestic"],
        description="A domestic trip needs no travel notice.",
    )


# --- transfer_to_human ---------------------------------------------------------------------------------------
def handoff(ctx, chain: Chain, situation: str, summary: str, source: tuple[str, str] | None = None) -> Const:
    code, c = handoff_reason(ctx, situation, source)
    chain.add(
        "transfer_to_human",
        {"summary": summary, "reason": code},
        {"summary": lit("free-text summary for the colleague (not graded)"), "reason": rule([c], {"kind": "enum"})},
    )
    return c


RELATIVES = (("mother", "son"), ("father", "daughter"), ("husband", "wife"), ("wife", "husband"), ("aunt", "nephew"))


@template(
    "estate_transfer",
    "a relative reports that a customer has died",
    ("transfer_to_human",),
    [("transfer", None), ("transfer", "multi_doc")],
    HANDOFF_KEYS[1:2],
    routes=[("deceased_customers_and_estates", "transfer", ("transfer", "multi_doc"))],
)
def _estate(plan, ctx, rng) -> Built:
    cust = new_customer(plan, ctx, rng, tier=pick_tier(plan, rng), age=rng.randint(68, 95))
    acct = checking(cust, rng)
    new_card(cust, acct, rng)
    rel, caller_role = rng.choice(RELATIVES)
    first = rng.choice([n for n in ("Daniel", "Grace", "Owen", "Lucia", "Marcus", "Helen") if n not in cust.name])
    caller = f"{first} {cust.name.split()[-1]}"
    chain = Chain()
    want = "close the accounts and move the money to the estate" if plan.failure_mode else "let you know"
    if plan.failure_mode == "multi_doc":
        want = rng.choice(
            (
                "close the accounts and move the money to the estate",
                "get the balance of the accounts for the will",
                "cancel the debit card",
            )
        )
    c = handoff(
        ctx,
        chain,
        "legal_or_estate",
        f"Caller {caller} ({caller_role}) reports the death of {cust.name}; "
        f"asks to {want}. Nothing verified or disclosed.",
        ("deceased_customers_and_estates", "transfer") if plan.failure_mode else None,
    )
    text = f"My {rel}, {cust.name}, passed away last week. I'm calling to {want}."
    if plan.failure_mode == "multi_doc":
        text = f"My {rel} {cust.name} has died. I'm the executor and I have the will here. I need to {want}."
    facts = {"full name": caller, f"{rel}'s name": cust.name, f"{rel}'s date of birth": cust.dob}
    docs = ["deceased_customers_and_estates", HANDOFF_DOC] + (
        ["third_party_requests_policy"] if plan.failure_mode else []
    )
    return Built(
        cust,
        chain,
        [ask("transfer_to_human", text, {"relationship": rel})],
        docs,
        "account holder died estate executor transfer",
        decisive=[c],
        facts=facts,
        identity=False,
        persona={
            "name": caller,
            "occupation": "relative of a deceased customer",
            "temperament": "grieving",
            "verbosity": "brief",
            "tier": None,
        },
        hint="You are not the account holder. Accept being passed to a colleague.",
        tags=["transfer_human", "estate", "third_party"],
        description="A death reported by a relative: no verification, hand off with legal_or_estate.",
    )


@template(
    "account_takeover",
    "a customer reports an account takeover",
    ("lock_card", "transfer_to_human"),
    [("transfer", "implicit_order"), ("transfer", "multi_doc")],
    HANDOFF_KEYS[0:1],
    routes=[("security_account_takeover", "chat_transfer", ("transfer", "multi_doc"))],
    calls={c: ("lock_card", "transfer_to_human") for c in (("transfer", "implicit_order"), ("transfer", "multi_doc"))},
)
def _takeover(plan, ctx, rng) -> Built:
    cust = new_customer(plan, ctx, rng, tier=pick_tier(plan, rng))
    accts = [checking(cust, rng, p) for p in rng.sample(list(CHECKING), rng.randint(1, 2))]
    for i in range(rng.randint(1, 3)):
        new_card(
            cust,
            accts[i % len(accts)],
            rng,
            status="active" if i == 0 else rng.choice(("active", "cancelled", "locked")),
        )
    chain = Chain()
    identity_prefix(chain, cust, get_customer=False)
    lc = list_cards(chain, cust)
    locked = []
    for card in sorted(cust.cards, key=lambda r: r["card_id"]):
        if card["status"] == "active":
            chain.add("lock_card", {"card_id": card["card_id"]}, {"card_id": out(lc)})
            locked.append(card["card_id"])
    c = handoff(
        ctx,
        chain,
        "fraud_or_security",
        f"Verified customer {cust.id} reports an account takeover. "
        f"Locked cards {', '.join(locked)}. No other changes made.",
        ("security_account_takeover", "chat_transfer") if plan.failure_mode == "multi_doc" else None,
    )
    sign = rng.choice(
        (
            "my online banking password was changed and someone logged in from a device I don't know",
            "my contact details were changed without my knowledge",
            "I got alerts about a wire I never set up",
        )
    )
    report = f"I think someone has taken over my account: {sign}!"
    asks = [ask("transfer_to_human", report)]
    if plan.failure_mode == "implicit_order":
        email = f"{cust.name.split()[0].lower()}.safe{rng.randint(10, 99)}@example.com"
        asks = [
            ask(
                "update_contact_info",
                f"Please change my email to {email}; I think someone got into my old one.",
                {"email": email},
            ),
            ask("transfer_to_human", report + " Put me through to your fraud team."),
        ]
    return Built(
        cust,
        chain,
        asks,
        ["security_account_takeover", HANDOFF_DOC, "card_controls_lock_unlock"],
        "account takeover lock cards transfer fraud",
        decisive=[c],
        hint="Agree to having your cards locked.",
        tags=["transfer_human", "security", "lock"],
        description="Takeover: lock every active card, change nothing else, then hand off (last).",
    )


@template(
    "takeover_unverified",
    "a takeover report from a caller who fails verification",
    ("transfer_to_human",),
    [("transfer", "contradicting_claim")],
    HANDOFF_KEYS[0:1],
    routes=[("security_account_takeover", "verification_fails", ("transfer", "contradicting_claim"))],
)
def _takeover_unverified(plan, ctx, rng) -> Built:
    cust = new_customer(plan, ctx, rng, tier=pick_tier(plan, rng))
    new_card(cust, checking(cust, rng), rng)
    wrong = f"{(int(cust.last4) + rng.randint(1, 9998)) % 10000:04d}"
    chain = Chain()
    chain.add(
        "find_customer",
        {"full_name": cust.name, "date_of_birth": cust.dob},
        {"full_name": fact("full name"), "date_of_birth": fact("date of birth")},
    )
    c = handoff(
        ctx,
        chain,
        "fraud_or_security",
        f"Caller claiming to be {cust.name} reports an account takeover; "
        "the caller could not be verified. Nothing locked or changed.",
        ("security_account_takeover", "verification_fails"),
    )
    text = "Someone has taken over my online banking, they changed my password! Lock everything now."
    return Built(
        cust,
        chain,
        [ask("transfer_to_human", text)],
        ["security_account_takeover", HANDOFF_DOC, "procedure_identity_verification"],
        "account takeover verification fails transfer fraud",
        decisive=[c],
        facts={"phone": wrong},
        unknown=["other phone number"],
        hint=f"The only phone digits you know are {wrong}.",
        tags=["transfer_human", "security"],
        description="Verification fails (the phone digits differ): hand off without locking.",
    )


@template(
    "insist_on_human",
    "a refused customer insists on a person",
    ("transfer_to_human",),
    [("transfer", None), ("transfer", "contradicting_claim")],
    HANDOFF_KEYS[2:3] + LIMIT_KEYS,
)
def _insist(plan, ctx, rng) -> Built:
    tier = pick_tier(plan, rng)
    chain = Chain()
    claim = plan.failure_mode == "contradicting_claim"
    if rng.random() < 0.5:
        mx = limit_max(ctx, tier)
        cust, card, _ = customer_with_cards(plan, ctx, rng, tier, 1)
        req = limit_request(rng, 0, LIMIT_MAX[tier], True)
        identity_prefix(chain, cust)
        lc = list_cards(chain, cust)
        if req <= mx.value:  # only when a constant changed: the limit is then allowed
            limit_step(chain, card, req, lc, fact("requested limit"))
        first = f"Raise the daily limit on my debit card to {money(req)}."
        decisive, docs, what = [mx], [*LIMIT_DOCS], f"a {money(req)} limit above the tier maximum"
        facts = {"card last 4 digits": card["last4"], "requested limit": money(req)}
    else:
        window = dispute_windows(ctx, rng, plan)
        cust, (acct,) = dispute_customer(plan, ctx, rng, tier)
        m, amount = rng.choice(MERCHANTS), rng.randint(2000, 50000)
        days = WINDOW + rng.randint(1, 50)
        txn = purchase(cust, acct, rng, m, amount, days)
        noise(cust, acct, rng, 2, WINDOW, {m})
        identity_prefix(chain, cust)
        la = list_accounts(chain, cust)
        src = list_txns(chain, acct, la)
        if within(window, days):  # only when a constant changed: the dispute is then allowed
            credit, used = credit_for(credit_rule(ctx, tier), amount)
            unlock(chain, DISPUTE, "procedure_card_disputes")
            dispute_step(ctx, chain, txn, "not_received", credit, used, src)
        first = f"I want to dispute the {money(amount)} charge from {m}, it never arrived."
        decisive, docs, what = [*window], ["procedure_card_disputes"], "a dispute outside the 60-day window"
        facts = {"dispute reason": "not_received"}
    if claim:
        promise = {"promise": "Your colleague promised me this would be done."}
        docs.append(CLAIMS_DOC)
    c = handoff(
        ctx,
        chain,
        "customer_requests_human",
        f"Verified customer {cust.id} asked for {what}; refused under the policy; the customer insists on a person.",
    )
    asks = [
        ask("refused_request", first, claims=promise if claim else None),
        ask("transfer_to_human", "That's not acceptable. I want to talk to a real person."),
    ]
    return Built(
        cust,
        chain,
        asks,
        [*docs, HANDOFF_DOC],
        f"customer insists on a human person after refusal of {what}",
        decisive=[*decisive, c],
        facts=facts,
        hint="Decline any alternative. When refused, insist on speaking to a person.",
        tags=["transfer_human", "refusal"],
        description=f"Refuse {what}; the customer insists: hand off.",
    )
