"""The run report from a fabricated run folder: its numbers, its sections, escaping."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from tau_env.synthesis.report import render_html, summary, write_report
from tau_env.synthesis.run import RunFolder

HOSTILE = "<script>alert('x')</script>&\x1b[2J"
SETTINGS = {"domain": "harbor-bank-v0", "loader": {}, "seed": 0, "backend": "template"}


def _task(tid, writes, *, decisive=(), outcome="success", mode=None, docs=1, requests=1, components=()):
    actions = [{"name": "find_customer", "arguments": {"q": tid}}]
    actions += [{"name": w, "arguments": {"id": tid, "n": i}} for i, w in enumerate(writes)]
    return {
        "id": tid,
        "scenario": {"requests": [f"req {i}" for i in range(requests)]},
        "actions": actions,
        "required_documents": [f"doc{i}" for i in range(docs)],
        "metadata": {
            "synthesis": {
                "plan": {"template": "tpl_a" if not components else "compose", "outcome": outcome},
                "outcome": outcome,
                "failure_mode": mode,
                "decisive": list(decisive),
                "components": list(components),
            }
        },
    }


@pytest.fixture
def run(tmp_path):
    with RunFolder.create(tmp_path / "run1", SETTINGS) as r:
        r.write_json(
            "graphs/tool_graph.json",
            {
                "nodes": [
                    {"name": "find_customer", "kind": "read"},
                    {"name": "freeze_card", "kind": "write"},
                    {"name": "open_account", "kind": "write"},
                    {"name": "never_used", "kind": "write"},
                ]
            },
        )
        r.write_json("graphs/rule_constants.json", ["fees/atm/standard", "limits/daily/gold", "unused/constant"])
        singles = [
            _task("t1", ["freeze_card"], decisive=["fees/atm/standard"], mode="multi_doc", docs=2),
            _task("t2", ["open_account"], decisive=["limits/daily/gold"], outcome="refusal"),
            _task("t3", ["freeze_card"], outcome="transfer", mode="implicit_order"),
            _task("t4", ["freeze_card", "open_account"], docs=0),
        ]
        dup = _task("t5", ["freeze_card"])
        dup["actions"] = singles[2]["actions"]  # same chain as t3
        singles.append(dup)
        hostile = _task(HOSTILE, ["open_account"], decisive=[HOSTILE], mode="underspecified")
        singles.append(hostile)
        r.append("tasks.jsonl", singles)
        r.append(
            "composite.jsonl",
            [_task("c1", ["freeze_card", "open_account"], requests=2, components=["t1", "t2"])],
        )
        r.record_stage(
            "tasks",
            {
                "round": 0,
                "planned": 10,
                "synthesized": 9,
                "verified": 6,
                "accepted": 4,
                "regenerated": 2,
                "problems": {"replay_error": 2, HOSTILE: 1},
                "prompt_version": 0,
            },
        )
        r.record_stage(
            "reflection",
            {
                "round": 0,
                "version": 1,
                "changes": ["weight tpl_a x2", HOSTILE],
                "decision": "keep",
                "yield_before": 0.4,
                "yield_after": 0.5,
            },
        )
        r.record_stage(
            "tasks",
            {
                "round": 1,
                "planned": 10,
                "synthesized": 10,
                "verified": 8,
                "accepted": 2,
                "problems": {"replay_error": 1},
            },
        )
        r.record_stage(
            "reflection",
            {
                "round": 1,
                "version": 2,
                "changes": [{"prompt": "wording"}],
                "decision": "rollback",
                "yield_before": 0.5,
                "yield_after": 0.2,
            },
        )
        r.record_stage("compose", {"planned": 3, "verified": 2, "accepted": 1})
        r.write_json(
            "llm_usage.json",
            {
                "model": "m",
                "roles": {
                    "wording": {
                        "calls": 20,
                        "cached": 8,
                        "failures": 1,
                        "prompt_tokens": 1000,
                        "completion_tokens": 400,
                    },
                    "review": {"calls": 8, "cached": 0, "failures": 0, "prompt_tokens": 600, "completion_tokens": 0},
                },
            },
        )
        r.write_json(
            "decontamination.json",
            {
                "removed": [{"id": "t9", "reasons": ["same reference chain as task_001", HOSTILE]}],
                "kept": 6,
                "checked": 7,
                "by_detector": {"chain": 1, "ngram": 0},
            },
        )
        r.append(
            "rl/stats.jsonl",
            [{"id": "c1", "pass_rate": 0.5}, {"id": "c2", "passes": 1, "rollouts": 8}, {"id": "c3", "pass_rate": 1.0}],
        )
        yield r


def test_summary_numbers(run):
    s = summary(run)
    assert s["tasks"] == {"single": 6, "composite": 1}
    f = s["funnel"]
    assert (f["planned"], f["synthesized"], f["verified"], f["accepted"], f["regenerated"]) == (20, 19, 14, 6, 2)
    assert f["yield"] == pytest.approx(0.3)
    assert [r["yield"] for r in f["rounds"]] == [pytest.approx(0.4), pytest.approx(0.2)]
    assert f["problems"] == {"replay_error": 3, HOSTILE: 1}
    assert s["compose"]["accepted"] == 1 and s["compose"]["planned"] == 3
    assert [r["decision"] for r in s["reflection"]] == ["keep", "rollback"]
    assert s["reflection"][1]["changes"] == ["prompt=wording"]

    llm = s["llm"]
    assert llm["totals"]["calls"] == 28 and llm["verified"] == 16  # 14 singles + 2 composites verified
    assert llm["calls_per_verified"] == pytest.approx(36 / 16)
    assert llm["tokens_per_verified"] == pytest.approx(2000 / 16)

    cov = s["coverage"]
    assert cov["write_tools"] == {"freeze_card": 4, "never_used": 0, "open_account": 3}  # singles only
    assert cov["write_tools_uncovered"] == ["never_used"] and cov["min_tasks_per_write_tool"] == 0
    assert cov["tool_pairs"] == {"freeze_card + open_account": 1}
    assert cov["rule_constants_total"] == 3 and cov["rule_constants_decisive"] == 2
    assert cov["rule_constants_uncovered"] == ["unused/constant"]
    assert cov["failure_modes"] == {"none": 3, "multi_doc": 1, "implicit_order": 1, "underspecified": 1}
    assert cov["outcomes"]["success"] == 4 and cov["outcomes"]["refusal"] == 1

    assert s["duplicates"]["single"] == {"tasks": 6, "distinct": 5, "rate": pytest.approx(1 / 6)}
    assert s["duplicates"]["composite"]["rate"] == 0

    con = s["contamination"]
    assert (con["checked"], con["removed"], con["kept"]) == (7, 1, 6)
    assert con["rate"] == pytest.approx(1 / 7) and con["by_detector"] == {"chain": 1, "ngram": 0}

    d = s["difficulty"]
    assert d["actions"] == {2: 5, 3: 2}
    assert d["documents"] == {0: 1, 1: 5, 2: 1}
    assert d["requests"] == {1: 6, 2: 1}
    assert d["rl_tasks"] == 3 and d["mean_pass_rate"] == pytest.approx((0.5 + 0.125 + 1.0) / 3)
    assert d["pass_rates"]["0.5-0.6"] == 1 and d["pass_rates"]["0.9-1.0"] == 1 and d["pass_rates"]["0.1-0.2"] == 1


def test_html_parses_has_sections_and_escapes(run):
    txt, page = write_report(run)
    assert txt == run.path / "report.txt" and page == run.path / "report.html"
    text = page.read_text()
    root = ET.fromstring(text.split("\n", 1)[1])  # well-formed XML after the doctype
    ns = {"h": "http://www.w3.org/1999/xhtml"}
    ids = {s.get("id") for s in root.iter("{http://www.w3.org/1999/xhtml}section")}
    for section in (
        "stage-yield--single-request-tasks",
        "reflection-rounds",
        "llm-calls-and-tokens",
        "coverage",
        "duplicates--same-reference-chain",
        "contamination",
        "actions-per-task",
        "rl-pass-rates",
    ):
        assert section in ids, section
    assert len(list(root.iter("{http://www.w3.org/2000/svg}svg"))) >= 8
    assert not list(root.iter("{http://www.w3.org/1999/xhtml}script"))
    assert "<script>" not in text and "&lt;script&gt;" in text and "\x1b" not in text
    assert root.find(".//h:title", ns).text.startswith("Synthesis report")
    report = txt.read_text()
    assert "Stage yield" in report and "30.0%" in report and "\x1b" not in report


def test_sections_only_with_data(tmp_path):
    with RunFolder.create(tmp_path / "bare", SETTINGS) as r:
        s = summary(r)
        assert s["funnel"] is None and s["llm"] is None and s["coverage"] is None
        assert s["contamination"] is None and s["difficulty"] is None and s["reflection"] == []
        page = render_html(s)
        ET.fromstring(page.split("\n", 1)[1])
        assert "Stage yield" not in page and "Contamination" not in page
        txt, _ = write_report(r)
        assert "Tasks" in txt.read_text()


def test_without_graphs_write_tools_are_the_tasks_tools(tmp_path):
    with RunFolder.create(tmp_path / "r", SETTINGS) as r:
        r.append("tasks.jsonl", [_task("a", ["w1"]), _task("b", ["w2", "w1"])])
        cov = summary(r)["coverage"]
        assert cov["write_tools_known"] is False
        assert cov["write_tools"] == {"find_customer": 2, "w1": 2, "w2": 1}
        assert cov["rule_constants_total"] is None


def test_counts_a_stage_does_not_record_and_other_stages(tmp_path):
    with RunFolder.create(tmp_path / "r", SETTINGS) as r:
        r.record_stage("graphs", {"constants": 458, "edges": {"requires": 18}, "names": ["a"]})
        r.record_stage("tasks", {"round": 0, "planned": 40, "synthesized": 40, "accepted": 28})
        r.record_stage("sft", {"episodes": 10, "kept": 7})
        r.write_json("llm_usage.json", {"roles": {"wording": {"calls": 56}}})
        s = summary(r)
        assert s["funnel"]["verified"] is None and s["funnel"]["accepted"] == 28
        assert s["funnel"]["yield"] == pytest.approx(0.7)
        assert s["llm"]["verified"] == 28 and s["llm"]["calls_per_verified"] == pytest.approx(2.0)
        assert s["other_stages"] == {
            "graphs": {"constants": 458, "edges.requires": 18},
            "sft": {"episodes": 10, "kept": 7},
        }
        txt, page = write_report(r)
        text = txt.read_text()
        assert ["edges.requires", "18"] in [line.split() for line in text.splitlines()] and "Stage sft" in text
        assert ["verified", "-"] in [line.split() for line in text.splitlines()]
        ET.fromstring(page.read_text().split("\n", 1)[1])
