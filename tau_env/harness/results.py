r"""Results folders: the files of one run, the lock that keeps it one run, and safe resuming.

A results folder holds ``config.json`` (the settings), ``trajectories.jsonl`` (one episode per
line, appended and synced as each finishes), ``metrics.json``, ``summary.txt`` and
``report.html``. Its promises:

- **One run at a time.** The folder is locked (``flock`` on ``.tau_env.lock``) for the whole run;
  a second run on it gets :class:`~tau_env.error.ResultsFolderError` at once. The lock goes with
  the process, so a killed run never leaves the folder locked.
- **Resume only the same run.** Resuming into a folder whose ``config.json`` names other settings
  (all but :data:`NOT_IDENTIFYING` count) raises ``ResultsFolderError`` naming each difference.
  The number of trials may differ: records beyond the new plan are skipped.
- **Trust no record.** Every line is checked (UTF-8, JSON, exactly the fields and types of
  :class:`~tau_env.harness.episode.EpisodeResult`, values in range, the grade's and each event's
  shape, a reward that is 0 or the grade's, a (task, trial, seed) of the plan); bad, surplus and
  duplicated lines are skipped, counted in ``config.json`` (``skipped_records``) and warned about,
  and each planned (task, trial) counts once (the first valid record; one that ended in an
  infrastructure error is run again).
- **Its own files only.** Each file it reads, writes or truncates is opened without following a
  symbolic link and must be a regular file; a link, FIFO, device or folder in the place of one is
  refused (``ResultsFolderError``) before anything is written. The folder itself may be a link.
- **Any text.** Text the results cannot encode as UTF-8 (lone surrogates, which ``json.loads``
  makes of a server's ``"\ud83d"``) is written as JSON ``\uXXXX`` escapes, so reading a record
  back gives the same string. (A *pair* of surrogate code points reads back as the one character
  it encodes: JSON cannot tell the two apart.)
"""

from __future__ import annotations

import json
import math
import os
import stat
import time
import types
import typing
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from tau_env.error import ResultsFolderError
from tau_env.harness.episode import EpisodeResult
from tau_env.harness.metrics import INFRA

try:
    import fcntl
except ImportError:  # Windows: no lock
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".tau_env.lock"
TRAJECTORIES = "trajectories.jsonl"
NL = b"\n"

#: config.json keys that may differ between a folder and a run resuming into it; every other key
#: identifies the run (agent, user, models and sampling, seed, env, domain, retrieval, max_steps,
#: tasks, loop_limit, make keywords, extra ``config`` entries, the domain's ``prompt_config()``: prompt
#: style, user prompt version, user-guideline hashes).
NOT_IDENTIFYING = frozenset(
    {
        "tau_env_version",
        "trials",
        "concurrency",
        "backend",
        "episode_retries",
        "resumed_episodes",
        "skipped_records",
        "agent_checkpoint_path",  # where the checkpoint was read; its content (agent_checkpoint.digest) identifies it
    }
)
#: Identifying keys that configs written before they existed lack, with the value those runs had.
LATER_KEYS = {"prompt_style": "tau_env", "user_guidelines_sha256": None}
#: Keys of a model policy's description that say how to reach the model, not which model it is.
TRANSPORT = frozenset({"base_url", "api_key_env", "timeout", "retries"})

_RESTART = "Pass --restart (resume=False in Python) to start over there, or another --out (out_dir)."


def encode(text: str) -> bytes:
    r"""UTF-8 bytes of ``text``; a lone surrogate becomes a ``\uXXXX`` escape (in JSON, the same string)."""
    return text.encode("utf-8", "backslashreplace")


def json_line(obj: Any) -> bytes:
    """One JSON record as a line of UTF-8: non-ASCII text as is, lone surrogates escaped."""
    return encode(json.dumps(obj, ensure_ascii=False, default=str) + "\n")


#: Every file a results folder reads, writes or truncates; each must be a regular file (or absent).
OWN_FILES = (LOCK_NAME, "config.json", TRAJECTORIES, "metrics.json", "summary.txt", "report.html")
_SAFE = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _not_regular(path: Path, mode: int) -> ResultsFolderError:
    kind = (
        "a symbolic link"
        if stat.S_ISLNK(mode)
        else "a folder"
        if stat.S_ISDIR(mode)
        else "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a device or socket"
    )
    return ResultsFolderError(
        f"Cannot use {path.parent} as a results folder: {path.name} there is {kind}, not a regular file, "
        "and a results folder writes only its own files. Remove it, or pass another --out (out_dir)."
    )


