"""The entity graph: rule-based extraction measured against a hand-written truth for Harbor Bank,
citations, ids, JSON, conflicts, random markdown, LLM extraction through a scripted server, tau3."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tau_env.synthesis.entity_graph import (
    Constant,
    EntityGraph,
    _tokens,
    bare,
    build_entity_graph,
    plain,
    rule_extract,
    slug,
)

from tau_env import Document, registry
from tau_env.testing import FakeOpenAI, text
from tests.conftest import TAU3_DATA, make_domain, needs_shared

TRUTH = Path(__file__).parent / "data" / "harbor_entity_truth.json"


@pytest.fixture(scope="module")
def harbor():
    return registry.load_domain("harbor-bank-v0")


@pytest.fixture(scope="module")
def graph(harbor):
    return build_entity_graph(harbor)


def _norm(v):
    return ("s", v.strip().lower()) if isinstance(v, str) else ("n", round(float(v), 6))


def measure(graph: EntityGraph, truth: dict) -> tuple[float, float, Counter, Counter]:
    """Precision and recall over the annotated documents; a constant is (doc, line, value), with multiplicity."""
    docs = set(truth["documents"])
    want = Counter((c["doc"], c["line"], _norm(c["value"])) for c in truth["constants"])
    got = Counter((c.doc, c.line, _norm(c.value)) for c in graph.constants if c.doc in docs)
    hit = sum((want & got).values())
    return hit / max(1, sum(got.values())), hit / max(1, sum(want.values())), got - want, want - got


def test_precision_and_recall_against_the_hand_written_truth(graph, harbor):
    truth = json.loads(TRUTH.read_text())
    ids = {d.id for d in harbor.documents}
    assert len(truth["documents"]) >= 12 and set(truth["documents"]) <= ids
    precision, recall, extra, missed = measure(graph, truth)
    # measured: precision 1.00, recall 0.99 (196 of 197; 'only one of the two charges' is missed)
    assert precision >= 0.95, f"precision {precision:.3f}; not in the truth: {sorted(extra)}"
    assert recall >= 0.95, f"recall {recall:.3f}; missed: {sorted(missed)}"


def test_precision_and_recall_on_held_out_documents(graph):
    """Annotated after the rules were written: 0.90 / 0.90 at first; 0.95 / 0.90 once back-quoted tool
    names stopped counting as values. Missed: 'no per-check limit', a double-quoted endorsement text;
    extra: the parenthesised term "dynamic currency conversion"."""
    held = json.loads(TRUTH.read_text())["held_out"]
    assert len(held["documents"]) >= 6 and len(held["constants"]) >= 20
    precision, recall, extra, missed = measure(graph, held)
    assert precision >= 0.9 and recall >= 0.85, f"{precision:.2f} / {recall:.2f}: {sorted(extra)} {sorted(missed)}"


def test_determining_attributes_agree_with_the_truth(graph):
    truth = json.loads(TRUTH.read_text())
    by_pos: dict[tuple, list[Constant]] = {}
    for c in graph.constants:
        by_pos.setdefault((c.doc, c.line, _norm(c.value)), []).append(c)
    checked = agree = 0
    for t in truth["constants"]:
        for k in ("tier", "product", "reason", "delivery"):
            if k in t["attributes"]:
                checked += 1
                cands = by_pos.get((t["doc"], t["line"], _norm(t["value"])), [])
                agree += any(c.attributes.get(k) == t["attributes"][k] for c in cands)
    assert checked >= 80
    assert agree / checked >= 0.9, f"{agree}/{checked} determining attributes agree"


def test_every_citation_states_its_value(graph, harbor):
    lines = {d.id: d.text.splitlines() for d in harbor.documents}
    assert len(graph.constants) > 300
    for c in graph.constants:
        assert c.text == lines[c.doc][c.line - 1]
        quote = c.attributes["quote"]
        assert quote and quote in plain(c.text), c
        if c.unit != "category":  # the quote, read where it stands on the line, is the value
            line = plain(c.text)
            assert any(v == c.value and u == c.unit and quote in line[s - 2 : e + 2] for v, u, s, e in _tokens(line)), c
        elif c.value == "unlimited":
            assert quote.lower() in ("no limit", "unlimited")
        else:
            assert bare(c.value).lower() in bare(quote).lower(), c


def test_ids_follow_the_scheme_are_unique_and_stable(graph, harbor):
    ids = [c.id for c in graph.constants]
    assert len(ids) == len(set(ids))
    assert ids == [c.id for c in build_entity_graph(harbor).constants]
    wire = graph.by_id("fee_schedule_2025/wires/outgoing_domestic_wire/standard")
    assert (wire.value, wire.unit, wire.line, wire.attributes["tier"]) == (3000, "cents", 37, "standard")
    fee = graph.by_id("fee_schedule_2025/account_activity_fees/overdraft_fee")
    assert (fee.value, fee.attributes["label"]) == (3500, "Overdraft fee")
    assert graph.by_id("fee_schedule_2025/account_activity_fees/overdraft_fee~2").value == 3
    for c in graph.constants:
        head = c.id.split("~")[0].split("/")
        assert head[0] == c.doc and all(p == slug(p) for p in head[1:]), c.id


def test_get_matches_slugs_and_attributes(graph):
    c = graph.get("fee_schedule_2025", section="Debit card replacement", row="Damaged card", column="Standard")
    assert (c.value, c.attributes["reason"]) == (500, "damaged")
    assert graph.get("debit_card_daily_limits", row="Private").value == 1_000_000
    assert graph.get("debit_card_daily_limits", label="new cards issued limit", tier="preferred").value == 250_000
    assert graph.get("product_student_checking", label="Minimum opening deposit").value == 1000
    with pytest.raises(KeyError, match="3 constants"):
        graph.get("debit_card_daily_limits", label="new cards issued limit")
    with pytest.raises(KeyError, match="no constant.*the document's constants"):
        graph.get("fee_schedule_2025", row="no such row")
    with pytest.raises(KeyError, match="no constant 'nope/x'"):
        graph.by_id("nope/x")


def test_get_by_a_label_a_prose_line_does_not_name(graph):
    # the words are in the section heading and the line; both 60s state one value
    window = graph.get("fee_refund_eligibility", section="2. Refund window", label="Refund window")
    assert (window.value, window.unit, window.line) == (60, "days", 19)
    # "one (1) ... rolling 12-month period": the 12 months is part of the label, the value asked is 1
    per_year = graph.get("standard_banking_benefits", section="Courtesy fee refunds", label="Refunds per 12 months")
    assert per_year.value == 1
    # "Monthly maintenance fee: $8, waived ... $1,500": a label's first value is its value
    assert graph.get("product_everyday_checking", label="Monthly maintenance fee").value == 800
    with pytest.raises(KeyError, match="no constant"):
        graph.get("fee_refund_eligibility", section="2. Refund window", label="Refund deadline")


def test_find_value(graph):
    hits = graph.find_value(3000, docs={"fee_schedule_2025"})
    assert {c.id for c in hits} == {
        "fee_schedule_2025/account_activity_fees/stop_payment_fee",
        "fee_schedule_2025/wires/outgoing_domestic_wire/standard",
    }
    assert any(c.doc == "procedure_courtesy_fee_refunds" for c in graph.find_value("Courtesy Refund"))
    assert graph.find_value(123456789) == []


def test_nodes_products_features_and_tool_names(graph):
    kinds = Counter(n["kind"] for n in graph.nodes)
    assert kinds["product"] >= 6 and kinds["feature"] >= 20 and kinds["tool_name"] >= 10
    node = {n["id"]: n for n in graph.nodes}
    everyday = node["product:everyday_checking"]
    assert "fee_schedule_2025/monthly_maintenance_fees/everyday_checking/fee" in everyday["constants"]
    assert "product_everyday_checking" in everyday["docs"]
    assert "procedure_card_replacement" in node["tool:replace_card_5120"]["docs"]
    assert node["product:cd_12_month"]["constants"]


def test_json_round_trip_and_write(graph, tmp_path):
    back = EntityGraph.from_json(json.loads(json.dumps(graph.to_json())))
    assert back.to_json() == graph.to_json()
    assert back.by_id("fee_schedule_2025/wires/outgoing_domestic_wire/private").value == 0
    j, s = graph.write(tmp_path / "graphs")
    assert EntityGraph.from_json(json.loads(j.read_text())).to_json() == graph.to_json()
    svg = ElementTree.fromstring(s.read_text())
    assert svg.tag.endswith("svg") and "Everyday Checking" in s.read_text()


def test_harbor_restatements_agree_and_a_changed_one_is_reported(harbor, graph):
    assert graph.conflicts == [] and graph.stats["restatements"] >= 5
    docs = list(harbor.documents)
    i = next(k for k, d in enumerate(docs) if d.id == "stop_payment_requests")
    assert "$30" in docs[i].content
    docs[i] = Document(docs[i].id, docs[i].title, docs[i].content.replace("$30", "$25"))
    changed = build_entity_graph(make_domain(documents=docs))
    (conflict,) = changed.conflicts
    assert conflict["key"]["unit"] == "cents" and "stop" in conflict["key"]["topic"]
    assert conflict["values"] == {"fee_schedule_2025": [3000], "stop_payment_requests": [2500]}


def test_conflict_keys_respect_determining_attributes():
    docs = [
        Document("a", "Fees A", "| Fee | Standard | Gold |\n|---|---|---|\n| Wire fee | $30.00 | $10.00 |"),
        Document("b", "Fees B", "## Wires\n- Wire fee: $30 for Standard customers.\n- Wire fee: $12 (Gold)."),
    ]
    g = build_entity_graph(make_domain(documents=docs))
    assert [c["values"] for c in g.conflicts] == [{"a": [1000], "b": [1200]}]
    assert g.conflicts[0]["key"]["tier"] == "gold" and g.stats["restatements"] == 1


def test_small_documents_and_odd_lines():
    doc = Document(
        "t",
        "Title",
        "Intro with $1,234.50 and 12.5% and 3-5 business days.\n\n## Limits\n| Tier | Max | Note |\n|---|---|\n"
        "| Gold | $5k | huge |\n| | $9,999,999,999,999.99 |\n- Plain item without numbers.\n"
        "- Cutoff: 4:30 p.m. on March 3, 2025.\n- Code: `ABC` (see ID HRBRUS33); call 555-0142.",
    )
    cs = rule_extract(doc, {}, ("gold",))
    got = [(c.line, c.value, c.unit) for c in cs]
    assert (3, 123450, "cents") in got and (3, 12.5, "percent") in got
    assert (3, 3, "business_days") in got and (3, 5, "business_days") in got
    assert (8, 500000, "cents") in got and (8, "huge", "category") in got
    assert (9, 999999999999999, "cents") in got
    assert (11, "16:30", "time") in got and (11, "2025-03-03", "date") in got
    assert (12, "ABC", "category") in got and (12, "HRBRUS33", "code") in got and (12, "555-0142", "phone") in got
    gold = next(c for c in cs if c.value == 500000)
    assert gold.attributes["tier"] == "gold" and gold.id == "t/limits/gold/max"
    assert next(c for c in cs if c.value == 123450).id.startswith("t/title/")


_cell = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=25)
_num = st.one_of(
    st.integers(0, 10**30).map(lambda n: f"${n:,}"),
    st.floats(0, 1e9, allow_nan=False).map(lambda f: f"${f:.2f}"),
    st.integers(0, 10**6).map(lambda n: f"{n}%"),
    st.integers(0, 500).map(lambda n: f"{n} days"),
    st.sampled_from(["`code`", "4:00 p.m.", "1 January 2025", "five business days", "no limit", "1-800-555-0100"]),
)
_line = st.one_of(
    st.lists(st.one_of(_cell, _num), min_size=1, max_size=5).map(lambda cs: "| " + " | ".join(cs) + " |"),
    st.lists(st.one_of(_cell, _num), min_size=1, max_size=4).map(lambda cs: "- " + ": ".join(cs)),
    st.lists(st.one_of(_cell, _num), min_size=1, max_size=4).map(" ".join),
    st.sampled_from(["|---|---|", "## Section ¶ ünïcode", "# ", "|", "||", "- ", "**", "`"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_line, max_size=12))
def test_random_markdown_never_crashes_nor_cites_a_line_without_its_value(lines):
    doc = Document("rand", "Random", "\n".join(lines))
    text_lines = doc.text.splitlines()
    cs = rule_extract(doc, {"checking plus": "checking_plus"})
    for c in cs:
        assert 1 <= c.line <= len(text_lines) and c.text == text_lines[c.line - 1]
        assert c.attributes["quote"] in plain(c.text)
    assert len({c.id for c in cs}) == len(cs)
    EntityGraph.from_json(json.loads(json.dumps(EntityGraph(cs).to_json())))


def test_llm_extraction_keeps_supported_constants_and_drops_hallucinations():
    from tau_env.synthesis.llm import SynthLLM

    # Document.text is the title, an empty line, then the content: the content starts on line 3
    docs = [Document("returns", "Returns policy", "Returns are accepted within 30 days with a receipt.\nNo cash.")]
    reply = {
        "constants": [
            {"name": "Return window", "value": 30, "unit": "days", "line": 3, "quote": "within 30 days"},
            {"name": "Restocking fee", "value": 1500, "unit": "cents", "line": 3, "quote": "$15 restocking fee"},
            {"name": "Cash refunds", "value": "no cash", "unit": "category", "line": 4, "quote": "No cash."},
            {"name": "Wrong line", "value": 30, "unit": "days", "line": 4, "quote": "within 30 days"},
        ]
    }
    with FakeOpenAI(lambda request: text(json.dumps(reply))) as server:
        llm = SynthLLM("m", server.url)
        g = build_entity_graph(make_domain(documents=docs), llm=llm, seed=3)
        (request,) = server.requests
    assert request["seed"] == 3 and "3: Returns are accepted within 30 days" in request["messages"][-1]["content"]
    assert g.stats["llm_dropped"] == 2 and g.stats["llm_duplicate"] == 1 and g.stats["llm_kept"] == 1
    (cash,) = [c for c in g.constants if c.attributes.get("source") == "llm"]
    assert (cash.id, cash.value, cash.line) == ("returns/returns_policy/cash_refunds", "no cash", 4)
    assert [c.value for c in g.constants if c.doc == "returns"] == [30, "no cash"]
    assert llm.usage["entity_extraction"]["calls"] == 1


@needs_shared(TAU3_DATA)
@pytest.mark.filterwarnings("ignore:tau3-banking. tau2-bench's user-simulator")
def test_tau3_banking_documents():
    """698 documents: about 4,500 constants in 2-5 s on this box; few conflicts (numbered series compare within)."""
    domain = registry.load_domain("tau3-banking", data_dir=TAU3_DATA)
    assert len(domain.documents) == 698
    start = time.perf_counter()
    g = build_entity_graph(domain)
    took = time.perf_counter() - start
    assert len(g.constants) > 3000 and len({c.id for c in g.constants}) == len(g.constants)
    assert sum(n["kind"] == "product" for n in g.nodes) >= 20 and len(g.conflicts) < 50
    lines = {d.id: d.text.splitlines() for d in domain.documents}
    assert all(c.attributes["quote"] in plain(lines[c.doc][c.line - 1]) for c in g.constants)
    assert took < 120, f"{took:.1f} s for {len(g.constants)} constants"
