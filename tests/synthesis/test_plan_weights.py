"""Planner weights a run is given (``run_tasks(weights=)``, ``tau-env synth tasks --weight KEY=W``):
they shift the mix of plans toward the cells they favour (``failure:-``: the plain variants), coverage
still reaches every cell, the run records them, continuing with others is refused, and every bad
weight is a clear error that writes nothing."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tau_env.synthesis import pipeline
from tau_env.synthesis.errors import SynthesisError
from tau_env.synthesis.planner import Planner

import tau_env
from tau_env.error import ResultsFolderError

ENV = "harbor-bank-v0"
CLI = [sys.executable, "-m", "tau_env.cli"]


class _T:
    def __init__(self, name, cells, tools):
        self.name, self._cells, self.tools, self.intent, self.rule_keys = name, cells, tools, name, ()

    def cells(self):
        return self._cells


TEMPLATES = [
    _T("wire", [("success", None), ("success", "multi_doc"), ("refusal", "contradicting_claim")], ("release_wire",)),
    _T("card", [("success", None), ("success", "implicit_order"), ("clarification", None)], ("lock_card",)),
]


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def plain_share(out: Path) -> float:
    """The share of a run's accepted tasks planned as a plain success (no failure mode)."""
    plans = {p["id"]: p for p in lines(out / "plans.jsonl")}
    tasks = lines(out / "tasks.jsonl")
    kinds = Counter(
        plans[t["id"].removeprefix("syn-")]["outcome"] == "success"
        and not plans[t["id"].removeprefix("syn-")]["failure_mode"]
        for t in tasks
    )
    return kinds[True] / len(tasks)


def test_failure_dash_weighs_exactly_the_cells_without_a_failure_mode():
    p = Planner(TEMPLATES, weights={"failure:-": 3, "outcome:refusal": 0.5, "card": 2})
    assert p.weight(("wire", "success", None)) == 3
    assert p.weight(("wire", "success", "multi_doc")) == 1
    assert p.weight(("wire", "refusal", "contradicting_claim")) == 0.5
    assert p.weight(("card", "success", None)) == 6
    assert p.weight(("card", "clarification", None)) == 6
    assert p.weight(("card", "success", "implicit_order")) == 2
    p = Planner(TEMPLATES, weights={"card/success/-": 0, "failure:-": 3})  # a cell's own weight wins
    assert p.weight(("card", "success", None)) == 0 and p.weight(("wire", "success", None)) == 3
    assert Planner(TEMPLATES).weight(("wire", "success", None)) == 1  # no weights: every cell alike
    assert Planner(TEMPLATES).weight_keys() == {
        "wire",
        "card",
        "wire/success/-",
        "wire/success/multi_doc",
        "wire/refusal/contradicting_claim",
        "card/success/-",
        "card/success/implicit_order",
        "card/clarification/-",
        "outcome:success",
        "outcome:refusal",
        "outcome:clarification",
        "failure:-",
        "failure:multi_doc",
        "failure:contradicting_claim",
        "failure:implicit_order",
    }


def test_coverage_plans_for_a_tool_follow_the_weights_only_when_asked():
    want = {"release_wire": 60, "lock_card": 60}
    turn = Planner(TEMPLATES, weights={"failure:-": 9}, seed=1).plan(120, want_tools=want)
    by_weight = Planner(TEMPLATES, weights={"failure:-": 9}, seed=1, weighted_coverage=True).plan(120, want_tools=want)
    plain = lambda plans: sum(p.outcome == "success" and not p.failure_mode for p in plans)  # noqa: E731
    assert plain(turn) == 60  # in turn: the two success cells of each tool alike
    assert plain(by_weight) > 90  # 9 to 1: about 108 of 120
    # equal weights: weighted coverage changes nothing, so an unweighted run plans as it always did
    same = Planner(TEMPLATES, seed=1, weighted_coverage=True).plan(120, want_tools=want)
    assert [(p.template, p.outcome, p.failure_mode) for p in same] == [
        (p.template, p.outcome, p.failure_mode) for p in Planner(TEMPLATES, seed=1).plan(120, want_tools=want)
    ]


