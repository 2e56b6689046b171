"""Playing other tasks than a domain's own: Domain.with_tasks, make(tasks=...), --tasks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import tau_env
from tau_env import NoopAgent, OracleAgent, ScriptedUser, evaluate
from tau_env.error import ResultsFolderError, TaskFileError

ENV = "harbor-bank-v0"


@pytest.fixture()
def tasks():
    return list(tau_env.make(ENV).domain.tasks[:3])


def test_make_plays_a_list_or_a_file_of_tasks(tmp_path, tasks):
    path = tmp_path / "mine.jsonl"
    tau_env.save_tasks(tasks[1:], path)
    for source, n in ((tasks, 3), (path, 2), (str(path), 2)):
        env = tau_env.make(ENV, tasks=source)
        assert [t.id for t in env.domain.tasks] == [t.id for t in tasks][-n:]
        assert env.task_pool == [t.id for t in env.domain.tasks]
    assert len(tau_env.make(ENV).domain.tasks) > 3  # the shared domain keeps its own tasks


def test_a_task_reusing_an_id_is_graded_against_its_own_target(tasks):
    original = tasks[0]
    # same id, no actions: the correct final state is the initial one
    changed = original.model_copy(update={"actions": [], "expect_no_change": True})
    env = tau_env.make(ENV)
    assert env.domain.grader.target(original)  # the original's target is cached first
    mine = tau_env.make(ENV, tasks=[changed])
    run = evaluate(lambda: tau_env.make(ENV, tasks=[changed]), NoopAgent, ScriptedUser)
    assert run.metrics["pass@1"] == 1.0  # doing nothing is right for the changed task
    assert mine.domain.grader is not env.domain.grader
    assert evaluate(ENV, NoopAgent, ScriptedUser, task_ids=[original.id]).metrics["pass@1"] == 0.0


@pytest.mark.parametrize(
    "bad, message",
    [
        ("missing.jsonl", "found none"),
        ([1], "got an item of type int"),
        (5, "got int"),
        ({"id": "x"}, "got dict"),
    ],
)
def test_bad_task_sources_are_task_file_errors_naming_the_call(tmp_path, bad, message):
    source = tmp_path / bad if isinstance(bad, str) else bad
    with pytest.raises(TaskFileError, match=message) as e:
        tau_env.make(ENV, tasks=source)
    assert str(e.value).startswith(f"make('{ENV}', tasks=")


def test_duplicate_ids_are_refused(tasks):
    with pytest.raises(TaskFileError, match="share the id"):
        tau_env.make(ENV, tasks=[tasks[0], tasks[0]])


def test_a_results_folder_records_the_task_set_and_refuses_to_resume_on_another(tmp_path, tasks):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    tau_env.save_tasks(tasks[:2], a)
    tau_env.save_tasks(tasks[1:], b)
    out = tmp_path / "run"
    run = evaluate(ENV, OracleAgent, ScriptedUser, tasks=a, out_dir=out)
    assert run.metrics["pass@1"] == 1.0
    config = json.loads((out / "config.json").read_text())
    assert config["task_source"] == str(a) and len(config["task_set_sha256"]) == 64
    assert config["tasks"] == sorted(t.id for t in tasks[:2])
    with pytest.raises(ResultsFolderError):
        evaluate(ENV, OracleAgent, ScriptedUser, tasks=b, out_dir=out)


def test_cli_check_eval_and_replay_take_a_task_file(tmp_path, tasks):
    path = tmp_path / "mine.jsonl"
    tau_env.save_tasks(tasks[:2], path)
    cli = [sys.executable, "-m", "tau_env.cli"]
    done = subprocess.run([*cli, "check", ENV, "--tasks", str(path)], capture_output=True, text=True)
    assert done.returncode == 0 and "2 tasks" in done.stdout, done.stderr
    out = tmp_path / "run"
    done = subprocess.run(
        [*cli, "eval", "--tasks", str(path), "--out", str(out), "--quiet"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert sum(1 for _ in open(out / "trajectories.jsonl")) == 2
    done = subprocess.run(
        [*cli, "replay", ENV, "--tasks", str(path), "--task", tasks[1].id], capture_output=True, text=True
    )
    assert done.returncode == 0 and tasks[1].id in done.stdout
    done = subprocess.run([*cli, "check", ENV, "--tasks", str(tmp_path / "no.jsonl")], capture_output=True, text=True)
    assert done.returncode == 2 and "found none" in done.stderr


def test_a_task_file_is_loaded_once_per_content(tmp_path, tasks):
    """Every env of a run (the harness makes one per episode) used to parse and check the file again:
    seconds per episode for a large synthesized file."""
    path = tmp_path / "mine.jsonl"
    tau_env.save_tasks(tasks[:2], path)
    first = tau_env.make(ENV, tasks=path).domain
    assert tau_env.make(ENV, tasks=str(path)).domain is first  # the same content: the same domain
    assert [t.id for t in first.tasks] == [t.id for t in tasks[:2]]
    tau_env.save_tasks(tasks[1:3], path)  # edited: loaded again
    second = tau_env.make(ENV, tasks=path).domain
    assert second is not first and [t.id for t in second.tasks] == [t.id for t in tasks[1:3]]
    path.write_text("not json\n")  # broken: refused every time, nothing kept
    for _ in range(2):
        with pytest.raises(TaskFileError):
            tau_env.make(ENV, tasks=path)
    tau_env.save_tasks(tasks[:2], path)
    assert tau_env.make(ENV, tasks=path).domain is first
    other = tmp_path / "other.jsonl"  # another file of the same content is another domain
    tau_env.save_tasks(tasks[:2], other)
    assert tau_env.make(ENV, tasks=other).domain is not first
    assert tau_env.make(ENV, tasks=tasks[:2]).domain is not first  # a list is the caller's own
