"""Harbor Bank card templates: hand-offs to a human colleague (transfer_to_human): estates, account
takeovers, customers who insist on a person.
"""

from __future__ import annotations

from . import Chain, Const, identity_prefix, new_customer, unlock
from .harbor_bank_cards_base import (
    CHECKING,
    CLAIMS_DOC,
    HANDOFF_DOC,
    HANDOFF_KEYS,
    LIMIT_DOCS,
    LIMIT_KEYS,
    LIMIT_MAX,
    MERCHANTS,
    WINDOW,
    Built,
    ask,
    checking,
    credit_for,
    credit_rule,
    customer_with_cards,
    dispute_windows,
    fact,
    handoff_reason,
    limit_max,
    list_accounts,
    list_cards,
    list_txns,
    lit,
    money,
    new_card,
    out,
    pick_tier,
    rule,
    template,
    within,
)
from .harbor_bank_cards_disputes import DISPUTE, dispute_customer, dispute_step, noise, purchase
from .harbor_bank_cards_limits import limit_request, limit_step


# --- transfer_to_human ---------------------------------------------------------------------------------------
def handoff(ctx, chain: Chain, situation: str, summary: str, source: tuple[str, str] | None = None) -> Const:
    code, c = handoff_reason(ctx, situation, source)
    chain.add(
        "transfer_to_human",
        {"summary": summary, "reason": code},
        {"summary": lit("free-text summary for the colleague (not graded)"), "reason": rule([c], {"kind": "enum"})},
    )
    return c


#: (the customer's relation to the caller, the caller's to the customer): neutral words, since the
#: names are drawn at random (a random "Grace" must not be someone's "husband").
RELATIVES = (("parent", "child"), ("spouse", "spouse"), ("sibling", "sibling"), ("partner", "partner"))


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
