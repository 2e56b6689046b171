import errno
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tau_env import cli
from tau_env.cli import main


def test_list(capsys):
    assert main(["list"]) == 0
    assert "harbor-bank-v0" in capsys.readouterr().out


def test_eval_and_show(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["eval", "--quiet", "--out", str(out), "--agent", "noop"]) == 0
    printed = capsys.readouterr().out
    assert "pass@1" in printed and str(out) in printed
    assert (out / "metrics.json").exists() and (out / "summary.txt").exists()
    first = json.loads((out / "trajectories.jsonl").read_text().splitlines()[0])
    assert main(["show", str(out), "--limit", "1", "--failed"]) == 0
    shown = capsys.readouterr().out
    assert "== task" in shown and "reward 0.0" in shown and "database differs" in shown
    assert main(["show", str(out), "--task", first["task_id"]]) == 0
    assert first["task_id"] in capsys.readouterr().out
    # the same command again: every episode is on disk; it says nothing ran (and no empty timing row)
    assert main(["eval", "--quiet", "--out", str(out), "--agent", "noop"]) == 0
    again = capsys.readouterr().out
    assert "nothing ran" in again and "done after" not in again and "pass@1" in again
    assert "resumed:" not in printed and "done after" in printed


def test_check_one_task(capsys):
    from tau_env import registry

    task = registry.load_domain("harbor-bank-v0").tasks[0].id
    assert main(["check", "harbor-bank-v0", "--task", task]) == 0
    assert "pass every check" in capsys.readouterr().out


def test_errors_are_reported_not_raised(capsys, tmp_path):
    assert main(["check", "no-such-env"]) == 2
    assert "No environment 'no-such-env'" in capsys.readouterr().err
    assert main(["show", str(tmp_path / "missing")]) == 2


