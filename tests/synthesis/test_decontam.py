"""Decontamination: planted near-duplicates are found by the right detector; distinct tasks stay."""

from __future__ import annotations

import json
import random
import re
import warnings

import numpy as np
import pytest
from tau_env.synthesis.decontam import (
    DETECTORS,
    DecontamReport,
    abstract_chain,
    decontaminate,
    identifiers,
    scenario_text,
)

import tau_env
from tau_env import Task
from tau_env.error import InvalidOptionError
from tests.conftest import TAU3_DATA, needs_tau3_data


@pytest.fixture(scope="module")
def harbor():
    return tau_env.make("harbor-bank-v0").domain


def reasons(report: DecontamReport, task_id: str) -> dict[str, set[str]]:
    """detector -> the evaluation ids it names, for one removed task."""
    out: dict[str, set[str]] = {}
    for r in report.removed:
        if r["id"] == task_id:
            for x in r["reasons"]:
                out.setdefault(x["detector"], set()).add(x["against_id"])
    return out


def copy(task: Task, new_id: str, **changes) -> Task:
    data = task.model_dump()
    data["id"] = new_id
    data.update(changes)
    return Task.model_validate(data)


def rename_ids(value, mapping):
    text = json.dumps(value)
    for old, new in mapping.items():
        text = text.replace(old, new)
    return json.loads(text)


SYNONYMS = {"card": "debit card", "need": "want", "please": "kindly", "my": "my own", "the": "that"}


def reword(text: str, rng: random.Random) -> str:
    """Swap a few words for near-synonyms and drop one sentence: a paraphrase, not a copy."""
    words = [SYNONYMS.get(w, w) if rng.random() < 0.5 else w for w in text.split(" ")]
    sentences = re.split(r"(?<=[.!?]) ", " ".join(words))
    if len(sentences) > 3:
        sentences.pop(rng.randrange(len(sentences)))
    return " ".join(sentences)


UNRELATED = {
    "persona": "Tom, a retired sailor.",
    "requests": ["Could you tell me what your branch opening hours are on holidays?"],
    "facts": {},
    "unknown": [],
    "instructions": "Ask about holiday opening hours and thank the agent.",
}


# --- Harbor only (no shared data) ------------------------------------------------------------------
def test_harbor_planted_copies_found_and_distinct_kept(harbor):
    tasks = harbor.tasks
    against = tasks[:20]
    rng = random.Random(0)
    src = against[1]  # damaged card, standard tier, expedited
    reworded = copy(
        src, "reworded", scenario={**src.scenario.model_dump(), "requests": [reword(src.scenario.requests[0], rng)]}
    )
    same_chain = copy(src, "same_chain", scenario=UNRELATED)
    mapping = {"C-1010": "C-9999", "CARD-4010": "CARD-9999", "Kevin O'Brien": "Zed Quinn", "1988-03-05": "1970-01-01"}
    renamed = Task.model_validate(
        {**rename_ids(src.model_dump(), mapping), "id": "renamed", "scenario": UNRELATED, "initial_state": {}}
    )
    against_ids = set().union(*(identifiers(t) for t in against))
    against_chains = {abstract_chain(t) for t in against}
    distinct = [t for t in tasks[20:] if not identifiers(t) & against_ids and abstract_chain(t) not in against_chains]
    assert len(distinct) >= 5
    report = decontaminate([reworded, same_chain, renamed, *distinct], against, domain=harbor)
    assert {t.id for t in report.kept} == {t.id for t in distinct}
    assert "chain" in reasons(report, "same_chain") and src.id in reasons(report, "same_chain")["chain"]
    assert "ngram" not in reasons(report, "same_chain")
    r = reasons(report, "renamed")
    assert "chain" not in r and src.id in r["chain_abstract"] and "ids" not in r
    assert src.id in reasons(report, "reworded")["ngram"] | reasons(report, "reworded").get("embedding", set())


