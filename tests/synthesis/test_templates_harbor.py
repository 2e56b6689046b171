"""Every Harbor Bank template cell instantiates and passes check_task (oracle + scripted user)."""

from __future__ import annotations

import asyncio

import pytest
from tau_env.synthesis.records import Plan, chain_signature
from tau_env.synthesis.synthesizer import synthesize, templates_of
from tau_env.synthesis.templates import SynthContext, templates_for
from tau_env.synthesis.templates import harbor_bank as hb

import tau_env


@pytest.fixture(scope="module")
def ctx():
    return SynthContext(tau_env.make("harbor-bank-v0").domain, templates=dict(hb.TEMPLATES))


def _cells():
    return [(name, o, f) for name, t in hb.TEMPLATES.items() for o, f in t.cells()]


@pytest.mark.parametrize(("name", "outcome", "mode"), _cells())
def test_every_cell_passes_check_task(ctx, name, outcome, mode):
    tasks = []
    for seed in (0, 7, 123):
        plan = Plan(
            id=f"t-{name}-{outcome}-{mode}-{seed}",
            template=name,
            intent="",
            outcome=outcome,
            failure_mode=mode,
            seed=seed,
        )
        task = asyncio.run(synthesize(plan, ctx))
        tau_env.check_task(ctx.domain.with_tasks([task]), task, play=True)
        writes = {n for n, t in ctx.domain.toolbox("all").tools.items() if t.kind == "write"}
        assert task.expect_no_change == (not any(a.name in writes for a in task.actions))
        assert outcome in task.tags and (mode is None or mode in task.tags)
        tasks.append(task)
    assert len({chain_signature(t) for t in tasks}) == 3


def test_templates_for_harbor_merges_cards(ctx):
    try:
        names = set(templates_for(ctx.domain))
    except SyntaxError:  # pragma: no cover - the cards module is being edited
        pytest.skip("harbor_bank_cards.py does not parse right now")
    assert set(hb.TEMPLATES) <= names
    assert {"open_account", "close_account", "wire", "refund_fee", "deposit_check"} <= names


def test_every_failure_mode_is_plannable():
    modes = {f for t in hb.TEMPLATES.values() for _, f in t.cells()}
    assert {"multi_doc", "implicit_order", "contradicting_claim", "underspecified"} <= modes


def test_refusal_after_verification_is_not_a_no_change_task(ctx):
    plan = Plan(id="r1", template="wire", intent="", outcome="refusal", seed=1)
    task = asyncio.run(synthesize(plan, ctx))
    assert [a.name for a in task.actions][:2] == ["find_customer", "verify_identity"]
    assert not task.expect_no_change
    assert not any(a.name.startswith("initiate_wire") for a in task.actions)


def test_wire_chain_uses_tier_fee_and_replayed_wire_id(ctx):
    for tier, fee in hb.WIRE_FEE.items():
        plan = Plan(id=f"w-{tier}", template="wire", intent="", persona={"tier": tier}, seed=4)
        task = asyncio.run(synthesize(plan, ctx))
        init = next(a for a in task.actions if a.name == "initiate_wire_9150")
        assert init.arguments["fee_cents"] == fee
        approve = next(a for a in task.actions if a.name == "approve_wire_in_app")
        assert approve.requestor == "user" and approve.arguments["wire_id"].startswith("WIRE-")
        # the user never states the fee
        if fee:
            assert hb.money(fee) not in " ".join(task.scenario.requests)


def test_close_with_balance_moves_money_first(ctx):
    plan = Plan(id="c1", template="close_account", intent="", failure_mode="implicit_order", seed=2)
    task = asyncio.run(synthesize(plan, ctx))
    names = [a.name for a in task.actions]
    assert names.index("transfer_funds") < names.index("close_account_8837")


def test_ids_are_unique_per_plan(ctx):
    a = asyncio.run(synthesize(Plan(id="p-0-1", template="refund_fee", intent="", seed=1), ctx))
    b = asyncio.run(synthesize(Plan(id="p-0-2", template="refund_fee", intent="", seed=1), ctx))
    ids = lambda t: {next(iter(r.values())) for rows in t.initial_state.values() for r in rows}  # noqa: E731
    assert not ids(a) & ids(b)
    assert templates_of(ctx) is templates_of(ctx)


@pytest.fixture(scope="module")
def graphs(ctx):
    from tau_env.synthesis.tool_graph import build_tool_graph

    eg = ctx.graph
    return eg, build_tool_graph(ctx.domain, eg)


def test_every_cell_passes_verify_and_review(ctx, graphs):
    from tau_env.synthesis.review import review
    from tau_env.synthesis.verify import verify

    eg, tg = graphs
    bad = []
    for name, o, f in _cells():
        t = hb.TEMPLATES[name]
        plan = Plan(
            id=f"v-{name}-{o}-{f}",
            template=name,
            intent=t.intent,
            tools=list(t.cell_tools(o, f)),
            outcome=o,
            failure_mode=f,
            seed=11,
        )
        task = asyncio.run(synthesize(plan, ctx))
        problems = verify(task, ctx.domain, eg, tg) or asyncio.run(review(task, ctx.domain))
        bad += [f"{plan.cell}: {p.check}: {p.message[:160]}" for p in problems]
    assert not bad, "\n".join(bad)


def test_rule_keys_are_entity_graph_constants(ctx):
    for t in hb.TEMPLATES.values():
        for key in t.rule_keys:
            ctx.graph.by_id(key)  # KeyError names the near ids when the graph's wording changed


def test_a_wanted_rule_becomes_decisive(ctx):
    from tau_env.synthesis.planner import Planner

    p = Planner(hb.TEMPLATES, seed=5)
    keys = sorted({k for t in hb.TEMPLATES.values() for k in t.rule_keys})
    missed = []
    for plan in p.plan(len(keys), want_rules=keys):
        task = asyncio.run(synthesize(plan, ctx))
        if plan.rule_keys[0] not in task.metadata["synthesis"]["decisive"]:
            missed.append(f"{plan.cell} {plan.rule_keys[0]}")
    assert not missed, "\n".join(missed)
