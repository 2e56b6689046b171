"""synthesize / regenerate, the template wording and LLM wording through a scripted server."""

from __future__ import annotations

import asyncio
import json

import pytest
from tau_env.synthesis.llm import SynthLLM
from tau_env.synthesis.planner import Planner
from tau_env.synthesis.records import Plan, Problem, Provenance
from tau_env.synthesis.synthesizer import draft_of, regenerate, synthesize, templates_of
from tau_env.synthesis.templates import SynthContext
from tau_env.synthesis.templates import harbor_bank as hb
from tau_env.synthesis.wording import WordingError, write_scenario

import tau_env
from tau_env.testing import FakeOpenAI, text


@pytest.fixture(scope="module")
def ctx():
    return SynthContext(tau_env.make("harbor-bank-v0").domain, templates=dict(hb.TEMPLATES))


def _batch(ctx, seed, n=40):
    plans = Planner(templates_of(ctx), seed=seed).plan(n)
    return [asyncio.run(synthesize(p, ctx)) for p in plans]


def test_same_seed_same_tasks(ctx):
    a = [t.model_dump() for t in _batch(ctx, 5)]
    b = [t.model_dump() for t in _batch(SynthContext(ctx.domain, templates=dict(hb.TEMPLATES)), 5)]
    assert a == b


def test_provenance_and_tags(ctx):
    plan = Plan(id="p-0-9", template="refund_fee", intent="x", outcome="refusal", failure_mode="multi_doc", seed=2)
    task = asyncio.run(synthesize(plan, ctx))
    prov = Provenance.of(task)
    assert task.id == "syn-p-0-9" and prov.plan["id"] == "p-0-9"
    assert len(prov.derivations) == len(task.actions)
    assert {"refund_fee", "refusal", "multi_doc"} <= set(task.tags)
    assert prov.decisive and prov.intent_query
    assert set(prov.user_facts) <= set(task.scenario.facts)


def test_regenerate_scenario_and_actions(ctx):
    plan = Plan(id="p-0-3", template="wire", intent="x", seed=11)
    task = asyncio.run(synthesize(plan, ctx))
    new = asyncio.run(regenerate(task, "scenario", [Problem("review", "scenario", "ambiguous")], ctx))
    assert new.actions == task.actions and new.initial_state == task.initial_state
    assert Provenance.of(new).regenerations == {"scenario": 1}
    again = asyncio.run(regenerate(task, "actions", [Problem("review", "actions", "wrong")], ctx))
    assert again.id == task.id and Provenance.of(again).plan["seed"] != plan.seed
    tau_env.check_task(ctx.domain.with_tasks([again]), again, play=True)


def test_llm_wording_accepted_and_leak_rejected(ctx, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    plan = Plan(id="p-0-4", template="wire", intent="x", persona={"tier": "standard"}, seed=3)
    draft = draft_of(plan, ctx)
    good = {
        "persona": "A careful nurse.",
        "requests": ["I need to send a wire to my landlord."],
        "instructions": "Be calm.",
    }
    bad = {"persona": "A nurse.", "requests": ["Send my wire; I know the fee is $30."], "instructions": ""}
    for reply, ok in ((good, True), (bad, False)):
        with FakeOpenAI(lambda req, r=reply: text(json.dumps(r))) as srv:
            llm = SynthLLM("fake-model", base_url=srv.url)
            if ok:
                sc = asyncio.run(write_scenario(draft, plan, llm, {"wording": "Be brief."}))
                assert sc.requests == good["requests"] and sc.facts == draft.facts
                assert "Be brief." in json.dumps(srv.requests[0])
            else:
                with pytest.raises(WordingError) as e:
                    asyncio.run(write_scenario(draft, plan, llm))
                assert e.value.problems[0].component == "scenario"
                assert "$30" in e.value.problems[0].message


def test_missing_claim_rejected(ctx, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    plan = Plan(
        id="p-0-5", template="deposit_check", intent="x", outcome="refusal", failure_mode="contradicting_claim", seed=1
    )
    draft = draft_of(plan, ctx)
    reply = {"persona": "x", "requests": ["Can I deposit a check in the app?"], "instructions": ""}
    with FakeOpenAI(lambda req: text(json.dumps(reply))) as srv:
        with pytest.raises(WordingError) as e:
            asyncio.run(write_scenario(draft, plan, SynthLLM("m", base_url=srv.url)))
    assert any(p.check == "wording_claim" for p in e.value.problems)
