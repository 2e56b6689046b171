"""The composer: joins along the tool graph, one customer, no conflicts or id collisions, re-verified.

Until the Harbor Bank templates synthesize singles, the Harbor tests move shipped tasks onto fresh
copies of their customers (run-unique ids, as the synthesizer makes them) with fabricated provenance.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tau_env.synthesis.compose import _pattern, _pinned, _walk_replace, acompose, compose
from tau_env.synthesis.errors import SynthesisError
from tau_env.synthesis.records import Provenance

import tau_env
from tau_env import Task


class Graph:
    """A minimal tool graph: write tools and symmetric conflict pairs."""

    def __init__(self, writes, pairs=()):
        self.writes = list(writes)
        self.pairs = {frozenset(p) for p in pairs}

    def write_tools(self):
        return self.writes

    def conflict(self, a, b):
        return frozenset((a, b)) in self.pairs


# --- Harbor Bank singles ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def harbor():
    return tau_env.make("harbor-bank-v0").domain


def fresh(domain, task: Task, n: int) -> Task:
    """``task`` moved onto a fresh copy of its customer: new ids and name, rows in initial_state, provenance."""
    seed = domain.seed
    cid = next(a.arguments["customer_id"] for a in task.actions if "customer_id" in a.arguments)
    cust = next(r for r in seed["customers"] if r["customer_id"] == cid)
    accts = [r for r in seed["accounts"] if r["customer_id"] == cid]
    aids = {r["account_id"] for r in accts}
    cards = [r for r in seed["cards"] if r["customer_id"] == cid]
    txns = [r for r in seed["transactions"] if r["account_id"] in aids]
    mapping = {cid: f"C-{n}", cust["full_name"]: f"{cust['full_name'].split()[0]} Test{n}"}
    for table, key in (("accounts", "account_id"), ("cards", "card_id"), ("transactions", "txn_id")):
        for r in {"accounts": accts, "cards": cards, "transactions": txns}[table]:
            mapping[r[key]] = f"{r[key]}-{n}"
    data = task.model_dump()
    data["initial_state"] = {"customers": [cust], "accounts": accts, "cards": cards, "transactions": txns}
    data = _walk_replace(data, mapping, _pattern(mapping))
    data["id"] = f"{task.id}-{n}"
    plan = {
        "id": data["id"],
        "template": task.id,
        "intent": task.id.replace("_", " "),
        "persona": {"tier": cust["tier"]},
    }
    derivs = [{k: {"kind": "literal", "why": "test"} for k in a.arguments} for a in task.actions]
    data["metadata"] = {"synthesis": Provenance(plan=plan, derivations=derivs).to_dict()}
    return Task.model_validate(data)


@pytest.fixture(scope="module")
def singles(harbor):
    out = []
    for i, t in enumerate(harbor.tasks):
        if not any("customer_id" in a.arguments for a in t.actions):
            continue
        out.append(fresh(harbor, t, 100 + i))
    d = harbor.with_tasks(out)
    return [t for t in out if not tau_env.checker.task_problems(d, t, play=False)]


def harbor_graph(domain, pairs=()):
    writes = [n for n, t in domain.toolbox("all").tools.items() if t.kind == "write"]
    return Graph(writes, pairs)


def test_fabricated_singles_pass_their_checks(harbor, singles):
    assert len(singles) >= 40  # a few whose chains hold content-derived ids do not survive the renaming
    d = harbor.with_tasks(singles)
    for t in singles[:8]:
        tau_env.check_task(d, t, play=True)


def test_harbor_composites_pass_check_task(harbor, singles):
    comps = compose(singles, harbor_graph(harbor), 12, seed=3, domain=harbor)
    assert len(comps) == 12
    assert len({c.id for c in comps}) == 12
    d = harbor.with_tasks(comps)
    by_id = {t.id: t for t in singles}
    for c in comps:
        tau_env.check_task(d, c, play=True)
        prov = Provenance.of(c)
        assert 2 <= len(prov.components) <= 4
        assert len(c.scenario.requests) == len(prov.components)
        tiers = {Provenance.of(by_id[i]).plan["persona"]["tier"] for i in prov.components}
        assert tiers == {prov.plan["persona"]["tier"]}
        names = Counter(a.name for a in c.actions)
        assert names["verify_identity"] == 1 and names["find_customer"] <= 1
        unlocks = [a.arguments["tool_name"] for a in c.actions if a.name == "unlock_tool"]
        assert len(unlocks) == len(set(unlocks))
        assert len(c.initial_state["customers"]) == 1
        assert len(prov.derivations) == len(c.actions)
        assert c.scenario.persona == by_id[prov.components[0]].scenario.persona


def test_same_seed_same_composites_and_conflicts_respected(harbor, singles):
    graph = harbor_graph(harbor, [("replace_card_5120", "file_dispute_6604"), ("refund_fee_4410", "refund_fee_4410")])
    a = compose(singles, graph, 10, seed=7, domain=harbor)
    b = compose(singles, graph, 10, seed=7, domain=harbor)
    assert [t.model_dump() for t in a] == [t.model_dump() for t in b]
    by_id = {t.id: t for t in singles}
    writes = set(graph.write_tools())
    assert a
    for c in a:
        comps = [{x.name for x in by_id[i].actions} & writes for i in Provenance.of(c).components]
        for x in range(len(comps)):
            for y in range(x + 1, len(comps)):
                assert not any(graph.conflict(u, v) for u in comps[x] for v in comps[y]), c.id


def test_customer_rewrite_moves_ids_names_and_drops_rows(harbor, singles):
    comps = compose(singles, harbor_graph(harbor), 6, seed=1, sizes=(2, 2), domain=harbor)
    by_id = {t.id: t for t in singles}
    for c in comps:
        first, second = (by_id[i] for i in Provenance.of(c).components)
        old = second.initial_state["customers"][0]
        new = first.initial_state["customers"][0]
        text = json.dumps(c.model_dump())
        assert old["customer_id"] not in text.replace(new["customer_id"], "")
        assert old["full_name"] not in text
        assert c.initial_state["customers"] == [new]


def test_bad_settings_are_refused(singles, harbor):
    with pytest.raises(SynthesisError, match="sizes"):
        compose(singles, harbor_graph(harbor), 3, sizes=(1, 3))
    with pytest.raises(SynthesisError, match="unique"):
        compose([singles[0], singles[0]], harbor_graph(harbor), 3)


# --- LLM wording -----------------------------------------------------------------------------------
class ScriptedLLM:
    """Duck-typed SynthLLM: answers each composition call from a list of replies (then repeats the last)."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.calls = []

    async def ajson(self, role, messages, *, seed=0, attempts=3):
        self.calls.append((role, messages))
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


