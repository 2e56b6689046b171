"""The pipeline end to end with the template backend: the commands, resuming, determinism."""

from __future__ import annotations

import collections
import functools
import hashlib
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tau_env.synthesis import pipeline
from tau_env.synthesis.errors import SynthesisError
from tau_env.synthesis.records import Problem, Provenance, chain_signature

import tau_env
from tests.conftest import TAU3_DATA, needs_tau3_data

ENV = "harbor-bank-v0"
CLI = [sys.executable, "-m", "tau_env.cli"]


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_the_commands_make_task_files_that_check_evaluate_and_report(tmp_path):
    out = tmp_path / "run1"

    def synth(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([*CLI, "synth", *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    synth("tasks", ENV, "--n", "24", "--out", str(out), "--quiet")
    synth("compose", "--from", str(out), "--n", "5", "--quiet")
    synth("report", str(out))
    singles, composites = lines(out / "tasks.jsonl"), lines(out / "composite.jsonl")
    assert len(singles) == 24 and len(composites) == 5
    assert len({chain_signature(tau_env.Task.model_validate(t)) for t in singles + composites}) == 29
    for t in composites:
        prov = Provenance.from_dict(t["metadata"]["synthesis"])
        assert 2 <= len(prov.components) <= 4
        assert set(prov.components) <= {s["id"] for s in singles}
    for name in ("tasks.jsonl", "composite.jsonl"):  # ordinary task files: check and eval play them
        done = subprocess.run([*CLI, "check", ENV, "--tasks", str(out / name)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-3000:]
    run = tau_env.evaluate(ENV, tau_env.OracleAgent, tau_env.ScriptedUser, tasks=out / "composite.jsonl")
    assert run.metrics["pass@1"] == 1.0
    text = (out / "report.txt").read_text()
    assert "Stage yield" in text and "Write tools" in text
    html = (out / "report.html").read_text()
    assert html.count("<svg") >= 2
    stages = [s["stage"] for s in lines(out / "stages.jsonl")]
    assert stages[0] == "graphs" and "tasks" in stages and stages[-1] == "compose"


def test_the_same_seed_gives_the_same_tasks_with_one_process_or_two(tmp_path):
    a = pipeline.run_tasks(tmp_path / "a", ENV, n=30, batch=40, seed=7)
    b = pipeline.run_tasks(tmp_path / "b", ENV, n=30, batch=40, seed=7, workers=2)
    c = pipeline.run_tasks(tmp_path / "c", ENV, n=30, batch=40, seed=8)
    assert a["accepted"] == b["accepted"] == c["accepted"] == 30
    ta, tb, tc = ((tmp_path / x / "tasks.jsonl").read_text() for x in "abc")
    assert ta == tb
    assert ta != tc


KILLER = """
import os, signal, sys
from tau_env.synthesis import pipeline
from tau_env.synthesis.run import RunFolder

pipeline.CHUNK = 8
append = RunFolder.append
count = {"n": 0}

def killing_append(self, name, records):
    n = append(self, name, records)
    if name == "tasks.jsonl":
        count["n"] += 1
        if count["n"] == 2:  # killed for good after two chunks: no cleanup, no finally
            os.kill(os.getpid(), signal.SIGKILL)
    return n

RunFolder.append = killing_append
pipeline.run_tasks(sys.argv[1], "harbor-bank-v0", n=30, batch=40, seed=3)
"""


def test_a_killed_run_goes_on_where_it_stopped_and_ends_as_an_uninterrupted_one(tmp_path):
    out = tmp_path / "killed"
    script = tmp_path / "killer.py"
    script.write_text(textwrap.dedent(KILLER))
    done = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True)
    assert done.returncode == -9, done.stderr[-2000:]
    before = lines(out / "verdicts.jsonl")
    assert 0 < len(before) < 40
    pipeline.CHUNK, chunk = 8, pipeline.CHUNK
    try:
        result = pipeline.run_tasks(out, ENV, n=30, batch=40, seed=3)
    finally:
        pipeline.CHUNK = chunk
    assert result["accepted"] == 30
    verdicts = lines(out / "verdicts.jsonl")
    ids = [v["id"] for v in verdicts]
    assert len(ids) == len(set(ids))  # nothing redone
    assert ids[: len(before)] == [v["id"] for v in before]
    whole = pipeline.run_tasks(tmp_path / "whole", ENV, n=30, batch=40, seed=3)
    assert whole["accepted"] == 30
    assert (out / "tasks.jsonl").read_text() == (tmp_path / "whole" / "tasks.jsonl").read_text()


def test_a_folder_of_another_run_is_refused_and_graphs_are_reused(tmp_path):
    out = tmp_path / "run"
    pipeline.run_graphs(out, ENV)
    made = (out / "graphs" / "tool_graph.json").stat().st_mtime_ns
    pipeline.run_tasks(out, ENV, n=5, batch=10)
    assert (out / "graphs" / "tool_graph.json").stat().st_mtime_ns == made
    with pytest.raises(SynthesisError, match="seed"):
        pipeline.run_tasks(out, ENV, n=5, seed=99)
    with pytest.raises(SynthesisError, match="run.json"):
        pipeline.run_compose(tmp_path / "nothing", n=3)
    with pytest.raises(tau_env.error.InvalidOptionError, match="n must be a positive integer"):
        pipeline.run_tasks(out, ENV, n=0)


def test_a_run_records_its_batch_and_continues_with_it_unless_given_another(tmp_path):
    """Another batch plans other tasks from the next round on: a resumed run takes its own when given
    none, so a stopped run resumed gives the tasks an uninterrupted one would; another is taken (a
    top-up in smaller rounds) with a warning, and the record stays the run's own."""
    whole = tmp_path / "whole"
    pipeline.run_tasks(whole, ENV, n=24, batch=12, seed=4)
    out = tmp_path / "run"
    pipeline.run_tasks(out, ENV, n=24, batch=12, seed=4, max_rounds=1)  # stopped after its first round
    settings = json.loads((out / "run.json").read_text())
    assert settings["batch"] == 12
    assert pipeline.run_tasks(out, n=24)["accepted"] == 24  # none given: the run's own
    assert (out / "tasks.jsonl").read_text() == (whole / "tasks.jsonl").read_text()
    rounds = collections.Counter(p["round"] for p in map(json.loads, (out / "plans.jsonl").read_text().splitlines()))
    assert max(rounds.values()) <= 12
    with pytest.warns(UserWarning, match="batch 5 for this call, the run's own is 12: the rounds from here plan other"):
        assert pipeline.run_tasks(out, n=30, batch=5)["accepted"] == 30
    rounds = collections.Counter(p["round"] for p in map(json.loads, (out / "plans.jsonl").read_text().splitlines()))
    assert rounds[max(rounds)] <= 5
    with pytest.warns(UserWarning, match="batch 6 for this call, the run's own is 12"):
        pipeline.run_tasks(out, ENV, n=31, batch=6, seed=4)  # the domain given: the same
    assert json.loads((out / "run.json").read_text()) == settings  # still the run's own
    # a folder from before batches were recorded takes the one given (or the default), and records it
    del settings["batch"]
    (out / "run.json").write_text(json.dumps(settings))
    pipeline.run_tasks(out, n=32, batch=5)
    assert json.loads((out / "run.json").read_text())["batch"] == 5
    new = tmp_path / "new"
    pipeline.run_tasks(new, ENV, n=2)
    assert json.loads((new / "run.json").read_text())["batch"] == pipeline.BATCH == 200
    settings = json.loads((new / "run.json").read_text())
    for bad in ("12", 0, True):  # a hand-edited record: said, not a TypeError in the planner
        (new / "run.json").write_text(json.dumps({**settings, "batch": bad}))
        with pytest.raises(SynthesisError, match="run.json: its batch is .*, not a positive integer"):
            pipeline.run_tasks(new, n=3)


# ---------------------------------------------------------------- every model role through a scripted server


def _scripted_model(request: dict) -> Any:
    """An OpenAI-compatible model that plays every synthesis role from what the prompt gives it."""
    from tau_env.testing import text

    system = request["messages"][0]["content"]
    body = request["messages"][1]["content"]
    if system.startswith("You extract every numeric"):
        return text(json.dumps({"constants": []}))
    if system.startswith("You write the customer's side"):
        spec = json.loads(body.split("\nA previous version")[0])
        requests = []
        for ask in spec["asks"]:
            said = "; ".join(f"{k}: {v}" for k, v in (ask.get("say") or {}).items())
            claims = "; ".join(str(v) for v in (ask.get("claims") or {}).values())
            opening = f"I need help: {ask.get('intent', 'a request')}."
            requests.append(" ".join(x for x in (opening, said, claims) if x))
        wording = {"persona": "A customer (model-written).", "requests": requests, "instructions": "Be brief."}
        return text(json.dumps(wording))
    if system.startswith("You review synthetic"):
        # the first review of some tasks rejects the scenario (the pipeline rewrites only that), then accepts
        first = len(request["messages"]) == 2 and "A previous version" not in body
        if first and int(hashlib.sha256(body.encode()).hexdigest(), 16) % 3 == 0:
            critique = {"component": "scenario", "kind": "ambiguous_instruction", "message": "say which account"}
            return text(json.dumps({"accept": False, "critiques": [critique]}))
        return text(json.dumps({"accept": True, "critiques": []}))
    if system.startswith("You merge several"):
        return text(json.dumps(json.loads(body)["draft"]))
    if system.startswith("You improve a task-synthesis"):
        return text(json.dumps({"prompts": {"wording": "Keep it short."}, "weights": {}, "why": "scripted"}))
    raise AssertionError(f"unexpected prompt: {system[:80]}")


def test_every_model_role_runs_through_a_scripted_server_cached_and_counted(tmp_path):
    from tau_env.synthesis.llm import SynthLLM
    from tau_env.synthesis.run import RunFolder

    from tau_env.testing import FakeOpenAI

    out = tmp_path / "llm"
    cache = tmp_path / "llm_cache.sqlite"
    with FakeOpenAI(_scripted_model) as server:
        llm = SynthLLM("scripted", server.url, cache_path=cache)
        pipeline.run_graphs(out, ENV, llm=llm)
        pipeline.run_tasks(out, ENV, n=12, batch=8, llm=llm)
        pipeline.run_compose(out, n=3, llm=llm)
        with RunFolder.open(out, lock=False) as run:
            llm.save_usage(run)
        llm.close()
        first = len(server.requests)
        roles = json.loads((out / "llm_usage.json").read_text())["roles"]
        assert {"entity_extraction", "wording", "review", "composition", "reflection"} <= set(roles)
        assert all(r["calls"] > 0 for r in roles.values())
        singles = lines(out / "tasks.jsonl")
        assert len(singles) == 12
        assert all(t["scenario"]["persona"] == "A customer (model-written)." for t in singles)
        assert any(v["regenerations"] for v in lines(out / "verdicts.jsonl"))  # a rejected scenario was rewritten
        done = subprocess.run([*CLI, "check", ENV, "--tasks", str(out / "tasks.jsonl")], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-2000:]
        # the same run again in a new folder with the same cache: no request reaches the server
        again = tmp_path / "again"
        llm2 = SynthLLM("scripted", server.url, cache_path=cache)
        pipeline.run_graphs(again, ENV, llm=llm2)
        pipeline.run_tasks(again, ENV, n=12, batch=8, llm=llm2)
        llm2.close()
        assert len(server.requests) == first
        assert (again / "tasks.jsonl").read_text() == (out / "tasks.jsonl").read_text()


# ---------------------------------------------------------------- datasets, decontamination, stopping


def test_sft_and_rl_stages_write_their_datasets(tmp_path):
    out = tmp_path / "run"
    pipeline.run_tasks(out, ENV, n=20, batch=30)
    assert pipeline.run_compose(out, n=2)["composite tasks"] == 2
    sft = pipeline.run_sft(out, agent=tau_env.OracleAgent)
    examples = lines(out / "sft" / "sft.jsonl")
    assert len(examples) == 20 and {e["task_id"] for e in examples} == {t["id"] for t in lines(out / "tasks.jsonl")}
    assert all(any(m["role"] == "assistant" and m.get("tool_calls") for m in e["messages"]) for e in examples)
    assert sft["run"] == str(out)
    rl = pipeline.run_rl(out, policy=tau_env.OracleAgent, rollouts=2)  # always solved: too easy for the band
    assert rl["run"] == str(out)
    stats = lines(out / "rl" / "stats.jsonl")
    assert len(stats) == 2 and not (out / "rl" / "tasks.jsonl").read_text().strip()
    with pytest.raises(tau_env.error.InvalidOptionError, match="band"):
        pipeline.run_rl(out, policy=tau_env.OracleAgent, band=(0.9, 0.1))
    assert [s["stage"] for s in lines(out / "stages.jsonl")][-2:] == ["sft", "rl"]


def test_synth_sft_with_the_built_in_teacher_asks_before_it_uses_a_fact(tmp_path):
    from tau_env.cli import main

    out = tmp_path / "run"
    pipeline.run_tasks(out, ENV, n=8, batch=10)
    assert main(["synth", "sft", "--from", str(out), "--teacher", "--quiet"]) == 0
    tasks = {t["id"]: t for t in lines(out / "tasks.jsonl")}
    examples = lines(out / "sft" / "sft.jsonl")
    assert {e["task_id"] for e in examples} == set(tasks)
    for e in examples:
        facts = tasks[e["task_id"]]["scenario"]["facts"]
        said, needed = "", False
        for m in e["messages"]:
            if m["role"] in ("user", "tool"):
                said += " " + str(m.get("content") or "")
            for c in m.get("tool_calls") or []:
                args = c["function"]["arguments"]
                # every fact a call holds (whole or inside a text) was said by the user or shown by a tool first
                for fact in facts.values():
                    if fact in args:
                        needed |= fact not in e["messages"][2]["content"]  # not in the opening request
                        assert fact in said, (e["task_id"], fact, c)
        assert needed == any("could you tell me your" in (m.get("content") or "") for m in e["messages"])


def test_a_run_that_accepts_nothing_stops_with_a_warning(tmp_path, monkeypatch):
    from tau_env.synthesis import synthesizer

    async def refuse(plan, ctx, llm=None, prompts=None, **kw):
        raise SynthesisError("no eligible record")

    monkeypatch.setattr(synthesizer, "synthesize", refuse)
    with pytest.warns(UserWarning, match="accepted nothing new"):
        result = pipeline.run_tasks(tmp_path / "run", ENV, n=5, batch=4)
    assert result["accepted"] == 0 and "stopped" in result
    assert result["rounds"] == pipeline.STALL_ROUNDS
    assert {p["check"] for v in lines(tmp_path / "run" / "verdicts.jsonl") for p in v["problems"]} == {"template"}


@needs_tau3_data
def test_decontamination_removes_a_planted_benchmark_task_and_a_top_up_stays_clean(tmp_path):
    data = str(TAU3_DATA)
    out = tmp_path / "tau3"
    pipeline.run_tasks(out, "tau3-banking", data_dir=data, n=12, batch=30)
    benchmark = tau_env.registry.load_domain("tau3-banking", data_dir=data).tasks[3]
    planted = benchmark.model_copy(update={"id": "planted"}).model_dump(mode="json", exclude_defaults=True)
    with (out / "tasks.jsonl").open("a") as f:
        f.write(json.dumps(planted) + "\n")
    result = pipeline.run_decontaminate(out, against="tau3-banking")
    record = json.loads((out / "decontamination.json").read_text())
    removed = {r["id"]: {x["detector"] for x in r["reasons"]} for r in record["removed"]}
    assert "chain" in removed["planted"]
    assert "planted" not in {t["id"] for t in lines(out / "tasks.jsonl")}
    assert "planted" in {t["id"] for t in lines(out / "contaminated.jsonl")}
    assert result["kept"] == 13 - len(removed)
    pipeline.run_tasks(out, "tau3-banking", data_dir=data, n=12, batch=30)  # top up to 12 again
    assert len(lines(out / "tasks.jsonl")) == 12
    again = pipeline.run_decontaminate(out, against="tau3-banking")
    assert again["kept"] == 12  # what the top-up added was checked on arrival


def test_a_first_try_whose_domain_cannot_load_leaves_no_run_behind(tmp_path, monkeypatch):
    monkeypatch.delenv("TAU3_BANKING_DATA", raising=False)
    out = tmp_path / "run"
    with pytest.raises(tau_env.error.Error, match="data_dir"):
        pipeline.run_tasks(out, "tau3-banking", n=3)  # no data folder given
    assert not (out / "run.json").exists()


def test_a_seed_or_model_given_to_a_continued_run_must_be_its_own(tmp_path):
    from tau_env.synthesis.llm import SynthLLM

    out = tmp_path / "run"
    pipeline.run_tasks(out, ENV, n=3, batch=5, seed=3)
    assert pipeline.run_tasks(out, n=4, batch=5)["accepted"] == 4  # no seed given: the run's own (3)
    assert pipeline.run_tasks(out, n=5, batch=5, seed=3)["accepted"] == 5
    with pytest.raises(SynthesisError, match="seed: 3 in the folder, 4 now"):
        pipeline.run_tasks(out, n=6, seed=4)
    with pytest.raises(SynthesisError, match="backend: template in the folder, m now"):
        pipeline.run_tasks(out, n=6, llm=SynthLLM("m", "http://127.0.0.1:9/v1"))
    assert json.loads((out / "run.json").read_text())["seed"] == 3


def test_a_first_model_run_that_produced_nothing_leaves_the_folder_free(tmp_path):
    from tau_env.synthesis.llm import SynthLLM

    out = tmp_path / "run"
    dead = SynthLLM("m", "http://127.0.0.1:9/v1", retries=0, timeout=2)
    with pytest.raises(tau_env.error.Error):
        pipeline.run_graphs(out, ENV, llm=dead)  # the model is needed for extraction, and never answers
    assert json.loads((out / "run.json").read_text())["backend"]["model"] == "m"
    assert pipeline.run_tasks(out, ENV, n=3, batch=5)["accepted"] == 3  # the template backend takes it over
    assert json.loads((out / "run.json").read_text())["backend"] == "template"
    with pytest.raises(SynthesisError, match="other settings"):  # once it holds tasks, it is that run's
        pipeline.run_tasks(out, ENV, n=3, llm=dead)


def test_a_refused_model_wording_is_asked_again_with_what_was_wrong(tmp_path):
    from tau_env.synthesis.llm import SynthLLM

    from tau_env.testing import FakeOpenAI, text

    def model(request):
        system, body = request["messages"][0]["content"], request["messages"][1]["content"]
        if system.startswith("You extract every numeric"):
            return text(json.dumps({"constants": []}))
        if system.startswith("You write the customer's side"):
            if "A previous version was rejected" not in body:
                return text(json.dumps({"persona": "x", "requests": [], "instructions": ""}))  # no request: refused
            return _scripted_model(request)
        return _scripted_model(request)

    with FakeOpenAI(model) as server:
        llm = SynthLLM("scripted", server.url)
        result = pipeline.run_tasks(tmp_path / "run", ENV, n=4, batch=6, llm=llm, reflect=False)
    assert result["accepted"] == 4
    accepted = [v for v in lines(tmp_path / "run" / "verdicts.jsonl") if v["accepted"]]
    assert all(v["regenerations"] >= 1 for v in accepted)
    retries = [r for r in server.requests if "A previous version was rejected" in r["messages"][1]["content"]]
    assert retries and "request" in retries[0]["messages"][1]["content"]


def _decontam_pair(tmp_path: Path) -> tuple[Path, Path, dict[str, set[str]]]:
    """Two copies of one Harbor Bank run; the first decontaminated against Harbor Bank with every
    detector. Returns both folders and, per shipped task, the run's tasks that only a procedure-level
    detector (``chain_abstract``, ``state_change``) matched to it."""
    full, split = tmp_path / "full", tmp_path / "split"
    pipeline.run_tasks(full, ENV, n=60, batch=60, seed=1)
    shutil.copytree(full, split)
    pipeline.run_decontaminate(full, against=ENV)
    by_eval: dict[str, set[str]] = {}
    for r in json.loads((full / "decontamination.json").read_text())["removed"]:
        if {x["detector"] for x in r["reasons"]} <= {"chain_abstract", "state_change"}:
            for x in r["reasons"]:
                by_eval.setdefault(x["against_id"], set()).add(r["id"])
    return full, split, by_eval


def test_decontamination_against_a_split_with_instance_detectors_removes_copies_and_keeps_the_procedures(tmp_path):
    full, split, by_eval = _decontam_pair(tmp_path)
    assert by_eval, "the run should share procedures with some shipped tasks"
    chosen = sorted(by_eval, key=lambda k: (-len(by_eval[k]), k))[:2]
    shipped = {t.id: t for t in tau_env.registry.load_domain(ENV).tasks}
    planted = shipped[chosen[0]].model_copy(update={"id": "planted"}).model_dump(mode="json", exclude_defaults=True)
    with (split / "tasks.jsonl").open("a") as f:
        f.write(json.dumps(planted) + "\n")
    instance = ["chain", "ids", "ngram", "embedding"]
    result = pipeline.run_decontaminate(split, against=ENV, task_ids=chosen, detectors=instance)
    record = json.loads((split / "decontamination.json").read_text())
    assert record["passes"] == [{"task_ids": chosen, "detectors": instance}]
    removed = {r["id"]: r["reasons"] for r in record["removed"]}
    assert "chain" in {x["detector"] for x in removed["planted"]}  # a copy of a split task goes
    assert all(x["against_id"] in chosen and x["detector"] in instance for rs in removed.values() for x in rs)
    kept = {t["id"] for t in lines(split / "tasks.jsonl")}
    assert result["kept"] == len(kept) and result["checked"] == len(kept) + len(removed)
    # other instances of the split tasks' procedures stay (every detector removed them in the full run)
    procedure_only = set().union(*(by_eval[c] for c in chosen)) - set(removed)
    assert procedure_only and procedure_only <= kept
    assert not procedure_only & {t["id"] for t in lines(full / "tasks.jsonl")}


def test_a_narrower_pass_keeps_the_earlier_ones_guard_on_a_top_up(tmp_path):
    full, _, by_eval = _decontam_pair(tmp_path)
    n = len(lines(full / "tasks.jsonl"))
    pipeline.run_decontaminate(full, against=ENV, task_ids=sorted(by_eval)[:1], detectors=["ids"])
    record = json.loads((full / "decontamination.json").read_text())
    assert record["passes"] == [
        {"task_ids": None, "detectors": None},
        {"task_ids": sorted(by_eval)[:1], "detectors": ["ids"]},
    ]
    pipeline.run_tasks(full, n=n + 15)  # the top-up (the run's own batch) is checked against both passes
    assert len(lines(full / "tasks.jsonl")) == n + 15
    pipeline.run_decontaminate(full, against=ENV)
    again = json.loads((full / "decontamination.json").read_text())
    assert len(again["removed"]) == len(record["removed"])  # the full pass found nothing new after the top-up
    assert again["passes"] == record["passes"]  # the same settings again add no pass


@pytest.mark.parametrize("rejected_first", [1, 3, 8])
def test_a_top_up_whose_first_tasks_are_contaminated_fills_with_the_clean_ones(tmp_path, monkeypatch, rejected_first):
    # the guard rejecting the first tasks of every chunk, with fewer places left than it rejects,
    # once kept the run going round after round with nothing kept (the cut at n came first)
    out = tmp_path / "run"
    pipeline.run_tasks(out, ENV, n=8, batch=20, seed=2)
    pipeline.run_decontaminate(out, against=ENV)
    n = len(lines(out / "tasks.jsonl"))
    check = pipeline._Guard.check
    rejected: set[str] = set()

    def first_ones_dirty(self, tasks, verdicts):
        dirty = check(self, tasks, verdicts) | {t.id for t in tasks[:rejected_first]}
        for v in verdicts:
            if (v.get("task") or {}).get("id") in dirty:
                v["accepted"] = False
                v["problems"] = [Problem("contamination", "plan", "planted by the test").to_dict()]
        rejected.update(dirty)
        return dirty

    monkeypatch.setattr(pipeline._Guard, "check", first_ones_dirty)
    result = pipeline.run_tasks(out, n=n + 2, batch=20, max_rounds=6)
    kept = [t["id"] for t in lines(out / "tasks.jsonl")]
    assert result["accepted"] == len(kept) == n + 2
    assert rejected and not rejected & set(kept)
    accepted = {v["task"]["id"] for v in lines(out / "verdicts.jsonl") if v["accepted"]}
    assert set(kept) <= accepted


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    task_ids=st.one_of(
        st.text(max_size=8),
        st.just([]),
        st.lists(st.one_of(st.integers(), st.none(), st.just(""), st.lists(st.text(max_size=3))), min_size=1),
        st.lists(st.text(min_size=1, max_size=12).filter(lambda s: s not in _shipped_ids()), min_size=1),
        st.integers(),
    ),
)
def test_a_bad_task_id_list_is_refused_clearly_and_moves_nothing(decon_run, task_ids):
    before = {p.name: p.read_bytes() for p in decon_run.iterdir() if p.is_file()}
    with pytest.raises((tau_env.error.InvalidOptionError, SynthesisError), match="decontaminate: "):
        pipeline.run_decontaminate(decon_run, against=ENV, task_ids=task_ids)
    assert {p.name: p.read_bytes() for p in decon_run.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("detectors", ["chain", [], ["chain", "bogus"], 5, [None]])
def test_bad_detectors_are_refused_clearly_and_move_nothing(decon_run, detectors):
    before = {p.name: p.read_bytes() for p in decon_run.iterdir() if p.is_file()}
    with pytest.raises(tau_env.error.InvalidOptionError, match="detectors"):
        pipeline.run_decontaminate(decon_run, against=ENV, detectors=detectors)
    assert {p.name: p.read_bytes() for p in decon_run.iterdir() if p.is_file()} == before
    assert not (decon_run / "decontamination.json").exists()


@functools.cache
def _shipped_ids() -> frozenset[str]:
    return frozenset(t.id for t in tau_env.registry.load_domain(ENV).tasks)


@pytest.fixture(scope="module")
def decon_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("decon") / "run"
    pipeline.run_tasks(out, ENV, n=6, batch=10)
    return out
