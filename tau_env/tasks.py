"""Tasks: a user scenario, an initial-state patch and reference actions (q = (u, s0, A*)).

Tasks load from and save to JSON (one task or a list) and JSONL (one task per line). A malformed
file raises :class:`~tau_env.error.TaskFileError` naming the file, the place and the problem
(e.g. ``tasks.json: tasks[3].scenario.requests: Field required``).

The small file readers here (:func:`read_text_file`, :func:`read_json_file`) are shared by the
domain loaders, so every data file's problem reads the same way.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tau_env.error import DomainError, Error, TaskFileError

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# --- reading data files --------------------------------------------------------------------
_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def read_file_bytes(path: Path, error: type[Error] = DomainError) -> bytes:
    """A regular file's bytes; raises ``error`` naming the file if it is missing, unreadable or not a
    regular file. A named pipe, device or socket is refused before it is opened (reading one could
    block forever or never end); a symbolic link to a regular file is read.
    """
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISREG(mode):
            # O_NONBLOCK: were it swapped for a FIFO since the stat, the open still returns at once.
            with os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as f:
                mode = os.fstat(f.fileno()).st_mode
                data = f.read() if stat.S_ISREG(mode) else None
    except FileNotFoundError as e:
        raise error(f"{path}: no such file.") from e
    except (OSError, ValueError) as e:  # ValueError: a NUL character in the path
        raise error(f"{path}: cannot be read ({getattr(e, 'strerror', None) or e}).") from e
    if not stat.S_ISREG(mode):
        hint = "; replace it with a file (or remove it)."
        if stat.S_ISDIR(mode):  # a folder is more likely a path one level short than something to remove
            inside = _task_files_in(Path(path))
            hint = f"; name a file in it ({', '.join(inside)})." if inside else "; name a file, not a folder."
        raise error(f"{path}: expected a regular file, found {_KINDS.get(stat.S_IFMT(mode), 'something else')}{hint}")
    return data  # type: ignore[return-value]


def _task_files_in(folder: Path, limit: int = 6) -> list[str]:
    """Names of files directly in ``folder`` that look like task files (JSON or JSON Lines whose start
    holds a task's ``"actions"``), for an error that points there; a few, looked at cheaply.
    """
    found = []
    try:
        candidates = sorted(p for p in folder.iterdir() if p.suffix in (".json", ".jsonl"))[:50]
    except OSError:
        return []
    for p in candidates:
        try:
            if not p.is_file():  # a FIFO named *.jsonl would block a read
                continue
            with p.open("rb") as f:
                if b'"actions"' in f.read(65536):
                    found.append(p.name)
        except OSError:
            continue
        if len(found) == limit:
            break
    return found


def read_text_file(path: Path, error: type[Error] = DomainError) -> str:
    """A UTF-8 text file's content; raises ``error`` naming the file if it is missing, unreadable,
    not a regular file (see :func:`read_file_bytes`) or not UTF-8.
    """
    data = read_file_bytes(path, error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise error(f"{path}: not valid UTF-8 at byte {e.start} (line {line}: {e.reason}); save it as UTF-8.") from e


#: A ``\uD800``-``\uDFFF`` escape in JSON text: only then can a parsed string hold a lone surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class _LongInt:
    """Stands in for an integer too long for ``int()`` while :func:`_long_int_path` looks for it."""


def _find(value: Any, hit: Callable[[Any], bool]) -> tuple[list[str | int], Any, bool] | None:
    """The first key or value (depth first) for which ``hit`` is true: its JSON path (for a key, the
    path of its object), it, and whether it is a key.
    """
    stack: list[tuple[Any, list[str | int]]] = [(value, [])]
    while stack:
        v, path = stack.pop()
        if isinstance(v, dict):
            for k in v:
                if hit(k):
                    return path, k, True
            stack.extend((item, [*path, k]) for k, item in reversed(v.items()))
        elif isinstance(v, list):
            stack.extend((item, [*path, i]) for i, item in reversed(list(enumerate(v))))
        elif hit(v):
            return path, v, False
    return None


def parse_json(text: str, where: str, error: type[Error] = DomainError) -> Any:
    r"""Parse JSON text; raises ``error`` saying where (``where``: the file, maybe with a line), at what
    JSON path if it can, and why: invalid syntax, nesting too deep for Python, an integer over
    Python's digit limit, or a ``\uD83D`` escape that is not half of a surrogate pair (such a string
    could never be written out as UTF-8, nor stored).
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{where}: not readable JSON ({e.msg} at line {e.lineno} column {e.colno}).") from e
    except RecursionError as e:
        raise error(f"{where}: not readable JSON (nested too deeply).") from e
    except ValueError as e:  # int(): "Exceeds the limit (4300 digits) for integer string conversion"
        raise error(_long_int_message(text, where)) from e
    if _SURROGATE_ESCAPE.search(text):
        found = _find(value, lambda v: isinstance(v, str) and _SURROGATE.search(v) is not None)
        if found:
            path, s, is_key = found
            char = ord(_SURROGATE.search(s).group())  # type: ignore[union-attr]
            raise error(
                f"{where}: {json_path(path)}: {'a key' if is_key else 'a string'} holds a lone surrogate "
                f"(\\u{char:04x}), an escape that is not half of a UTF-16 pair, which no UTF-8 text can hold; "
                "fix or remove the escape."
            )
    return value