def test_llm_wording_used_when_valid_and_rejected_when_it_leaks(harbor, singles):
    pool = [s for s in singles if Provenance.of(s).plan["persona"]["tier"] == "standard"]
    base = compose(pool, harbor_graph(harbor), 1, seed=2, sizes=(2, 2), domain=harbor)[0]
    good = {
        "persona": "A busy nurse.",
        "requests": ["First thing, please.", "And the second thing."],
        "instructions": "",
    }
    llm = ScriptedLLM([good])
    out = asyncio.run(acompose(pool, harbor_graph(harbor), 1, seed=2, sizes=(2, 2), domain=harbor, llm=llm))
    assert out[0].scenario.requests == good["requests"]
    assert Provenance.of(out[0]).versions["backend"] == "llm"
    assert llm.calls[0][0] == "composition"
    # a looked-up value (the customer id comes from find_customer's output) leaks: retried, then the template
    prov = Provenance.of(base)
    i = next(i for i, a in enumerate(base.actions) if a.name == "verify_identity")
    leak_value = base.actions[i].arguments["customer_id"]
    pool2 = []
    for s in pool:
        p = Provenance.of(s)
        p.derivations = [
            {k: ({"kind": "output", "action": 0} if k == "customer_id" else v) for k, v in d.items()}
            for d in p.derivations
        ]
        pool2.append(s.model_copy(update={"metadata": {"synthesis": p.to_dict()}}))
    leak = {**good, "requests": [f"My id is {leak_value}.", "Second."]}
    llm = ScriptedLLM([leak])
    out = asyncio.run(acompose(pool2, harbor_graph(harbor), 1, seed=2, sizes=(2, 2), domain=harbor, llm=llm))
    assert len(llm.calls) == 2 and "look up" in llm.calls[1][1][-1]["content"]
    assert Provenance.of(out[0]).versions["backend"] == "template-fallback"
    assert out[0].scenario.requests == base.scenario.requests
    assert prov.components == Provenance.of(out[0]).components