def test_report_json_and_text(harbor):
    tasks = harbor.tasks
    report = decontaminate([tasks[0], tasks[30]], [tasks[0]])
    data = report.to_json()
    json.dumps(data)
    assert data["total"] == 2 and data["removed_count"] == 1 and data["kept_ids"] == [tasks[30].id]
    assert data["removed"][0]["id"] == tasks[0].id and data["by_detector"]["chain"] == 1
    assert 0.0 < data["contamination_rate"] < 1.0
    text = report.text()
    assert "1 of 2 tasks removed" in text and tasks[0].id in text and "chain" in text


def test_options_and_custom_embedder(harbor):
    tasks = harbor.tasks
    with pytest.raises(InvalidOptionError, match="ngram"):
        decontaminate(tasks[:1], tasks[:1], ngram=0)
    with pytest.raises(InvalidOptionError, match="ngram_threshold"):
        decontaminate(tasks[:1], tasks[:1], ngram_threshold=2)
    with pytest.raises(InvalidOptionError, match="unknown detectors"):
        decontaminate(tasks[:1], tasks[:1], detectors=["nope"])
    with pytest.raises(InvalidOptionError, match="embedder"):
        decontaminate(tasks[:1], tasks[:1], embedder="bert", detectors=["embedding"])
    seen = []

    def constant(texts):
        seen.append(len(texts))
        return np.ones((len(texts), 3))

    report = decontaminate(tasks[:3], tasks[5:7], embedder=constant, detectors=["embedding"])
    assert seen == [5] and len(report.removed) == 3 and report.by_detector == {"embedding": 3}
    report = decontaminate(tasks[:3], tasks[5:7], detectors=["embedding"])
    assert not report.removed  # TF-IDF: different scenarios stay apart


def test_routine_only_chains_are_not_compared(harbor):
    refusal = next(t for t in harbor.tasks if t.id == "refund_limit_reached_standard")
    other = copy(refusal, "other", actions=[a.model_dump() for a in refusal.actions[:3]], scenario=UNRELATED)
    report = decontaminate([other], [copy(other, "x")], detectors=["chain", "chain_abstract"])
    assert report.kept and not report.removed


# --- against tau3-banking's benchmark tasks ---------------------------------------------------------
@pytest.fixture(scope="module")
def tau3():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tau_env.registry.load_domain("tau3-banking", data_dir=str(TAU3_DATA))


@needs_tau3_data
def test_planted_tau3_near_duplicates_found_by_the_right_detector(tau3, harbor):
    bench = tau3.tasks
    rng = random.Random(1)
    by_id = {t.id: t for t in bench}
    src = by_id["task_017"]  # a verified customer, discoverable tools, a user-side call
    assert len(src.actions) >= 3
    # 1. copy and reword
    s = src.scenario.model_dump()
    reworded = copy(src, "p-reworded", scenario={**s, "instructions": reword(s["instructions"], rng)}, actions=[])
    reworded = copy(reworded, "p-reworded", expect_no_change=True)
    # 2. copy and rename ids (and the customer), unrelated wording
    ids = sorted({x for x in identifiers(src) if not x.startswith("name:")}, key=len, reverse=True)
    mapping = {x: f"zz{i:03d}{x[5:]}" for i, x in enumerate(ids)}
    renamed = Task.model_validate({**rename_ids(src.model_dump(), mapping), "id": "p-renamed", "scenario": UNRELATED})
    renamed = Task.model_validate(
        json.loads(json.dumps(renamed.model_dump()).replace("Kenji Tanaka", "Ann Other").replace("kenji", "ann"))
    )
    # 3. the same chain, other wording
    same_chain = copy(src, "p-same-chain", scenario=UNRELATED)
    # 4. the same customer, another request
    user_id = next(a.arguments["user_id"] for a in src.actions if "user_id" in a.arguments)
    same_customer = Task.model_validate(
        {
            "id": "p-same-customer",
            "scenario": {**UNRELATED, "facts": {"user id": user_id}},
            "actions": [{"name": "get_user_details", "arguments": {"user_id": user_id}}],
            "expect_no_change": True,
        }
    )
    planted = [reworded, renamed, same_chain, same_customer]
    report = decontaminate([*planted, *harbor.tasks], bench, domain=tau3, against_domain=tau3)
    assert {t.id for t in report.kept} == {t.id for t in harbor.tasks}
    assert report.removed_ids == [t.id for t in planted]
    assert src.id in reasons(report, "p-reworded")["ngram"]
    assert src.id in reasons(report, "p-reworded")["embedding"]
    assert "chain" not in reasons(report, "p-reworded")
    r = reasons(report, "p-renamed")
    assert "chain" not in r and src.id in r["chain_abstract"] and "ngram" not in r
    r = reasons(report, "p-same-chain")
    assert src.id in r["chain"] and "ngram" not in r and "embedding" not in r
    r = reasons(report, "p-same-customer")
    assert set(r) == {"ids"} and src.id in r["ids"]


