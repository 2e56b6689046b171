"""``python -m tau_env.reference_trainers.verl_data`` with the files a careless user gives it: an OUT
forgotten (the last source taken for it), an OUT that is a task file, a folder or under a file; SFT
examples the CPU trainer leaves out; text with U+2028 or a lone surrogate; an env id or keywords that
would fail only on the GPUs. No veRL needed (the parquet side only).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")

from tau_env.reference_trainers import verl_data as vd  # noqa: E402

import tau_env  # noqa: E402
from tau_env.sft import to_example  # noqa: E402

ENV_ID, TASK = "harbor-bank-v0", "update_email_and_phone"


@pytest.fixture(scope="module")
def example():
    env = tau_env.make(ENV_ID)
    r = tau_env.run_episode(env, tau_env.OracleAgent(), tau_env.ScriptedUser(), task_id=TASK)
    return to_example(r.to_dict())


def _jsonl(path, *examples):
    path.write_text("".join(json.dumps(e) + "\n" for e in examples), encoding="utf-8")
    return path


def test_an_out_that_would_destroy_an_input_is_refused(example, tmp_path, capsys):
    day1, day2 = _jsonl(tmp_path / "day1.jsonl", example), _jsonl(tmp_path / "day2.jsonl", example)
    kept = day2.read_bytes()
    tasks = tmp_path / "composite.jsonl"
    tau_env.save_tasks([tau_env.registry.load_domain(ENV_ID).task(TASK)], tasks)
    file = tmp_path / "afile"
    file.write_text("x")
    for argv, said in (
        (["sft", str(day1), str(day2)], "exists and is not a parquet file: refusing to overwrite it"),
        (["sft", str(day1), str(day1)], "is also a source"),
        (["rl", ENV_ID, str(tasks)], "exists and is not a parquet file"),
        (["rl", ENV_ID, str(tasks), "--tasks", str(tasks)], "is also a source"),
        (["sft", str(day1), str(tmp_path)], "is a folder"),
        (["sft", str(day1), str(file / "out.parquet")], "is a file, not a folder"),
    ):
        assert vd.main(argv) == 2
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err
    assert day2.read_bytes() == kept and tasks.is_file() and file.read_text() == "x"
    # an existing parquet is replaced (the same command again), whole
    out = tmp_path / "sft.parquet"
    assert vd.main(["sft", str(day1), str(out)]) == 0 and vd.main(["sft", str(day1), str(day2), str(out)]) == 0
    assert len(pd.read_parquet(out)) == 2 and not list(tmp_path.glob(".sft.parquet.tmp-*"))


def test_examples_the_cpu_trainer_leaves_out_are_left_out_here_too(example, tmp_path, caplog):
    untrained = {**example, "train": [False] * len(example["messages"])}
    broken = json.loads(json.dumps(example))
    k = next(j for j, m in enumerate(broken["messages"]) if m.get("tool_calls") and broken["train"][j])
    broken["messages"][k]["tool_calls"][0]["function"]["arguments"] = "{bad"
    src = _jsonl(tmp_path / "sft.jsonl", untrained, example, broken)
    with caplog.at_level("WARNING"):
        rows = vd.read_sft_jsonl(src)
    assert len(rows) == 1 and "left out 2 SFT example(s)" in caplog.text and f"{src}:1 " in caplog.text


def test_text_with_line_separators_round_trips_and_a_lone_surrogate_is_refused(example, tmp_path, capsys):
    odd = json.loads(json.dumps(example))
    user = next(m for m in odd["messages"] if m["role"] == "user")
    user["content"] += " a\u2028b\x85c end"
    src = tmp_path / "sft.jsonl"  # U+2028 and U+0085 raw, as export-sft writes them
    src.write_text(json.dumps(odd, ensure_ascii=False) + "\n", encoding="utf-8")
    out = tmp_path / "sft.parquet"
    assert vd.main(["sft", str(src), str(out)]) == 0
    assert json.loads(pd.read_parquet(out)["messages_json"][0]) == odd["messages"]
    # an escaped lone surrogate is no character: veRL's dataset failed on it mid-training; refused by line
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(odd) + "\n" + json.dumps(odd).replace(" end", " \\ud800 end") + "\n")
    assert vd.main(["sft", str(bad), str(tmp_path / "bad.parquet")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2" in err and "lone surrogate" in err and not (tmp_path / "bad.parquet").exists()


def test_a_synthesis_run_folder_is_a_source_and_a_parquet_source_is_named(example, tmp_path, capsys):
    run = tmp_path / "run"
    (run / "sft").mkdir(parents=True)
    _jsonl(run / "sft" / "sft.jsonl", example)
    out = tmp_path / "sft.parquet"
    assert vd.main(["sft", str(run), str(out)]) == 0
    assert vd.main(["sft", str(out), str(tmp_path / "again.parquet")]) == 2
    assert "is a parquet file; the sources are export-sft JSONL" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, said",
    [
        (["rl", "harbr-bank-v0", "OUT", "--tasks", "TASKS"], "harbr-bank-v0"),
        (["rl", ENV_ID, "OUT", "--tasks", "TASKS", "--make-kwargs", '{"max_steps": "lots"}'], "max_steps"),
        (["rl", ENV_ID, "OUT", "--make-kwargs", '{"retrieval": "nope"}'], "nope"),
    ],
)
def test_an_env_that_would_fail_on_the_workers_is_said_now(argv, said, tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tau_env.save_tasks([tau_env.registry.load_domain(ENV_ID).task(TASK)], tasks)
    argv = [str(tmp_path / "rl.parquet") if a == "OUT" else str(tasks) if a == "TASKS" else a for a in argv]
    assert vd.main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and not (tmp_path / "rl.parquet").exists()


def test_make_kwargs_task_ids_are_the_rows(tmp_path, capsys):
    """An env made with ``task_ids`` plays only those: the rows are those tasks, --task-id among them."""
    out = tmp_path / "rl.parquet"
    pool = ["found_card_unlock", TASK]
    kwargs = json.dumps({"task_ids": pool})
    assert vd.main(["rl", ENV_ID, str(out), "--make-kwargs", kwargs]) == 0
    assert [e["task_id"] for e in pd.read_parquet(out)["extra_info"]] == pool
    assert vd.main(["rl", ENV_ID, str(out), "--make-kwargs", kwargs, "--task-id", TASK]) == 0
    assert [e["task_id"] for e in pd.read_parquet(out)["extra_info"]] == [TASK]
    kept = out.read_bytes()
    assert vd.main(["rl", ENV_ID, str(out), "--make-kwargs", kwargs, "--task-id", "travel_notice_simple"]) == 2
    err = capsys.readouterr().err
    assert "'travel_notice_simple'" in err and "not among make_kwargs' task_ids" in err and "Traceback" not in err
    assert out.read_bytes() == kept
    assert vd.main(["rl", ENV_ID, str(out), "--make-kwargs", '{"task_ids": ["no_such_task"]}']) == 2
    assert "no_such_task" in capsys.readouterr().err and out.read_bytes() == kept


def test_a_task_id_given_twice_is_one_row(tmp_path):
    out = tmp_path / "rl.parquet"
    assert vd.main(["rl", ENV_ID, str(out), "--task-id", TASK, "--task-id", TASK]) == 0
    assert len(pd.read_parquet(out)) == 1


def test_the_plugin_check_without_verl_is_one_line():
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("verl") is not None:
        pytest.skip("veRL is installed here: tests/reference_trainers/test_verl_plugins.py checks the command")
    import os

    for modules in (None, "verl.workers.custom", "my_plugins"):  # a module list does not hide that veRL is missing
        env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"}
        if modules:
            env["VERL_USE_EXTERNAL_MODULES"] = modules
        done = subprocess.run(
            [sys.executable, "-m", "tau_env.reference_trainers.verl_plugins"],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        assert done.returncode == 2 and done.stderr.strip().count("\n") == 0
        assert "error: veRL is not importable here" in done.stderr and "Traceback" not in done.stderr
        assert "VERL_USE_EXTERNAL_MODULES" not in done.stderr


def test_an_out_that_cannot_be_written_is_one_line(example, tmp_path, capsys):
    """A folder that cannot be made, a file system that takes no file, a name too long (root too)."""
    from pathlib import Path

    src = _jsonl(tmp_path / "sft.jsonl", example)
    cases = [tmp_path / ("n" * 300 + ".parquet")]
    if Path("/proc/self").is_dir():
        cases += [Path("/proc/tau_env_nowhere/x.parquet"), Path("/proc/x.parquet")]
    for out in cases:
        for argv in (["sft", str(src), str(out)], ["rl", ENV_ID, str(out), "--task-id", TASK]):
            assert vd.main(argv) == 2
            err = capsys.readouterr().err
            assert "Traceback" not in err and len(err.strip().splitlines()) == 1
            assert f"Cannot write {out}" in err


@pytest.mark.parametrize("seed", ["99999999999999999999999", str(2**63), "-9223372036854775809", "x"])
def test_a_seed_outside_eval_s_range_is_a_usage_error(tmp_path, seed, capsys):
    with pytest.raises(SystemExit) as e:
        vd.main(["rl", ENV_ID, str(tmp_path / "rl.parquet"), "--seed", seed])
    assert e.value.code == 2 and "--seed" in capsys.readouterr().err


@pytest.mark.parametrize(
    "field, value, said",
    [
        ("make_kwargs", "{bad", "extra_info.make_kwargs is not JSON"),
        ("make_kwargs", "[1]", "extra_info.make_kwargs must be a JSON object"),
        ("task", "{broken", "extra_info.task is not JSON"),
        ("task", '{"id": "restock"}', "extra_info.task is not a task"),
        ("seed", "abc", "extra_info.seed must be an integer"),
    ],
)
def test_a_malformed_row_field_is_named_with_its_row(field, value, said):
    """What veRL hands the agent loop from a hand-made or damaged parquet: one line naming row and field."""
    from tau_env.error import InvalidOptionError

    info = {"env_id": ENV_ID, "task_id": TASK, field: value}
    with pytest.raises(InvalidOptionError, match=said) as e:
        vd.episode_spec(info)
    assert f"task {TASK!r}" in str(e.value) and "\n" not in str(e.value)


def test_a_task_file_that_is_no_task_file_is_one_line(example, tmp_path, capsys):
    """An SFT file given as --tasks: the validation lists a problem per line, the command says one line."""
    src = _jsonl(tmp_path / "sft.jsonl", example)
    assert vd.main(["rl", ENV_ID, str(tmp_path / "rl.parquet"), "--tasks", str(src)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(src) in err


def test_a_source_given_twice_or_with_no_example_is_refused(example, tmp_path, capsys):
    """The same file twice (as spelled, by another path, by a link, a run folder and its sft/sft.jsonl)
    would write each of its rows twice; a file with no example is refused as the CPU trainer's reader
    refuses it, by name. Nothing is written."""
    src = _jsonl(tmp_path / "sft.jsonl", example)
    (tmp_path / "link.jsonl").symlink_to(src)
    run = tmp_path / "run"
    (run / "sft").mkdir(parents=True)
    _jsonl(run / "sft" / "sft.jsonl", example)
    empty, blank = tmp_path / "empty.jsonl", tmp_path / "blank.jsonl"
    empty.write_text("")
    blank.write_text("\n  \n")
    out = tmp_path / "sft.parquet"
    for sources, said in (
        ([src, src], f"{src} is given twice as a source"),
        ([src, tmp_path / ".." / tmp_path.name / "sft.jsonl"], "are the same file, given twice as a source"),
        ([src, tmp_path / "link.jsonl"], f"{tmp_path / 'link.jsonl'} and {src} are the same file"),
        ([run, run / "sft" / "sft.jsonl"], "are the same file, given twice as a source"),
        ([src, empty], f"{empty} holds no SFT example (it is empty or blank)"),
        ([blank, src], f"{blank} holds no SFT example"),
    ):
        assert vd.main(["sft", *map(str, sources), str(out)]) == 2
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert not out.exists()
    assert vd.main(["sft", str(src), str(run), str(out)]) == 0  # two files with the same examples: both kept
    assert len(pd.read_parquet(out)) == 2


def test_tasks_among_make_kwargs_are_the_tasks_of_tasks(tmp_path, capsys, monkeypatch):
    """``--make-kwargs '{"tasks": FILE}'`` makes the rows --tasks FILE makes (the tasks embedded, no
    relative path left for workers in another folder); both at once are one line, not a TypeError."""
    domain = tau_env.registry.load_domain(ENV_ID)
    monkeypatch.chdir(tmp_path)
    tau_env.save_tasks([domain.task("found_card_unlock")], "t.jsonl")
    tau_env.save_tasks([domain.task(TASK)], "t2.jsonl")
    by_flag, by_kwargs = tmp_path / "flag.parquet", tmp_path / "kwargs.parquet"
    assert vd.main(["rl", ENV_ID, str(by_flag), "--tasks", "t.jsonl"]) == 0
    assert vd.main(["rl", ENV_ID, str(by_kwargs), "--make-kwargs", '{"tasks": "t.jsonl", "max_steps": 30}']) == 0
    flag, kwargs = pd.read_parquet(by_flag)["extra_info"][0], pd.read_parquet(by_kwargs)["extra_info"][0]
    assert json.loads(kwargs["make_kwargs"]) == {"max_steps": 30}
    assert kwargs["task"] == flag["task"] and json.loads(kwargs["task"])["id"] == "found_card_unlock"
    kept = by_flag.read_bytes()
    for kw in ('{"tasks": "t2.jsonl"}', '{"tasks": "t.jsonl"}'):
        assert vd.main(["rl", ENV_ID, str(by_flag), "--tasks", "t.jsonl", "--make-kwargs", kw]) == 2
        err = capsys.readouterr().err
        assert "Tasks given twice" in err and "as --tasks" in err and len(err.strip().splitlines()) == 1
    assert vd.main(["rl", ENV_ID, str(by_flag), "--make-kwargs", '{"tasks": [{"id": "x"}]}']) == 2
    assert "tau_env.Task" in capsys.readouterr().err and by_flag.read_bytes() == kept
    from tau_env.error import InvalidOptionError

    with pytest.raises(InvalidOptionError, match="Tasks given twice"):
        vd.rl_rows(ENV_ID, tasks="t.jsonl", make_kwargs={"tasks": "t2.jsonl"})


def test_a_relative_path_among_make_kwargs_is_stored_absolute(tmp_path, monkeypatch):
    """A loader's path keyword (typed ``os.PathLike``, as tau3-banking's ``data_dir``) given relative
    would name another folder on a rollout worker: the rows store it absolute; other keywords as given."""
    import os

    seen = []

    def load(data_dir: str | os.PathLike[str] | None = None, label: str = ""):
        seen.append(os.path.abspath(data_dir))
        assert os.path.isdir(data_dir), data_dir
        return tau_env.registry.load_domain(ENV_ID)

    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    with tau_env.registry.scoped():
        tau_env.registry.register("paths-bank-v0", load)
        rows = vd.rl_rows("paths-bank-v0", task_ids=[TASK], make_kwargs={"data_dir": "data", "label": "data"})
        kwargs = json.loads(rows[0]["extra_info"]["make_kwargs"])
        assert kwargs == {"data_dir": str(tmp_path / "data"), "label": "data"}
        monkeypatch.chdir(tmp_path.parent)  # a worker elsewhere makes the env of the row
        made = len(seen)
        tau_env.make("paths-bank-v0", **kwargs).close()
    assert len(seen) > made and set(seen) == {str(tmp_path / "data")}


def test_an_example_starting_with_a_trained_assistant_turn_is_refused_by_line(tmp_path):
    # the rollout starts from the messages before the first trained turn: there are none (the CPU
    # trainer's reader refuses it the same way, through the same check)
    from tau_env.reference_trainers.verl_data import read_sft_jsonl

    from tau_env.error import InvalidOptionError

    ex = {
        "task_id": "a",
        "messages": [{"role": "assistant", "content": "Hello"}, {"role": "user", "content": "card"}],
        "train": [1, 0],
        "tools": [],
    }
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps(ex) + "\n", encoding="utf-8")
    with pytest.raises(InvalidOptionError, match=rf"{path}:1.*first message is a trained assistant turn"):
        read_sft_jsonl(path)