def test_llm_wording_through_synthllm_on_loopback(harbor, singles):
    llm_mod = pytest.importorskip("tau_env.synthesis.llm")
    from tau_env.testing import FakeOpenAI, text

    pool = [s for s in singles if Provenance.of(s).plan["persona"]["tier"] == "preferred"]
    reply = {"persona": "Calm.", "requests": ["One.", "Two."], "instructions": "Be brief."}
    with FakeOpenAI(lambda body: text(json.dumps(reply))) as server:
        llm = llm_mod.SynthLLM("fake", server.url)
        out = asyncio.run(acompose(pool, harbor_graph(harbor), 2, seed=0, sizes=(2, 2), domain=harbor, llm=llm))
        llm.close()
    assert out and all(t.scenario.requests == ["One.", "Two."] for t in out)
    assert llm.usage["composition"]["calls"] >= 2


# --- property test over random tool graphs and task pools -----------------------------------------
TOOLS = [f"w{i}" for i in range(8)]


def make_pool(rng: random.Random, n: int) -> list[Task]:
    tasks = []
    for i in range(n):
        tier = rng.choice(["a", "b", "c"])
        cid = f"CU-{i}"
        name = f"Person{i} Last{i}"
        tools = rng.sample(TOOLS, rng.randint(1, 2))
        items = [f"IT-{rng.randint(0, 3 * n)}" for _ in range(rng.randint(0, 2))]
        state = {
            "customers": [{"customer_id": cid, "full_name": name, "tier": tier}],
            "items": [{"item_id": x, "owner": cid, "qty": rng.randint(0, 3)} for x in dict.fromkeys(items)],
        }
        actions = [
            {"name": "find_customer", "arguments": {"full_name": name}},
            {"name": "verify_identity", "arguments": {"customer_id": cid}},
        ] + [{"name": t, "arguments": {"customer_id": cid, "item_id": items[0] if items else "none"}} for t in tools]
        plan = {"id": f"t{i}", "intent": f"do {i}", "tools": tools, "persona": {"tier": tier}}
        derivs = [{}, {"customer_id": {"kind": "output", "action": 0}}] + [{} for _ in tools]
        tasks.append(
            Task.model_validate(
                {
                    "id": f"t{i}",
                    "scenario": {"requests": [f"please do {i}"], "facts": {"full name": name}},
                    "initial_state": state,
                    "actions": actions,
                    "metadata": {"synthesis": Provenance(plan=plan, derivations=derivs).to_dict()},
                }
            )
        )
    return tasks


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n_tasks=st.integers(2, 24),
    density=st.floats(0.0, 0.8),
    lo=st.integers(2, 3),
    extra=st.integers(0, 2),
)
def test_property_never_conflicting_mixed_colliding_or_oversized(seed, n_tasks, density, lo, extra):
    rng = random.Random(seed)
    pairs = [(a, b) for a in TOOLS for b in TOOLS if a <= b and rng.random() < density]
    graph = Graph(TOOLS, pairs)
    pool = make_pool(rng, n_tasks)
    by_id = {t.id: t for t in pool}
    comps = compose(pool, graph, 10, seed=seed, sizes=(lo, lo + extra))
    assert len({c.id for c in comps}) == len(comps) <= 10
    for c in comps:
        ids = Provenance.of(c).components
        assert lo <= len(ids) <= lo + extra and len(set(ids)) == len(ids)
        parts = [by_id[i] for i in ids]
        # one tier: the tier each component's chain was computed for (its own customer's row)
        assert len({p.initial_state["customers"][0]["tier"] for p in parts}) == 1
        assert c.initial_state["customers"][0]["tier"] == parts[0].initial_state["customers"][0]["tier"]
        # a chain decided by its customer's age or seniority keeps its own customer: it comes first
        assert not any(_pinned(Provenance.of(p)) for p in parts[1:])
        for x in range(len(parts)):
            for y in range(x + 1, len(parts)):
                wx, wy = Provenance.of(parts[x]).plan["tools"], Provenance.of(parts[y]).plan["tools"]
                assert not any(graph.conflict(a, b) for a in wx for b in wy)
        for table, rows in c.initial_state.items():
            key = "customer_id" if table == "customers" else "item_id"
            keys = [r[key] for r in rows]
            assert len(keys) == len(set(keys)), f"colliding {table} ids in {c.id}"
        assert len(c.initial_state["customers"]) == 1
        assert sum(a.name == "verify_identity" for a in c.actions) == 1
        assert len(Provenance.of(c).derivations) == len(c.actions)
        # the output derivation of the deduplicated verify points at the one find_customer
        for a, d in zip(c.actions, Provenance.of(c).derivations, strict=True):
            if a.name == "verify_identity":
                assert c.actions[d["customer_id"]["action"]].name == "find_customer"


