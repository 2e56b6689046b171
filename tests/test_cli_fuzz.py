"""Property test of the command line: random argument vectors never end in a traceback.

Each example builds a random subcommand with a random subset of its flags, hostile values
(negatives, zero, huge, NaN, empty, control characters, unicode, paths to files, folders and
nothing) and unknown flags, and runs ``tau_env.cli.main`` in-process. Whatever happens, it must
return or exit with status 0, 1, 2 (or 130), stderr holds no traceback, a failure ends with one
``tau-env: ...`` line, and nothing a terminal would act on reaches stdout or stderr.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tau_env.cli import build_parser, main

TASKS = ["wire_preferred", "lost_card_standard_shipping"]
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")

HOSTILE = [
    "-1", "0", "-0", "1e3", "1.5", "nan", "NaN", "inf", "-inf", "99999999999999999999", "-99999999999999999999",
    "", " ", "abc", "\x1b[2J", "\x1b]0;t\x07", "\u202eevil", "\ud83d", "é", "\x00", "--", "-x", "a\nb", "0x10",
]  # fmt: skip
SMALL = ["1", "2", "3"]
FLOATS = ["0", "0.5", "1", "2.0"]
#: Keys of the paths built per module (see ``paths``); PATH picks one of them.
PATH = ["file", "dir", "missing", "under_file", "run", "run_traj"]

#: Per subcommand, its flags and the values that may be valid (None: a switch); every flag also gets
#: hostile values (HOSTILE, random text) a quarter of the time.
FLAGS: dict[str, dict[str, list[str] | None]] = {
    "list": {},
    "check": {"--task": TASKS, "--no-play": None, "--data-dir": PATH},
    "eval": {
        "--domain": ["harbor-bank-v0", "no-such-v0", "tau3-banking"],
        "--agent": ["oracle", "noop", "random", "gpt"],
        "--user": ["scripted", "llm"],
        # model names are never valid here: a valid one would reach for a network
        "--agent-model": ["", " ", "\x1b[2J", "a\nb", "\x00"],
        "--user-model": ["", "\t", "\u202e", "\x7f"],
        "--agent-base-url": ["http://127.0.0.1:9"],
        "--user-base-url": ["http://127.0.0.1:9"],
        "--agent-api-key-env": ["MY_KEY"],
        "--user-api-key-env": ["MY_KEY"],
        "--agent-temperature": FLOATS,
        "--user-temperature": FLOATS,
        "--max-tokens": SMALL,
        "--timeout": FLOATS,
        "--retries": SMALL,
        "--strip-reasoning": None,
        "--cache": PATH,
        "--no-cache": None,
        "--concurrency": SMALL,
        "--backend": ["local", "slurm"],
        "--restart": None,
        "--trials": SMALL,
        "--task": TASKS,
        "--seed": SMALL,
        "--max-steps": [*SMALL, "30"],
        "--retrieval": ["bm25", "grep", "none", "bm25+grep", "dense?"],
        "--out": PATH,
        "--data-dir": PATH,
        "--quiet": None,
    },
    "replay": {"--task": [*TASKS, "all"], "--json": None, "--data-dir": PATH},
    "export-sft": {
        "--jsonl": ["new.jsonl", "new.jsonl", *PATH],
        "--parquet": ["new.parquet", *PATH],
        "--min-reward": FLOATS,
        "--greeting-turns": SMALL,
    },
    "show": {"--task": TASKS, "--failed": None, "--limit": SMALL, "--width": SMALL},
}
POSITIONAL = {
    "check": ["harbor-bank-v0", "tau3-banking", "no-such-v0"],
    "eval": ["harbor-bank-v0", "tau3-banking"],
    "replay": ["harbor-bank-v0", "tau3-banking"],
    "export-sft": ["run", "run", "run_traj", *PATH],
    "show": ["run", "run", "run_traj", *PATH],
}
UNKNOWN = ["--bogus", "-z", "--trial", "--help", "extra", "--task=", "--out=\x1b"]


def _value(draw, valid: list[str]) -> str:
    if draw(st.integers(0, 3)) > 0:
        return draw(st.sampled_from(valid))
    return draw(st.sampled_from(HOSTILE) | st.text(max_size=6))


@st.composite
def argv_templates(draw) -> list[str]:
    """An argument vector; path keys (see ``paths``) are filled in by the test."""
    command = draw(st.sampled_from(sorted(FLAGS)))
    argv = [command]
    if command in POSITIONAL and draw(st.integers(0, 9)) > 0:  # now and then the positional is missing
        argv.append(_value(draw, POSITIONAL[command]))
    if command in ("check", "eval"):  # keep episodes few: one known task unless fuzzed further
        argv += ["--task", TASKS[0]]
    flags = FLAGS[command]
    for flag in draw(st.lists(st.sampled_from(sorted(flags)), max_size=4)) if flags else []:
        argv.append(flag)
        if flags[flag] is not None and draw(st.integers(0, 19)) > 0:  # now and then the value is missing
            argv.append(_value(draw, flags[flag]))
    if draw(st.integers(0, 7)) == 0:
        argv.insert(draw(st.integers(1, len(argv))), draw(st.sampled_from(UNKNOWN)))
    return argv


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    base = tmp_path_factory.mktemp("cli_fuzz")
    run = base / "run"
    assert main(["eval", "--quiet", "--out", str(run), "--task", TASKS[0], "--task", TASKS[1]]) == 0
    (base / "file").write_text("not a trajectory\n\x1b[2J\n")
    (base / "dir").mkdir()
    return {
        "file": base / "file",
        "dir": base / "dir",
        "missing": base / "missing" / "deeper",
        "under_file": base / "file" / "x",
        "run": run,
        "run_traj": run / "trajectories.jsonl",
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(template=argv_templates(), fresh=st.integers(0, 10**9))
def test_random_argument_vectors_never_raise(template, fresh, paths, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a default --out (runs/...) lands in the test's folder
    monkeypatch.delenv("TAU3_BANKING_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # the default response cache, never the real one
    out = tmp_path / f"out{fresh}"
    argv = [str(paths[a]) if a in paths else a for a in template]
    if "--out" not in argv and "eval" == argv[0]:
        argv += ["--out", str(out)]
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as e:  # argparse: --help (0) or a refused flag (2)
        code = e.code
    stdout, stderr = capsys.readouterr()
    assert code in (0, 1, 2), (argv, code, stderr)
    assert "Traceback" not in stderr, (argv, stderr)
    assert not UNSAFE.search(stdout) and not UNSAFE.search(stderr), (argv, stdout[-300:], stderr)
    if code == 2:
        assert stderr.splitlines()[-1].startswith("tau-env: "), (argv, stderr)
    if argv[0] == "export-sft" and stdout.startswith("wrote "):
        target = build_parser().parse_args(argv).jsonl
        for line in open(target, encoding="utf-8") if target else []:  # what was written is valid JSON
            json.loads(line)
