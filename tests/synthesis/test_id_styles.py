"""Record ids of synthesized customers: ``plan`` style (``CHK-P017-1``) or ``domain`` style
(``CHK-482913``, digits only, the shape of Harbor Bank's own ``CHK-2001``): unique, disjoint from the
seed, recorded in the run folder, and a run continued with the other style refused."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tau_env.synthesis import pipeline
from tau_env.synthesis.errors import SynthesisError
from tau_env.synthesis.templates import ID_STYLES, IdAllocator

import tau_env
from tau_env.error import ResultsFolderError

ENV = "harbor-bank-v0"
CLI = [sys.executable, "-m", "tau_env.cli"]
DIGITS = re.compile(r"^[A-Z]+-\d{6,}$")


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def record_ids(task: dict) -> list[str]:
    """The primary ids of the rows a task adds to the seed (each table's first ``*_id`` column)."""
    out = []
    for rows in (task.get("initial_state") or {}).values():
        for row in rows if isinstance(rows, list) else []:
            key = next((k for k in row if k.endswith("_id")), None)
            if key is not None and isinstance(row[key], str):
                out.append(row[key])
    return out


@settings(max_examples=60, deadline=None)
@given(
    plans=st.sets(st.tuples(st.integers(0, 3), st.integers(0, 30_000)), min_size=1, max_size=40),
    counts=st.integers(1, 99),
)
def test_domain_ids_are_digits_unique_across_plans_and_beyond_the_seed_numbers(plans, counts):
    ids = IdAllocator(style="domain")
    made = []
    for r, n in plans:
        one = ids.for_plan(f"p-{r}-{n}")
        made += [one.next(p) for p in ("C-", "CHK-", "T-") for _ in range(counts // 3 or 1)][:counts]
    assert len(set(made)) == len(made)
    for x in made:
        assert DIGITS.match(x), x
        assert int(x.split("-")[1]) >= 100_000  # Harbor Bank's seed numbers are 4 digits


def test_each_style_writes_its_shape_and_bad_input_is_refused():
    assert ID_STYLES == ("plan", "domain")
    plan = IdAllocator().for_plan("p-0-17")
    assert [plan.next("CHK-"), plan.next("SAV-")] == ["CHK-P017-1", "SAV-P017-2"]
    a, b = IdAllocator(style="domain").for_plan("p-0-17"), IdAllocator(style="domain").for_plan("p-0-17")
    first = [a.next("C-"), a.next("CHK-")]
    assert first == [b.next("C-"), b.next("CHK-")]  # a function of the plan id: the same in every process
    assert first[0][2:] != first[1][4:]  # an account's number is not its customer's
    with pytest.raises(ValueError, match="id style 'numeric'"):
        IdAllocator(style="numeric")
    with pytest.raises(ValueError, match="p-ROUND-N"):
        IdAllocator(style="domain").for_plan("my-plan")
    many = IdAllocator(style="domain").for_plan("p-0-1")
    for _ in range(99):
        many.next("T-")
    with pytest.raises(ValueError, match="more than 99"):
        many.next("T-")
    big = IdAllocator(style="domain").for_plan("p-2-5")  # past six digits: longer numbers, still unique
    assert big.next("C-") == f"C-{1_000_000 + (2 * 1_000_000 + 5) * 100 + 1}"


def test_a_domain_style_run_gives_tasks_the_oracle_solves_singly_and_composed(tmp_path):
    out = tmp_path / "run"
    assert pipeline.run_tasks(out, ENV, n=40, batch=40, seed=5, ids="domain")["accepted"] == 40
    assert json.loads((out / "run.json").read_text())["ids"] == "domain"
    tasks = lines(out / "tasks.jsonl")
    seed = tau_env.registry.load_domain(ENV).seed
    seed_ids = {str(v) for rows in seed.values() if isinstance(rows, list) for r in rows for v in r.values()}
    new = [x for t in tasks for x in record_ids(t) if x not in seed_ids]
    assert new and all(DIGITS.match(x) for x in new), [x for x in new if not DIGITS.match(x)][:5]
    assert not any("-P0" in json.dumps(t) for t in tasks)
    run = tau_env.evaluate(ENV, tau_env.OracleAgent, tau_env.ScriptedUser, tasks=out / "tasks.jsonl")
    assert run.metrics["pass@1"] == 1.0
    made = pipeline.run_compose(out, n=4, seed=1)
    assert made["composite tasks"] == 4 and "stopped" not in made  # the components' ids never collide
    run = tau_env.evaluate(ENV, tau_env.OracleAgent, tau_env.ScriptedUser, tasks=out / "composite.jsonl")
    assert run.metrics["pass@1"] == 1.0
    two = tmp_path / "two"  # two verification processes allocate the same ids
    pipeline.run_tasks(two, ENV, n=40, batch=40, seed=5, ids="domain", workers=2)
    assert (two / "tasks.jsonl").read_text() == (out / "tasks.jsonl").read_text()


def test_a_run_is_continued_in_its_own_style_and_the_other_refused(tmp_path):
    out = tmp_path / "run"
    pipeline.run_tasks(out, ENV, n=5, batch=5, seed=3, ids="domain")
    for domain_id in (ENV, None):  # a new-run call and a continuing one
        with pytest.raises(SynthesisError, match='ids: "?domain"? in the folder, "?plan"? now'):
            pipeline.run_tasks(out, domain_id, n=8, batch=5, seed=3, ids="plan")
    pipeline.run_tasks(out, n=8, batch=5)  # no style given: the folder's own
    assert all(DIGITS.match(x) for t in lines(out / "tasks.jsonl") for x in record_ids(t) if x.startswith("C-"))
    assert not any("-P0" in json.dumps(t) for t in lines(out / "tasks.jsonl"))
    old = tmp_path / "old"  # a folder from before id styles: plan ids, and it stays so
    pipeline.run_tasks(old, ENV, n=3, batch=5)
    settings_ = json.loads((old / "run.json").read_text())
    settings_.pop("ids", None)
    (old / "run.json").write_text(json.dumps(settings_))
    for domain_id in (ENV, None):
        with pytest.raises(SynthesisError, match='ids: "?plan"? in the folder, "?domain"? now'):
            pipeline.run_tasks(old, domain_id, n=4, batch=5, ids="domain")
    assert pipeline.run_tasks(old, ENV, n=4, batch=5, ids="plan")["accepted"] == 4
    with pytest.raises(SynthesisError, match="ids='digits'"):
        pipeline.run_tasks(tmp_path / "bad", ENV, n=1, ids="digits")
    assert not (tmp_path / "bad").exists()


def test_the_cli_takes_the_style_and_refuses_others(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(
        [*CLI, "synth", "tasks", ENV, "--n", "3", "--out", str(out), "--ids", "domain", "--quiet"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((out / "run.json").read_text())["ids"] == "domain"
    assert all(DIGITS.match(x) for t in lines(out / "tasks.jsonl") for x in record_ids(t) if x.startswith("C-"))
    done = subprocess.run(
        [*CLI, "synth", "tasks", ENV, "--n", "3", "--out", str(tmp_path / "x"), "--ids", "numeric"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "--ids" in done.stderr and not (tmp_path / "x").exists()


def test_the_recipe_refuses_a_folder_of_the_other_style(tmp_path):
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "recipe_cpu.py"
    spec = importlib.util.spec_from_file_location("recipe_cpu_ids", script)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    recipe.same_synth(tmp_path / "none", "domain")  # no folder yet: nothing to refuse
    pipeline.run_tasks(tmp_path / "synth", ENV, n=2, batch=2)
    recipe.same_synth(tmp_path / "synth", "plan")
    with pytest.raises(ResultsFolderError, match="plan-style ids, not domain"):
        recipe.same_synth(tmp_path / "synth", "domain")
