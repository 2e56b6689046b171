"""The CPU recipe's standard errors (benchmarks/recipe_cpu.py: ``pass_at_1``): over tasks, as
``tau-env eval`` reports them, and over episodes; the SFT bar uses the one over tasks."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("torch")
pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "recipe_cpu.py"
_spec = importlib.util.spec_from_file_location("recipe_cpu_se", SCRIPT)
recipe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recipe)


def records(rewards_by_task: dict[str, list[float]]) -> list[dict]:
    return [
        {
            "task_id": t,
            "trial": i,
            "reward": r,
            "termination_reason": "user_stop",
            "steps": 3,
            "tool_calls": 1,
            "tool_errors": 0,
        }
        for t, rs in rewards_by_task.items()
        for i, r in enumerate(rs)
    ]


def test_one_task_solved_every_time_is_one_task_of_evidence():
    # 8 tasks x 4 trials, one task 4 of 4 (run 14 after SFT): by hand, over tasks the means are
    # seven 0s and one 1: mean 1/8, sample variance (7 * (1/8)^2 + (7/8)^2) / 7 = 1/8, se = sqrt(1/8 / 8)
    # = 0.125; over 32 episodes: variance (28 * (1/8)^2 + 4 * (7/8)^2) / 31 = 3.5 / 31, se = 0.0594
    by_task = {f"t{i}": [0.0] * 4 for i in range(7)} | {"t7": [1.0] * 4}
    r = recipe.pass_at_1(records(by_task))
    assert r["pass@1"] == pytest.approx(0.125)
    assert r["se"] == pytest.approx(0.125)
    assert r["se_episodes"] == pytest.approx(math.sqrt(3.5 / 31 / 32))
    assert (r["episodes"], r["tasks"]) == (32, 8)


def test_successes_spread_over_tasks_give_the_smaller_error():
    # 4 of 32 again, one success in each of 4 tasks: task means 0.25 x 4 and 0 x 4, mean 1/8,
    # variance (8 * (1/8)^2) / 7 = 1/56, se = sqrt(1/56 / 8) = 0.0472 (< 0.125 above)
    by_task = {f"t{i}": [1.0, 0.0, 0.0, 0.0] for i in range(4)} | {f"u{i}": [0.0] * 4 for i in range(4)}
    r = recipe.pass_at_1(records(by_task))
    assert r["se"] == pytest.approx(math.sqrt(1 / 56 / 8))
    assert r["se_episodes"] == pytest.approx(math.sqrt(3.5 / 31 / 32))


def test_one_task_or_one_episode_has_no_error():
    assert recipe.pass_at_1(records({"t": [1.0, 0.0]}))["se"] is None
    assert recipe.pass_at_1(records({"t": [1.0]}))["se_episodes"] is None


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=4),
        st.lists(st.sampled_from([0.0, 1.0]), min_size=3, max_size=3),
        min_size=2,
        max_size=8,
    )
)
def test_with_equal_trials_the_mean_is_the_mean_of_the_task_means(rewards_by_task):
    r = recipe.pass_at_1(records(rewards_by_task))
    means = [sum(v) / 3 for v in rewards_by_task.values()]
    assert r["pass@1"] == pytest.approx(sum(means) / len(means))
    assert r["se"] >= 0 and r["tasks"] == len(rewards_by_task)