def _long_int_message(text: str, where: str) -> str:
    limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300
    first = f"{where}: not readable JSON (an integer over {limit} digits, Python's limit)"
    try:  # parse again, the long integers kept aside, to say where the first one is
        value = json.loads(text, parse_int=lambda s: _LongInt() if len(s.lstrip("-")) > limit else int(s))
        found = _find(value, lambda v: isinstance(v, _LongInt))
    except (ValueError, RecursionError):  # pragma: no cover - the first parse got this far
        found = None
    at = f" at {json_path(found[0])}" if found else ""
    return f"{first}{at}; write it as a string if it is an id."


def read_json_file(path: Path, error: type[Error] = DomainError) -> Any:
    """A UTF-8 JSON file's content; raises ``error`` naming the file for any problem reading or
    parsing it (see :func:`read_text_file` and :func:`parse_json`).
    """
    return parse_json(read_text_file(path, error), str(path), error)


def json_path(parts: Sequence[str | int], root: str = "") -> str:
    """``("tasks", 3, "scenario")`` -> ``tasks[3].scenario`` (keys that are not identifiers are quoted)."""
    out = root
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif _IDENT.fullmatch(p):
            out += f".{p}" if out else p
        else:
            out += f"[{json.dumps(p, ensure_ascii=False)}]"
    return out or "(top level)"


