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

This module holds the lock, unlock and replacement templates; the others live in
``harbor_bank_cards_disputes``, ``harbor_bank_cards_limits`` (limits, travel notices) and
``harbor_bank_cards_handoffs``, the shared pieces in ``harbor_bank_cards_base``. All register in
:data:`TEMPLATES`.
"""

from __future__ import annotations

import random
from typing import Any

from ..records import Plan
from . import Chain, SynthContext, identity_prefix
from .harbor_bank_cards_base import (
    CHECKING,
    CLAIMS_DOC,
    FEE_KEYS,
    REASON_STORY,
    REPLACE,
    REPLACE_DOCS,
    TEMPLATES,
    TIER_DOC,
    TIER_NAME,
    TIERS,
    Built,
    ask,
    card_choice,
    customer_with_cards,
    fact,
    list_accounts,
    list_cards,
    lit,
    money,
    new_card,
    out,
    pick_tier,
    replace_step,
    replaced,
    ship_words,
    template,
)

__all__ = ["TEMPLATES"]

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


# The other templates register themselves in TEMPLATES when imported; the module's TEMPLATES holds them all.
from . import harbor_bank_cards_disputes, harbor_bank_cards_handoffs, harbor_bank_cards_limits  # noqa: E402, F401