def test_console_script_entry_point():
    r = subprocess.run([sys.executable, "-m", "tau_env.cli", "list"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "harbor-bank-v0" in r.stdout


def test_import_is_light():
    code = (
        "import sys, tau_env; heavy = [m for m in ('torch', 'sentence_transformers', 'transformers', 'vllm', "
        "'verl', 'ray', 'trl', 'openai', 'pyarrow', 'httpx') if m in sys.modules]; print(heavy)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]"


@pytest.mark.parametrize("client", ["http", "openai"])
def test_eval_with_model_servers_and_export_sft(tmp_path, capsys, monkeypatch, client):
    if client == "openai":
        pytest.importorskip("openai")
    from tau_env.testing import FakeOpenAI, own_turns, seat_of, text, tool

    def script(req):
        n = own_turns(req)
        if seat_of(req) == "user":
            return text("I lost my debit card." if n == 0 else "Thanks ###STOP###")
        return tool("get_current_time", {}, call_id=f"c{n}") if n == 1 else text("Done.")

    monkeypatch.setenv("MY_KEY", "secret-value")
    out = tmp_path / "run"
    with FakeOpenAI(script) as server:
        args = [
            "eval",
            "--domain",
            "harbor-bank-v0",
            "--agent-model",
            "m-agent",
            "--agent-base-url",
            server.url,
            "--agent-api-key-env",
            "MY_KEY",
            "--user-model",
            "m-user",
            "--user-base-url",
            server.url,
            "--trials",
            "2",
            "--concurrency",
            "8",
            "--task",
            "lost_card_standard_shipping",
            "--task",
            "travel_notice_simple",
            "--cache",
            str(tmp_path / "cache.sqlite"),
            "--out",
            str(out),
            "--quiet",
            "--client",
            client,
        ]
        assert main(args) == 0
    printed = capsys.readouterr().out
    assert "pass^2" in printed and "mean tokens" in printed
    config = (out / "config.json").read_text()
    assert "secret-value" not in config and '"api_key_env": "MY_KEY"' in config
    cfg = json.loads(config)
    assert cfg["agent"]["model"] == "m-agent" and cfg["user"]["model"] == "m-user"
    assert cfg["user_prompt_version"] and cfg["retrieval"] == "bm25" and cfg["tau_env_version"]
    assert cfg["agent"]["sampling"]["temperature"] == 0.0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["episodes"] == 4 and set(metrics["pass^k"]) == {"1", "2"}
    assert set(metrics["time_to_done_s"]) == {"50%", "90%", "100%"} and metrics["terminations"] == {"user_stop": 4}
    html = (out / "report.html").read_text()
    assert "lost_card_standard_shipping" in html and "<script" in html
    # teacher data: nothing succeeded with these scripted models, so no example...
    assert main(["export-sft", str(out), "--jsonl", str(tmp_path / "sft.jsonl")]) == 0
    assert (tmp_path / "sft.jsonl").read_text() == ""
    # ...and with the oracle every episode becomes one
    assert main(["eval", "--quiet", "--out", str(tmp_path / "oracle"), "--task", "lost_card_standard_shipping"]) == 0
    assert main(["export-sft", str(tmp_path / "oracle"), "--jsonl", str(tmp_path / "sft.jsonl")]) == 0
    ex = json.loads((tmp_path / "sft.jsonl").read_text())
    assert ex["task_id"] == "lost_card_standard_shipping" and len(ex["train"]) == len(ex["messages"])
    assert ex["messages"][0]["role"] == "system" and ex["train"][1] is False  # the env's greeting
    assert any(ex["train"]) and all(m["role"] == "assistant" for m, t in zip(ex["messages"], ex["train"]) if t)
    assert ex["tools"] and main(["export-sft", str(tmp_path / "oracle")]) == 2


def test_export_sft_parquet(tmp_path):
    import pytest

    pq = pytest.importorskip("pyarrow.parquet")
    assert main(["eval", "--quiet", "--out", str(tmp_path / "run"), "--task", "wire_preferred"]) == 0
    assert (
        main(
            [
                "export-sft",
                str(tmp_path / "run"),
                "--parquet",
                str(tmp_path / "sft.parquet"),
                "--jsonl",
                str(tmp_path / "sft.jsonl"),
            ]
        )
        == 0
    )
    table = pq.read_table(tmp_path / "sft.parquet")
    rows = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert table.num_rows == len(rows) > 0
    first = table.to_pylist()[0]
    assert json.loads(first["messages"]) == rows[0]["messages"] and first["train"] == rows[0]["train"]


# -- user errors: one line on stderr, "tau-env: ...", exit status 2, never a traceback ------------------


TASK = "wire_preferred"


def _fails(capsys, argv, pattern):
    """``main(argv)`` is a user error: status 2 and exactly one stderr line matching ``pattern``."""
    try:
        code = main(argv)
    except SystemExit as e:  # argparse rejects a flag itself
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2, (code, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert re.match(r"^tau-env: " + pattern, lines[0]), lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--trials", "0"),
        ("--trials", "-1"),
        ("--trials", "nan"),
        ("--trials", "1.5"),
        ("--trials", "10001"),
        ("--concurrency", "0"),
        ("--concurrency", "-3"),
        ("--max-steps", "0"),
        ("--max-steps", "-1"),
        ("--max-tokens", "0"),
        ("--retries", "-1"),
        ("--seed", "x"),
        ("--seed", str(2**64)),
        ("--timeout", "0"),
        ("--timeout", "-1"),
        ("--timeout", "nan"),
        ("--timeout", "inf"),
        ("--agent-temperature", "nan"),
        ("--user-temperature", "-0.5"),
        ("--agent-temperature", "inf"),
        ("--agent-model", ""),
        ("--user-model", "m\x1b[2J"),
        ("--out", ""),
        ("--retrieval", ""),
        ("--task", ""),
        ("--agent", "gpt"),
        ("--backend", "slurm"),
    ],
)
def test_eval_rejects_bad_flag_values(capsys, tmp_path, flag, value):
    line = _fails(capsys, ["eval", "--out", str(tmp_path / "r"), "--task", TASK, flag, value], f"argument {flag}: ")
    assert "\x1b" not in line and not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "DIR", "--width", "0"],
        ["show", "DIR", "--width", "-5"],
        ["show", "DIR", "--limit", "0"],
        ["export-sft", "DIR", "--jsonl", "x", "--min-reward", "nan"],
        ["export-sft", "DIR", "--jsonl", "x", "--greeting-turns", "-1"],
        ["check", ""],
        ["replay", "harbor-bank-v0"],
    ],
)
def test_other_commands_reject_bad_flag_values(capsys, tmp_path, argv):
    _fails(capsys, [str(tmp_path) if a == "DIR" else a for a in argv], "")


def test_unknown_flags_and_commands(capsys):
    _fails(capsys, ["eval", "--bogus"], "unrecognized arguments: --bogus")
    _fails(capsys, ["frobnicate"], "argument command: invalid choice")
    _fails(capsys, [], "the following arguments are required: command")


