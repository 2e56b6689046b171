"""Harbor Bank card templates: daily card limits (change_daily_limit_7745) and travel notices
(set_travel_notice_3012).
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

from . import Chain, date_speaker, identity_prefix, new_customer, unlock
from .harbor_bank_cards_base import (
    CHECKING,
    CLAIMS_DOC,
    COUNTRIES,
    LIMIT_DOC,
    LIMIT_DOCS,
    LIMIT_KEYS,
    LIMIT_MAX,
    LIMIT_MIN,
    TIER_NAME,
    TIERS,
    TRAVEL_MAX,
    US_PLACES,
    Built,
    ask,
    checking,
    customer_with_cards,
    fact,
    limit_max,
    limit_min,
    list_accounts,
    list_cards,
    lit,
    money,
    new_card,
    out,
    pick_tier,
    rule,
    template,
    travel_rules,
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
    spk = date_speaker(plan)
    s_txt, e_txt = spk(start, today), spk(end, today)
    span = f"from {s_txt} to {e_txt}"
    text = f"I'm travelling to {where} {span}. Can you make sure my debit card works there?"
    if kind == "abroad":
        text = (
            f"I'm in {where} right now: I arrived on {s_txt} and I'm back on {e_txt}. My card was "
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
    spk = date_speaker(plan)
    span = f"from {spk(start, ctx.today)} to {spk(end, ctx.today)}"
    text = f"I'm going to {place} {span}. Please put a travel notice on my debit card."
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
