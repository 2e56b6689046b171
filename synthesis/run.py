"""The run folder: one synthesis run's files, the lock that keeps it one run, and safe resuming.

A run folder holds ``run.json`` (the settings), JSON Lines files the stages append to
(``plans.jsonl``, ``candidates.jsonl``, ``tasks.jsonl``, ...), JSON files written whole
(``llm_usage.json``, ``graphs/*.json``, ...) and ``synth.db``, an index of it all for
sqlite-utils and Datasette. The JSONL files are the source of truth; ``synth.db`` is rebuilt from
them by :meth:`RunFolder.index`.

Its promises, as for tau_env's results folders:

- **One run at a time.** The folder is locked (``flock`` on ``.synth.lock``) while a
  :class:`RunFolder` is open; a second process gets :class:`SynthesisError` at once. Within one
  process, opening the same folder again shares the lock. The lock goes with the process, so a
  killed run never leaves the folder locked.
- **Resume only the same run.** Opening a folder whose ``run.json`` names another domain, loader
  settings (``data_dir`` as given), seed or model raises :class:`SynthesisError` naming each
  difference. A setting the folder has not recorded yet (``graphs`` records no seed) is recorded
  at its first use.
- **Nothing lost or torn by a kill.** JSONL records are appended as whole lines and synced per
  batch; a torn last line (a kill mid-write) is skipped with a warning when read and cut off
  before the next append. JSON files are written to a temporary file and renamed.
- **Its own files only.** Files are opened without following a symbolic link and must be regular
  files.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tau_env.synthesis.errors import SynthesisError

from tau_env.harness.results import FolderLock

LOCK_NAME = ".synth.lock"
SETTINGS = "run.json"
STAGES = "stages.jsonl"
INDEX = "synth.db"
#: run.json keys that identify a run: a folder refuses a run that differs on one of them.
IDENTITY = ("domain", "loader", "seed", "backend", "ids", "weights")
#: Keys of a ``backend`` object that say how to reach the model, not which model it is.
TRANSPORT = frozenset({"base_url", "api_key_env", "timeout", "retries", "max_concurrency"})
_SAFE = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
NL = b"\n"
_WRITING = threading.Lock()  # appends of this process's threads, one at a time


def _short(value: Any, width: int = 60) -> str:
    s = json.dumps(value, default=str)
    return s if len(s) <= width else s[: width - 3] + "..."


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    return "a device or socket"


def _open(path: Path, flags: int) -> int:
    """A descriptor of the regular file ``path``, never through a symbolic link, never blocking on a FIFO."""
    try:
        fd = os.open(path, flags | _SAFE, 0o644)
    except OSError as e:
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            raise e from None
        if not stat.S_ISREG(mode):
            raise SynthesisError(
                f"{path} is {_kind(mode)}, not a regular file, and a run folder writes only its own files. Remove it."
            ) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise SynthesisError(f"{path} is {_kind(mode)}, not a regular file. Remove it.")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_bytes(path: Path) -> bytes:
    with os.fdopen(_open(path, os.O_RDONLY), "rb") as f:
        return f.read()


def identity(settings: dict[str, Any]) -> dict[str, Any]:
    """The identifying settings (:data:`IDENTITY`) as JSON would give them back; a model backend
    is named by its model, not by where it is served.
    """
    cfg = json.loads(json.dumps({k: settings[k] for k in IDENTITY if k in settings}, default=str))
    if isinstance(cfg.get("backend"), dict):
        cfg["backend"] = {k: v for k, v in cfg["backend"].items() if k not in TRANSPORT}
    return cfg


def id_style(settings: dict[str, Any]) -> str:
    """The record-id style of a run's ``settings`` (``run.json``): ``plan`` when it names none (a new
    run given no style, or a folder written before id styles existed).
    """
    return settings.get("ids") or "plan"


def plan_weights(settings: dict[str, Any]) -> dict[str, float]:
    """The planner weights a run's ``settings`` (``run.json``) were given: none (``{}``) when it names
    none (a run given no weights, or a folder written before weights could be given).
    """
    return dict(settings.get("weights") or {})


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The identifying settings both give and on which they differ, one short phrase each (the
    folder's id style is :func:`id_style`'s, its weights :func:`plan_weights`').
    """
    kept = {k: v for k, v in old.items() if v is not None}
    a = identity({**kept, "ids": id_style(old), "weights": plan_weights(old)})
    b = identity({k: v for k, v in new.items() if v is not None})
    return [
        f"{k}: {_short(a[k])} in the folder, {_short(b[k])} now" for k in IDENTITY if k in a and k in b and a[k] != b[k]
    ]


