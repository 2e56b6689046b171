"""The on-disk cache of tau3-banking's grading targets (issue 8.5) and :mod:`tau_env.diskcache`.

A second load reads the targets instead of replaying the tasks; the results are the same with and
without the cache; changed data or code gives a new key; a damaged file is never trusted; concurrent
writers leave a valid cache; an unusable cache folder means no cache, never an error.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tau_env.diskcache as diskcache
from tau_env.diskcache import MAGIC, DiskCache
from tau_env.domains import tau3_banking
from tau_env.grading import Grader
from tau_env.registry import domain_cache
from tests.conftest import TAU3_DATA, needs_tau3_data

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache folder, as TAU_ENV_CACHE; loaded domains are forgotten before and after."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("TAU_ENV_CACHE", str(folder))
    domain_cache.clear()
    yield folder
    domain_cache.clear()


@pytest.fixture
def replays(monkeypatch):
    """Counts the target computations (reference replays) of every grader."""
    calls: list[str] = []
    real = Grader._replay

    def counted(self, task):
        calls.append(task.id)
        return real(self, task)

    monkeypatch.setattr(Grader, "_replay", counted)
    return calls


def fresh(data_dir=TAU3_DATA):
    """A newly built domain (nothing of an earlier load kept in memory)."""
    domain_cache.clear()
    return tau3_banking.load(data_dir)


def all_digests(domain):
    return {t.id: domain.grader.target(t).digests for t in domain.tasks}


def data_copy(tmp_path: Path) -> Path:
    """The data folder without most documents (targets do not read them), to edit."""
    root = tmp_path / "data"
    root.mkdir(parents=True)
    shutil.copy(TAU3_DATA / "db.json", root / "db.json")
    shutil.copytree(TAU3_DATA / "tasks", root / "tasks")
    shutil.copytree(TAU3_DATA / "prompts", root / "prompts")
    (root / "documents").mkdir()
    for p in sorted((TAU3_DATA / "documents").glob("*.json"))[:5]:
        shutil.copy(p, root / "documents" / p.name)
    return root


def target_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("tau3-targets/*/*") if not p.name.startswith("."))


# --- the cache in use -----------------------------------------------------------------------------
@needs_tau3_data
def test_a_second_load_reads_every_target_from_disk(cache, replays):
    first = all_digests(fresh())
    assert len(replays) == len(first) == 97
    assert len(target_files(cache)) == 97
    replays.clear()
    second = all_digests(fresh())
    assert replays == []  # no task replayed
    assert second == first


@needs_tau3_data
def test_results_are_identical_with_and_without_the_cache(cache):
    fresh()  # fills the cache
    cached = fresh()
    plain = fresh()
    plain.grader = Grader(plain)  # no store: computed here
    for task in cached.tasks:
        assert cached.grader.target(task).digests == plain.grader.target(task).digests, task.id
        db, _ = cached.replay(task)
        assert cached.grader.grade(db, task).reward == 1.0
        db.close()
    # a failed grade's explanation needs the target's rows: the image is rebuilt on demand
    task = max(cached.tasks, key=lambda t: len(t.actions))
    for domain in (cached, plain):
        db = domain.start_db(task)
        grade = domain.grader.grade(db, task)
        db.close()
        assert grade.reward == 0.0 and grade.diff
    assert cached.grader.grade(cached.start_db(task), task) == plain.grader.grade(plain.start_db(task), task)


@needs_tau3_data
def test_another_code_version_is_another_key(cache, replays, monkeypatch):
    fresh().grader.target(fresh().tasks[0])
    replays.clear()
    monkeypatch.setattr(diskcache, "_code_fingerprint", ["another version"])
    domain = fresh()
    domain.grader.target(domain.tasks[0])
    assert replays == [domain.tasks[0].id]
    assert len(list(cache.glob("tau3-targets/*"))) == 2


# --- stale data -----------------------------------------------------------------------------------
@needs_tau3_data
@pytest.mark.parametrize("edit", ["db row", "task action"])
def test_a_changed_data_file_gives_new_targets(cache, replays, tmp_path, edit):
    root = data_copy(tmp_path)
    before = all_digests(fresh(root))
    if edit == "db row":  # every account's balance changes: the targets of tasks touching accounts too
        db = json.loads((root / "db.json").read_text())
        for row in db["accounts"]["data"].values():
            row["current_holdings"] = str(float(row.get("current_holdings") or 0) + 1)
        (root / "db.json").write_text(json.dumps(db))
    else:  # the task with the most reference actions loses them all: its target is its initial state
        path = max((root / "tasks").glob("task_*.json"), key=lambda p: p.read_text().count('"requestor"'))
        raw = json.loads(path.read_text())
        raw["evaluation_criteria"]["actions"] = []
        path.write_text(json.dumps(raw))
    replays.clear()
    after = fresh(root)
    digests = all_digests(after)
    assert len(replays) == 97  # a new key: nothing of the old targets is read
    assert digests != before
    plain = Grader(after)
    assert digests == {t.id: plain.target(t).digests for t in after.tasks}
    assert len(list(cache.glob("tau3-targets/*"))) == 2


@needs_tau3_data
def test_the_key_ignores_where_the_folder_is(cache, replays, tmp_path):
    all_digests(fresh(data_copy(tmp_path / "a")))
    replays.clear()
    all_digests(fresh(data_copy(tmp_path / "b")))
    assert replays == []


# --- damaged files --------------------------------------------------------------------------------
def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    payload = data[len(MAGIC) + 65 :]
    entry = json.loads(payload)
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "byte flipped":
        path.write_bytes(data[:-5] + bytes([data[-5] ^ 1]) + data[-4:])
    elif how == "not ours":
        path.write_bytes(b"garbage\n" * 20)
    elif how == "a folder":
        path.unlink()
        path.mkdir()
    else:  # a valid checksum over a wrong entry: the grader's own checks refuse it
        if how == "other task":
            entry["task"] = "task_000"
        elif how == "a table missing":
            entry["digests"].popitem()
        elif how == "not a digest":
            entry["digests"][next(iter(entry["digests"]))] = "0" * 31 + "g"
        elif how == "not json":
            entry = None
        body = b"\xff{" if entry is None else json.dumps(entry).encode()
        path.write_bytes(MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)


DAMAGES = [
    "truncated",
    "empty",
    "byte flipped",
    "not ours",
    "a folder",
    "other task",
    "a table missing",
    "not a digest",
    "not json",
]


@needs_tau3_data
@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_cache_file_is_ignored_and_rebuilt(cache, replays, how):
    domain = fresh()
    task = domain.tasks[-1]
    expected = domain.grader.target(task).digests
    (path,) = [p for p in target_files(cache) if p.name == task.id]
    _damage(path, how)
    replays.clear()
    again = fresh()
    assert again.grader.target(task).digests == expected
    assert replays == [task.id]
    if how != "a folder":  # rewritten whole: the next load reads it
        replays.clear()
        assert fresh().grader.target(task).digests == expected
        assert replays == []


@settings(max_examples=200, deadline=None)
@given(payload=st.binary(max_size=300), cut=st.integers(min_value=0), flip=st.integers(min_value=0))
def test_a_cache_file_reads_back_whole_or_not_at_all(tmp_path_factory, payload, cut, flip):
    store = DiskCache("ns", "key", root=tmp_path_factory.mktemp("c"))
    assert store.put("name", payload) and store.get("name") == payload
    path = store.folder / "name"
    data = path.read_bytes()
    path.write_bytes(data[: cut % len(data)])  # any truncation
    assert store.get("name") is None
    i = flip % len(data)
    path.write_bytes(data[:i] + bytes([data[i] ^ 0x20]) + data[i + 1 :])  # any one changed byte
    assert store.get("name") is None


def test_names_cannot_leave_the_cache_folder(tmp_path):
    store = DiskCache("ns", "key", root=tmp_path)
    for name in ("../escape", "/etc/passwd", "a/b", ".hidden", "", "x" * 300, "é"):
        assert store.put(name, b"v") and store.get(name) == b"v"
    assert {p.parent for p in tmp_path.rglob("*") if p.is_file()} == {store.folder}
    assert not any(p.name.startswith(".") for p in store.folder.iterdir())


def test_old_keys_are_pruned(tmp_path):
    for i in range(diskcache.KEEP + 3):
        folder = DiskCache("ns", f"k{i}", root=tmp_path)
        folder.put("a", b"x")
        os.utime(folder.folder, (i, i))  # k0 is the oldest
    kept = sorted(p.name for p in (tmp_path / "ns").iterdir())
    assert len(kept) == diskcache.KEEP and f"k{diskcache.KEEP + 2}" in kept and "k0" not in kept


# --- concurrent writers ---------------------------------------------------------------------------
_WRITER = """
import sys
import tau_env
d = tau_env.registry.load_domain("tau3-banking", data_dir=sys.argv[1])
for t in d.tasks:
    d.grader.target(t)