def test_max_steps_is_passed_through(tmp_path):
    out = tmp_path / "r"
    assert main(["eval", "--quiet", "--out", str(out), "--task", TASK, "--max-steps", "1"]) == 0
    assert json.loads((out / "config.json").read_text())["max_steps"] == 1
    assert json.loads((out / "trajectories.jsonl").read_text())["termination_reason"] == "max_steps"


def test_out_folder_that_cannot_be_used(capsys, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    _fails(
        capsys,
        ["eval", "--out", str(tmp_path / "file"), "--task", TASK],
        r"--out \S+: \S+ is a file, not a folder; pass another path\.$",
    )
    _fails(capsys, ["eval", "--out", str(tmp_path / "file" / "sub"), "--task", TASK], r".* is a file, not a folder")
    monkeypatch.setattr(cli.os, "access", lambda *a: False)  # a read-only file system (root ignores modes)
    _fails(capsys, ["eval", "--out", str(tmp_path / "ro"), "--task", TASK], r".* is not writable")
    assert (tmp_path / "file").read_text() == "x" and not (tmp_path / "ro").exists()


def test_os_errors_about_user_paths_are_one_line(capsys, monkeypatch, tmp_path):
    def read_only(args):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / "r"))

    monkeypatch.setattr(cli, "cmd_list", read_only)
    _fails(capsys, ["list"], re.escape(f"{tmp_path / 'r'}: Read-only file system") + "$")

    def disk_full(args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cli, "cmd_list", disk_full)
    _fails(capsys, ["list"], "No space left on device$")


def test_bugs_still_show_a_traceback(monkeypatch):
    def bug(args):
        return {}["missing"]

    monkeypatch.setattr(cli, "cmd_list", bug)
    with pytest.raises(KeyError, match=r"^'missing'$"):
        main(["list"])

    def socket_bug(args):  # an OSError about no user path is not a user error either
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(cli, "cmd_list", socket_bug)
    with pytest.raises(OSError, match="Bad file descriptor"):
        main(["list"])


