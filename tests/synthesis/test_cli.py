"""``tau-env synth``: argument plumbing to the pipeline's stage functions, flag errors, lazy import."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
import tau_env.synthesis

from tau_env.agents import TeacherAgent
from tau_env.cli import main


@pytest.fixture
def calls(monkeypatch):
    """A fake ``tau_env.synthesis.pipeline`` recording each stage call; returns the record list."""
    seen: list[tuple[str, tuple, dict]] = []
    fake = types.ModuleType("tau_env.synthesis.pipeline")

    def stage(name, result):
        def fn(*args, **kwargs):
            seen.append((name, args, kwargs))
            return result

        fn.__name__ = name
        return fn

    fake.run_graphs = stage("run_graphs", {"constants": 42, "tools": 30})
    fake.run_tasks = stage("run_tasks", {"accepted": 5, "yield": 0.8333, "problems": {"replay_error": 1}})

    def run_compose(run_dir, *, n, seed=0, llm=None):  # no quiet: the CLI must not pass it
        seen.append(("run_compose", (run_dir,), {"n": n, "seed": seed, "llm": llm}))
        return {"composite": n}

    fake.run_compose = run_compose
    fake.run_sft = stage("run_sft", {"episodes": 3, "kept": 2})
    fake.run_rl = stage("run_rl", {"kept": 1})
    fake.run_decontaminate = stage("run_decontaminate", {"removed": 2, "kept": 9})
    fake.run_report = stage("run_report", (Path("r/report.txt"), Path("r/report.html")))
    monkeypatch.setitem(sys.modules, "tau_env.synthesis.pipeline", fake)
    monkeypatch.setattr(tau_env.synthesis, "pipeline", fake, raising=False)
    return seen


@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "run1"
    d.mkdir()
    (d / "run.json").write_text(json.dumps({"domain": "harbor-bank-v0"}))
    return d


def test_graphs_and_tasks_plumbing(calls, tmp_path, capsys):
    out = tmp_path / "run1"
    assert main(["synth", "graphs", "harbor-bank-v0", "--out", str(out)]) == 0
    name, args, kw = calls[-1]
    assert name == "run_graphs" and args == (out, "harbor-bank-v0")
    assert kw["data_dir"] is None and kw["llm"] is None and kw["quiet"] is False
    assert "constants  42" in capsys.readouterr().out

    argv = ["synth", "tasks", "harbor-bank-v0", "--n", "500", "--out", str(out), "--seed", "7"]
    argv += ["--batch", "50", "--no-review", "--workers", "3", "--quiet"]
    assert main(argv) == 0
    name, args, kw = calls[-1]
    assert name == "run_tasks" and args == (out, "harbor-bank-v0")
    assert kw == {
        "n": 500,
        "data_dir": None,
        "llm": None,
        "seed": 7,
        "batch": 50,
        "review": False,
        "workers": 3,
        "quiet": True,
        "ids": None,  # the run's own style (plan for a new run)
        "weights": None,  # the run's own weights (none for a new run)
    }
    assert main([*argv, "--ids", "domain"]) == 0
    assert calls[-1][2]["ids"] == "domain"
    assert main([*argv, "--weight", "failure:-=4", "--weight", "wire=0"]) == 0
    assert calls[-1][2]["weights"] == {"failure:-": 4.0, "wire": 0.0}
    printed = capsys.readouterr().out
    assert "yield" in printed and "0.8333" in printed and "problems.replay_error  1" in printed


def test_tasks_batch_is_100_for_a_new_run_and_the_runs_own_when_it_continues(calls, tmp_path):
    out = tmp_path / "run1"
    argv = ["synth", "tasks", "harbor-bank-v0", "--n", "5", "--out", str(out)]
    assert main(argv) == 0 and calls[-1][2]["batch"] == 100  # a new run
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"domain": "harbor-bank-v0"}))
    assert main(argv) == 0 and calls[-1][2]["batch"] == 100  # a run that recorded none: as before
    (out / "run.json").write_text(json.dumps({"domain": "harbor-bank-v0", "batch": 40}))
    assert main(argv) == 0 and calls[-1][2]["batch"] is None  # the run's own (40), checked by the pipeline
    assert (
        main([*argv, "--batch", "7"]) == 0 and calls[-1][2]["batch"] == 7
    )  # given: taken, with the pipeline's warning


def test_tasks_with_a_model_builds_a_cached_synth_llm(calls, tmp_path):
    out = tmp_path / "run1"
    argv = ["synth", "tasks", "harbor-bank-v0", "--n", "2", "--out", str(out)]
    argv += ["--llm-model", "qwen", "--llm-base-url", "http://127.0.0.1:9/v1", "--llm-api-key-env", "MY_KEY"]
    assert main(argv) == 0
    llm = calls[-1][2]["llm"]
    assert (llm.model, llm.base_url, llm.api_key_env) == ("qwen", "http://127.0.0.1:9/v1", "MY_KEY")
    assert llm.cache is not None and llm.cache.path == out / "llm_cache.sqlite"


def test_tasks_data_dir(calls, tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    assert (
        main(["synth", "tasks", "tau3-banking", "--n", "1", "--out", str(tmp_path / "o"), "--data-dir", str(data)]) == 0
    )
    assert calls[-1][2]["data_dir"] == str(data)
    assert main(["synth", "tasks", "tau3-banking", "--n", "1", "--out", str(tmp_path / "o"), "--data-dir", "nope"]) == 2
    assert "--data-dir nope is not a folder" in capsys.readouterr().err


def test_tasks_without_domain_needs_an_existing_run(calls, tmp_path, run_dir, capsys):
    assert main(["synth", "tasks", "--n", "3", "--out", str(tmp_path / "fresh")]) == 2
    assert "needs a DOMAIN" in capsys.readouterr().err
    assert main(["synth", "tasks", "--n", "3", "--out", str(run_dir)]) == 0
    assert calls[-1][1] == (run_dir, None)


def test_compose_sft_rl_decontaminate_report(calls, run_dir, capsys):
    assert main(["synth", "compose", "--from", str(run_dir), "--n", "200", "--seed", "3"]) == 0
    assert calls[-1] == ("run_compose", (run_dir,), {"n": 200, "seed": 3, "llm": None})

    argv = ["synth", "sft", "--from", str(run_dir), "--agent-model", "T", "--agent-base-url", "http://h/v1"]
    assert main([*argv, "--user-model", "U"]) == 0
    name, args, kw = calls[-1]
    assert kw["agent"] == {"model": "T", "base_url": "http://h/v1", "api_key_env": "OPENAI_API_KEY"}
    assert kw["user"] == {"model": "U", "base_url": None, "api_key_env": "OPENAI_API_KEY"} and kw["trials"] == 1
    assert main(argv) == 0 and calls[-1][2]["user"] is None
    assert main(["synth", "sft", "--from", str(run_dir), "--teacher"]) == 0
    assert calls[-1][2]["agent"] is TeacherAgent and calls[-1][2]["user"] is None

    argv = ["synth", "rl", "--from", str(run_dir), "--policy-model", "P", "--rollouts", "4", "--band", "0.2", "0.7"]
    assert main(argv) == 0
    name, args, kw = calls[-1]
    assert name == "run_rl" and kw["rollouts"] == 4 and kw["band"] == (0.2, 0.7) and kw["policy"]["model"] == "P"

    assert main(["synth", "decontaminate", "--from", str(run_dir), "--against", "tau3-banking"]) == 0
    assert calls[-1][2] == {
        "against": "tau3-banking",
        "data_dir": None,
        "task_ids": None,
        "detectors": None,
        "quiet": False,
    }
    argv = ["synth", "decontaminate", "--from", str(run_dir), "--against", "harbor-bank-v0"]
    assert main([*argv, "--task-ids", "found_card_unlock, travel_notice_simple", "--detectors", "chain,ids"]) == 0
    assert calls[-1][2]["task_ids"] == ["found_card_unlock", "travel_notice_simple"]
    assert calls[-1][2]["detectors"] == ["chain", "ids"]

    capsys.readouterr()
    assert main(["synth", "report", str(run_dir)]) == 0
    assert calls[-1][1] == (run_dir,)
    assert capsys.readouterr().out.split() == [str(Path("r/report.txt")), str(Path("r/report.html"))]
    assert main(["synth", "report", "--from", str(run_dir)]) == 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["synth", "rl", "--from", "{run}", "--policy-model", "P", "--band", "0.9", "0.1"], "0 <= LO < HI <= 1"),
        (["synth", "rl", "--from", "{run}", "--policy-model", "P", "--band", "0.5", "1.5"], "0 <= LO < HI <= 1"),
        (["synth", "rl", "--from", "{run}", "--policy-model", "P", "--band", "0.5", "0.5"], "0 <= LO < HI <= 1"),
        (["synth", "rl", "--from", "{run}", "--band", "0.1", "0.9"], "needs --policy-model"),
        (["synth", "rl", "--from", "{run}", "--policy-model", "P", "--band", "-1", "0.5"], "argument --band"),
        (["synth", "sft", "--from", "{run}"], "needs --agent-model"),
        (["synth", "sft", "--from", "{run}"], "or --teacher"),
        (["synth", "sft", "--from", "{run}", "--teacher", "--agent-model", "T"], "not both"),
        (["synth", "sft", "--from", "{run}", "--agent-model", "T", "--user-base-url", "u"], "--user-base-url needs"),
        (["synth", "compose", "--from", "{run}", "--n", "0"], "at least 1"),
        (["synth", "compose", "--from", "{run}", "--n", "x"], "expected an integer"),
        (["synth", "compose", "--from", "{missing}", "--n", "2"], "does not exist"),
        (["synth", "compose", "--from", "{file}", "--n", "2"], "is a file"),
        (["synth", "compose", "--from", "{empty}", "--n", "2"], "no run.json"),
        (["synth", "compose", "--n", "2"], "--from"),
        (["synth", "compose", "--from", "{run}", "--n", "2", "--llm-base-url", "u"], "--llm-base-url needs"),
        (["synth", "tasks", "d", "--out", "{file}", "--n", "2"], "is a file"),
        (["synth", "tasks", "d", "--n", "2"], "--out"),
        (["synth", "report"], "needs a run folder"),
        (["synth", "report", "{missing}"], "does not exist"),
        (["synth", "nope"], "invalid choice"),
        (["synth"], "required"),
        (["synth", "decontaminate", "--from", "{run}", "--against", "e", "--task-ids", "a,,b"], "separated by commas"),
        (["synth", "decontaminate", "--from", "{run}", "--against", "e", "--detectors", " "], "separated by commas"),
        (["synth", "decontaminate", "--from", "{run}", "--against", "e", "--detectors", "chain,"], "--detectors"),
    ],
)
def test_flag_errors_are_one_line_and_status_2(calls, run_dir, tmp_path, capsys, argv, message):
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    paths = {"run": run_dir, "missing": tmp_path / "missing", "file": tmp_path / "file", "empty": tmp_path / "empty"}
    argv = [a.format(**paths) if a.startswith("{") else a for a in argv]
    assert _status(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tau-env: ") and err.count("\n") == 1 and message in err
    assert not any(name.startswith("run_") for name, *_ in calls)


def _status(argv):
    """main's exit status, whether it returns it or argparse exits with it."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def test_stage_errors_are_reported(monkeypatch, calls, run_dir, capsys):
    from tau_env.synthesis.errors import SynthesisError

    def broken(*a, **k):
        raise SynthesisError("run folder in use by another synthesis run")

    monkeypatch.setattr(sys.modules["tau_env.synthesis.pipeline"], "run_compose", broken)
    assert main(["synth", "compose", "--from", str(run_dir), "--n", "2"]) == 2
    assert capsys.readouterr().err == "tau-env: run folder in use by another synthesis run\n"