def type_name(value: Any) -> str:
    """The JSON type of ``value``, for messages: object, array, string, number, boolean or null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class Scenario(_Model):
    """What the simulated user wants and knows.

    The scripted user sends ``requests`` one at a time, reveals a fact from ``facts`` only when
    the agent's message asks for it (by its name), and ends once every request is answered.
    LLM user simulators get the same fields rendered as text.
    """

    persona: str = Field("", description="Who the user is and how they talk.")
    requests: list[str] = Field(
        ..., min_length=1, description="What the user asks, in order; the first opens the chat."
    )
    facts: dict[str, str] = Field(
        default_factory=dict,
        description="Private facts, revealed only when asked; keyed as an agent would ask (e.g. 'date of birth').",
    )
    unknown: list[str] = Field(default_factory=list, description="Things the user does not know.")
    instructions: str = Field(
        "", description="Extra guidance for an LLM user simulator (how to react, what to refuse)."
    )


class Action(_Model):
    """One reference action: a tool call by a seat."""

    name: str = Field(..., min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    requestor: Literal["agent", "user"] = "agent"


class Task(_Model):
    """One task of a domain."""

    id: str = Field(..., min_length=1)
    description: str = Field("", description="What the task tests (for authors; never shown to a seat).")
    scenario: Scenario
    initial_state: dict[str, list[dict[str, Any]]] = Field(
        default_factory=dict,
        description="Patch over the domain's seed data: {table: [rows]}; rows are upserted, "
        "a row with '_delete': true is deleted.",
    )
    actions: list[Action] = Field(
        default_factory=list, description="Reference actions A*; replayed to get the target state."
    )
    expect_no_change: bool = Field(
        False, description="The correct outcome leaves the database unchanged (e.g. a refusal)."
    )
    required_documents: list[str] = Field(default_factory=list, description="Documents whose rules decide the task.")
    tags: list[str] = Field(default_factory=list)
    clock: str | None = Field(None, description="ISO date-time the tools see as 'now'; the domain's default if unset.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Anything else (e.g. a benchmark's own fields).")

    @field_validator("clock")
    @classmethod
    def _iso_clock(cls, v: str | None) -> str | None:
        if v is not None:
            datetime.fromisoformat(v)  # a ValueError names the bad text
        return v


def validation_message(e: ValidationError, where: str, root: str = "", limit: int = 5) -> str:
    """A pydantic error as ``<where>: <json path>: <problem> (got <type>)`` lines, at most ``limit``."""
    lines = []
    for err in e.errors()[:limit]:
        got = "" if err["type"] == "missing" else f" (got {type_name(err.get('input'))})"
        lines.append(f"{where}: {json_path(err['loc'], root)}: {err['msg']}{got}.")
    if e.error_count() > limit:
        lines.append(f"... and {e.error_count() - limit} more problems.")
    return "\n".join(lines)


def _parse(obj: Any, where: str, root: str) -> Task:
    try:
        return Task.model_validate(obj)
    except ValidationError as e:
        raise TaskFileError(validation_message(e, where, root)) from e


def load_tasks(path: str | Path) -> list[Task]:
    """Load tasks from a ``.json`` file (one task or a list) or a ``.jsonl`` file.

    Raises :class:`~tau_env.error.TaskFileError` (a ``TaskError``) naming the file, the place and
    the problem for anything malformed: unreadable or non-UTF-8 bytes, invalid JSON, a field of
    the wrong type, duplicate ids.
    """
    p = Path(path)
    if not p.exists():  # anything else that is not a regular file is refused by read_text_file
        raise TaskFileError(f"Expected a task file (.json or .jsonl) at {p}, found none.")
    text = read_text_file(p, TaskFileError)
    if p.suffix == ".jsonl":
        if text.lstrip().startswith("[") and "\n" in text.strip():  # a pretty-printed array, not JSON Lines
            try:
                json.loads(text)
            except ValueError:
                pass
            else:
                raise TaskFileError(
                    f"{p} holds one JSON array over several lines, not JSON Lines (one task per line): name it "
                    f"{p.with_suffix('.json').name}, or write one task per line."
                )
        tasks = []
        for n, line in enumerate(text.split("\n"), 1):  # not splitlines(): \x85 and \u2028 are data
            if line.strip():
                tasks.append(_parse(parse_json(line, f"{p}:{n}", TaskFileError), f"{p}:{n}", "task"))
    else:
        obj = parse_json(text, str(p), TaskFileError)
        if isinstance(obj, list):
            tasks = [_parse(o, str(p), f"tasks[{i}]") for i, o in enumerate(obj)]
        else:
            tasks = [_parse(obj, str(p), "task")]
    seen: set[str] = set()
    for i, t in enumerate(tasks):
        if t.id in seen:
            raise TaskFileError(f"{p}: two tasks share the id {t.id!r} (the second is task number {i + 1}).")
        seen.add(t.id)
    return tasks


def task_set_digest(tasks: Iterable[Task]) -> str:
    """SHA-256 of the tasks' canonical JSON, in order: equal for equal task sets."""
    import hashlib

    h = hashlib.sha256()
    for t in tasks:
        h.update(
            json.dumps(t.model_dump(mode="json"), sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass")
        )
        h.update(b"\n")
    return h.hexdigest()


def save_tasks(tasks: Iterable[Task], path: str | Path) -> None:
    """Save tasks as ``.jsonl`` (one per line) or ``.json`` (an indented list), by the suffix."""
    p = Path(path)
    items = [t.model_dump(mode="json", exclude_defaults=True) for t in tasks]
    if p.suffix == ".jsonl":
        p.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in items), encoding="utf-8")
    else:
        p.write_text(json.dumps(items, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
