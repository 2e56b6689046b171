"""The tool graph: nodes, declared / mined / reviewed edges, conflicts, JSON and the picture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tau_env.synthesis.tool_graph import Edge, ToolGraph, build_tool_graph

import tau_env

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