def check_own_files(directory: Path) -> None:
    """Raise :class:`~tau_env.error.ResultsFolderError` if one of :data:`OWN_FILES` in ``directory``
    is there but is not a regular file (a symbolic link, FIFO, device, folder): the folder would
    write through it, or block on it.
    """
    for name in OWN_FILES:
        try:
            mode = os.lstat(directory / name).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            raise _not_regular(directory / name, mode)


def open_own(path: Path, flags: int, *, truncate: bool = False) -> int:
    """A descriptor of the regular file ``path`` (created if ``flags`` say so), never through a
    symbolic link and never blocking on a FIFO; truncated once it is known to be a regular file.
    """
    try:
        fd = os.open(path, flags | _SAFE, 0o644)
    except OSError as e:
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            raise e from None
        if not stat.S_ISREG(mode):  # ELOOP (a link), ENXIO (a FIFO without a reader), EISDIR, ...
            raise _not_regular(path, mode) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        if truncate:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_own(path: Path) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_own`)."""
    with os.fdopen(open_own(path, os.O_RDONLY), "rb") as f:
        return f.read()


def write_own(path: Path, data: bytes) -> None:
    """Replace the content of the regular file ``path`` (see :func:`open_own`) with ``data``."""
    with os.fdopen(open_own(path, os.O_WRONLY | os.O_CREAT, truncate=True), "wb") as f:
        f.write(data)


def write_text(path: Path, text: str) -> None:
    write_own(path, encode(text))


def _short(value: Any, width: int = 60) -> str:
    s = "(missing)" if value is _MISSING else json.dumps(value, default=str)  # ASCII, one line
    return s if len(s) <= width else s[: width - 3] + "..."


_MISSING = object()


def _identity(config: dict[str, Any]) -> dict[str, Any]:
    """The settings that identify a run, as JSON would give them back."""
    cfg = json.loads(json.dumps(config, default=str))
    out = {k: v for k, v in cfg.items() if k not in NOT_IDENTIFYING}
    for k, v in LATER_KEYS.items():
        out.setdefault(k, v)
    for seat in ("agent", "user"):
        if isinstance(out.get(seat), dict):
            out[seat] = {k: v for k, v in out[seat].items() if k not in TRANSPORT}
    return out


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The identifying settings on which two configs differ, one short phrase each."""
    out: list[str] = []
    _differ("", _identity(old), _identity(new), out)
    return out


def _differ(key: str, x: Any, y: Any, out: list[str]) -> None:
    """Settings nested in objects (an agent's description) are compared field by field, so the one
    that differs is named (``agent.temperature``) instead of two clipped objects that look alike.
    """
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(x.keys() | y.keys()):
            _differ(f"{key}.{k}" if key else k, x.get(k, _MISSING), y.get(k, _MISSING), out)
    elif x != y:
        out.append(f"{key}: {_short(x)} in the folder, {_short(y)} now")


# ---------------------------------------------------------------- records

_HINTS = typing.get_type_hints(EpisodeResult)
_FIELDS = frozenset(f.name for f in fields(EpisodeResult))


def _conforms(value: Any, hint: Any) -> bool:
    """Whether decoded JSON ``value`` has the annotated type (``float`` accepts ints; bools are not ints)."""
    if hint is Any:
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is float:
        return type(value) in (int, float)
    if hint in (int, str, bool):
        return type(value) is hint
    if origin is dict:
        return isinstance(value, dict) and all(_conforms(v, args[1]) for v in value.values())
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, args[0]) for v in value)
    try:
        return isinstance(value, origin or hint)
    except TypeError:
        return False


def _finite(x: Any, low: float, high: float = math.inf) -> bool:
    return math.isfinite(x) and low <= x <= high


def _check_grade(grade: dict[str, Any], reward: float) -> str | None:
    """Why ``grade`` is not the grade of an episode whose reward is ``reward``, or None.

    An episode without a grade (an infrastructure error) has ``{}`` and reward 0. A graded one has
    the fields of :class:`~tau_env.grading.Grade`; its reward is the grade's, or 0 when the
    episode was cut off (a truncated episode scores 0 whatever its grade).
    """
    if not grade:
        return None if reward == 0 else f"reward {reward} without a grade"
    r = grade.get("reward")
    if type(r) not in (int, float) or not _finite(r, 0.0, 1.0):
        return f"grade reward {_short(r, 30)} is not a number in [0, 1]"
    if type(grade.get("db_match")) is not bool:
        return f"grade db_match {_short(grade.get('db_match', _MISSING), 30)} is not true or false"
    tables = grade.get("differing_tables", _MISSING)
    if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables):
        return f"grade differing_tables {_short(tables, 30)} is not a list of names"
    if not isinstance(grade.get("diff"), dict):
        return f"grade diff {_short(grade.get('diff', _MISSING), 30)} is not an object"
    if reward not in (0, r):
        return f"reward {reward} is neither 0 nor the grade's reward {r}"
    return None


def _check_event(ev: Any) -> str | None:
    """Why ``ev`` is not a trajectory event (step, seat, message, tool results), or None."""
    if not isinstance(ev, dict):
        return f"is {_short(ev, 30)}, not an object"
    if type(ev.get("step")) is not int or ev["step"] < 1:
        return f"step {_short(ev.get('step', _MISSING), 30)} is not an int >= 1"
    if ev.get("seat") not in ("agent", "user"):
        return f'seat {_short(ev.get("seat", _MISSING), 30)} is not "agent" or "user"'
    if not isinstance(ev.get("message"), dict):
        return f"message {_short(ev.get('message', _MISSING), 30)} is not an object"
    results = ev.get("tool_results", [])
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        return f"tool_results {_short(results, 30)} is not a list of objects"
    return None


def check_record(obj: Any) -> str | None:
    """Why ``obj`` (decoded JSON) is not an episode record, or None if it is one."""
    if not isinstance(obj, dict):
        return f"a JSON {type(obj).__name__}, not an object"
    if missing := _FIELDS - obj.keys():
        return f"missing fields {sorted(missing)}"
    if extra := obj.keys() - _FIELDS:
        return f"unknown fields {sorted(extra)[:5]}"
    for name, hint in _HINTS.items():
        if not _conforms(obj[name], hint):
            return f"{name} is {_short(obj[name], 30)}, not of type {getattr(hint, '__name__', hint)}"
    for name in ("trial", "steps", "tool_calls", "tool_errors"):
        if obj[name] < 0:
            return f"{name} is negative"
    if not _finite(obj["reward"], 0.0, 1.0):
        return f"reward {obj['reward']} is not in [0, 1]"
    if not _finite(obj["duration_s"], 0.0):
        return f"duration_s {obj['duration_s']} is not a finite duration"
    if obj["termination_reason"] is not None and not obj["termination_reason"].strip():
        return "termination_reason is an empty string"
    if why := _check_grade(obj["grade"], obj["reward"]):
        return why
    for i, ev in enumerate(obj["events"]):
        if why := _check_event(ev):
            return f"events[{i}] {why}"
    for seat, u in obj["usage"].items():
        if not isinstance(u, dict) or not all(
            type(u.get(k, 0)) is int and u.get(k, 0) >= 0 for k in ("prompt_tokens", "completion_tokens")
        ):
            return f"usage of {seat!r} is not token counts"
    return None


def _parse(raw: bytes) -> tuple[str, str] | EpisodeResult:
    """An episode, or (reason, detail) for a line that is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return "invalid UTF-8", str(e)
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as e:
        return "invalid JSON", str(e)[:80]
    why = check_record(obj)
    return ("not an episode record", why) if why else EpisodeResult(**obj)


def read_records(
    path: Path, plan: Sequence[tuple[str, int, int]], data: bytes | None = None
) -> tuple[list[EpisodeResult], Counter[str]]:
    """The episodes of ``path`` (whose bytes are ``data``, if given) that belong to ``plan`` (in
    plan order, each (task, trial) once, infrastructure errors left out so that they run again),
    and the skipped lines by reason.

    A torn last line (from a kill mid-write) is cut off the file.
    """
    data = read_own(path) if data is None else data
    end = data.rfind(NL) + 1
    skipped: Counter[str] = Counter()
    first: dict[str, str] = {}
    if end < len(data):
        fd = open_own(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, end)
        finally:
            os.close(fd)
        skipped["torn last line"] += 1
        first["torn last line"] = f"line {data.count(NL) + 1}"
    seeds = {(t, k): s for t, k, s in plan}
    tasks = {t for t, _, _ in plan}
    kept: dict[tuple[str, int], EpisodeResult] = {}
    for n, raw in enumerate(data[:end].split(NL)[:-1], 1):
        if not raw.strip():
            continue
        r = _parse(raw)
        if isinstance(r, EpisodeResult):
            key = (r.task_id, r.trial)
            if r.task_id not in tasks:
                r = ("task not in this run", r.task_id)
            elif key not in seeds:
                r = ("trial beyond the plan", f"trial {r.trial} of {r.task_id}")
            elif r.seed != seeds[key]:
                r = ("seed not of this run", f"seed {r.seed} for trial {r.trial} of {r.task_id}")
            elif key in kept and kept[key].termination_reason != INFRA:
                r = ("duplicate episode", f"trial {r.trial} of {r.task_id}")
            else:
                kept[key] = r
                continue
        skipped[r[0]] += 1
        first.setdefault(r[0], f"line {n}: {r[1]}")
    if skipped:
        detail = "; ".join(f"{n} {why} (first at {first[why]})" for why, n in skipped.items())
        warnings.warn(f"{path}: skipped {sum(skipped.values())} records: {detail}.", stacklevel=4)
    order = [(t, k) for t, k, _ in plan]
    return [kept[key] for key in order if key in kept and kept[key].termination_reason != INFRA], skipped


# ---------------------------------------------------------------- the folder


def _holder(fd: int) -> str:
    """The pid the lock's holder wrote; it writes it just after taking the lock, so wait a moment for it."""
    for _ in range(50):
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if holder.isdigit():
            return holder
        time.sleep(0.02)
    return holder


class FolderLock:
    """An exclusive, non-blocking ``flock`` on the file ``path`` (created if needed), holding this
    process's pid; released, and the file removed, by :meth:`release`. One folder, one writer:
    tau_env's results folders and the synthesis pipeline's run folders both lock this way.

    Args:
        path: The lock file.
        refused: Builds the error raised when another process holds the lock, from the text
            ``" (process N)"`` (empty when the holder's pid cannot be read).
        opener: Opens the lock file (default :func:`open_own`: regular files only, no links).
    """

    def __init__(
        self,
        path: Path,
        refused: Callable[[str], BaseException],
        opener: Callable[[Path, int], int] = open_own,
    ):
        self.path = path
        self.fd: int | None = None
        if fcntl is None:
            return
        while True:
            fd = opener(self.path, os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise refused(f" (process {holder})" if holder.isdigit() else "") from None
            except BaseException:
                os.close(fd)
                raise
            # the holder before us may have removed the file while we opened it: lock the file that is there
            try:
                same = os.path.samestat(os.fstat(fd), os.lstat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self.fd = fd
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())

    def release(self) -> None:
        if self.fd is not None:
            try:
                os.unlink(self.path)  # while still locked, so no one else holds this file
            except OSError:
                pass
            os.close(self.fd)
            self.fd = None


def _lock(directory: Path) -> FolderLock:
    """The lock of a results folder."""
    return FolderLock(
        directory / LOCK_NAME,
        lambda pid: ResultsFolderError(
            f"{directory} is in use by another run{pid}: one results folder takes one run at a time. "
            "Wait for it to finish, or pass another --out (out_dir)."
        ),
    )


class ResultsFolder:
    """An open results folder: locked, checked, with the episodes a resumed run keeps.

    Raises :class:`~tau_env.error.ResultsFolderError` when ``out_dir`` is a file, under a file or
    not writable, when another run holds it, or when resuming a run with other settings.
    """

    def __init__(self, out_dir: str | Path, config: dict[str, Any], plan: Sequence[tuple[str, int, int]], resume: bool):
        self.dir = Path(out_dir)
        self.previous: list[EpisodeResult] = []
        self.skipped: Counter[str] = Counter()
        self._lock: FolderLock | None = None
        self._traj: Any = None
        try:
            if self.dir.exists() and not self.dir.is_dir():
                raise ResultsFolderError(f"{self.dir} is a file, not a folder. Pass another --out (out_dir).")
            self.dir.mkdir(parents=True, exist_ok=True)
            check_own_files(self.dir)  # before anything is written: no link, FIFO or device in our place
            self._lock = _lock(self.dir)
            self._check_not_foreign()
            path = self.dir / TRAJECTORIES
            data = read_own(path) if resume and path.exists() else b""
            if data.strip():
                self._check_settings(config)
                self.previous, self.skipped = read_records(path, plan, data)
            elif path.exists() or path.is_symlink():
                path.unlink()
            record = {**config, "resumed_episodes": len(self.previous), "skipped_records": dict(self.skipped)}
            write_text(self.dir / "config.json", json.dumps(record, indent=2, ensure_ascii=False, default=str) + "\n")
            self._traj = os.fdopen(open_own(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), "ab")
        except OSError as e:
            self.close()
            raise self._cannot_write(e) from e
        except BaseException:
            self.close()
            raise

    def _check_not_foreign(self) -> None:
        """Refuse a folder whose ``config.json`` is someone else's (a model's, a trainer checkpoint's, a
        project's): writing the run's record there destroys it, and --restart does not make it ours.
        A record this package wrote, or a damaged one beside episodes, is ours.
        """
        path = self.dir / "config.json"
        if not path.is_file():
            return
        try:
            data = json.loads(read_own(path))
        except (OSError, ValueError, RecursionError):
            data = None
        if isinstance(data, dict):
            if "tau_env_version" in data or {"resumed_episodes", "skipped_records"} <= data.keys():
                return  # the harness's record, or one this class wrote (it adds those two to any config)
        elif (self.dir / TRAJECTORIES).exists():
            return  # a damaged record of ours: _check_settings says so, --restart rewrites it
        what = "a model's (model_type)" if isinstance(data, dict) and "model_type" in data else "not a results record"
        raise ResultsFolderError(
            f"{self.dir} holds a config.json that is {what}, not tau_env's: writing results there would replace it. "
            "Pass another --out (out_dir)."
        )

    def _check_settings(self, config: dict[str, Any]) -> None:
        try:
            old = json.loads(read_own(self.dir / "config.json"))
        except (OSError, ValueError, RecursionError):
            old = None
        if not isinstance(old, dict):
            raise ResultsFolderError(
                f"{self.dir} holds episodes but no readable config.json, so they cannot be checked against "
                f"this run's settings. {_RESTART}"
            )
        if diff := differences(old, config):
            old_names = any(isinstance(old.get(s), str) and "." not in old[s] for s in ("agent", "user"))
            note = (
                " (Earlier versions of tau_env named a policy by its class alone; "
                "it is now named by module and class, so such a folder cannot be resumed.)"
                if old_names
                else ""
            )
            raise ResultsFolderError(
                f"{self.dir} holds episodes of a run with other settings: {'; '.join(diff)}.{note} {_RESTART}"
            )

    def episode(self, r: EpisodeResult) -> None:
        """Append one episode, synced to disk (a kill loses no finished episode)."""
        try:
            self._traj.write(json_line(r.to_dict()))
            self._traj.flush()
            os.fsync(self._traj.fileno())
        except OSError as e:
            raise self._cannot_write(e) from e

    def finish(self, metrics: dict[str, Any], summary: str, episodes: list[dict[str, Any]], title: str) -> None:
        """Write metrics.json, summary.txt and report.html."""
        from tau_env import report

        try:
            self._traj.close()
            write_text(self.dir / "metrics.json", json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")
            write_text(self.dir / "summary.txt", summary + "\n")
            write_own(self.dir / "report.html", encode(report.render(episodes, metrics, title)))
        except OSError as e:
            raise self._cannot_write(e) from e

    def _cannot_write(self, e: OSError) -> ResultsFolderError:
        where = f" ({e.filename})" if e.filename else ""
        return ResultsFolderError(
            f"Cannot use {self.dir} as a results folder: {e.strerror or e}{where}. Pass another --out (out_dir)."
        )

    def close(self) -> None:
        """Close the trajectory file and release the lock (idempotent)."""
        if self._traj is not None:
            self._traj.close()
        if self._lock is not None:
            self._lock.release()
