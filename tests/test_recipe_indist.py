"""The CPU recipe's in-distribution check picks fresh synthesized tasks that no training task shares a
request or a customer with (benchmarks/recipe_cpu.py: ``pick_indist``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "recipe_cpu.py"
_spec = importlib.util.spec_from_file_location("recipe_cpu", SCRIPT)
recipe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recipe)

TOOLS = ("replace_card_5120", "set_travel_notice_3012", "update_contact_info", "close_account_8837")
NAMES = ("Ana Ruiz", "Ben Ode", "Cy Hall", "Di Moss", "Ed Fray")
REQUESTS = ("close it", "new card please", "I travel", "new phone", "raise my limit")


def task(tid, requests, names, tool):
    return {
        "id": tid,
        "scenario": {"requests": list(requests)},
        "initial_state": {"customers": [{"full_name": n} for n in names]},
        "actions": [{"name": "find_customer", "arguments": {}}] + ([{"name": tool, "arguments": {}}] if tool else []),
    }


tasks_st = st.lists(
    st.tuples(
        st.lists(st.sampled_from(REQUESTS), min_size=1, max_size=2),
        st.lists(st.sampled_from(NAMES), max_size=2),
        st.sampled_from(TOOLS),
    ),
    max_size=12,
)


def test_a_shared_request_or_customer_or_a_second_request_is_left_out():
    training = [task("syn-1", ["close it"], ["Ana Ruiz"], "close_account_8837")]
    candidates = [
        task("syn-1", ["close it"], ["Zoe Park"], "close_account_8837"),  # same request text
        task("syn-2", ["shut my savings"], ["Ana Ruiz"], "close_account_8837"),  # same customer
        task("syn-3", ["a", "b"], ["Zoe Park"], "close_account_8837"),  # two requests
        task("syn-4", ["shut my savings"], ["Zoe Park"], "close_account_8837"),
    ]
    picked = recipe.pick_indist(training, candidates, 8)
    assert [t["id"] for t in picked] == ["indist-syn-4"]
    assert candidates[3]["id"] == "syn-4"  # the candidates are not renamed in place


def test_every_procedure_comes_before_a_second_of_any():
    candidates = [task(f"c{i}", [f"req {i}"], [f"N {i}"], tool) for i, tool in enumerate(TOOLS * 3)]
    picked = recipe.pick_indist([], candidates, len(TOOLS) + 1)
    finals = [t["actions"][-1]["name"] for t in picked]
    assert sorted(finals[: len(TOOLS)]) == sorted(TOOLS)
    assert finals[len(TOOLS)] == TOOLS[0]
    assert [t["id"] for t in picked[: len(TOOLS)]] == [f"indist-c{i}" for i in range(len(TOOLS))]


@settings(max_examples=200, deadline=None)
@given(tasks_st, tasks_st, st.integers(0, 10))
def test_picks_are_fresh_spanning_and_as_many_as_asked(train, cand, n):
    training = [task(f"t{i}", r, m, x) for i, (r, m, x) in enumerate(train)]
    candidates = [task(f"c{i}", r, m, x) for i, (r, m, x) in enumerate(cand)]
    picked = recipe.pick_indist(training, candidates, n)
    seen_text = {r for t in training for r in t["scenario"]["requests"]}
    seen_names = {c["full_name"] for t in training for c in t["initial_state"]["customers"]}
    fresh = [
        t
        for t in candidates
        if len(t["scenario"]["requests"]) == 1
        and t["scenario"]["requests"][0] not in seen_text
        and not {c["full_name"] for c in t["initial_state"]["customers"]} & seen_names
    ]
    assert len(picked) == min(n, len(fresh))
    ids = [t["id"] for t in picked]
    assert len(set(ids)) == len(ids) and all(i.startswith("indist-") for i in ids)
    assert {i.removeprefix("indist-") for i in ids} <= {t["id"] for t in fresh}
    distinct = {t["actions"][-1]["name"] for t in fresh}
    assert len({t["actions"][-1]["name"] for t in picked}) == min(len(picked), len(distinct))
