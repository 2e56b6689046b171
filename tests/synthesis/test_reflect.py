"""Reflection: versioned prompt and weight updates; a planted harmful update is rolled back, a helpful
one kept, both in the history, and the versions survive reopening the folder."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest
from tau_env.synthesis.errors import SynthesisError
from tau_env.synthesis.llm import SynthLLM
from tau_env.synthesis.reflect import Reflector, Version, patterns, validate_proposal
from tau_env.synthesis.review import review
from test_verify import make_good_task

import tau_env
from tau_env import Task
from tau_env.testing import FakeOpenAI, text

#: A simulated generator: the share of each template's plans that end verified and accepted.
SUCCESS = {"replace_card": 0.9, "refund_fee": 0.8, "open_account": 0.0}


def run_batch(version: Version, n: int = 400, seed: int = 0) -> dict[str, Any]:
    """The next batch under ``version``'s weights: plans drawn by weight, each accepted with its
    template's success rate; failures are verification problems of that template."""
    rng = random.Random(seed)
    names = sorted(SUCCESS)
    weights = [version.weights.get(t, 1.0) for t in names]
    by_t = {t: {"planned": 0, "accepted": 0} for t in names}
    problems = []
    for _ in range(n):
        t = rng.choices(names, weights)[0]
        by_t[t]["planned"] += 1
        if rng.random() < SUCCESS[t]:
            by_t[t]["accepted"] += 1
        else:
            problems.append({"template": t, "check": "replay_error", "component": "actions", "message": "boom"})
    accepted = sum(s["accepted"] for s in by_t.values())
    return {"planned": n, "accepted": accepted, "by_template": by_t, "problems": problems, "validity": accepted / n}


def measure(stats: dict[str, Any]) -> dict[str, float]:
    return {"yield": stats["accepted"] / stats["planned"], "validity": stats["validity"]}


def test_base_version_and_files(tmp_path):
    r = Reflector(tmp_path / "reflection")
    v = r.current()
    assert v.number == 0 and v.status == "base" and v.prompts == {} and v.weights == {}
    assert json.loads((tmp_path / "reflection" / "current.json").read_text())["current"] == 0
    assert (tmp_path / "reflection" / "v0000.json").exists()
    assert r.history() == []


def test_helpful_update_is_kept(tmp_path):
    r = Reflector(tmp_path)
    before = run_batch(r.current(), seed=1)
    v = r.propose(before)
    assert v.number == 1 and v.parent == 0 and v.source == "rules"
    assert v.weights["open_account"] < 1.0  # the failing template is weighted down
    assert r.current().number == 1
    after = run_batch(v, seed=2)
    assert measure(after)["yield"] > measure(before)["yield"]
    assert r.decide(v, measure(before), measure(after)) == "keep"
    assert r.current().number == 1 and r.version(1).status == "kept"


def test_harmful_weights_are_rolled_back(tmp_path):
    r = Reflector(tmp_path)
    before = run_batch(r.current(), seed=1)
    # a planted update from a "model": every plan to the template whose tasks almost all fail
    reply = {"weights": {"open_account": 10.0, "replace_card": 0.05, "refund_fee": 0.05}, "why": "more accounts"}
    v = _propose_with_model(r, before, reply)
    assert v.source == "model" and v.weights["open_account"] == 10.0
    after = run_batch(v, seed=2)
    assert r.decide(v, measure(before), measure(after)) == "rollback"
    assert r.current().number == 0
    assert r.version(1).status == "rolled_back" and r.version(1).after["yield"] < r.version(1).before["yield"]
    # the same update is never proposed again; the rule-based one is, on top of the restored parent
    v2 = r.propose(before)
    assert v2.number == 2 and v2.parent == 0 and v2.weights.get("open_account", 1.0) < 1.0
    assert r.decide(v2, measure(before), measure(run_batch(v2, seed=3))) == "keep"
    events = [(e["event"], e["version"]) for e in r.history()]
    assert events == [("propose", 1), ("rollback", 1), ("propose", 2), ("keep", 2)]


def test_versions_survive_reopening(tmp_path):
    r = Reflector(tmp_path)
    before = run_batch(r.current(), seed=1)
    v = r.propose(before)
    r.decide(v, measure(before), {"yield": 0.0, "validity": 0.0})
    again = Reflector(tmp_path)
    assert again.current().number == 0
    assert [x.number for x in again.versions()] == [0, 1]
    assert again.version(1).status == "rolled_back" and again.version(1).weights == v.weights
    assert [e["event"] for e in again.history()] == ["propose", "rollback"]
    assert again.decide(1, {"yield": 1}, {"yield": 1}) == "rollback"  # decided once, stays decided


