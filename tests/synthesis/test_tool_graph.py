"""The tool graph: nodes, declared / mined / reviewed edges, conflicts, JSON and the picture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tau_env.synthesis.errors import SynthesisError
from tau_env.synthesis.tool_graph import (
    EDGE_KINDS,
    Edge,
    ToolGraph,
    ToolNode,
    build_tool_graph,
    precision_recall,
    rule_constants,
)

import tau_env
from tau_env import ToolContext, tool
from tests.conftest import TAU3_DATA, TOOLS, make_domain, needs_tau3_data

TRUTH = Path(__file__).parent / "data" / "harbor_tool_truth.json"


@pytest.fixture(scope="module")
def harbor():
    return tau_env.registry.load_domain("harbor-bank-v0")


@pytest.fixture(scope="module")
def graph(harbor):
    return build_tool_graph(harbor)


def test_nodes_are_the_full_toolbox_with_argument_domains(harbor, graph):
    assert set(graph.nodes) == set(harbor.toolbox("all").tools)
    n = graph.nodes["replace_card_5120"]
    assert (n.side, n.kind, n.discoverable) == ("agent", "write", True)
    assert n.params["reason"]["enum"] == ["lost", "stolen", "damaged"]
    assert n.params["card_id"]["db"]["table"] == "cards"
    assert set(n.params["card_id"]["db"]["values"]) == {c["card_id"] for c in harbor.seed["cards"]}
    assert graph.nodes["transfer_funds"].params["from_account_id"]["db"]["column"] == "account_id"
    assert graph.nodes["approve_wire_in_app"].handover
    assert graph.nodes["transfer_to_human"].ends_episode
    assert "verify_identity" in graph.nodes["transfer_funds"].requires
    assert set(graph.write_tools()) == {n for n, t in harbor.toolbox("all").tools.items() if t.kind == "write"}


def test_key_edges(graph):
    assert graph.has("verify_identity", "lock_card", "requires")
    assert graph.has("list_cards", "replace_card_5120", "produces", "card_id")
    assert graph.has("unlock_tool", "release_wire_9152", "unlock")
    assert graph.has("hand_over_tool", "approve_wire_in_app", "handover")
    assert graph.has("initiate_wire_9150", "approve_wire_in_app", "follow_up")
    assert graph.conflict("lock_card", "unlock_card") and graph.conflict("unlock_card", "lock_card")
    assert graph.conflict("transfer_funds", "close_account_8837")
    assert not graph.conflict("update_contact_info", "set_travel_notice_3012")
    deps = graph.dependencies("release_wire_9152")
    assert deps and all("release_wire_9152" in (e.src, e.dst) and e.kind != "conflict" for e in deps)


def test_json_round_trip_and_picture(graph, tmp_path):
    js, svg = graph.write(tmp_path / "graphs")
    back = ToolGraph.read(js)
    assert back.to_json() == graph.to_json()
    assert back.conflict("lock_card", "unlock_card")
    text = svg.read_text()
    assert text.startswith("<svg") and "release_wire_9152" in text and text.rstrip().endswith("</svg>")
    assert json.loads(js.read_text())["domain"] == graph.domain


def test_edge_key_is_undirected_for_conflicts_only():
    assert Edge("a", "b", "conflict").key == Edge("b", "a", "conflict").key
    assert Edge("a", "b", "requires").key != Edge("b", "a", "requires").key


# --- measured against the hand-written truth ---------------------------------------------------------
def _truth() -> set[tuple]:
    t = json.loads(TRUTH.read_text())
    deps = {Edge(e["src"], e["dst"], e["kind"], param=e.get("param")).key for e in t["dependencies"]}
    return deps | {Edge(a, b, "conflict").key for a, b in t["conflicts"]}


def test_truth_names_real_tools_and_arguments(harbor):
    tools = harbor.toolbox("all").tools
    for src, dst, kind, param in _truth():
        assert src in tools and dst in tools, (src, dst)
        assert kind in EDGE_KINDS
        if kind == "produces":
            assert param in tools[dst].parameters["properties"], (src, dst, param)


def test_mined_edges_against_the_truth(harbor):
    """The miner alone (no metadata, no reviewed file): precision and recall as measured."""
    g = build_tool_graph(harbor, overrides=False, declared=False)
    truth, mined = _truth(), g.edge_keys(g.mined)
    assert g.edge_keys() == mined
    deps = {k for k in truth if k[2] != "conflict"}
    conflicts = truth - deps
    p_dep, r_dep = precision_recall({k for k in mined if k[2] != "conflict"}, deps)
    p_con, r_con = precision_recall({k for k in mined if k[2] == "conflict"}, conflicts)
    p_all, r_all = precision_recall(mined, truth)
    # measured: dependencies P 0.93 R 0.77; conflicts P 0.89 R 0.47; all P 0.92 R 0.71
    assert p_dep >= 0.9 and r_dep >= 0.75
    assert p_con >= 0.85 and r_con >= 0.45
    assert p_all >= 0.9 and r_all >= 0.7
    # the miner finds the identity check before every write the tools guard, and the unlock chain
    for k in truth:
        if k[0] == "verify_identity" and k[2] == "requires" or k[2] in ("unlock", "handover", "follow_up"):
            assert k in mined, k


def test_with_the_reviewed_file_the_graph_is_the_truth(graph):
    assert graph.edge_keys() == _truth()
    assert graph.stats["by_source"]["mined"] > 0  # the follow-ups come from mining alone


def test_constant_links_and_rule_constants(harbor):
    from tau_env.synthesis.entity_graph import build_entity_graph

    eg = build_entity_graph(harbor)
    g = build_tool_graph(harbor, eg)
    fee = g.nodes["replace_card_5120"].params["fee_cents"]["constants"]
    assert fee and all(eg.by_id(c).doc == "fee_schedule_2025" for c in fee)
    limits = g.nodes["change_daily_limit_7745"].params["new_limit_cents"]["constants"]
    assert any("maximum_daily_spending_limit" in c for c in limits)
    rules = rule_constants(eg, g)
    assert set(fee) <= set(rules) and set(limits) <= set(rules)
    assert all(eg.by_id(c) for c in rules)
    # the reviewed file can drop a link and name a tool's policy preconditions
    first = fee[0]
    some_rule = next(c.id for c in eg.constants if c.doc == "procedure_travel_notices")
    g2 = build_tool_graph(
        harbor,
        eg,
        overrides={
            "drop_constants": {"replace_card_5120.fee_cents": [first]},
            "rules": {"set_travel_notice_3012": [some_rule, "no/such/constant"]},
        },
    )
    assert first not in g2.nodes["replace_card_5120"].params["fee_cents"]["constants"]
    assert g2.nodes["set_travel_notice_3012"].rules == [some_rule, "no/such/constant"]
    r2 = rule_constants(eg, g2)
    assert some_rule in r2 and "no/such/constant" not in r2


# --- overrides -----------------------------------------------------------------------------------------
def test_overrides_add_and_remove(harbor):
    g = build_tool_graph(
        harbor,
        overrides={
            "add": [{"src": "get_customer", "dst": "update_contact_info", "kind": "requires", "why": "x"}],
            "remove": [{"src": "lock_card", "dst": "unlock_card", "kind": "conflict"}],
            "constants": {"transfer_funds.amount_cents": ["some/doc/const"]},
        },
        mine=False,
    )
    assert g.has("get_customer", "update_contact_info", "requires")
    assert [e.source for e in g.edges if e.src == "get_customer" and e.kind == "requires"] == ["override"]
    assert not g.conflict("unlock_card", "lock_card")
    assert "some/doc/const" in g.nodes["transfer_funds"].params["amount_cents"]["constants"]
    assert "get_customer" in g.nodes["update_contact_info"].requires


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ([], "must hold a JSON object"),
        ({"add": {}}, "'add' must be a list"),
        ({"add": [{"src": "lock_card"}]}, r"add\[0\] must be an object with src, dst and kind"),
        ({"remove": [{"src": "lock_card", "dst": "unlock_card", "kind": "clash"}]}, r"remove\[0\]: kind 'clash'"),
        ({"add": [{"src": "lock_crd", "dst": "unlock_card", "kind": "conflict"}]}, r"add\[0\]: src 'lock_crd'"),
        ({"add": [{"src": "list_cards", "dst": "lock_card", "kind": "produces"}]}, r"add\[0\]: a produces edge"),
        ({"add": [{"src": "a", "dst": "b", "kind": "conflict", "wy": 1}]}, r"add\[0\]: src 'a'"),
        ({"edges": []}, r"unknown keys \['edges'\]"),
        ({"constants": {"lock_card": ["x"]}}, r"constants\['lock_card'\] must be 'tool.param'"),
        ({"rules": {"lock_card.card_id": ["x"]}}, r"rules\['lock_card.card_id'\] must be 'tool'"),
        ({"drop_constants": []}, r"'drop_constants' must map"),
        ({"constants": {"lock_card.card_id": "x"}}, r"must be a list of constant ids"),
        ({"constants": {"lock_card.cardid": ["x"]}}, r"lock_card has no argument 'cardid'"),
    ],
)
def test_bad_override_files_name_the_file_and_entry(harbor, tmp_path, data, expected):
    path = tmp_path / "reviewed.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SynthesisError, match=expected) as err:
        build_tool_graph(harbor, overrides=path, mine=False)
    assert str(path) in str(err.value)


def test_unreadable_override_files(harbor, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SynthesisError, match=r"bad.json is not JSON"):
        build_tool_graph(harbor, overrides=bad, mine=False)
    with pytest.raises(SynthesisError, match=r"Cannot read .*missing.json"):
        build_tool_graph(harbor, overrides=tmp_path / "missing.json", mine=False)
    with pytest.raises(SynthesisError, match="not True"):
        build_tool_graph(harbor, overrides=True, mine=False)


def test_a_stale_removal_warns(harbor):
    with pytest.warns(UserWarning, match=r"remove\[0\].*matches no edge"):
        build_tool_graph(
            harbor, overrides={"remove": [{"src": "get_customer", "dst": "lock_card", "kind": "requires"}]}, mine=False
        )


@tool(kind="write", requires=("verify_idenity",))
def poke(ctx: ToolContext, item_id: str) -> str:
    """Poke an item.

    Args:
        item_id: The item.
    """
    return "ok"


def test_declared_metadata_naming_an_unknown_tool_is_an_error():
    bad = make_domain(tools=[*TOOLS, poke])
    with pytest.raises(SynthesisError, match=r"'poke' requires 'verify_idenity', which is not a tool"):
        build_tool_graph(bad, mine=False, overrides=False)


# --- any domain: the tiny one from conftest, and tau3-banking ---------------------------------------------
def test_tiny_domain(domain):
    g = build_tool_graph(domain)
    assert g.has("unlock_tool", "secret_restock_1234", "unlock")
    assert g.has("hand_over_tool", "confirm_in_app", "handover")
    assert g.nodes["add_stock"].params["item_id"]["db"] == {
        "table": "items",
        "column": "item_id",
        "values": ["widget"],
        "n_values": 1,
    }
    assert g.stats["tasks_mined"] == len(domain.tasks)


@pytest.mark.slow
@needs_tau3_data
def test_tau3_banking():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = tau_env.registry.load_domain("tau3-banking", data_dir=str(TAU3_DATA))
    g = build_tool_graph(d)
    # measured: 71 nodes, about 120 mined edges (70 produces, 38 unlock, 4 handover, 9 conflicts)
    # from 97 tasks, in 35 s on this box
    assert len(g.nodes) == len(d.toolbox("all").tools) >= 60
    assert g.stats["tasks_mined"] == len(d.tasks)
    kinds = g.stats["by_kind"]
    assert kinds["unlock"] >= 30 and kinds["produces"] >= 40 and kinds["handover"] >= 2 and kinds["conflict"] >= 3
    assert len(g.write_tools()) >= 30
    assert g.has("give_discoverable_user_tool", "submit_cash_back_dispute_0589", "handover")
    assert ToolGraph.from_json(json.loads(json.dumps(g.to_json()))).to_json() == g.to_json()


# --- properties over random graphs ----------------------------------------------------------------------------
NAMES = st.sampled_from([f"t{i}" for i in range(6)])
EDGES = st.lists(st.tuples(NAMES, NAMES, st.sampled_from(EDGE_KINDS)), max_size=25)


@settings(max_examples=150, deadline=None)
@given(EDGES, NAMES, NAMES)
def test_random_graphs(edges, a, b):
    nodes = {f"t{i}": ToolNode(f"t{i}", "agent", "write") for i in range(6)}
    g = ToolGraph("rand", nodes=nodes, edges=[Edge(s, d, k, source="mined") for s, d, k in edges])
    assert g.conflict(a, b) == g.conflict(b, a)
    assert g.conflict(a, b) == any(k == "conflict" and {s, d} == {a, b} for s, d, k in edges)
    deps = g.dependencies(a)
    assert all(a in (e.src, e.dst) and e.kind != "conflict" for e in deps)
    assert len(deps) == sum(k != "conflict" and a in (s, d) for s, d, k in edges)
    back = ToolGraph.from_json(json.loads(json.dumps(g.to_json())))
    assert back.conflict(a, b) == g.conflict(a, b)
    assert back.edge_keys() == g.edge_keys()
