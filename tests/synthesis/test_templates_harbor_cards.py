"""Harbor Bank's card templates: every cell plays to reward 1, the chain follows the entity graph's
constants (change one and the chain changes), and instantiation is seeded."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from tau_env.synthesis.entity_graph import EntityGraph, build_entity_graph
from tau_env.synthesis.records import FAILURE_MODES, OUTCOMES, Plan, Provenance, chain_signature
from tau_env.synthesis.synthesizer import synthesize
from tau_env.synthesis.templates import IdAllocator, SynthContext, templates_for
from tau_env.synthesis.templates import harbor_bank_cards as cards
from tau_env.synthesis.templates import harbor_bank_cards_base as base
from tau_env.synthesis.verify import verify
from tau_env.synthesis.wording import problems_of

import tau_env
from tau_env import Action

WRITES = {
    "lock_card",
    "unlock_card",
    "replace_card_5120",
    "file_dispute_6604",
    "change_daily_limit_7745",
    "set_travel_notice_3012",
    "transfer_to_human",
}
CELLS = [(name, o, f) for name, t in sorted(cards.TEMPLATES.items()) for o, f in t.cells()]


@pytest.fixture(scope="module")
def domain():
    return tau_env.make("harbor-bank-v0").domain


@pytest.fixture(scope="module")
def graph(domain):
    return build_entity_graph(domain)


def ctx_of(domain, graph, tag: str = "t") -> SynthContext:
    return SynthContext(domain=domain, entity_graph=graph, ids=IdAllocator(tag))


def plan_of(name: str, outcome: str, mode: str | None, seed: int, rule_keys: list[str] | None = None) -> Plan:
    t = cards.TEMPLATES[name]
    if rule_keys is None:
        rule_keys = [t.rule_keys[seed % len(t.rule_keys)]] if t.rule_keys else []
    return Plan(
        id=f"p-{name}-{outcome}-{mode or 'none'}-{seed}",
        template=name,
        intent=t.intent,
        tools=list(t.tools),
        outcome=outcome,
        failure_mode=mode,
        rule_keys=rule_keys,
        seed=seed,
    )


def chain(draft) -> list[tuple[str, dict]]:
    return [(a.name, a.arguments) for a in draft.actions]


@pytest.mark.parametrize(("name", "outcome", "mode"), CELLS, ids=[f"{n}/{o}/{f or '-'}" for n, o, f in CELLS])
def test_every_cell_plays_to_reward_one(domain, graph, name, outcome, mode):
    ctx = ctx_of(domain, graph)
    for seed in (0, 1, 7):
        plan = plan_of(name, outcome, mode, seed)
        task = asyncio.run(synthesize(plan, ctx))
        tau_env.check_task(domain.with_tasks([task]), task, play=True)
        assert verify(task, domain, graph) == []
        draft = cards.TEMPLATES[name].instantiate(plan, ctx)
        assert problems_of(task.scenario, draft) == []
        writes = [a.name for a in task.actions if a.name in WRITES or a.name == "verify_identity"]
        assert task.expect_no_change == (not writes)
        if outcome == "success":
            assert set(cards.TEMPLATES[name].tools) <= {a.name for a in task.actions}
        if outcome in ("refusal", "clarification"):
            assert "transfer_to_human" not in {a.name for a in task.actions}
        if outcome == "refusal":
            assert not ({a.name for a in task.actions} & (WRITES - {"transfer_to_human"}))
        if outcome == "transfer":
            assert task.actions[-1].name == "transfer_to_human"
        prov = Provenance.of(task)
        assert len(prov.derivations) == len(task.actions)
        for a, ds in zip(task.actions, prov.derivations, strict=True):
            assert set(ds) == set(a.arguments), f"{a.name}: every argument carries a derivation"
    assert not ctx.missing, f"constants the entity graph lacks: {ctx.missing}"


def test_cells_cover_outcomes_failure_modes_and_tools():
    cells = {(o, f) for _, o, f in CELLS}
    assert {o for o, _ in cells} == set(OUTCOMES)
    assert set(FAILURE_MODES) <= {f for _, f in cells}
    tools = {tool for t in cards.TEMPLATES.values() for tool in t.tools}
    assert WRITES <= tools
    with pytest.raises(ValueError, match="supports the cells"):
        cards.TEMPLATES["lock_card"].instantiate(plan_of("lock_card", "transfer", None, 0), None)


def test_templates_for_harbor_bank_includes_the_card_templates(domain):
    assert set(cards.TEMPLATES) <= set(templates_for(domain))


def test_rule_keys_are_entity_graph_constants_and_steer_the_chain(domain, graph):
    ids = {c.id for c in graph.constants}
    for t in cards.TEMPLATES.values():
        assert set(t.rule_keys) <= ids, t.name
    ctx = ctx_of(domain, graph)
    for name, cell in (("replace_card", ("success", None)), ("change_daily_limit", ("success", "multi_doc"))):
        for i, key in enumerate(cards.TEMPLATES[name].rule_keys):
            draft = cards.TEMPLATES[name].instantiate(plan_of(name, *cell, i, [key]), ctx)
            assert key in draft.decisive, (name, key)
    for key in base.CREDIT_KEYS:
        seen = set()
        for seed in range(6):
            seen |= set(
                cards.TEMPLATES["file_dispute"]
                .instantiate(plan_of("file_dispute", "success", None, seed, [key]), ctx)
                .decisive
            )
        assert key in seen


def test_the_fee_and_the_credit_follow_the_documents(domain, graph):
    """The computed values match the documents (Fee Schedule 2025, Dispute Provisional Credit)."""
    ctx = ctx_of(domain, graph)
    expected = {("damaged", "expedited", "standard"): 3000, ("damaged", "standard", "preferred"): 0,
                ("lost", "expedited", "preferred"): 1000, ("stolen", "expedited", "private"): 0,
                ("damaged", "standard", "standard"): 500}  # fmt: skip
    for (reason, shipping, tier), fee in expected.items():
        assert base.card_fee(ctx, reason, tier).value + base.ship_fee(ctx, shipping, tier).value == fee
    standard = base.credit_rule(ctx, "standard")
    assert base.credit_for(standard, 10_000)[0] == 10_000
    assert base.credit_for(standard, 10_001)[0] == 0
    assert base.credit_for(base.credit_rule(ctx, "preferred"), 73_000)[0] == 73_000
    assert base.limit_max(ctx, "preferred").value == 500_000
    assert [w.value for w in base.dispute_windows(ctx)] == [60, 60, 60] and base.travel_max(ctx).value == 90
    assert base.handoff_reason(ctx, "legal_or_estate")[0] == "legal_or_estate"


def _changed(graph: EntityGraph, cid: str, value) -> EntityGraph:
    g = EntityGraph.from_json(graph.to_json())
    g.constants = [dataclasses.replace(c, value=value) if c.id == cid else c for c in g.constants]
    g.__post_init__()
    return g


def _alternatives(value):
    if isinstance(value, str):
        return ["nothing: no provisional credit", "other", "customer_requests_human", "fraud_or_security"]
    return [value + 1234, max(1, value // 3), value * 3 + 7, value * 100 + 1, 20, 200, 0]


DECISIVE_CASES = [
    ("replace_card", "success", None),
    ("replace_card", "success", "contradicting_claim"),
    ("file_dispute", "success", None),
    ("file_dispute", "success", "multi_doc"),
    ("file_dispute_multi", "success", "multi_doc"),
    ("file_dispute_refusal", "refusal", None),
    ("stolen_card_disputes", "success", "implicit_order"),
    ("change_daily_limit", "success", "multi_doc"),
    ("change_daily_limit_refusal", "refusal", None),
    ("change_daily_limit_refusal", "refusal", "multi_doc"),
    ("unlock_and_raise_limit", "success", "implicit_order"),
    ("set_travel_notice", "success", "contradicting_claim"),
    ("set_travel_notice", "success", "multi_doc"),
    ("estate_transfer", "transfer", None),
    ("estate_transfer", "transfer", "multi_doc"),
    ("takeover_unverified", "transfer", "contradicting_claim"),
    ("file_dispute_multi", "success", None),
    ("account_takeover", "transfer", "multi_doc"),
    ("insist_on_human", "transfer", None),
]


@pytest.mark.parametrize(("name", "outcome", "mode"), DECISIVE_CASES)
def test_decisive_constants_decide_the_chain(domain, graph, name, outcome, mode):
    """Change a decisive constant in a copied graph: the computed chain changes; change an unrelated
    constant: it does not."""
    checked = 0
    for seed in range(8):
        plan = plan_of(name, outcome, mode, seed)
        base = cards.TEMPLATES[name].instantiate(plan, ctx_of(domain, graph))
        unrelated = graph.get("fee_schedule_2025", section="Wires", row="Outgoing domestic wire", column="standard")
        same = cards.TEMPLATES[name].instantiate(plan, ctx_of(domain, _changed(graph, unrelated.id, 99_999)))
        assert chain(same) == chain(base)
        for cid in base.decisive:
            value = graph.by_id(cid).value
            assert any(
                chain(cards.TEMPLATES[name].instantiate(plan, ctx_of(domain, _changed(graph, cid, alt)))) != chain(base)
                for alt in _alternatives(value)
                if alt != value
            ), f"{name} seed {seed}: changing {cid} never changes the chain"
            checked += 1
    assert checked, f"{name}: no decisive constant in 8 seeds"


def test_seeded_determinism_and_distinct_chains(domain, graph):
    sigs = set()
    for name, outcome, mode in CELLS:
        for seed in (3, 4):
            plan = plan_of(name, outcome, mode, seed)
            a = asyncio.run(synthesize(plan, ctx_of(domain, graph)))
            b = asyncio.run(synthesize(plan, ctx_of(domain, graph)))
            assert a.model_dump() == b.model_dump()
            sigs.add(chain_signature(a))
            other = dataclasses.replace(plan, id=plan.id + "x")
            assert chain_signature(asyncio.run(synthesize(other, ctx_of(domain, graph)))) != chain_signature(a)
    assert len(sigs) == 2 * len(CELLS)


def test_amounts_merchants_and_tiers_vary_across_seeds(domain, graph):
    ctx = ctx_of(domain, graph)
    fees, credits, tiers, merchants = set(), set(), set(), set()
    for seed in range(30):
        d = cards.TEMPLATES["replace_card"].instantiate(plan_of("replace_card", "success", None, seed, []), ctx)
        fees.add(d.actions[-1].arguments["fee_cents"])
        tiers.add(d.persona["tier"])
        d = cards.TEMPLATES["file_dispute"].instantiate(plan_of("file_dispute", "success", None, seed, []), ctx)
        credits.add(d.actions[-1].arguments["provisional_credit_cents"])
        merchants.add(next(r["description"] for r in d.initial_state["transactions"]
                           if r["txn_id"] == d.actions[-1].arguments["txn_id"]))  # fmt: skip
    assert len(fees) >= 3 and tiers == set(base.TIERS) and len(credits) >= 10 and len(merchants) >= 8


def test_duplicate_dispute_targets_the_later_or_higher_id_charge(domain, graph):
    ctx = ctx_of(domain, graph)
    for seed in range(12):
        d = cards.TEMPLATES["file_dispute"].instantiate(plan_of("file_dispute", "success", "multi_doc", seed), ctx)
        target = d.actions[-1].arguments["txn_id"]
        rows = {r["txn_id"]: r for r in d.initial_state["transactions"]}
        twin = next(
            r for r in rows.values()
            if r["txn_id"] != target and r["description"] == rows[target]["description"]
            and r["amount_cents"] == rows[target]["amount_cents"]
        )  # fmt: skip
        assert (rows[target]["posted_on"], len(target), target) > (
            twin["posted_on"],
            len(twin["txn_id"]),
            twin["txn_id"],
        )
        assert d.actions[-1].arguments["reason"] == "duplicate"


def test_refusals_never_call_the_refused_tool(domain, graph):
    ctx = ctx_of(domain, graph)
    for name in ("lock_card_refusal", "unlock_card_refusal", "replace_card_refusal", "file_dispute_refusal",
                 "change_daily_limit_refusal", "set_travel_notice_refusal"):  # fmt: skip
        for o, f in cards.TEMPLATES[name].cells():
            for seed in range(5):
                d = cards.TEMPLATES[name].instantiate(plan_of(name, o, f, seed), ctx)
                assert not ({a.name for a in d.actions} & (WRITES | {"unlock_tool"}))
                assert d.actions[1] == Action(name="verify_identity", arguments=d.actions[1].arguments)
                assert d.expect_no_change is False  # verify_identity writes


def test_a_graph_without_the_constants_falls_back_to_the_documents_readings(domain):
    """A graph that lacks the constants: every cell still instantiates and plays, the lookups are
    recorded as missing, and no made-up constant id is called decisive."""
    ctx = ctx_of(domain, EntityGraph())
    for name, outcome, mode in CELLS:
        plan = plan_of(name, outcome, mode, 5)
        task = asyncio.run(synthesize(plan, ctx))
        tau_env.check_task(domain.with_tasks([task]), task, play=True)
        assert Provenance.of(task).decisive == []
    assert any("fee_schedule_2025" in k for k in ctx.missing)


def test_routed_constants_are_decisive_in_their_cells(domain, graph):
    """Every graph constant a template covers beyond its rule keys is decisive in the cell it names."""
    ctx = ctx_of(domain, graph)
    routed = [(t, c.id) for t in cards.TEMPLATES.values() for c in graph.constants if t.cell_for_rule(c.id)]
    assert len({cid for _, cid in routed}) >= 12
    for t, cid in routed:
        assert t.covers(cid)
        outcome, mode = t.cell_for_rule(cid)
        seen = set()
        for seed in range(3):
            seen |= set(t.instantiate(plan_of(t.name, outcome, mode, seed, [cid]), ctx).decisive)
        assert cid in seen, (t.name, cid)