# ---------------------------------------------------------------- the lock


class _Lock:
    """The run folder's :class:`~tau_env.harness.results.FolderLock` on ``dir/.synth.lock``, shared by the
    openers in this process (the last one to release it releases the lock).
    """

    _held: dict[str, tuple[_Lock, int]] = {}
    _guard = threading.Lock()

    @classmethod
    def acquire(cls, directory: Path) -> _Lock:
        key = os.path.realpath(directory)
        with cls._guard:
            if key in cls._held:
                lock, n = cls._held[key]
                cls._held[key] = (lock, n + 1)
                return lock
            lock = cls(directory)
            cls._held[key] = (lock, 1)
            lock.key = key
            return lock

    def __init__(self, directory: Path):
        self.key = ""
        self._flock = FolderLock(
            directory / LOCK_NAME,
            lambda pid: SynthesisError(
                f"{directory} is in use by another synthesis run{pid}: one run folder takes one run at a time. "
                "Wait for it to finish, or pass another --out."
            ),
            opener=_open,
        )

    def release(self) -> None:
        with self._guard:
            lock, n = self._held.get(self.key, (self, 1))
            if n > 1:
                self._held[self.key] = (lock, n - 1)
                return
            self._held.pop(self.key, None)
            self._flock.release()


# ---------------------------------------------------------------- the folder


