"""Hostile data folders: special files, JSON that Python cannot hold, schema.sql reaching outside.

Each case must raise a DomainError (TaskFileError for task files) naming the file, never hang, never
leak a raw builtin exception and never touch anything outside the folder.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tau_env import load_tasks, make
from tau_env.error import DomainError, TaskFileError
from tau_env.tasks import parse_json, read_json_file, read_text_file
from tests.test_data_folders import (
    harbor_dir,  # noqa: F401  (fixtures)
    harbor_pristine,  # noqa: F401
    load_harbor,
    load_tau3,
    needs_tau3,
    tau3_dir,  # noqa: F401
    tau3_pristine,  # noqa: F401
)

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")


@pytest.fixture(autouse=True)
def no_hang():
    """Without the fix a named pipe blocks the open forever: fail the test instead of the suite."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def hung(*_):
        raise TimeoutError("hung: a special file was opened")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(120)  # a hang takes forever; a loaded machine's slowest test here, seconds
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


LIMIT = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300


# --- 7b: a named pipe (or any non-regular file) is refused, never opened ----------------------------
def _special(path: Path, kind: str) -> None:
    if path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


@needs_fifo
@pytest.mark.parametrize(
    "rel,error",
    [
        ("documents/zz.md", DomainError),
        ("documents/zz.json", DomainError),
        ("domain.json", DomainError),
        ("schema.sql", DomainError),
        ("seed.json", DomainError),
        ("policy.md", DomainError),
        ("user_guidelines.md", DomainError),
        ("tasks.json", TaskFileError),
    ],
)
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_domain_folder_refuses_special_files(harbor_dir, rel, error, kind):  # noqa: F811
    _special(harbor_dir / rel, kind)
    found = "a named pipe \\(FIFO\\)" if kind == "fifo" else "a folder"
    with pytest.raises(error, match=f"^{re.escape(str(harbor_dir / rel))}: expected a regular file, found {found};"):
        load_harbor(harbor_dir)


@needs_tau3
@needs_fifo
@pytest.mark.parametrize(
    "rel,error",
    [
        ("documents/zz.json", DomainError),
        ("tasks/task_999.json", TaskFileError),
        ("db.json", DomainError),
        ("prompts/zz.md", DomainError),
    ],
)
def test_tau3_folder_refuses_named_pipes(tau3_dir, rel, error):  # noqa: F811
    _special(tau3_dir / rel, "fifo")
    with pytest.raises(error, match=f"^{re.escape(str(tau3_dir / rel))}: expected a regular file, found a named pipe"):
        load_tau3(tau3_dir)


def test_readers_refuse_sockets_and_devices(tmp_path):
    sock_path = tmp_path / "s.json"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock_path))
        with pytest.raises(DomainError, match=r"s\.json: expected a regular file, found a socket;"):
            read_json_file(sock_path)
    if Path("/dev/zero").exists():  # endless: reading it would never finish
        with pytest.raises(TaskFileError, match=r"^/dev/zero: expected a regular file, found a character device;"):
            read_text_file(Path("/dev/zero"), TaskFileError)


def test_a_symlink_to_a_regular_file_is_read(tmp_path):
    (tmp_path / "real.json").write_text('{"a": 1}', encoding="utf-8")
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    assert read_json_file(tmp_path / "link.json") == {"a": 1}


@needs_fifo
def test_load_tasks_refuses_a_named_pipe(tmp_path):
    os.mkfifo(tmp_path / "tasks.jsonl")
    with pytest.raises(TaskFileError, match=r"tasks\.jsonl: expected a regular file, found a named pipe"):
        load_tasks(tmp_path / "tasks.jsonl")
    with pytest.raises(TaskFileError, match="found a named pipe"):  # make's per-content cache reads no pipe either
        make("harbor-bank-v0", tasks=tmp_path / "tasks.jsonl")


# --- 10: JSON that parses but Python cannot hold ------------------------------------------------------
def test_long_integer_names_the_file_and_path(tmp_path):
    p = tmp_path / "seed.json"
    p.write_text('{"accounts": [{"id": 1}, {"id": ' + "9" * (LIMIT + 1) + "}]}", encoding="utf-8")
    where = rf"^{re.escape(str(p))}: not readable JSON \(an integer over {LIMIT} digits"
    with pytest.raises(DomainError, match=where + r".*\) at accounts\[1\]\.id;"):
        read_json_file(p)
    assert parse_json("-" + "9" * LIMIT, "x") == -int("9" * LIMIT)  # at the limit: fine


@pytest.mark.parametrize(
    "text,path,what",
    [
        ('{"a": "x\\ud83d"}', "a", "a string"),
        ('{"a": [1, {"b c": "\\uDFFFy"}]}', r'a\[1\]\["b c"\]', "a string"),
        ('{"a": {"k\\udc00": 1}}', "a", "a key"),
        ('["\\ude00\\ud83d"]', r"\[0\]", "a string"),  # the halves in the wrong order
        ('"\\ud800"', r"\(top level\)", "a string"),
    ],
)
def test_lone_surrogate_names_the_file_and_path(text, path, what):
    with pytest.raises(DomainError, match=rf"^f\.json: {path}: {what} holds a lone surrogate \(\\u[0-9a-f]{{4}}\)"):
        parse_json(text, "f.json")