def test_interrupt_exits_130(capsys, monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_list", interrupted)
    assert main(["list"]) == 130
    assert capsys.readouterr().err == "tau-env: interrupted\n"


def test_library_errors_become_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("TAU3_BANKING_DATA", raising=False)
    out = str(tmp_path / "r")
    _fails(capsys, ["eval", "--out", out, "--task", "nope"], r".*Domain 'harbor-bank' has no task 'nope'")
    _fails(capsys, ["check", "harbor-bank-v0", "--task", "nope"], r".*Domain 'harbor-bank' has no task 'nope'")
    _fails(capsys, ["replay", "harbor-bank-v0", "--task", "nope"], r".*Domain 'harbor-bank' has no task 'nope'")
    _fails(capsys, ["eval", "no-such-env", "--out", out], r".*No environment 'no-such-env'")
    _fails(capsys, ["eval", "--out", out, "--task", TASK, "--retrieval", "bogus"], r".*'bogus'")
    _fails(capsys, ["eval", "a-v0", "--domain", "b-v0"], r"Two domains given")
    _fails(capsys, ["eval", "--agent-base-url", "http://x", "--out", out], r"--agent-base-url needs --agent-model")
    for command in (["check", "tau3-banking"], ["replay", "tau3-banking", "--task", "all"]):
        _fails(capsys, command, r".*tau3-banking needs the benchmark's data")
    _fails(capsys, ["check", "tau3-banking", "--data-dir", str(tmp_path / "nowhere")], r"--data-dir .* is not a folder")
    _fails(
        capsys, ["eval", "--data-dir", str(tmp_path), "--out", out], r"harbor-bank-v0 is not loaded from a data folder"
    )
    (tmp_path / "file").write_text("x")
    _fails(capsys, ["replay", "tau3-banking", "--task", "all", "--data-dir", str(tmp_path / "file")], r"--data-dir")
    _fails(capsys, ["check", "tau3-banking", "--data-dir", str(tmp_path)], r".*tau3-banking data folder")
    assert not (tmp_path / "r").exists()


def test_export_sft_and_show_path_errors(capsys, tmp_path):
    run = tmp_path / "run"
    assert main(["eval", "--quiet", "--out", str(run), "--task", TASK]) == 0
    capsys.readouterr()
    (tmp_path / "file").write_text("x")
    _fails(capsys, ["export-sft", str(tmp_path / "missing"), "--jsonl", str(tmp_path / "o")], r"No trajectories at ")
    _fails(capsys, ["export-sft", str(tmp_path), "--jsonl", str(tmp_path / "o")], r"No trajectories at ")
    _fails(capsys, ["export-sft", str(run), "--jsonl", str(tmp_path)], r".* is a folder; pass a file path")
    _fails(capsys, ["export-sft", str(run), "--parquet", str(tmp_path / "file" / "x")], r".* is a file, not a folder")
    _fails(capsys, ["export-sft", str(run)], r"export-sft needs an output")
    _fails(
        capsys,
        ["export-sft", str(run), "--jsonl", "x", "--parquet", "./x"],
        r"--jsonl x and --parquet x name one file",
    )
    # through a folder that is not there, and through a link: the same file too (the parquet's bytes
    # were written over the JSONL, or the link replaced)
    _fails(capsys, ["export-sft", str(run), "--jsonl", "x", "--parquet", "nodir/../x"], r".* name one file")
    assert not Path("x").exists()
    (tmp_path / "alias.jsonl").symlink_to(tmp_path / "out2.jsonl")
    out2, alias = str(tmp_path / "out2.jsonl"), str(tmp_path / "alias.jsonl")
    _fails(capsys, ["export-sft", str(run), "--jsonl", out2, "--parquet", alias], r".* name one file")
    assert not (tmp_path / "out2.jsonl").exists() and (tmp_path / "alias.jsonl").is_symlink()
    # one output spelled through a folder that is not there is written where it resolves
    assert main(["export-sft", str(run), "--jsonl", str(tmp_path / "nodir" / ".." / "one.jsonl")]) == 0
    assert (tmp_path / "one.jsonl").is_file()
    traj = run / "trajectories.jsonl"
    before = traj.read_bytes()
    _fails(capsys, ["export-sft", str(run), "--jsonl", str(traj)], r".* is the trajectory file being read")
    assert traj.read_bytes() == before
    _fails(capsys, ["show", str(tmp_path / "missing")], r"No trajectories at ")
    _fails(capsys, ["show", str(tmp_path)], r"No trajectories at .*trajectories\.jsonl")
    _fails(
        capsys,
        ["eval", "--user-model", "m", "--cache", str(tmp_path), "--out", str(tmp_path / "r2")],
        r"--cache .* is a folder",
    )
    assert not (tmp_path / "o").exists()


# -- terminal output: model text and data are escaped ------------------------------------------------------

HOSTILE = "title\x1b]0;pwned\x07 clear\x1b[2J csi\x9b2J del\x7f bidi\u202eevil\u2066 lone\ud83d cr\r"
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _hostile_record():
    call = {"id": "c1", "type": "function", "function": {"name": "do\x1b[2J", "arguments": json.dumps({"x": HOSTILE})}}
    return {
        "task_id": "t\x1b[31m",
        "trial": 0,
        "seed": 1,
        "reward": 0.0,
        "termination_reason": "user_stop\x9b",
        "steps": 2,
        "grade": {"db_match": False, "diff": {"accounts\u202e": [HOSTILE]}},
        "events": [
            {"step": 1, "seat": "user", "message": {"role": "assistant", "content": HOSTILE}},
            {
                "step": 2,
                "seat": "agent",
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "tool_results": [{"tool_call_id": "c1", "content": HOSTILE, "error": True}],
            },
        ],
    }


def test_show_escapes_model_text(capsys, tmp_path):
    path = tmp_path / "trajectories.jsonl"
    path.write_text(json.dumps(_hostile_record()) + "\n")  # ensure_ascii: the lone surrogate as "\ud83d"
    assert main(["show", str(path)]) == 0
    out, err = capsys.readouterr()
    assert not UNSAFE.search(out + err)
    assert "\\x1b]0;pwned\\x07" in out and "\\x1b[2J" in out and "\\x9b2J" in out and "\\x7f" in out
    assert "\\u202eevil\\u2066" in out and "lone\\ud83d" in out and "cr\\r" in out and "t\\x1b[31m" in out
    assert "database differs" in out and "\n" in out  # newlines stay


def test_transcript_is_escaped():
    import tau_env

    env = tau_env.make("harbor-bank-v0")
    env.reset(seed=0, options={"task_id": TASK})
    env.step({"role": "assistant", "content": HOSTILE})
    text = env.transcript()
    env.close()
    assert not UNSAFE.search(text) and "\\x1b]0;pwned" in text


def test_show_skips_records_that_are_not_episodes(capsys, tmp_path):
    path = tmp_path / "trajectories.jsonl"
    good = json.dumps(_hostile_record())
    bad = [
        b"1",
        b"{}",
        b"[]",
        b'"x"',
        b"null",
        b'{"task_id": 5}',
        b"\xff\xfe{}",
        b"[" * 100_000,
        b"9" * 5000,
        json.dumps({**_hostile_record(), "reward": "1"}).encode(),
        json.dumps({**_hostile_record(), "events": {}}).encode(),
        json.dumps({**_hostile_record(), "events": [1, {"message": 5}, {"seat": [], "tool_results": 3}]}).encode(),
        b'{"task_id": "a", "trial": 0, "reward": true, "termination_reason": null, "events": []}',
        b"{torn",
    ]
    path.write_bytes(b"\n".join([*bad, good.encode(), b""]))
    assert main(["show", str(path), "--width", "1"]) == 0
    out, err = capsys.readouterr()
    assert out.count("== task") == 2  # the good record and the one whose events are garbage
    notes = err.splitlines()
    assert len(notes) == len(bad) - 1 and all(re.match(r"^\(.*: line \d+ is .*; skipped\)$", n) for n in notes)
    assert "line 1 is a JSON int, not an episode object" in notes[0] and "not valid UTF-8" in err
    assert "'reward' is a str, expected int or float" in err and "'reward' is a bool" in err
    assert "JSON nested too deeply" in err and "not valid JSON" in err


def test_check_and_replay_output_is_escaped(capsys, monkeypatch):
    import tau_env.checker

    monkeypatch.setattr(tau_env.checker, "domain_problems", lambda *a, **k: {"t\x1b[2J": ["bad \x9b \u202e"]})
    assert main(["check", "harbor-bank-v0", "--task", TASK]) == 1
    out, err = capsys.readouterr()
    assert not UNSAFE.search(out + err) and "t\\x1b[2J:" in out and "bad \\x9b \\u202e" in out

    from tau_env.domain import Domain

    real = Domain.replay_record

    def hostile(self, task):
        rec = real(self, task)
        rec["actions"][0]["output"] = HOSTILE
        return rec

    monkeypatch.setattr(Domain, "replay_record", hostile)
    assert main(["replay", "harbor-bank-v0", "--task", TASK]) == 0
    out = capsys.readouterr().out
    assert not UNSAFE.search(out) and "\\x1b]0;pwned" in out
    assert main(["replay", "harbor-bank-v0", "--task", TASK, "--json"]) == 0
    out = capsys.readouterr().out
    assert not UNSAFE.search(out) and json.loads(out)["actions"][0]["output"] == HOSTILE


def test_export_sft_keeps_text_and_skips_bad_records(capsys, tmp_path):
    run = tmp_path / "run"
    assert main(["eval", "--quiet", "--out", str(run), "--task", TASK]) == 0
    traj = run / "trajectories.jsonl"
    rec = json.loads(traj.read_text())
    rec["agent_view"]["messages"][-1]["content"] = HOSTILE
    traj.write_text(json.dumps(rec) + "\n1\n{}\n\xff\n")
    capsys.readouterr()
    assert main(["export-sft", str(run), "--jsonl", str(tmp_path / "sft.jsonl")]) == 0
    out, err = capsys.readouterr()
    assert "wrote 1 examples" in out and len(err.splitlines()) == 3
    ex = json.loads((tmp_path / "sft.jsonl").read_text(encoding="utf-8"))
    assert ex["messages"][-1]["content"] == HOSTILE
    del rec["agent_view"]
    traj.write_text(json.dumps(rec) + "\n")
    _fails(capsys, ["export-sft", str(run), "--jsonl", str(tmp_path / "sft.jsonl")], r"Episode .* has no agent_view")


def test_a_terminal_that_cannot_encode_gets_escapes(tmp_path):
    import os

    path = tmp_path / "t.jsonl"
    record = {**_hostile_record(), "task_id": "héllo €"}
    path.write_text(json.dumps(record) + "\n")
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    r = subprocess.run(
        [sys.executable, "-m", "tau_env.cli", "show", str(path)], capture_output=True, env=env, timeout=60
    )
    assert r.returncode == 0 and b"Traceback" not in r.stderr
    assert b"== task h\\xe9llo \\u20ac" in r.stdout and b"\x1b" not in r.stdout
    r = subprocess.run([sys.executable, "-m", "tau_env.cli", "eval", "--trials", "0"], capture_output=True, timeout=60)
    assert r.returncode == 2 and r.stdout == b""
    assert r.stderr.decode().splitlines() == [
        "tau-env: argument --trials: expected an integer from 1 to 10000, got '0' (see: tau-env eval --help)"
    ]


def test_export_sft_makes_missing_output_folders(tmp_path):
    pytest.importorskip("pyarrow")
    assert main(["eval", "--quiet", "--out", str(tmp_path / "run"), "--task", TASK]) == 0
    jsonl, parquet = tmp_path / "a" / "b" / "sft.jsonl", tmp_path / "c" / "sft.parquet"
    assert main(["export-sft", str(tmp_path / "run"), "--jsonl", str(jsonl), "--parquet", str(parquet)]) == 0
    assert jsonl.read_text() and parquet.stat().st_size > 0


@pytest.mark.parametrize("seat", ["agent", "user"])
@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("notaurl", ""),
        ("ftp://x/v1", ""),
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://127.0.0.1:99999/v1", "Port out of range 0-65535"),
    ],
)
def test_eval_refuses_a_bad_base_url_in_one_line(capsys, tmp_path, seat, url, problem):
    argv = ["eval", "--quiet", "--no-cache", "--out", str(tmp_path / "r"), f"--{seat}-model", "m"]
    _fails(
        capsys,
        [*argv, f"--{seat}-base-url", url],
        rf"Expected an http:// or https:// base URL, got '.*'{problem and ': '}{re.escape(problem)}\.$",
    )
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(not os.access("/proc/self/mem", os.R_OK), reason="needs Linux's /proc/self/mem")
@pytest.mark.parametrize("command", [["show"], ["export-sft", "--jsonl", "OUT"]])
def test_show_and_export_sft_report_an_unreadable_file_in_one_line(capsys, tmp_path, command):
    """/proc/self/mem opens, then reading it from its start fails with EIO."""
    argv = [command[0], "/proc/self/mem", *[str(tmp_path / "o") if a == "OUT" else a for a in command[1:]]]
    _fails(capsys, argv, r"Cannot read trajectories at /proc/self/mem: Input/output error\.$")
    _fails(capsys, [command[0], "x" * 5000, *argv[2:]], r"(Cannot read trajectories at )?x+: File name too long\.?$")


