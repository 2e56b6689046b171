"""Data folders: a malformed file gives a DomainError/TaskError naming the file, never a raw exception.

Covers tau3-banking's data folder (``tau_env/domains/tau3_banking/data.py``; a trimmed copy of
../shared/data/tau3_banking, skipped where absent, failed under CI) and folders loaded by ``load_domain_dir`` (a
copy of Harbor Bank's), plus ``load_tasks``. The property tests corrupt a valid copy at random
(truncate, invalid UTF-8, delete, retype a JSON value, drop a key, empty a file): loading either
succeeds or raises a tau_env error whose message names the file.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tau_env import load_domain_dir, load_tasks
from tau_env.domains import harbor_bank
from tau_env.domains.harbor_bank.tools import TOOLS as HARBOR_TOOLS
from tau_env.error import DomainError, TaskError, TaskFileError
from tests.conftest import TAU3_DATA as TAU3
from tests.conftest import needs_tau3_data, require_shared

needs_tau3 = needs_tau3_data
HARBOR_FILES = ["domain.json", "schema.sql", "seed.json", "tasks.json", "policy.md", "user_guidelines.md", "documents"]
#: A trimmed tau3 folder: every prompt, the seed, a few documents and tasks (two with initial states).
TAU3_TASKS = ["task_001", "task_002", "task_003", "task_004", "task_026", "task_027"]


def _copy(src: Path, dst: Path, only: list[str] | None = None) -> Path:
    """Copy files as writable (the shared data is read-only, and copytree would keep that)."""
    dst.mkdir(parents=True, exist_ok=True)
    for p in sorted(src.iterdir()):
        if only is not None and p.name not in only:
            continue
        if p.is_dir():
            _copy(p, dst / p.name)
        else:
            shutil.copyfile(p, dst / p.name)
    return dst


@pytest.fixture(scope="session")
def tau3_pristine(tmp_path_factory) -> Path:
    require_shared(TAU3)
    root = tmp_path_factory.mktemp("tau3_pristine")
    _copy(TAU3, root, ["db.json", "prompts"])
    _copy(TAU3 / "tasks", root / "tasks", [f"{t}.json" for t in TAU3_TASKS])
    _copy(TAU3 / "documents", root / "documents", sorted(p.name for p in (TAU3 / "documents").iterdir())[:25])
    return root


@pytest.fixture(scope="session")
def harbor_pristine(tmp_path_factory) -> Path:
    return _copy(harbor_bank.ROOT, tmp_path_factory.mktemp("harbor_pristine"), HARBOR_FILES)


@pytest.fixture
def tau3_dir(tau3_pristine, tmp_path) -> Path:
    return _copy(tau3_pristine, tmp_path / "tau3")


@pytest.fixture
def harbor_dir(harbor_pristine, tmp_path) -> Path:
    return _copy(harbor_pristine, tmp_path / "harbor")


def load_tau3(root: Path) -> Any:
    """Load as ``make`` does, then build what episodes need later (prompt, each task's initial state)."""
    from tau_env.domains import tau3_banking

    domain = tau3_banking.load(str(root), retrieval="bm25")
    domain.system_prompt()
    for t in domain.tasks:
        domain.image(t)
    return domain


def load_harbor(root: Path) -> Any:
    domain = load_domain_dir(root, HARBOR_TOOLS)
    domain.system_prompt()
    for t in domain.tasks:
        if t.initial_state:
            domain.image(t)
    return domain


def edit_json(path: Path, change) -> None:
    """Rewrite a JSON file: ``change`` mutates the document, or returns a new one (None: keep the mutated one)."""
    obj = json.loads(path.read_text(encoding="utf-8"))
    new = change(obj)
    path.write_text(json.dumps(obj if new is None else new), encoding="utf-8")


def without(key: str):
    """A change that drops ``key`` from the document."""
    return lambda obj: obj.pop(key) and None


def test_pristine_copies_load(tau3_dir, harbor_dir):
    assert len(load_tau3(tau3_dir).tasks) == len(TAU3_TASKS)
    assert len(load_harbor(harbor_dir).tasks) == len(harbor_bank.load().tasks)


# --- random corruptions ----------------------------------------------------------------------------
OTHER_TYPES = [None, True, 0, 1.5, "x", [], {}, [1], {"a": 1}]


def _json_type(v: Any) -> str:
    return "number" if isinstance(v, (int, float)) and not isinstance(v, bool) else type(v).__name__


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else []
    for k, v in items:
        out += _paths(v, (*prefix, k))
    return out


def _set(obj: Any, path: tuple, value: Any, drop: bool = False) -> Any:
    if not path:
        return value
    parent = obj
    for k in path[:-1]:
        parent = parent[k]
    if drop:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return obj


def corrupt(root: Path, data: st.DataObject) -> Path:
    """Apply one random corruption to a file (or folder) of ``root``; returns what was corrupted."""
    kind = data.draw(st.sampled_from(["truncate", "bad_utf8", "delete", "retype", "drop_key", "empty"]), "kind")
    files = sorted(p for p in root.rglob("*") if p.is_file())
    if kind in ("retype", "drop_key"):
        files = [p for p in files if p.suffix == ".json"]
    target = data.draw(st.sampled_from(files), "file")
    raw = target.read_bytes()
    if kind == "truncate":
        target.write_bytes(raw[: data.draw(st.integers(0, max(len(raw) - 1, 0)), "at")])
    elif kind == "empty":
        target.write_bytes(b"")
    elif kind == "bad_utf8":
        buf = bytearray(raw)
        for _ in range(data.draw(st.integers(1, 3), "count")):
            at = data.draw(st.integers(0, len(buf)), "at")
            buf[at : at + 1] = data.draw(st.sampled_from([b"\xff", b"\x80", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88"]))
        target.write_bytes(bytes(buf))
    elif kind == "delete":
        if target.parent != root and data.draw(st.booleans(), "whole folder"):
            target = target.parent
            shutil.rmtree(target)
        else:
            target.unlink()
    else:
        obj = json.loads(raw.decode("utf-8"))
        if kind == "retype":
            path = data.draw(st.sampled_from(_paths(obj)), "path")
            current = obj
            for k in path:
                current = current[k]
            value = data.draw(st.sampled_from([v for v in OTHER_TYPES if _json_type(v) != _json_type(current)]))
            obj = _set(obj, path, value)
        else:
            keyed = [p for p in _paths(obj) if p and isinstance(_set_parent(obj, p), dict)]
            if not keyed:
                return target
            obj = _set(obj, data.draw(st.sampled_from(keyed), "path"), None, drop=True)
        target.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return target


def _set_parent(obj: Any, path: tuple) -> Any:
    for k in path[:-1]:
        obj = obj[k]
    return obj


#: A corrupted file whose problem may surface in a file that depends on it.
DEPENDENTS = {"schema.sql": ["seed.json", "tasks.json"]}


def assert_loads_or_names_file(load, root: Path, target: Path) -> None:
    try:
        load(root)
    except (DomainError, TaskError) as e:
        names = [target.name, *DEPENDENTS.get(target.name, [])]
        assert any(n in str(e) for n in names), f"{target.name} corrupted, but the error says: {e}"


_SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))


@needs_tau3
@_SETTINGS
@given(data=st.data())
def test_random_corruptions_of_a_tau3_folder(tau3_pristine, data):
    root = _copy(tau3_pristine, Path(tempfile.mkdtemp(dir=tau3_pristine.parent)))
    try:
        assert_loads_or_names_file(load_tau3, root, corrupt(root, data))
    finally:
        shutil.rmtree(root)


@_SETTINGS
@given(data=st.data())
def test_random_corruptions_of_a_domain_folder(harbor_pristine, data):
    root = _copy(harbor_pristine, Path(tempfile.mkdtemp(dir=harbor_pristine.parent)))
    try:
        assert_loads_or_names_file(load_harbor, root, corrupt(root, data))
    finally:
        shutil.rmtree(root)


# --- tau3-banking: each named case -------------------------------------------------------------
@needs_tau3
@pytest.mark.parametrize(
    "file,change,error,match",
    [
        (
            "db.json",
            lambda db: db.update(users="oops"),
            DomainError,
            r"db\.json: users: expected an object or null, got string\.$",
        ),
        (
            "db.json",
            lambda db: db["users"]["data"].update(u1=[1, 2]),
            DomainError,
            r"db\.json: users\.data\.u1: expected an object, got array\.$",
        ),
        (
            "db.json",
            lambda db: db["accounts"].update(notes=5),
            DomainError,
            r"db\.json: accounts\.notes: expected a string or null, got number\.$",
        ),
        ("db.json", lambda db: [db], DomainError, r"db\.json: \(top level\): expected an object, got array\.$"),
        (
            "tasks/task_001.json",
            lambda t: 7,
            TaskFileError,
            r"task_001\.json: \(top level\): expected an object, got number\.$",
        ),
        ("tasks/task_001.json", without("id"), TaskFileError, r"task_001\.json: id: missing"),
        (
            "tasks/task_001.json",
            lambda t: t.update(id=17),
            TaskFileError,
            r"task_001\.json: id: expected a string, got number\.$",
        ),
        (
            "tasks/task_001.json",
            lambda t: t["user_scenario"].update(instructions=["a"]),
            TaskFileError,
            r"task_001\.json: user_scenario\.instructions: expected a string, an object or null, got array\.$",
        ),
        (
            "tasks/task_001.json",
            lambda t: t["evaluation_criteria"]["actions"][0].update(arguments="{}"),
            TaskFileError,
            r"task_001\.json: evaluation_criteria\.actions\[0\]\.arguments: expected an object or null, got string\.$",
        ),
        (
            "tasks/task_001.json",
            lambda t: t["evaluation_criteria"].update(actions=[5]),
            TaskFileError,
            r"task_001\.json: evaluation_criteria\.actions\[0\]: expected an object, got number\.$",
        ),
        (
            "tasks/task_001.json",
            lambda t: t.update(required_documents=["a", None]),
            TaskFileError,
            r"task_001\.json: required_documents\[1\]: expected a string, got null\.$",
        ),
        (
            "tasks/task_026.json",
            lambda t: t["initial_state"]["initialization_data"]["agent_data"].update(userz={"data": {}}),
            TaskFileError,
            r"task_026\.json: initial_state\.initialization_data\.agent_data\.userz: unknown table 'userz'\. "
            r'Did you mean "users"\?$',
        ),
        (
            "tasks/task_026.json",
            lambda t: t["initial_state"]["initialization_data"]["agent_data"].update(users={"data": {"u": "row"}}),
            TaskFileError,
            r"task_026\.json: initial_state\.initialization_data\.agent_data\.users\.data\.u: expected an object, "
            r"got string\.$",
        ),
    ],
)
def test_tau3_wrong_json_types_name_the_file_and_place(tau3_dir, file, change, error, match):
    edit_json(tau3_dir / file, change)
    with pytest.raises(error, match=match):
        load_tau3(tau3_dir)


@needs_tau3
def test_tau3_task_errors_are_task_and_domain_errors(tau3_dir):
    edit_json(tau3_dir / "tasks/task_002.json", lambda t: t.update(id="task_001"))
    with pytest.raises(TaskFileError, match=r"task_002\.json: id: 'task_001' is also the id of .*task_001\.json\.$"):
        load_tau3(tau3_dir)
    assert issubclass(TaskFileError, TaskError) and issubclass(TaskFileError, DomainError)


@needs_tau3
def test_tau3_documents_are_checked(tau3_dir):
    doc = sorted((tau3_dir / "documents").iterdir())[3]
    edit_json(doc, lambda d: d.update(content=["not", "text"]))
    with pytest.raises(DomainError, match=rf"{re.escape(doc.name)}: content: expected a string, got array\.$"):
        load_tau3(tau3_dir)
    edit_json(doc, without("content"))
    with pytest.raises(DomainError, match=rf"{re.escape(doc.name)}: content: missing"):
        load_tau3(tau3_dir)
    other = sorted((tau3_dir / "documents").iterdir())[4]
    first_id = json.loads(other.read_text())["id"]
    edit_json(doc, lambda d: d.update(id=first_id, content="x"))
    with pytest.raises(DomainError, match=r"id: '.*' is also the id of .*\.json\.$"):
        load_tau3(tau3_dir)


@needs_tau3
@pytest.mark.parametrize(
    "file", ["db.json", "tasks/task_003.json", "prompts/classic_rag_bm25_no_grep.md", "documents/<first>"]
)
def test_tau3_invalid_utf8_and_truncation_name_the_file(tau3_dir, file):
    path = sorted((tau3_dir / "documents").iterdir())[0] if file == "documents/<first>" else tau3_dir / file
    raw = path.read_bytes()
    path.write_bytes(raw[:40] + b"\xff\xfe" + raw[40:])
    with pytest.raises(
        DomainError,
        match=rf"{re.escape(path.name)}: not valid UTF-8 at byte 40 \(line \d+: invalid start byte\); save it as UTF-8",
    ):
        load_tau3(tau3_dir)
    if path.suffix == ".json":
        path.write_bytes(raw[: len(raw) // 2])
        with pytest.raises(
            DomainError, match=rf"{re.escape(path.name)}: not readable JSON \(.* at line \d+ column \d+\)\.$"
        ):
            load_tau3(tau3_dir)


@needs_tau3
def test_tau3_missing_files_name_them(tau3_dir):
    (tau3_dir / "prompts/classic_rag_bm25_no_grep.md").unlink()
    with pytest.raises(DomainError, match=r"no prompts/classic_rag_bm25_no_grep\.md \(needed by retrieval 'bm25'\)"):
        load_tau3(tau3_dir)
    (tau3_dir / "db.json").unlink()
    with pytest.raises(DomainError, match=r"missing db\.json"):
        load_tau3(tau3_dir)


# --- domain folders (Harbor Bank's layout) ---------------------------------------------------------
H_CASES = [
    ("domain.json", without("name"), DomainError, r"domain\.json: name: missing"),
    ("domain.json", lambda m: m.update(name=3), DomainError, r"domain\.json: name: expected a non-empty string"),
    ("domain.json", lambda m: m.update(clock="noon"), DomainError, r"domain\.json: clock: expected an ISO date-time"),
    ("domain.json", lambda m: m.update(max_steps=True), DomainError, r"domain\.json: max_steps: expected a positive"),
    ("domain.json", lambda m: m.update(retrieval=[]), DomainError, r"domain\.json: retrieval: expected one of"),
    (
        "domain.json",
        lambda m: m.update(greting="hi"),
        DomainError,
        r"domain\.json: unknown key 'greting'.*\"greeting\"",
    ),
    ("domain.json", lambda m: "harbor", DomainError, r"domain\.json: expected an object .* got string\.$"),
    ("seed.json", lambda s: s.update(customers="x"), DomainError, r"seed\.json: customers: expected an array of rows"),
    ("seed.json", lambda s: s.update(custmers=[]), DomainError, r"seed\.json: custmers: Unknown table 'custmers'"),
    (
        "seed.json",
        lambda s: s["customers"].append([1, 2]),
        DomainError,
        r"seed\.json: customers\[\d+\]: Rows of table 'customers' must be objects",
    ),
    (
        "seed.json",
        lambda s: s["customers"][0].update(nmae="x"),
        DomainError,
        r"seed\.json: customers\[0\]: Table 'customers' has no column 'nmae'",
    ),
    (
        "seed.json",
        lambda s: s["customers"][0].update(customer_id=None),
        DomainError,
        r"seed\.json: customers\[0\]: Row .* does not fit table 'customers'",
    ),
    (
        "tasks.json",
        lambda ts: ts.__setitem__(3, 7),
        TaskError,
        r"tasks\.json: tasks\[3\]: Input should be a valid dictionary .*\(got number\)\.$",
    ),
    (
        "tasks.json",
        lambda ts: ts[2]["scenario"].update(requests="hi"),
        TaskError,
        r"tasks\.json: tasks\[2\]\.scenario\.requests: Input should be a valid list \(got string\)\.$",
    ),
    (
        "tasks.json",
        lambda ts: ts[1]["actions"][0].update(arguments=[]),
        TaskError,
        r"tasks\.json: tasks\[1\]\.actions\[0\]\.arguments: Input should be a valid dictionary \(got array\)\.$",
    ),
    (
        "tasks.json",
        lambda ts: ts[0].update(clock="yesterday"),
        TaskError,
        r"tasks\.json: tasks\[0\]\.clock: Value error, Invalid isoformat string",
    ),
    ("tasks.json", lambda ts: {"tasks": ts}, TaskError, r"tasks\.json: task(\.id)?: (Field required|Extra inputs)"),
]


@pytest.mark.parametrize("file,change,error,match", H_CASES)
def test_domain_folder_wrong_json_types_name_the_file_and_place(harbor_dir, file, change, error, match):
    edit_json(harbor_dir / file, change)
    with pytest.raises(error, match=match):
        load_harbor(harbor_dir)


def test_domain_folder_task_initial_state_rows_are_checked_at_load(harbor_dir):
    tasks = json.loads((harbor_dir / "tasks.json").read_text())
    n = next(i for i, t in enumerate(tasks) if t.get("initial_state"))
    table = next(iter(tasks[n]["initial_state"]))
    tasks[n]["initial_state"][table][0]["no_such_column"] = 1
    (harbor_dir / "tasks.json").write_text(json.dumps(tasks))
    with pytest.raises(
        TaskFileError,
        match=rf"tasks\.json: tasks\[{n}\]\.initial_state\.{table}\[0\] \(task '{tasks[n]['id']}'\): "
        rf"Table '{table}' has no column 'no_such_column'",
    ):
        load_harbor(harbor_dir)


@pytest.mark.parametrize("file", ["domain.json", "schema.sql", "seed.json", "tasks.json", "policy.md", "documents"])
def test_domain_folder_missing_files_name_them(harbor_dir, file):
    path = harbor_dir / file
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    with pytest.raises(DomainError, match=rf"{file}: (no such file|expected a folder)"):
        load_harbor(harbor_dir)


@pytest.mark.parametrize(
    "file", ["domain.json", "schema.sql", "seed.json", "tasks.json", "policy.md", "documents/<first>"]
)
def test_domain_folder_invalid_utf8_names_the_file(harbor_dir, file):
    path = sorted((harbor_dir / "documents").iterdir())[0] if file == "documents/<first>" else harbor_dir / file
    raw = path.read_bytes()
    path.write_bytes(raw[:5] + b"\xc3(" + raw[5:])
    with pytest.raises(
        DomainError, match=rf"{re.escape(path.name)}: not valid UTF-8 at byte 5 \(line \d+: invalid continuation byte\)"
    ):
        load_harbor(harbor_dir)


def test_domain_folder_truncated_and_broken_files(harbor_dir):
    schema = harbor_dir / "schema.sql"
    schema.write_text(schema.read_text()[:-30])
    with pytest.raises(DomainError, match=r"schema\.sql: line \d+: .*: not valid SQL \(incomplete input\)\.$"):
        load_harbor(harbor_dir)
    schema.write_text("-- nothing\n")
    with pytest.raises(DomainError, match=r"schema\.sql: defines no tables\.$"):
        load_harbor(harbor_dir)


def test_domain_folder_documents_are_checked(harbor_dir):
    docs = harbor_dir / "documents"
    (docs / "zz.json").write_text(json.dumps({"id": "zz", "title": "T", "content": 5}))
    with pytest.raises(DomainError, match=r"zz\.json: content: expected a string, got number\.$"):
        load_harbor(harbor_dir)
    first = sorted(docs.glob("*.md"))[0]
    (docs / "zz.json").write_text(json.dumps({"id": first.stem, "title": "T", "content": "c"}))
    with pytest.raises(DomainError, match=rf"zz\.json: document id '{first.stem}' is also the id of .*{first.name}\.$"):
        load_harbor(harbor_dir)
    (docs / "zz.json").unlink()
    first.write_text("no title line\n")
    with pytest.raises(DomainError, match=rf"{first.name}: a markdown document must start with '# Title'"):
        load_harbor(harbor_dir)


def test_load_tasks_jsonl_names_the_line_and_path(tmp_path):
    p = tmp_path / "tasks.jsonl"
    p.write_text('{"id": "a", "scenario": {"requests": ["x"]}}\n{"id": "b", "scenario": {"requests": [3]}}\n')
    with pytest.raises(
        TaskFileError,
        match=r"tasks\.jsonl:2: task\.scenario\.requests\[0\]: Input should be a valid string \(got number\)\.$",
    ):
        load_tasks(p)
    p.write_bytes(b'{"id": "a\xff", "scenario": {"requests": ["x"]}}\n')
    with pytest.raises(TaskFileError, match=r"tasks\.jsonl: not valid UTF-8 at byte 9 \(line 1: invalid start byte\)"):
        load_tasks(p)
    p.write_text("[" * 100_000)
    with pytest.raises(TaskFileError, match=r"tasks\.jsonl:1: not readable JSON \(nested too deeply\)\.$"):
        load_tasks(p)