def test_surrogate_pairs_and_raw_characters_are_fine():
    assert parse_json('["\\ud83d\\ude00", "\\uD83D\\uDE00", "😀", "\\\\ud83d"]', "f") == ["😀", "😀", "😀", "\\ud83d"]


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.text() | st.integers(), lambda c: st.lists(c) | st.dictionaries(st.text(), c), max_leaves=8))
def test_parse_json_takes_what_utf8_can_hold_and_refuses_the_rest(value):
    text = json.dumps(value)  # ensure_ascii: every lone surrogate becomes an escape
    try:
        text.encode("utf-8") and json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        with pytest.raises(DomainError, match=r"^f: .*: a (string|key) holds a lone surrogate"):
            parse_json(text, "f")
    else:
        assert parse_json(text, "f") == value


@needs_tau3
@pytest.mark.parametrize(
    "replacement,match",
    [
        ('"\\ud83d"', r"users\.data\[\"\d+\"\]\.name: a string holds a lone surrogate \(\\ud83d\)"),
        ("9" * 5000, rf"not readable JSON \(an integer over {LIMIT} digits.*\) at users\.data\[\"\d+\"\]\.name;"),
    ],
)
def test_tau3_db_json_python_cannot_hold(tau3_dir, replacement, match):  # noqa: F811
    from tau_env import make, registry

    db = tau3_dir / "db.json"
    db.write_text(db.read_text(encoding="utf-8").replace('"Mia Smith"', replacement, 1), encoding="utf-8")
    registry.clear_cache()
    with pytest.raises(DomainError, match=rf"^make\('tau3-banking', data_dir=.*\): {re.escape(str(db))}: {match}"):
        make("tau3-banking", data_dir=str(tau3_dir))


@needs_tau3
def test_tau3_task_file_with_a_lone_surrogate(tau3_dir):  # noqa: F811
    p = tau3_dir / "tasks" / "task_001.json"
    raw = json.loads(p.read_text(encoding="utf-8"))
    raw["description"] = {"notes": "\ud83d"}
    p.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(TaskFileError, match=rf"^{re.escape(str(p))}: description\.notes: a string holds a lone"):
        load_tau3(tau3_dir)


# --- 11: schema.sql can only build tables in the database it is given -------------------------------
@pytest.mark.parametrize(
    "sql,match",
    [
        (
            "ATTACH DATABASE '{out}' AS p; CREATE TABLE p.x(a);",
            r"line 1: \"ATTACH DATABASE .*\": not allowed in a schema: ATTACH ",
        ),
        ("CREATE TABLE z(a);\nVACUUM INTO '{out}';", r"line 2: \"VACUUM INTO .*\": not allowed in a schema: ATTACH "),
        ("DETACH main;", r"line 1: 'DETACH main;': not allowed in a schema: DETACH main;"),
        ("PRAGMA writable_schema = ON;", r"line 1: .*: not allowed in a schema: PRAGMA writable_schema "),
        ("CREATE TEMP TABLE z(a);", r"line 1: .*: not allowed in a schema: .* in database 'temp'"),
        ("BEGIN;", r"line 1: 'BEGIN;': not allowed in a schema: TRANSACTION BEGIN;"),
        (
            "CREATE TABLE z(a);\nCREATE TABLE z(b);",
            r"line 2: 'CREATE TABLE z\(b\);': not valid SQL \(table z already exists\)\.$",
        ),
        (
            "CREATE TABLE z(a);\nWITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c)"
            " INSERT INTO z SELECT n FROM c;",
            r"line 2: .*: stopped after [\d,]+ SQLite steps",
        ),
        ("CREATE TABLE z(a);\n\x00", r"line 2: a NUL character"),
    ],
)
def test_schema_sql_cannot_reach_outside_the_folder(harbor_dir, tmp_path, sql, match):  # noqa: F811
    out = tmp_path / "outside.db"
    schema = harbor_dir / "schema.sql"
    schema.write_text(sql.format(out=out) + "\n" + schema.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(DomainError, match=rf"^{re.escape(str(schema))}: {match}"):
        load_harbor(harbor_dir)
    assert not out.exists()


def test_schema_sql_may_read_its_own_tables(harbor_dir):  # noqa: F811
    schema = harbor_dir / "schema.sql"
    schema.write_text(schema.read_text(encoding="utf-8") + "\nPRAGMA table_info(customers);\n", encoding="utf-8")
    assert load_harbor(harbor_dir).schema.tables["customers"].primary_key == ("customer_id",)


def test_a_schema_built_by_hand_is_held_to_the_same_rules():
    from tau_env.db import Schema, build_image

    with pytest.raises(DomainError, match=r"^line 1: .*: not allowed in a schema: ATTACH"):
        build_image(Schema("ATTACH DATABASE ':memory:' AS p;", {}), {})


def test_a_task_folder_given_as_a_file_names_the_files_in_it(tmp_path):
    """``--tasks synth/run1`` (a run folder, one level short): the error names the task files there
    instead of suggesting the folder be removed."""
    run = tmp_path / "run1"
    run.mkdir()
    task = '{"id": "t1", "scenario": {}, "actions": []}\n'
    (run / "composite.jsonl").write_text(task, encoding="utf-8")
    (run / "tasks.jsonl").write_text(task, encoding="utf-8")
    (run / "notes.txt").write_text(task, encoding="utf-8")
    (run / "run.json").write_text('{"domain": "harbor-bank-v0"}', encoding="utf-8")  # JSON, not tasks
    (run / "verdicts.jsonl").write_text('{"accepted": true}\n', encoding="utf-8")
    with pytest.raises(TaskFileError, match=r"found a folder; name a file in it \(composite\.jsonl, tasks\.jsonl\)\.$"):
        load_tasks(run)
    with pytest.raises(TaskFileError, match=r"found a folder; name a file, not a folder\.$"):
        load_tasks(tmp_path / "run1" / ".." / "run1" / "..")