def test_import_and_eval_do_not_import_synthesis():
    code = (
        "import sys, tau_env, tau_env.cli\n"
        "assert not [m for m in sys.modules if m.startswith('tau_env.synthesis')], 'import'\n"
        "task = 'lost_card_standard_shipping'\n"
        "rc = tau_env.cli.main(['eval', 'harbor-bank-v0', '--task', task, '--quiet', '--out', sys.argv[1]])\n"
        "assert rc == 0, rc\n"
        "tau_env.cli.main(['list'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('tau_env.synthesis') or m == 'sqlite_utils'))\n"
    )
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([sys.executable, "-c", code, d], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_synth_without_sqlite_utils_names_the_extra(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "sqlite_utils" else real(name, *a)
    )
    assert main(["synth", "report", "x"]) == 2
    assert "pip install 'tau-env[synth]'" in capsys.readouterr().err


def test_top_level_help_lists_synth_and_placeholder_forwards(calls, run_dir):
    from tau_env.cli import build_parser

    p = build_parser()
    assert "synth" in p.format_help()
    args = p.parse_args(["synth", "report", str(run_dir)])  # a caller of the plain parser still gets there
    assert args.fn(args) == 0 and calls[-1][0] == "run_report"


def test_a_missing_stage_is_one_line(calls, run_dir, monkeypatch, capsys):
    monkeypatch.delattr(sys.modules["tau_env.synthesis.pipeline"], "run_sft")
    assert main(["synth", "sft", "--from", str(run_dir), "--agent-model", "T"]) == 2
    assert "no synthesis stage run_sft" in capsys.readouterr().err