def test_a_weighted_run_plans_more_plain_requests_and_still_covers_every_cell(tmp_path):
    flat, plain = tmp_path / "flat", tmp_path / "plain"
    pipeline.run_tasks(flat, ENV, n=150, batch=150, seed=5)
    pipeline.run_tasks(plain, ENV, n=150, batch=150, seed=5, weights={"failure:-": 6})
    assert plain_share(plain) > plain_share(flat) + 0.1, (plain_share(plain), plain_share(flat))
    tools = lambda out: Counter(x for p in lines(out / "plans.jsonl") for x in p["tools"])  # noqa: E731
    assert set(tools(plain)) == set(tools(flat))  # coverage first: every write tool still planned
    floor = min(pipeline.MIN_PER_TOOL, 150 // (2 * len(tools(flat))))  # what coverage asks of each tool
    assert min(tools(plain).values()) >= floor >= 1
    assert json.loads((plain / "run.json").read_text())["weights"] == {"failure:-": 6.0}
    assert json.loads((flat / "run.json").read_text()).get("weights") is None
    # every task of the weighted run is a verified one the oracle solves
    tasks = lines(plain / "tasks.jsonl")[:40]
    sample = tmp_path / "sample.jsonl"
    sample.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    run = tau_env.evaluate(ENV, tau_env.OracleAgent, tau_env.ScriptedUser, tasks=sample)
    assert run.metrics["pass@1"] == 1.0


def test_a_weight_of_zero_keeps_its_cells_out_beyond_what_coverage_needs(tmp_path):
    out = tmp_path / "run"
    pipeline.run_tasks(out, ENV, n=120, batch=120, seed=2, weights={"outcome:refusal": 0})
    assert not any(p["outcome"] == "refusal" for p in lines(out / "plans.jsonl") if not p.get("rule_keys"))


def test_a_run_continues_with_its_own_weights_and_refuses_others(tmp_path):
    out = tmp_path / "run"
    pipeline.run_tasks(out, ENV, n=5, batch=5, seed=3, weights={"failure:-": 2})
    for domain_id in (ENV, None):  # a new-run call and a continuing one
        with pytest.raises(SynthesisError, match="weights: .*failure:-.* in the folder, .*failure:-.*3.* now"):
            pipeline.run_tasks(out, domain_id, n=8, batch=5, seed=3, weights={"failure:-": 3})
        with pytest.raises(SynthesisError, match=r"weights: \{.*\} in the folder, \{\} now"):
            pipeline.run_tasks(out, domain_id, n=8, batch=5, seed=3, weights={})
    assert pipeline.run_tasks(out, n=8, batch=5)["accepted"] == 8  # none given: the folder's own
    assert pipeline.run_tasks(out, ENV, n=9, batch=5, seed=3, weights={"failure:-": 2.0})["accepted"] == 9
    old = tmp_path / "old"  # a folder from before weights: none, and it stays so
    pipeline.run_tasks(old, ENV, n=3, batch=5)
    settings_ = json.loads((old / "run.json").read_text())
    settings_.pop("weights", None)
    (old / "run.json").write_text(json.dumps(settings_))
    with pytest.raises(SynthesisError, match=r"weights: \{\} in the folder"):
        pipeline.run_tasks(old, ENV, n=4, batch=5, weights={"failure:-": 2})
    assert pipeline.run_tasks(old, ENV, n=4, batch=5, weights={})["accepted"] == 4


def test_an_unknown_key_is_refused_with_a_suggestion_and_the_corrected_call_runs(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(SynthesisError, match=r"'failure:multidoc' \(did you mean failure:multi_doc") as e:
        pipeline.run_tasks(out, ENV, n=3, batch=5, weights={"failure:multidoc": 0.5})
    assert "This domain's templates:" in str(e.value)
    assert not out.exists()  # the folder this command began is gone with its mistake
    outcomes = str(e.value).split("outcomes: ")[1].split(";")[0].split(", ")
    assert {"success", "refusal"} <= set(outcomes)
    with pytest.raises(SynthesisError, match="every cell of this domain weight 0"):
        pipeline.run_tasks(out, ENV, n=3, batch=5, weights={f"outcome:{o}": 0 for o in outcomes})
    # the refused tries produced nothing: the corrected command starts the folder afresh
    assert pipeline.run_tasks(out, ENV, n=3, batch=5, weights={"failure:multi_doc": 0.5})["accepted"] == 3


def test_a_refused_weight_is_not_recorded_so_the_command_without_it_runs(tmp_path):
    """`synth tasks --weight failure:none=4` refused, then the same command without --weight: it runs
    (the refused weight used to stay in run.json and refuse it again, naming a flag not given)."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine", encoding="utf-8")  # a folder that was there keeps what it had
    with pytest.raises(SynthesisError, match="failure:none"):
        pipeline.run_tasks(out, ENV, n=2, batch=5, weights={"failure:none": 4})
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert pipeline.run_tasks(out, ENV, n=2, batch=5)["accepted"] == 2
    assert "weights" not in json.loads((out / "run.json").read_text())


def test_a_refused_weight_leaves_an_existing_runs_record_as_it_was(tmp_path):
    """`synth graphs` first (run.json written), then `synth tasks --weight` with a key the domain has no
    use for: refused, and run.json is byte for byte what it was, so the command without it runs."""
    out = tmp_path / "run"
    pipeline.run_graphs(out, ENV)
    recorded = (out / "run.json").read_bytes()
    with pytest.raises(SynthesisError, match="failure:none"):
        pipeline.run_tasks(out, ENV, n=2, batch=5, weights={"failure:none": 4})
    assert (out / "run.json").read_bytes() == recorded
    assert pipeline.run_tasks(out, ENV, n=2, batch=5)["accepted"] == 2


BAD_VALUES = st.one_of(
    st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=True),
    st.floats(min_value=1.0000001e6, allow_nan=False, allow_infinity=True),
    st.just(math.nan),
    st.just(math.inf),
    st.booleans(),
    st.text(max_size=5),
    st.none(),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=40, deadline=None)
@given(
    good=st.dictionaries(st.sampled_from(["failure:-", "outcome:success", "wire"]), st.floats(0.1, 9), max_size=2),
    bad_key=st.sampled_from(["failure:-", "outcome:refusal", "x"]),
    bad=BAD_VALUES,
)
def test_a_bad_weight_value_is_refused_before_anything_is_written(tmp_path_factory, good, bad_key, bad):
    out = tmp_path_factory.mktemp("bad") / "run"
    with pytest.raises(SynthesisError, match="expected a number from 0 to 1e"):
        pipeline.run_tasks(out, ENV, n=1, weights={**good, bad_key: bad})
    assert not out.exists()


@pytest.mark.parametrize(
    "weights", [[("failure:-", 2)], "failure:-=2", {3: 1.0}, {"  ": 1.0}, {"wire": 1, " wire ": 2}]
)
def test_malformed_weights_are_refused(tmp_path, weights):
    with pytest.raises(SynthesisError, match="weights"):
        pipeline.run_tasks(tmp_path / "run", ENV, n=1, weights=weights)
    assert not (tmp_path / "run").exists()


def test_the_cli_takes_weights_and_refuses_bad_ones(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(
        [*CLI, "synth", "tasks", ENV, "--n", "3", "--out", str(out), "--weight", "failure:-=4", "--weight", "wire=0.5"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((out / "run.json").read_text())["weights"] == {"failure:-": 4.0, "wire": 0.5}
    done = subprocess.run(  # continued with no --weight: the run's own
        [*CLI, "synth", "tasks", "--n", "4", "--out", str(out), "--quiet"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(lines(out / "tasks.jsonl")) == 4
    for args, says in [
        (["--weight", "failure:-"], "KEY=WEIGHT"),
        (["--weight", "failure:-=-1"], "KEY=WEIGHT"),
        (["--weight", "failure:-=nan"], "KEY=WEIGHT"),
        (["--weight", "=2"], "KEY=WEIGHT"),
        (["--weight", "wire=1", "--weight", "wire=2"], "given twice"),
        (["--weight", "wires=1"], "did you mean wire"),
    ]:
        x = tmp_path / f"x{len(args)}{says[:3]}"
        done = subprocess.run(
            [*CLI, "synth", "tasks", ENV, "--n", "2", "--out", str(x), *args], capture_output=True, text=True
        )
        assert done.returncode == 2, (args, done.stderr[-1000:])
        assert says in done.stderr and "Traceback" not in done.stderr, (args, done.stderr[-1000:])
        assert not (x / "tasks.jsonl").exists()
    done = subprocess.run(
        [*CLI, "synth", "tasks", "--n", "5", "--out", str(out), "--weight", "failure:-=5"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "in the folder" in done.stderr
    assert len(lines(out / "tasks.jsonl")) == 4  # refused: nothing added, nothing lost


def test_the_recipe_parses_weights_and_refuses_a_folder_planned_otherwise(tmp_path):
    import argparse

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "recipe_cpu.py"
    spec = importlib.util.spec_from_file_location("recipe_cpu_weights", script)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    assert recipe.parse_weights("failure:-=4, wire=0.5") == {"failure:-": 4.0, "wire": 0.5}
    for bad in ("failure:-", "failure:-=x", "failure:-=-2", "=1", "failure:-=inf"):
        with pytest.raises(argparse.ArgumentTypeError, match="KEY=WEIGHT"):
            recipe.parse_weights(bad)
    pipeline.run_tasks(tmp_path / "synth", ENV, n=2, batch=2, weights={"failure:-": 4})
    recipe.same_synth(tmp_path / "synth", "plan", {"failure:-": 4.0})
    with pytest.raises(ResultsFolderError, match="planned with weights"):
        recipe.same_synth(tmp_path / "synth", "plan", {})
    with pytest.raises(ResultsFolderError, match="planned with weights"):
        recipe.same_synth(tmp_path / "synth", "plan", {"failure:-": 2.0})