# --- real synthesized singles and real tool graphs ---------------------------------------------------
def test_composites_of_synthesized_harbor_singles_pass_check_task(harbor):
    from tau_env.synthesis.planner import Planner
    from tau_env.synthesis.synthesizer import synthesize, templates_of
    from tau_env.synthesis.templates import SynthContext
    from tau_env.synthesis.templates import harbor_bank as hb
    from tau_env.synthesis.tool_graph import build_tool_graph

    ctx = SynthContext(harbor, templates=dict(hb.TEMPLATES))
    singles = [asyncio.run(synthesize(p, ctx)) for p in Planner(templates_of(ctx), seed=4).plan(120)]
    graph = build_tool_graph(harbor)
    comps = compose(singles, graph, 15, seed=4, domain=harbor)
    assert len(comps) == 15
    d = harbor.with_tasks(comps)
    by_id = {t.id: t for t in singles}
    writes = set(graph.write_tools())
    for c in comps:
        tau_env.check_task(d, c, play=True)
        prov = Provenance.of(c)
        parts = [by_id[i] for i in prov.components]
        # one tier: the tier each component's chain was computed for (its own customer's row)
        assert len({p.initial_state["customers"][0]["tier"] for p in parts}) == 1
        assert c.initial_state["customers"][0]["tier"] == parts[0].initial_state["customers"][0]["tier"]
        # a chain decided by its customer's age or seniority keeps its own customer: it comes first
        assert not any(_pinned(Provenance.of(p)) for p in parts[1:])
        tools = [{a.name for a in p.actions} & writes - {"verify_identity"} for p in parts]
        for x in range(len(tools)):
            for y in range(x + 1, len(tools)):
                assert not any(graph.conflict(u, v) for u in tools[x] for v in tools[y])
        assert sum(a.name == "verify_identity" for a in c.actions) == 1
        assert not any(r.lower().startswith(("also, hi", "also, hello")) for r in c.scenario.requests)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n_tasks=st.integers(2, 20), density=st.floats(0.0, 0.9))
