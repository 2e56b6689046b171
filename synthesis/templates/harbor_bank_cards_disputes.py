"""Harbor Bank card templates: debit card disputes (file_dispute_6604), alone and after a theft."""

from __future__ import annotations

import random
from typing import Any

from ..records import Plan
from . import Chain, Const, Customer, identity_prefix, new_customer, unlock
from .harbor_bank_cards_base import (
    CHECKING,
    CLAIMS_DOC,
    CREDIT_DOC,
    CREDIT_KEYS,
    CREDIT_THRESHOLD,
    FEE_KEYS,
    MERCHANTS,
    REPLACE,
    REPLACE_DOCS,
    TIER_NAME,
    WINDOW,
    Built,
    age,
    ask,
    card_choice,
    checking,
    code_of,
    credit_for,
    credit_rule,
    customer_with_cards,
    dispute_code,
    dispute_windows,
    fact,
    key_tier,
    list_accounts,
    list_cards,
    list_txns,
    lit,
    money,
    new_card,
    out,
    pick_tier,
    replace_step,
    rule,
    ship_words,
    template,
    theft_code,
    wanted,
    within,
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