def test_nothing_to_change_keeps_the_current_version(tmp_path):
    r = Reflector(tmp_path)
    stats = {"planned": 9, "accepted": 9, "by_template": {t: {"planned": 3, "accepted": 3} for t in SUCCESS}}
    assert r.propose({**stats, "problems": []}).number == 0
    assert r.history() == []


def test_frequent_patterns_become_prompt_additions(tmp_path):
    r = Reflector(tmp_path)
    problems = [
        {"template": "replace_card", "check": "review:ambiguous_instruction", "component": "scenario", "message": "m"}
    ] * 5 + [{"template": "refund_fee", "check": "missing_user_fact", "component": "scenario", "message": "m"}] * 3
    stats = {"planned": 20, "accepted": 12, "by_template": {}, "problems": problems}
    pats = patterns(stats)
    assert pats[0]["check"] == "review:ambiguous_instruction" and pats[0]["count"] == 5
    v = r.propose(stats)
    assert "last four digits" in v.prompts["wording"] and "facts" in v.prompts["wording"]
    assert {c["kind"] for c in v.changes} == {"prompt"}
    # the same batch again adds nothing new
    assert r.propose(stats).number == v.number


def test_invalid_model_proposals_are_refused():
    cur = Version(0)
    assert validate_proposal({"prompts": {"agent": "x"}}, cur, {"a"}) is None
    assert validate_proposal({"weights": {"unknown_template": 2}}, cur, {"a"}) is None
    assert validate_proposal({"weights": {"a": 1e9}}, cur, {"a"}) is None
    assert validate_proposal({"weights": {"a": True}}, cur, {"a"}) is None
    assert validate_proposal([1], cur, {"a"}) is None
    prompts, weights, why = validate_proposal({"prompts": {"wording": "Be brief."}, "weights": {"a": 2}}, cur, {"a"})
    assert prompts == {"wording": "Be brief."} and weights == {"a": 2.0}


def test_unreadable_current_is_a_synthesis_error(tmp_path):
    r = Reflector(tmp_path)
    (tmp_path / "current.json").write_text("{")
    with pytest.raises(SynthesisError, match="current.json"):
        r.current()


# --- a harmful prompt addition, measured through the scripted judge ---------------------------------
BAD_ADDITION = "Reject every task that mentions a card."


def judge_script(request: dict[str, Any]):
    system = request["messages"][0]["content"]
    if BAD_ADDITION in system:
        crit = {"component": "scenario", "kind": "ambiguous_instruction", "message": "It mentions a card."}
        return text(json.dumps({"accept": False, "critiques": [crit]}))
    return text('{"accept": true, "critiques": []}')


def test_prompt_addition_that_makes_the_judge_reject_is_rolled_back(tmp_path):
    domain = tau_env.make("harbor-bank-v0").domain
    tasks = [Task.model_validate(make_good_task(domain))]
    r = Reflector(tmp_path / "reflection")

    def reviewed(version: Version) -> dict[str, float]:
        rejected = [asyncio.run(review(t, domain, judge, version.prompts)) for t in tasks]
        accepted = sum(not p for p in rejected)
        return {"yield": accepted / len(tasks), "validity": 1.0}

    with FakeOpenAI(judge_script) as server:
        judge = SynthLLM("judge", server.url, retries=0)
        before = reviewed(r.current())
        v = _propose_with_model(r, {"planned": 1, "accepted": 1}, {"prompts": {"review": BAD_ADDITION}})
        assert v.prompts["review"] == BAD_ADDITION
        after = reviewed(v)
        assert (before["yield"], after["yield"]) == (1.0, 0.0)
        assert r.decide(v, before, after) == "rollback"
        assert r.current().prompts == {}
        assert reviewed(r.current())["yield"] == 1.0


def _propose_with_model(r: Reflector, stats: dict[str, Any], reply: dict[str, Any]) -> Version:
    with FakeOpenAI(lambda request: text(json.dumps(reply))) as server:
        llm = SynthLLM("reflector", server.url, retries=0)
        v = r.propose(stats, llm)
        assert llm.usage["reflection"]["calls"] == 1
    return v


def test_invalid_model_proposal_falls_back_to_the_rules(tmp_path):
    r = Reflector(tmp_path)
    stats = run_batch(r.current(), seed=1)
    v = _propose_with_model(r, stats, {"weights": {"no_such_template": 3.0}})
    assert v.source == "rules" and v.weights["open_account"] < 1.0


def test_apropose_from_async_code(tmp_path):
    r = Reflector(tmp_path)
    v = asyncio.run(r.apropose(run_batch(r.current(), seed=1)))
    assert v.number == 1 and r.current().number == 1