class RunFolder:
    """An open run folder (see the module docstring). Use :meth:`create` or :meth:`open`, and
    :meth:`close` it (or use it as a context manager) to release the lock.

    Attributes:
        path: The folder.
        settings: ``run.json``: ``domain``, ``loader`` (loader keywords such as ``data_dir``, as
            given), ``seed``, ``backend`` (``"template"`` or ``{"model", "base_url"}``),
            ``tau_env_version``, and whatever else a stage records (``quiet``, ...).
    """

    def __init__(self, path: str | Path, settings: dict[str, Any], *, lock: bool = True):
        self.path = Path(path)
        self.settings = settings
        self._lock: _Lock | None = _Lock.acquire(self.path) if lock else None
        self._domain: Any = None

    # -- opening

    @classmethod
    def create(cls, path: str | Path, settings: dict[str, Any]) -> RunFolder:
        """Open the run folder ``path`` for a run with ``settings``, making it if needed.

        An existing folder is resumed when its identifying settings (:data:`IDENTITY`) agree with
        ``settings``; settings it lacks are added and ``run.json`` rewritten.

        Raises:
            SynthesisError: ``path`` is a file or cannot be written, another run holds it, or its
                ``run.json`` names other identifying settings (each difference named).
        """
        path = Path(path)
        settings = {k: v for k, v in settings.items() if v is not None}  # None: not given
        if path.exists() and not path.is_dir():
            raise SynthesisError(f"{path} is a file, not a folder. Pass another --out.")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SynthesisError(f"Cannot make the run folder {path}: {e.strerror or e}. Pass another --out.") from e
        folder = cls(path, {}, lock=True)
        try:
            old = folder.read_json(SETTINGS, None)
            if old is not None and not isinstance(old, dict):
                raise SynthesisError(f"{path / SETTINGS} is not a JSON object. Remove it, or pass another --out.")
            if old is not None and (diff := differences(old, settings)):
                raise SynthesisError(
                    f"{path} holds a synthesis run with other settings: {'; '.join(diff)}. "
                    "Pass another --out, or the same settings to resume it."
                )
            import tau_env

            merged = {**(old or {}), **json.loads(json.dumps(settings, default=str))}
            merged["tau_env_version"] = tau_env.__version__
            folder.settings = merged
            if merged != old:
                folder.write_json(SETTINGS, merged)
        except BaseException:
            folder.close()
            raise
        return folder

    @classmethod
    def open(cls, path: str | Path, expect: dict[str, Any] | None = None, *, lock: bool = True) -> RunFolder:
        """Open the existing run folder ``path`` (for a later stage, or a report with ``lock=False``,
        which reads while a run may be writing).

        ``expect``, when given, must agree with the folder's settings on the identifying keys; keys
        it adds are recorded (with the lock only).

        Raises:
            SynthesisError: ``path`` holds no run (no ``run.json``), another run holds it, or the
                settings differ.
        """
        path = Path(path)
        if not (path / SETTINGS).is_file():
            what = "does not exist" if not path.exists() else "holds no synthesis run (no run.json)"
            raise SynthesisError(
                f"{path} {what}. Pass the --out folder of an earlier 'tau-env synth graphs' or 'synth tasks' run."
            )
        if expect is not None and lock:
            return cls.create(path, expect)
        folder = cls(path, {}, lock=lock)
        try:
            old = folder.read_json(SETTINGS, None)
            if not isinstance(old, dict):
                raise SynthesisError(f"{path / SETTINGS} is not a JSON object; the run folder is damaged.")
            if expect is not None and (diff := differences(old, expect)):
                raise SynthesisError(f"{path} holds a synthesis run with other settings: {'; '.join(diff)}.")
            folder.settings = old
        except BaseException:
            folder.close()
            raise
        return folder

    def close(self) -> None:
        """Release the lock (idempotent)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    # -- paths

    def file(self, name: str) -> Path:
        """The path of the folder's file ``name`` (a relative path such as ``graphs/tool_graph.json``)."""
        p = Path(name)
        if not name or p.is_absolute() or ".." in p.parts:
            raise SynthesisError(f"A run folder's file name must be a relative path inside it, got {name!r}.")
        return self.path / p

    def exists(self, name: str) -> bool:
        return self.file(name).exists()

    # -- JSON Lines

    def append(self, name: str, records: Iterable[dict[str, Any]]) -> int:
        """Append ``records`` as whole lines of ``name``, flushed and synced once for the batch;
        returns how many. A torn last line left by a killed run is cut off first.
        """
        data = b"".join(_line(r) for r in records)
        if not data:
            return 0
        path = self.file(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with _WRITING:
            self._append(path, data)
        return data.count(NL)

    def _append(self, path: Path, data: bytes) -> None:
        fd = _open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != NL:
                tail_start = _last_line_start(fd, size)
                tail = os.pread(fd, size - tail_start, tail_start)
                if _record(tail) is not None:  # a whole record without its newline: keep it
                    os.write(fd, NL)
                else:
                    warnings.warn(f"{path}: cut off a torn last line (from a killed run).", stacklevel=3)
                    os.ftruncate(fd, tail_start)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)

    def rewrite(self, name: str, records: Iterable[dict[str, Any]]) -> Path:
        """Replace the records of ``name`` with ``records``, atomically (a stage that removes records)."""
        data = b"".join(_line(r) for r in records)
        with _WRITING:
            return self.write_bytes(name, data)

    def read(self, name: str) -> list[dict[str, Any]]:
        """The records of ``name`` ([] when it does not exist). A torn last line is skipped with a
        warning; any other line that is not a JSON object raises :class:`SynthesisError`.
        """
        path = self.file(name)
        if not path.exists() and not path.is_symlink():
            return []
        data = _read_bytes(path)
        lines = data.split(NL)
        out = []
        for n, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            rec = _record(raw)
            if rec is None:
                if n == len(lines):  # no newline after it: a kill mid-write
                    warnings.warn(f"{path}: skipped a torn last line (line {n}, from a killed run).", stacklevel=2)
                    continue
                raise SynthesisError(
                    f"{path}: line {n} is not a JSON object ({raw[:60]!r}); the run folder is damaged. "
                    "Remove the line, or start another run folder."
                )
            out.append(rec)
        return out

    def ids(self, name: str, key: str = "id") -> set[Any]:
        """The values of ``key`` over the records of ``name`` that have it."""
        return {r[key] for r in self.read(name) if key in r and isinstance(r[key], str | int)}

    # -- whole files

    def write_json(self, name: str, obj: Any) -> Path:
        """Write ``obj`` as indented JSON to ``name``, atomically (a temporary file renamed)."""
        text = json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n"
        return self.write_text(name, text)

    def write_text(self, name: str, text: str) -> Path:
        """Write ``text`` to ``name``, atomically; lone surrogates become JSON-style escapes."""
        return self.write_bytes(name, text.encode("utf-8", "backslashreplace"))

    def write_bytes(self, name: str, data: bytes) -> Path:
        """Write ``data`` to ``name``, atomically (temporary file, fsync, rename)."""
        path = self.file(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            raise SynthesisError(f"{path} is {_kind(mode)}, not a regular file. Remove it.")
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return path

    def read_json(self, name: str, default: Any = None) -> Any:
        """The JSON of ``name``, or ``default`` when it does not exist.

        Raises:
            SynthesisError: The file is not valid JSON.
        """
        path = self.file(name)
        if not path.exists() and not path.is_symlink():
            return default
        try:
            return json.loads(_read_bytes(path))
        except (ValueError, RecursionError) as e:
            raise SynthesisError(f"{path} is not valid JSON ({e}); the run folder is damaged. Remove it.") from None

    # -- stages

    def record_stage(self, stage: str, summary: dict[str, Any]) -> dict[str, Any]:
        """Append ``{"stage": stage, "time": ..., **summary}`` to ``stages.jsonl``; returns the record."""
        rec = {"stage": stage, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **summary}
        self.append(STAGES, [rec])
        return rec

    def stages(self, stage: str | None = None) -> list[dict[str, Any]]:
        """The stage records, in order (those of ``stage`` only, when given)."""
        return [r for r in self.read(STAGES) if stage is None or r.get("stage") == stage]

    # -- the domain

    def domain(self) -> Any:
        """The run's domain: ``load_domain(settings["domain"], **settings["loader"])`` (loaded once)."""
        if self._domain is None:
            if not self.settings.get("domain"):
                raise SynthesisError(f"{self.path / SETTINGS} names no domain; the run folder is damaged.")
            from tau_env.registry import registry

            self._domain = registry.load_domain(self.settings["domain"], **(self.settings.get("loader") or {}))
        return self._domain

    # -- progress

    def progress(self, desc: str, total: int | None = None) -> Any:
        """A tqdm bar on stderr, silent when stderr is not a terminal or the settings say ``quiet``."""
        from tqdm.auto import tqdm

        quiet = bool(self.settings.get("quiet")) or not sys.stderr.isatty()
        return tqdm(total=total, desc=desc, disable=quiet, leave=False, dynamic_ncols=True)

    # -- the index

    def index(self) -> Path:
        """Rebuild ``synth.db`` (tables ``tasks``, ``stages``, ``llm_calls``) from the folder's files,
        for sqlite-utils and Datasette; returns its path. Needs the ``synth`` extra.
        """
        try:
            import sqlite_utils
        except ImportError as e:
            from tau_env.error import DependencyNotInstalled

            raise DependencyNotInstalled(
                "The run folder's index (synth.db) needs the 'synth' extra: pip install 'tau-env[synth]'."
            ) from e
        write_names = self.write_tool_names()
        rows: dict[str, dict[str, Any]] = {}
        for name, kind in (("tasks.jsonl", "single"), ("composite.jsonl", "composite")):
            for rec in self.read(name):
                row = task_row(rec, kind, write_names, accepted=True)
                if row is not None:
                    rows[row["id"]] = row
        for rec in self.read("candidates.jsonl"):
            row = task_row(rec.get("task", rec), "single", write_names, accepted=False)
            if row is not None and row["id"] not in rows:
                rows[row["id"]] = row
        stage_rows = []
        for i, rec in enumerate(self.read(STAGES)):
            rest = {k: v for k, v in rec.items() if k not in ("stage", "time", "round")}
            stage_rows.append(
                {
                    "n": i,
                    "stage": str(rec.get("stage")),
                    "time": str(rec.get("time", "")),
                    "round": rec.get("round") if isinstance(rec.get("round"), int) else None,
                    "summary": json.dumps(rest, ensure_ascii=False, default=str),
                }
            )
        usage = self.read_json("llm_usage.json", {}) or {}
        roles = usage.get("roles", {}) if isinstance(usage, dict) else {}
        call_rows = [
            {"role": str(role), **{k: int(u.get(k, 0) or 0) for k in USAGE_KEYS}}
            for role, u in sorted(roles.items())
            if isinstance(u, dict)
        ]
        target = self.file(INDEX)
        fd, tmp = tempfile.mkstemp(prefix=f".{INDEX}.", suffix=".tmp", dir=self.path)
        os.close(fd)
        try:
            db = sqlite_utils.Database(tmp)
            db["tasks"].insert_all(list(rows.values()), pk="id", columns=TASK_COLUMNS)
            db["stages"].insert_all(stage_rows, pk="n", columns={"round": int})
            db["llm_calls"].insert_all(call_rows, pk="role", columns={k: int for k in USAGE_KEYS})
            for table in ("tasks", "stages", "llm_calls"):  # empty tables still exist, with their columns
                if not db[table].exists():
                    db[table].create(
                        {"tasks": TASK_COLUMNS, "stages": STAGE_COLUMNS, "llm_calls": CALL_COLUMNS}[table],
                        pk={"tasks": "id", "stages": "n", "llm_calls": "role"}[table],
                    )
            db.close()
            try:
                mode = os.lstat(target).st_mode
            except FileNotFoundError:
                mode = None
            if mode is not None and not stat.S_ISREG(mode):
                raise SynthesisError(f"{target} is {_kind(mode)}, not a regular file. Remove it.")
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return target

    def write_tool_names(self) -> set[str] | None:
        """The write tools of ``graphs/tool_graph.json`` (nodes of kind ``write``), or None without a tool graph."""
        graph = self.read_json("graphs/tool_graph.json", None)
        if not isinstance(graph, dict):
            return None
        nodes = graph.get("nodes", [])
        if isinstance(nodes, dict):
            nodes = [{"name": k, **v} for k, v in nodes.items() if isinstance(v, dict)]
        return {n["name"] for n in nodes if isinstance(n, dict) and n.get("kind") == "write" and "name" in n}


USAGE_KEYS = ("calls", "cached", "failures", "prompt_tokens", "completion_tokens")
TASK_COLUMNS: dict[str, Any] = {
    "id": str,
    "kind": str,
    "template": str,
    "outcome": str,
    "failure_mode": str,
    "n_actions": int,
    "write_tools": str,
    "chain_signature": str,
    "accepted": int,
}
STAGE_COLUMNS: dict[str, Any] = {"n": int, "stage": str, "time": str, "round": int, "summary": str}
CALL_COLUMNS: dict[str, Any] = {"role": str, **{k: int for k in USAGE_KEYS}}


class _Act:
    """An action of a task record, as :func:`~tau_env.synthesis.records.chain_signature` reads it."""

    def __init__(self, d: dict[str, Any]):
        self.name = d.get("name")
        self.arguments = d.get("arguments") or {}
        self.requestor = d.get("requestor") or "agent"


class _TaskView:
    def __init__(self, actions: list[Any]):
        self.actions = [_Act(a) for a in actions if isinstance(a, dict)]


def task_row(rec: Any, kind: str, write_names: set[str] | None, *, accepted: bool) -> dict[str, Any] | None:
    """The ``tasks`` index row of a task record (a task as JSON), or None when it is not one."""
    from tau_env.synthesis.records import called_tool, chain_signature

    if not isinstance(rec, dict) or not isinstance(rec.get("id"), str) or not isinstance(rec.get("actions", []), list):
        return None
    actions = rec.get("actions") or []
    view = _TaskView(actions)
    prov = (rec.get("metadata") or {}).get("synthesis") or {}
    prov = prov if isinstance(prov, dict) else {}
    plan = prov.get("plan") if isinstance(prov.get("plan"), dict) else {}
    names = [called_tool(a.name, a.arguments) for a in view.actions if isinstance(a.name, str)]
    writes = [n for n in dict.fromkeys(names) if write_names is None or n in write_names]
    return {
        "id": rec["id"],
        "kind": "composite" if kind == "composite" or prov.get("components") else "single",
        "template": str(plan.get("template") or ""),
        "outcome": str(prov.get("outcome") or plan.get("outcome") or ""),
        "failure_mode": prov.get("failure_mode") or plan.get("failure_mode"),
        "n_actions": len(view.actions),
        "write_tools": json.dumps(writes),
        "chain_signature": chain_signature(view),  # type: ignore[arg-type]
        "accepted": int(accepted),
    }


def _line(record: dict[str, Any]) -> bytes:
    if not isinstance(record, dict):
        raise SynthesisError(f"A run folder record must be a JSON object, got {type(record).__name__}.")
    return (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8", "backslashreplace")


def _record(raw: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _last_line_start(fd: int, size: int) -> int:
    """Offset just after the last newline of the file (0 when it has none)."""
    pos, chunk = size, 1 << 16
    while pos > 0:
        start = max(0, pos - chunk)
        buf = os.pread(fd, pos - start, start)
        i = buf.rfind(NL)
        if i >= 0:
            return start + i + 1
        pos = start
    return 0