def test_prompt_flags_reach_the_tau3_loader_and_are_refused_elsewhere(tmp_path, capsys, monkeypatch):
    """--prompt-style/--user-guidelines-dir/--document-order are tau3-banking loader options: passed to make
    there, a one-line error for a domain that has none."""
    seen = {}

    def fake_evaluate(env, agent, user, **kw):
        seen.update(kw)
        raise KeyboardInterrupt  # stop before any work; exit 130

    monkeypatch.setattr("tau_env.harness.evaluate", fake_evaluate)
    order = tmp_path / "order.json"
    order.write_text("[]")
    argv = ["eval", "tau3-banking", "--prompt-style", "tau_env", "--document-order", str(order), "--quiet"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 130
    assert seen["prompt_style"] == "tau_env" and seen["document_order"] == str(order)
    capsys.readouterr()
    monkeypatch.undo()
    _fails(
        capsys, ["eval", "--prompt-style", "tau_env", "--out", str(tmp_path / "b")], r".*unknown keyword 'prompt_style'"
    )


def test_library_warnings_are_one_escaped_line(tmp_path, capsys, monkeypatch):
    import warnings as w

    def warn_then_fail(args):
        w.warn("careful\nnow \x1b[2J", UserWarning, stacklevel=1)
        return 0

    monkeypatch.setattr(cli, "cmd_list", warn_then_fail)
    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["list"].set_defaults(fn=warn_then_fail)
    assert main(["list"]) == 0
    err = capsys.readouterr().err
    assert err == "tau-env: warning: careful now \\x1b[2J\n"


def test_agent_checkpoint_without_the_train_extra_says_which_extra(monkeypatch, tmp_path, capsys):
    import sys

    # as on an install without torch: the trainers' checkpoint module cannot be imported
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.delitem(sys.modules, "tau_env.reference_trainers.checkpoint", raising=False)
    assert main(["eval", "--agent-checkpoint", str(tmp_path), "--task", "found_card_unlock"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "pip install 'tau-env[train]'" in err


@pytest.mark.parametrize(
    "edit, said",
    [
        (lambda t: t["actions"][-1].update(name="unlock_kard"), "no tool named 'unlock_kard'"),
        (lambda t: t.update(required_documents=["no_such_doc"]), "required document 'no_such_doc' does not exist"),
        # an initial state the database refuses: the episode could not start (found when played, hours in)
        (
            lambda t: t.update(initial_state={"customers": [{"customer_id": "C-9", "tier": "platinum-ultra"}]}),
            "its initial_state does not fit the database: ",
        ),
        (
            lambda t: t.update(initial_state={"customers": [{"customer_idd": "C-9"}]}),
            "its initial_state does not fit the database: Table 'customers' has no column 'customer_idd'",
        ),
        (lambda t: t.update(initial_state={"no_such_table": []}), "its initial_state does not fit the database: "),
    ],
)
def test_a_task_file_whose_actions_cannot_run_is_refused_by_eval_and_listed_by_check(tmp_path, capsys, edit, said):
    """A reference action naming a tool the domain lacks would make a target from actions that
    cannot run (the oracle then 'passes' with a tool error): eval refuses the file naming the task;
    check still lists every problem."""
    from tau_env.registry import registry
    from tau_env.tasks import save_tasks

    domain = registry.load_domain("harbor-bank-v0")
    path = tmp_path / "tasks.jsonl"
    save_tasks([domain.task("found_card_unlock"), domain.task("update_email_and_phone")], path)
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    edit(rows[1])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "eval"
    assert main(["eval", "--agent", "oracle", "--tasks", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: task 'update_email_and_phone': " in err and said in err and not out.exists()
    assert main(["check", "harbor-bank-v0", "--tasks", str(path), "--no-play"]) == 1
    captured = capsys.readouterr()
    assert said in captured.out and "1 of 2 entries fail" in captured.err


def test_an_empty_task_file_says_so(tmp_path, capsys):
    path = tmp_path / "tasks.jsonl"
    path.write_text("")
    assert main(["eval", "--agent", "oracle", "--tasks", str(path), "--out", str(tmp_path / "o")]) == 2
    assert "it holds none (an empty task file" in capsys.readouterr().err


def test_a_pretty_printed_array_in_a_jsonl_file_is_named(tmp_path, capsys):
    from tau_env.registry import registry

    task = registry.load_domain("harbor-bank-v0").task("found_card_unlock")
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps([task.model_dump(mode="json")], indent=2))
    assert main(["eval", "--agent", "oracle", "--tasks", str(path), "--out", str(tmp_path / "o")]) == 2
    assert "one JSON array over several lines, not JSON Lines" in capsys.readouterr().err
    path.with_suffix(".json").write_text(path.read_text())
    assert (
        main(
            [
                "eval",
                "--agent",
                "oracle",
                "--tasks",
                str(path.with_suffix(".json")),
                "--quiet",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 0
    )


def test_export_sft_writes_nothing_into_the_results_folder_and_says_when_nothing_matched(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["eval", "--quiet", "--out", str(run), "--task", "found_card_unlock"]) == 0
    config = (run / "config.json").read_text()
    for spelled in (run / "config.json", run / ".." / run.name / "config.json"):
        assert main(["export-sft", str(run), "--jsonl", str(spelled)]) == 2
        assert "is in the results folder being read" in capsys.readouterr().err
    assert (run / "config.json").read_text() == config
    out = tmp_path / "sft.jsonl"
    assert main(["export-sft", str(run), "--jsonl", str(out)]) == 0 and out.read_text().strip()
    assert main(["export-sft", str(run), "--jsonl", str(out), "--greeting-turns", "100"]) == 0
    assert "no episode of" in capsys.readouterr().err and out.read_text() == ""
    assert not list(tmp_path.glob(".sft.jsonl.tmp-*"))


def test_export_sft_writes_into_no_input_and_nowhere_in_its_results_folder_however_spelled(
    tmp_path, capsys, monkeypatch
):
    """The results folder named as the folder, its trajectories file, a relative path through ``..``, a
    link to either; the output one of its files, a new file or folder in it, a link into it: each
    refused, the folder left as it was and still resumable. Only the folder a run wrote is guarded: a
    trajectories file elsewhere may have its output beside it."""
    run = tmp_path / "run"
    argv = ["eval", "--quiet", "--out", str(run), "--agent", "oracle", "--task", "found_card_unlock", "--trials", "2"]
    assert main(argv) == 0
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    (tmp_path / "runlink").symlink_to(run)
    (tmp_path / "trajlink.jsonl").symlink_to(run / "trajectories.jsonl")
    (tmp_path / "cfglink").symlink_to(run / "config.json")
    monkeypatch.chdir(tmp_path)
    sources = ["run", "run/trajectories.jsonl", "./run/../run/trajectories.jsonl", "runlink/trajectories.jsonl"]
    sources += ["trajlink.jsonl", str(run / "trajectories.jsonl")]
    outputs = ["run/config.json", "run/metrics.json", "run/new.jsonl", "runlink/c.json", "cfglink"]
    for source in sources:
        for flag in ("--jsonl", "--parquet"):
            for out in outputs:
                _fails(capsys, ["export-sft", source, flag, out], r".* is in the results folder being read \(")
            _fails(capsys, ["export-sft", source, flag, "trajlink.jsonl"], r".* is the trajectory file being read")
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    assert main(argv) == 0 and "nothing ran" in capsys.readouterr().out
    # a copy of the folder with its trajectories renamed is still a results folder (config.json beside it)
    shutil.copytree(run, "copy")
    os.rename("copy/trajectories.jsonl", "copy/kept.jsonl")
    _fails(capsys, ["export-sft", "copy/kept.jsonl", "--jsonl", "copy/config.json"], r".* is in the results")
    # a subfolder of it is apart from its own files (a flat list): the export may go there
    assert main(["export-sft", "run", "--jsonl", "run/sft/train.jsonl"]) == 0
    assert Path("run/sft/train.jsonl").read_text().strip()
    shutil.rmtree("run/sft")
    # a trajectories file outside a results folder: the output may go beside it
    os.mkdir("data")
    shutil.copy(run / "trajectories.jsonl", "data/episodes.jsonl")
    assert main(["export-sft", "data/episodes.jsonl", "--jsonl", "data/sft.jsonl"]) == 0
    assert len(Path("data/sft.jsonl").read_text().splitlines()) == 2


def test_export_sft_skips_duplicate_episodes_as_the_harness_reader_does(tmp_path, capsys):
    """Each (task, trial) once: the first record, or a later one when the first ended in an
    infrastructure error (the harness runs that one again); the skipped duplicates are counted."""
    run = tmp_path / "run"
    argv = ["eval", "--quiet", "--out", str(run), "--agent", "oracle", "--task", "found_card_unlock", "--trials", "2"]
    assert main(argv) == 0
    lines = (run / "trajectories.jsonl").read_text().splitlines(keepends=True)
    doubled = tmp_path / "doubled.jsonl"
    doubled.write_text("".join(lines * 2))  # every line twice
    capsys.readouterr()
    out = tmp_path / "sft.jsonl"
    assert main(["export-sft", str(doubled), "--jsonl", str(out)]) == 0
    printed, err = capsys.readouterr()
    assert [(ex["task_id"], ex["trial"]) for ex in map(json.loads, out.read_text().splitlines())] == [
        ("found_card_unlock", 0),
        ("found_card_unlock", 1),
    ]
    assert "wrote 2 examples" in printed
    assert err.splitlines() == [
        f"tau-env: warning: {doubled}: skipped 2 duplicate episode(s), a task and trial already read "
        "(first at line 3: trial 0 of 'found_card_unlock')."
    ]
    infra = {**json.loads(lines[0]), "termination_reason": "infrastructure_error", "reward": 0.0}
    doubled.write_text(json.dumps(infra) + "\n" + lines[0] + lines[1] + lines[0])
    assert main(["export-sft", str(doubled), "--jsonl", str(out), "--min-reward", "0"]) == 0
    printed, err = capsys.readouterr()
    assert [json.loads(x)["trial"] for x in out.read_text().splitlines()] == [0, 1]
    assert "skipped 1 duplicate episode(s)" in err and "first at line 4" in err


def test_export_sft_with_no_example_writes_a_parquet_with_the_columns(tmp_path, capsys):
    """As --jsonl writes an empty file, --parquet writes the same columns as ever, with no row."""
    pq = pytest.importorskip("pyarrow.parquet")
    assert main(["eval", "--quiet", "--out", str(tmp_path / "run"), "--task", "found_card_unlock"]) == 0
    full, empty = tmp_path / "full.parquet", tmp_path / "empty.parquet"
    assert main(["export-sft", str(tmp_path / "run"), "--parquet", str(full)]) == 0
    argv = ["export-sft", str(tmp_path / "run"), "--parquet", str(empty), "--jsonl", str(tmp_path / "e.jsonl")]
    assert main([*argv, "--min-reward", "2"]) == 0
    assert "the output holds none" in capsys.readouterr().err and (tmp_path / "e.jsonl").read_text() == ""
    table = pq.read_table(empty)
    assert table.num_rows == 0 and table.schema == pq.read_table(full).schema
    assert table.column_names == ["task_id", "trial", "reward", "messages", "tools", "train"]