@needs_tau3_data
def test_state_change_catches_another_chain_with_the_same_effect(tau3):
    bench = tau3.tasks
    src = next(t for t in bench if t.id == "task_017")
    # the same calls in another order: another chain, the same change
    actions = [a.model_dump() for a in src.actions]
    shuffled = copy(src, "p-order", scenario=UNRELATED, actions=[actions[0], actions[1], actions[3], actions[2]])
    report = decontaminate([shuffled], bench, domain=tau3, detectors=["chain", "state_change"])
    r = reasons(report, "p-order")
    assert "chain" not in r and src.id in r["state_change"]


@pytest.mark.slow
@needs_tau3_data
def test_minilm_embedder_finds_a_paraphrase(tau3):
    pytest.importorskip("sentence_transformers")
    src = next(t for t in tau3.tasks if t.id == "task_017")
    s = src.scenario.model_dump()
    para = copy(src, "para", scenario={**s, "instructions": reword(s["instructions"], random.Random(3))}, actions=[])
    report = decontaminate([para], tau3.tasks, embedder="minilm", detectors=["embedding"])
    assert src.id in reasons(report, "para")["embedding"]
    assert scenario_text(para) != scenario_text(src)


def test_detector_names_are_stable():
    assert DETECTORS == ("chain", "chain_abstract", "ids", "state_change", "ngram", "embedding")


def test_identifiers_people_and_records_not_merchants():
    task = Task.model_validate(
        {
            "id": "t",
            "scenario": {"requests": ["hi"], "facts": {"full name": "Ann Other", "user id": "u_123456"}},
            "actions": [{"name": "x", "arguments": {"merchant_name": "Best Buy", "tool_name": "secret_tool_1234"}}],
            "metadata": {
                "agent_data": {
                    "users": {"ab12cd34ef": {"name": "Kim Lee", "email": "k@example.com"}},
                    "txns": {"t1": {"name": "Whole Foods Market", "amount": 3}},
                }
            },
        }
    )
    ids = identifiers(task)
    assert {"name:ann other", "name:kim lee", "u_123456", "k@example.com"} <= ids
    assert not {"name:best buy", "name:whole foods market", "secret_tool_1234"} & ids


def test_a_product_code_both_tasks_use_is_not_a_shared_id():
    # 'cd_12_month' looks like an id (letters and digits) but is a value of the tool's enum: every
    # CD-opening task names it, so sharing it says nothing about contamination
    import tau_env

    harbor = tau_env.registry.load_domain("harbor-bank-v0")

    def opening(task_id: str, customer: str, account: str) -> tau_env.Task:
        return tau_env.Task.model_validate(
            {
                "id": task_id,
                "scenario": {"requests": [f"Open a CD for me please ({task_id})."]},
                "actions": [
                    {
                        "name": "open_account_2291",
                        "arguments": {
                            "customer_id": customer,
                            "product": "cd_12_month",
                            "initial_deposit_cents": 100000,
                            "funding_account_id": account,
                        },
                    }
                ],
            }
        )

    mine, theirs = opening("mine", "C-7001", "CHK-7001"), opening("theirs", "C-8002", "CHK-8002")
    report = decontaminate([mine], [theirs], domain=harbor, detectors=("ids",))
    assert report.removed == []
    same_customer = opening("again", "C-8002", "CHK-9003")
    report = decontaminate([same_customer], [theirs], domain=harbor, detectors=("ids",))
    assert [r["id"] for r in report.removed] == ["again"]
