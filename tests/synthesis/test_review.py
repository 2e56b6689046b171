"""The reviewer: the model judge through a scripted server on loopback (accept, reject, malformed
replies), and the rule-based judge's categories on hand-made flawed tasks."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
from tau_env.synthesis.llm import SynthLLM
from tau_env.synthesis.records import COMPONENTS
from tau_env.synthesis.review import KINDS, parse_review, review, review_messages, rule_review
from test_verify import make_good_task

import tau_env
from tau_env import Task
from tau_env.testing import FakeOpenAI, text


@pytest.fixture(scope="module")
def bank():
    return tau_env.make("harbor-bank-v0").domain


@pytest.fixture(scope="module")
def good_task(bank) -> dict[str, Any]:
    return make_good_task(bank)


def scripted(*replies: str):
    queue = list(replies)

    def script(request: dict[str, Any]):
        return text(queue.pop(0) if len(queue) > 1 else queue[0])

    return script


def as_task(d: dict[str, Any]) -> Task:
    return Task.model_validate(d)


def judge(server: FakeOpenAI, tmp_path) -> SynthLLM:
    return SynthLLM("judge", server.url, cache_path=tmp_path / "cache.sqlite", retries=0)


REJECT = {
    "accept": False,
    "critiques": [
        {"component": "scenario", "kind": "ambiguous_instruction", "message": "Which card is meant is not said."},
        {"component": "actions", "kind": "wrong_expected_action", "message": "The fee should be $25."},
    ],
}


def test_model_accepts(bank, good_task, tmp_path):
    with FakeOpenAI(scripted('{"accept": true, "critiques": []}')) as server:
        llm = judge(server, tmp_path)
        assert asyncio.run(review(as_task(good_task), bank, llm)) == []
        assert llm.usage["review"]["calls"] == 1
        body = server.requests[0]["messages"]
    system, user = body[0]["content"], body[1]["content"]
    for kind in KINDS:
        assert kind in system
    # the judge sees the policy excerpts, the scenario, the chain with derivations and outputs
    assert "## procedure_card_replacement" in user and "replace_card_5120" in user
    assert good_task["scenario"]["requests"][0] in user
    assert '"kind": "output"' in user and "output: " in user and "CARD-4001" in user


def test_model_rejects_with_critiques(bank, good_task, tmp_path):
    with FakeOpenAI(scripted(json.dumps(REJECT))) as server:
        problems = asyncio.run(review(as_task(good_task), bank, judge(server, tmp_path)))
    assert [(p.check, p.component) for p in problems] == [
        ("review:ambiguous_instruction", "scenario"),
        ("review:wrong_expected_action", "actions"),
    ]
    assert problems[1].message == "The fee should be $25."


def test_malformed_reply_is_corrected(bank, good_task, tmp_path):
    bad = {"accept": False, "critiques": [{"component": "wording", "kind": "typo", "message": "x"}]}
    with FakeOpenAI(scripted(json.dumps(bad), json.dumps(REJECT))) as server:
        llm = judge(server, tmp_path)
        problems = asyncio.run(review(as_task(good_task), bank, llm))
        second = server.requests[1]["messages"]
    assert len(problems) == 2
    assert "not a valid review" in second[-1]["content"] and "component" in second[-1]["content"]


@pytest.mark.parametrize(
    "reply",
    [
        '{"accept": "yes"}',
        '{"accept": false, "critiques": []}',
        '{"accept": false, "critiques": [{"component": "actions", "kind": "bad_vibes", "message": "m"}]}',
        "not json at all",
    ],
)
def test_persistently_malformed_reply_is_a_rejection(bank, good_task, tmp_path, reply):
    with FakeOpenAI(scripted(reply)) as server:
        problems = asyncio.run(review(as_task(good_task), bank, judge(server, tmp_path), attempts=2))
    assert [p.check for p in problems] == ["review:malformed"]
    assert problems[0].component in COMPONENTS
    assert "no valid review" in problems[0].message


def test_prompt_addition_reaches_the_judge(bank, good_task):
    msgs = review_messages(as_task(good_task), bank, {"review": "Reject tasks whose fee is not quoted."})
    assert msgs[0]["content"].endswith("Reject tasks whose fee is not quoted.")


def test_accept_with_notes_is_accepted():
    assert parse_review({"accept": True, "critiques": REJECT["critiques"]}) == []


# --- the rule-based judge -------------------------------------------------------------------------
def kinds(problems) -> list[str]:
    return [p.check.split(":", 1)[1] for p in problems]


def edited(good: dict[str, Any], edit) -> Task:
    t = copy.deepcopy(good)
    edit(t)
    return as_task(t)


def test_rules_accept_the_good_task_and_the_shipped_tasks(bank, good_task):
    assert asyncio.run(review(as_task(good_task), bank)) == []
    assert {t.id: rule_review(t, bank) for t in bank.tasks if rule_review(t, bank)} == {}


def test_rules_ambiguous_card(bank, good_task):
    second = {
        "card_id": "CARD-4999",
        "account_id": "CHK-2001",
        "customer_id": "C-1001",
        "last4": "9911",
        "status": "active",
        "daily_limit_cents": 200000,
        "issued_on": "2024-01-01",
        "replaces": None,
    }

    def edit(t):
        t["initial_state"]["cards"] = [second]
        t["actions"][5]["arguments"]["card_id"] = "CARD-4999"
        del t["scenario"]["facts"]["card last 4 digits"]

    problems = rule_review(edited(good_task, edit), bank)
    assert kinds(problems) == ["ambiguous_instruction"] and problems[0].component == "scenario"

    def named(t):  # naming the card's last four digits settles it
        edit(t)
        t["scenario"]["facts"]["card last 4 digits"] = "9911"

    assert rule_review(edited(good_task, named), bank) == []


def test_rules_wrong_expected_action(bank, good_task):
    t = edited(good_task, lambda t: t["metadata"]["synthesis"]["plan"].update(tools=["lock_card"]))
    assert kinds(rule_review(t, bank)) == ["wrong_expected_action"]
    # a template's optional tools need not all be called
    t = edited(good_task, lambda t: t["metadata"]["synthesis"]["plan"]["tools"].append("lock_card"))
    assert rule_review(t, bank) == []


def test_rules_impossible_constraint(bank, good_task):
    t = edited(good_task, lambda t: t["metadata"]["synthesis"]["plan"]["tools"].append("teleport_card"))
    assert kinds(rule_review(t, bank)) == ["impossible_constraint"]
    t = edited(good_task, lambda t: t["scenario"].update(unknown=["phone"]))
    problems = rule_review(t, bank)
    assert kinds(problems) == ["impossible_constraint"] and problems[0].component == "scenario"


def test_rules_missing_fallback(bank, good_task):
    def refusal(t):
        t["actions"] = t["actions"][:1]
        t["metadata"]["synthesis"]["derivations"][1:] = []
        t["metadata"]["synthesis"]["outcome"] = "refusal"
        t["metadata"]["synthesis"]["plan"]["tools"] = []
        t["expect_no_change"] = True
        t["scenario"]["instructions"] = ""

    assert kinds(rule_review(edited(good_task, refusal), bank)) == ["missing_fallback"]

    def explained(t):
        refusal(t)
        t["scenario"]["instructions"] = "If the agent explains why not, accept it and end the chat."

    assert rule_review(edited(good_task, explained), bank) == []


def test_rules_refusal_that_performs_the_write(bank, good_task):
    def edit(t):
        t["metadata"]["synthesis"]["outcome"] = "refusal"
        t["expect_no_change"] = True

    assert "wrong_expected_action" in kinds(rule_review(edited(good_task, edit), bank))


def test_rules_policy_loophole(bank, good_task):
    def edit(t):  # unlock and replace before verifying the customer
        t["actions"] = [t["actions"][0], t["actions"][4], t["actions"][5], *t["actions"][1:4]]

    assert kinds(rule_review(edited(good_task, edit), bank)) == ["policy_loophole"]


def test_rules_transfer_without_the_transfer_tool(bank, good_task):
    t = edited(good_task, lambda t: t["metadata"]["synthesis"].update(outcome="transfer"))
    assert kinds(rule_review(t, bank)) == ["missing_fallback"]


def test_task_without_provenance_is_judged_too(bank):
    assert rule_review(bank.task("third_party_address_change_refused"), bank) == []