def test_property_with_toolgraph_objects(seed, n_tasks, density):
    from tau_env.synthesis.tool_graph import Edge, ToolGraph, ToolNode

    rng = random.Random(seed)
    nodes = {t: ToolNode(t, "agent", "write") for t in TOOLS}
    nodes["verify_identity"] = ToolNode("verify_identity", "agent", "write")
    edges = [Edge(a, b, "conflict") for a in TOOLS for b in TOOLS if a <= b and rng.random() < density]
    edges += [Edge(a, b, "requires") for a in TOOLS for b in TOOLS if a != b and rng.random() < 0.2]
    graph = ToolGraph("random", nodes, edges)
    pool = make_pool(rng, n_tasks)
    by_id = {t.id: t for t in pool}
    for c in compose(pool, graph, 8, seed=seed):
        parts = [by_id[i] for i in Provenance.of(c).components]
        assert 2 <= len(parts) <= 4
        # one tier: the tier each component's chain was computed for (its own customer's row)
        assert len({p.initial_state["customers"][0]["tier"] for p in parts}) == 1
        assert c.initial_state["customers"][0]["tier"] == parts[0].initial_state["customers"][0]["tier"]
        # a chain decided by its customer's age or seniority keeps its own customer: it comes first
        assert not any(_pinned(Provenance.of(p)) for p in parts[1:])
        names = [{a.name for a in p.actions} & set(TOOLS) for p in parts]
        for x in range(len(names)):
            for y in range(x + 1, len(names)):
                assert not any(graph.conflict(u, v) for u in names[x] for v in names[y])
        items = [r["item_id"] for r in c.initial_state.get("items", [])]
        assert len(items) == len(set(items))


def test_property_pools_are_not_vacuous():
    """The random pools both yield composites and hold conflicting pairs the composer must avoid."""
    rng = random.Random(5)
    pairs = [(a, b) for a in TOOLS for b in TOOLS if a <= b and rng.random() < 0.3]
    graph = Graph(TOOLS, pairs)
    pool = make_pool(rng, 24)
    tools = {t.id: Provenance.of(t).plan["tools"] for t in pool}
    conflicting = sum(
        any(graph.conflict(a, b) for a in tools[x.id] for b in tools[y.id]) for x in pool for y in pool if x.id < y.id
    )
    assert conflicting >= 20
    comps = compose(pool, graph, 10, seed=5)
    assert len(comps) >= 5


def test_llm_wording_that_states_a_computed_fee_is_rejected(harbor):
    from tau_env.synthesis.planner import Planner
    from tau_env.synthesis.synthesizer import synthesize, templates_of
    from tau_env.synthesis.templates import SynthContext
    from tau_env.synthesis.templates import harbor_bank as hb

    ctx = SynthContext(harbor, templates=dict(hb.TEMPLATES))
    singles = [asyncio.run(synthesize(p, ctx)) for p in Planner(templates_of(ctx), seed=6).plan(80)]
    graph = harbor_graph(harbor)
    base = compose(singles, graph, 30, seed=6, sizes=(2, 2), domain=harbor)
    fee = None
    for c in base:
        prov = Provenance.of(c)
        for a, d in zip(c.actions, prov.derivations, strict=True):
            for arg, v in a.arguments.items():
                if arg.endswith("_cents") and v and d[arg]["kind"] in ("constant", "rule") and not fee:
                    fee, target = f"${v / 100:,.2f}", c
    assert fee, "no composite with a computed fee"
    reply = {"persona": "Calm.", "requests": [f"It should cost {fee}.", "Next."], "instructions": ""}
    llm = ScriptedLLM([reply])
    out = asyncio.run(acompose(singles, graph, 30, seed=6, sizes=(2, 2), domain=harbor, llm=llm))
    got = next(t for t in out if t.id == target.id)
    assert Provenance.of(got).versions["backend"] == "template-fallback"
    assert got.scenario.requests == target.scenario.requests
    corrections = [m[-1]["content"] for _, m in llm.calls if m[-1]["content"].startswith("Fix these")]
    assert any("must look up" in c and fee in c for c in corrections)
