"""A second ``tau-env synth tasks`` on a run folder another process is running (before that run's
first verdict) is refused and changes nothing: it must not take the folder for a first try that
produced nothing and clear it (it deleted the running run's run.json)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from tau_env.synthesis.errors import SynthesisError
from tau_env.synthesis.pipeline import _open


def test_a_refused_second_command_leaves_the_running_runs_folder_alone(tmp_path):
    run = tmp_path / "R"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from tau_env.synthesis.run import RunFolder\n"
            f"f = RunFolder.create({str(run)!r}, {{'domain': 'harbor-bank-v0', 'seed': 0}})\n"
            "print('held', flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        before = (run / "run.json").read_text()
        for seed in (0, 7):  # the same settings, and other ones (which would otherwise be a "fresh start")
            with pytest.raises(SynthesisError, match="in use by another synthesis run|other settings"):
                _open(run, "harbor-bank-v0", None, None, seed, True)
            assert (run / "run.json").read_text() == before
        assert json.loads(before)["seed"] == 0
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
    _open(run, "harbor-bank-v0", None, None, 7, True).close()  # free, nothing produced: a fresh start
    assert json.loads((run / "run.json").read_text())["seed"] == 7


def test_sft_after_a_top_up_or_a_decontamination_plays_the_current_tasks_and_keeps_no_removed_one(tmp_path):
    """A run topped up or decontaminated after ``synth sft``: its SFT examples lose the removed tasks
    at once, and ``synth sft`` again plays the current task set (it was refused with flags the stage
    does not have); another teacher on the same tasks is refused with what to delete."""
    from tau_env.synthesis import pipeline

    import tau_env
    from tau_env.error import ResultsFolderError

    def ids(path):
        return {json.loads(x)["task_id"] for x in path.read_text().splitlines() if x.strip()}

    out = tmp_path / "run"
    pipeline.run_tasks(out, "harbor-bank-v0", n=12, batch=12, seed=0)
    first = pipeline.run_sft(out, agent=tau_env.OracleAgent)
    assert first["examples"] > 0
    pipeline.run_tasks(out, n=16, batch=4)  # a top-up
    again = pipeline.run_sft(out, agent=tau_env.OracleAgent)
    tasks = {json.loads(x)["id"] for x in (out / "tasks.jsonl").read_text().splitlines() if x.strip()}
    assert again["tasks"] == len(tasks) == 16 and ids(out / "sft" / "sft.jsonl") <= tasks
    result = pipeline.run_decontaminate(out, against="harbor-bank-v0")
    removed = {r["id"] for r in json.loads((out / "decontamination.json").read_text())["removed"]}
    assert removed, "the planted overlap of this seed removes some tasks"
    assert not ids(out / "sft" / "sft.jsonl") & removed and result.get("dropped from sft/sft.jsonl", 0) >= 0
    third = pipeline.run_sft(out, agent=tau_env.OracleAgent)
    assert third["tasks"] == 16 - len(removed) and not ids(out / "sft" / "sft.jsonl") & removed
    with pytest.raises(ResultsFolderError, match="delete that folder to play the tasks again"):
        pipeline.run_sft(out, agent=tau_env.NoopAgent)


def test_compose_with_another_seed_is_refused_and_a_relative_data_dir_is_recorded_absolute(tmp_path, monkeypatch):
    from pathlib import Path

    from tau_env.synthesis import pipeline

    from tests.conftest import TAU3_DATA, shared_missing

    out = tmp_path / "run"
    pipeline.run_tasks(out, "harbor-bank-v0", n=40, batch=40, seed=0)
    first = pipeline.run_compose(out, n=2, seed=0)
    assert first["composite tasks"] >= 1
    with pytest.raises(SynthesisError, match="composed with --seed 0, not 1"):
        pipeline.run_compose(out, n=4, seed=1)
    if shared_missing(TAU3_DATA / "tasks"):
        pytest.skip("no tau3-banking data beside the project")
    monkeypatch.chdir(TAU3_DATA.parent)
    t3 = tmp_path / "t3"
    pipeline._open(t3, "tau3-banking", Path(TAU3_DATA.name), None, 0, True).close()
    recorded = json.loads((t3 / "run.json").read_text())["loader"]["data_dir"]
    assert Path(recorded).is_absolute() and Path(recorded) == TAU3_DATA.resolve()
    monkeypatch.chdir(tmp_path)  # from elsewhere, the same folder named absolutely continues it
    pipeline._open(t3, "tau3-banking", TAU3_DATA.resolve(), None, 0, True).close()