print("ok")
"""


@needs_tau3_data
def test_concurrent_writers_leave_a_valid_cache(cache, replays, monkeypatch):
    monkeypatch.setattr(diskcache, "_code_fingerprint", [])  # read the code as the writers do
    env = {**os.environ, "TAU_ENV_CACHE": str(cache), "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(TAU3_DATA)], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    assert [p.communicate(timeout=120)[0].strip() for p in procs] == ["ok"] * 4
    files = target_files(cache)
    assert len(files) == 97
    assert not list(cache.glob("tau3-targets/*/.tmp-*"))  # no temporary file left behind
    domain = fresh()
    plain = Grader(domain)
    assert all_digests(domain) == {t.id: plain.target(t).digests for t in domain.tasks}
    assert replays == [t.id for t in domain.tasks]  # only ``plain`` replayed: the cache was whole


_RACER = """
import sys
from pathlib import Path
from tau_env.diskcache import DiskCache
store = DiskCache("ns", "key", root=Path(sys.argv[1]))
mine = sys.argv[2].encode() * 50_000
for _ in range(200):
    store.put("shared", mine)
    got = store.get("shared")
    assert got is not None and len(got) == len(mine) and len(set(got)) == 1, "a partial or mixed file"
"""


def test_racing_writers_of_one_file_never_expose_a_partial_one(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, str(tmp_path), c], env=env) for c in "abc"]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    assert DiskCache("ns", "key", root=tmp_path).get("shared") in {c.encode() * 50_000 for c in "abc"}


# --- an unusable cache folder ---------------------------------------------------------------------
@needs_tau3_data
def test_a_cache_folder_that_cannot_be_made_means_no_cache(tmp_path, monkeypatch, replays):
    blocker = tmp_path / "a file"
    blocker.write_text("in the way")
    monkeypatch.setenv("TAU_ENV_CACHE", str(blocker / "cache"))
    domain = fresh()
    with pytest.warns(RuntimeWarning, match=r"^tau_env: cannot write the cache folder .*working without"):
        digests = all_digests(domain)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # one warning per folder, not one per task
        domain2 = fresh()
        assert all_digests(domain2) == digests
    assert len(replays) == 2 * 97
    domain_cache.clear()


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_cache_folder_means_no_cache(tmp_path):
    tmp_path.chmod(0o555)
    try:
        store = DiskCache("ns", "key", root=tmp_path)
        with pytest.warns(RuntimeWarning, match=r"^tau_env: cannot write the cache folder"):
            assert store.put("a", b"x") is False
        assert store.get("a") is None
    finally:
        tmp_path.chmod(0o755)


def test_a_missing_cache_folder_is_made(tmp_path, monkeypatch):
    monkeypatch.setenv("TAU_ENV_CACHE", str(tmp_path / "not" / "yet"))
    store = DiskCache("ns", "key")
    assert store.put("a", b"x") and store.get("a") == b"x"
    assert store.folder == tmp_path / "not" / "yet" / "ns" / "key"
