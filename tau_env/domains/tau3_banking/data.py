"""Loading the benchmark's ``banking_knowledge`` data folder from a path the user gives.

Every file is checked as it is read, before anything else touches the data: a missing, non-UTF-8,
truncated or ill-typed file raises :class:`DomainError` (:class:`TaskFileError`, also a
``TaskError``, for task files) naming the file, the JSON path and the problem, e.g.
``tasks/task_004.json: user_scenario.instructions: expected a string, an object or null, got array``.
Only the fields the loader reads are checked; others are kept as they are.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tau_env.domains.tau3_banking import interface
from tau_env.domains.tau3_banking.store import TABLES
from tau_env.error import DomainError, TaskFileError, did_you_mean
from tau_env.knowledge import Document
from tau_env.tasks import (
    Action,
    Scenario,
    Task,
    json_path,
    parse_json,
    read_json_file,
    read_text_file,
    type_name,
)

ENV_VAR = "TAU3_BANKING_DATA"
_NON_MUTATING = frozenset(
    [n for n, k in {**interface.BASE_KINDS, **interface.USER_KINDS}.items() if k == "read"]
    + ["transfer_to_human_agents"]
)
_OPENER = re.compile(r'"([^"\n]{8,400})"')


@dataclass
class Tau3Data:
    root: Path
    db: dict[str, Any]
    documents: list[Document]
    tasks: list[Task]
    prompts: dict[str, str]
    #: SHA-256 of the files the tasks' targets depend on (db.json and the task files), as read.
    fingerprint: str = ""


def resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> Path:
    """The data folder from the argument or ``$TAU3_BANKING_DATA``, checked for the expected layout."""
    raw = data_dir if data_dir is not None else os.environ.get(ENV_VAR)
    if not raw:
        raise DomainError(
            "tau3-banking needs the benchmark's data: pass data_dir=PATH (tau-env: --data-dir PATH) or set "
            f"{ENV_VAR}=PATH, where PATH is the banking_knowledge data folder of your copy of tau2-bench "
            "(data/tau2/domains/banking_knowledge), holding db.json, documents/, tasks/ and prompts/."
        )
    root = Path(raw).expanduser()
    expected = {
        "db.json": root / "db.json",
        "documents/": root / "documents",
        "tasks/": root / "tasks",
        "prompts/": root / "prompts",
    }
    # db.json need only exist: the reader refuses anything that is not a regular file, naming it
    missing = [name for name, p in expected.items() if not (p.exists() if name == "db.json" else p.is_dir())]
    if missing:
        raise DomainError(
            f"{root} is not a tau3-banking data folder: expected db.json, documents/, tasks/ and prompts/ in it; "
            f"missing {', '.join(missing)}. Point data_dir (or {ENV_VAR}) at tau2-bench's "
            "data/tau2/domains/banking_knowledge."
        )
    return root


# --- checking parsed JSON -------------------------------------------------------------------------
_OBJ, _STR, _LIST, _NULL = (dict,), (str,), (list,), (type(None),)
_EXPECTED = {dict: "an object", str: "a string", list: "an array", type(None): "null"}


def need(value: Any, types: tuple[type, ...], file: Path, path: list[str | int], error: type[DomainError]) -> Any:
    """``value`` if its JSON type is one of ``types``; else ``error`` naming the file, the place and the problem."""
    if isinstance(value, types):
        return value
    expected = ", ".join(_EXPECTED[t] for t in types)
    raise error(
        f"{file}: {json_path(path)}: expected {expected.replace(', null', ' or null')}, got {type_name(value)}."
    )


def need_strings(value: Any, file: Path, path: list[str | int], error: type[DomainError]) -> None:
    """``value`` is null or an array of strings."""
    for i, item in enumerate(need(value, _LIST + _NULL, file, path, error) or []):
        need(item, _STR, file, [*path, i], error)


def check_table(table: Any, file: Path, path: list[str | int], error: type[DomainError]) -> None:
    """A table as the benchmark stores it: ``{"data": {id: row object}, "notes": str}`` (null parts allowed)."""
    if need(table, _OBJ + _NULL, file, path, error) is None:
        return
    for rid, row in (need(table.get("data"), _OBJ + _NULL, file, [*path, "data"], error) or {}).items():
        need(row, _OBJ, file, [*path, "data", rid], error)
    need(table.get("notes"), _STR + _NULL, file, [*path, "notes"], error)


def check_db(db: Any, file: Path) -> None:
    """``db.json``: an object of tables (tables the benchmark does not have are ignored, as before)."""
    need(db, _OBJ, file, [], DomainError)
    for t in TABLES:
        check_table(db.get(t), file, [t], DomainError)


def check_task(raw: Any, file: Path) -> None:
    """The fields of a benchmark task file that the loader reads, with the types it needs."""
    E = TaskFileError  # noqa: N806
    need(raw, _OBJ, file, [], E)
    if "id" not in raw:
        raise E(f"{file}: id: missing; every task needs an id.")
    if not need(raw["id"], _STR, file, ["id"], E):
        raise E(f"{file}: id: expected a non-empty string.")
    if isinstance(need(raw.get("description"), _OBJ + _STR + _NULL, file, ["description"], E), dict):
        need(raw["description"].get("notes"), _STR + _NULL, file, ["description", "notes"], E)
    us = need(raw.get("user_scenario"), _OBJ + _NULL, file, ["user_scenario"], E) or {}
    need(us.get("persona"), _STR + _NULL, file, ["user_scenario", "persona"], E)
    instructions = need(us.get("instructions"), _STR + _OBJ + _NULL, file, ["user_scenario", "instructions"], E)
    for k, v in (instructions if isinstance(instructions, dict) else {}).items():
        need(v, _STR + _NULL, file, ["user_scenario", "instructions", k], E)
    state = need(raw.get("initial_state"), _OBJ + _NULL, file, ["initial_state"], E) or {}
    init = need(state.get("initialization_data"), _OBJ + _NULL, file, ["initial_state", "initialization_data"], E)
    agent_path: list[str | int] = ["initial_state", "initialization_data", "agent_data"]
    for t, table in (need((init or {}).get("agent_data"), _OBJ + _NULL, file, agent_path, E) or {}).items():
        if t not in TABLES:
            raise E(f"{file}: {json_path([*agent_path, t])}: unknown table {t!r}.{did_you_mean(t, TABLES)}")
        check_table(table, file, [*agent_path, t], E)
    crit = need(raw.get("evaluation_criteria"), _OBJ + _NULL, file, ["evaluation_criteria"], E) or {}
    for i, a in enumerate(need(crit.get("actions"), _LIST + _NULL, file, ["evaluation_criteria", "actions"], E) or []):
        path: list[str | int] = ["evaluation_criteria", "actions", i]
        need(a, _OBJ, file, path, E)
        if not need(a.get("name"), _STR, file, [*path, "name"], E):
            raise E(f"{file}: {json_path([*path, 'name'])}: expected a tool name, got an empty string.")
        need(a.get("arguments"), _OBJ + _NULL, file, [*path, "arguments"], E)
        need(a.get("requestor"), _STR + _NULL, file, [*path, "requestor"], E)
    need_strings(crit.get("reward_basis"), file, ["evaluation_criteria", "reward_basis"], E)
    need_strings(raw.get("user_tools"), file, ["user_tools"], E)
    need_strings(raw.get("required_documents"), file, ["required_documents"], E)


def load_documents(root: Path) -> list[Document]:
    docs = []
    origin: dict[str, Path] = {}
    # The benchmark loads documents in the folder's listing order (not sorted), and BM25 ties keep
    # that order; so do we.
    for p in (root / "documents").glob("*.json"):
        d = need(read_json_file(p), _OBJ, p, [], DomainError)
        for key in ("id", "title", "content"):
            if key not in d:
                raise DomainError(f"{p}: {key}: missing; a document needs 'id', 'title' and 'content'.")
            need(d[key], _STR, p, [key], DomainError)
        if d["id"] in origin:
            raise DomainError(f"{p}: id: {d['id']!r} is also the id of {origin[d['id']]}.")
        origin[d["id"]] = p
        docs.append(Document(d["id"], d["title"], d["content"]))
    if not docs:
        raise DomainError(f"{root / 'documents'} holds no *.json documents.")
    return docs


def _scenario(raw: dict[str, Any]) -> Scenario:
    us = raw.get("user_scenario") or {}
    instructions = us.get("instructions") or ""
    if isinstance(instructions, dict):  # tau2's structured form
        parts = [f"{k}: {v}" for k, v in instructions.items() if v]
        opener = instructions.get("reason_for_call") or ""
        instructions = "\n\n".join(parts)
    else:
        m = _OPENER.search(instructions)
        opener = m.group(1) if m else ""
    return Scenario(
        persona=us.get("persona") or "",
        requests=[opener or "Hi, I need some help with my account."],
        instructions=instructions,
    )


def read_log_allowlist(actions: list[dict[str, Any]]) -> list[str]:
    """Discoverable agent tools called by the reference actions: their read calls are logged."""
    names = set()
    for a in actions:
        if a.get("name") == "call_discoverable_agent_tool":
            name = (a.get("arguments") or {}).get("agent_tool_name")
            if isinstance(name, str):
                names.add(name)
    return sorted(names)


def convert_task(raw: dict[str, Any], where: str) -> Task:
    """A benchmark task (checked by :func:`check_task`) as a tau_env Task.

    The benchmark's own fields go to ``metadata``.
    """
    try:
        crit = raw.get("evaluation_criteria") or {}
        actions = crit.get("actions") or []
        init = ((raw.get("initial_state") or {}).get("initialization_data") or {}).get("agent_data") or {}
        return Task(
            id=str(raw["id"]),
            description=((raw.get("description") or {}).get("notes") or "")
            if isinstance(raw.get("description"), dict)
            else str(raw.get("description") or ""),
            scenario=_scenario(raw),
            actions=[
                Action(
                    name=a["name"],
                    arguments=a.get("arguments") or {},
                    requestor="user" if a.get("requestor") == "user" else "agent",
                )
                for a in actions
            ],
            required_documents=list(raw.get("required_documents") or []),
            # the benchmark's own classification: no reference action mutates state (transfer-only tasks)
            expect_no_change=bool(actions) and all(a.get("name") in _NON_MUTATING for a in actions),
            metadata={
                "reward_basis": crit.get("reward_basis") or ["DB"],
                "agent_data": init,
                "user_tools": raw.get("user_tools"),
                "read_log_allowlist": read_log_allowlist(actions),
            },
        )
    except (KeyError, TypeError, ValueError) as e:  # a safety net: check_task lets none of these through
        raise TaskFileError(f"{where}: not a tau3-banking task ({e}).") from e


def load_task(path: Path) -> Task:
    """One benchmark task file, checked, as a tau_env Task."""
    raw = read_json_file(path, TaskFileError)
    check_task(raw, path)
    return convert_task(raw, str(path))


def load(root: Path) -> Tau3Data:
    """Read and check the data folder ``root``.

    The result's ``fingerprint`` hashes the bytes of db.json and of every task file as they were
    parsed (no second read, so it cannot differ from what was loaded): the grading targets depend
    on those and on the code, not on the documents or prompts.
    """
    fingerprint = hashlib.sha256()

    def read(path: Path, error: type[DomainError]) -> str:
        text = read_text_file(path, error)
        data = text.encode("utf-8", "surrogatepass")
        fingerprint.update(f"{path.relative_to(root).as_posix()}\0{len(data)}\0".encode("utf-8", "surrogatepass"))
        fingerprint.update(data)
        return text

    db_file = root / "db.json"
    db = parse_json(read(db_file, DomainError), str(db_file))
    check_db(db, db_file)
    task_files = sorted((root / "tasks").glob("task_*.json"))
    if not task_files:
        raise DomainError(f"{root / 'tasks'} holds no task_*.json files.")
    tasks = []
    origin: dict[str, Path] = {}
    for p in task_files:
        raw = parse_json(read(p, TaskFileError), str(p), TaskFileError)
        check_task(raw, p)
        task = convert_task(raw, str(p))
        if task.id in origin:
            raise TaskFileError(f"{p}: id: {task.id!r} is also the id of {origin[task.id]}.")
        origin[task.id] = p
        tasks.append(task)
    prompts = {}
    for p in sorted((root / "prompts").rglob("*.md")):
        prompts[str(p.relative_to(root / "prompts").with_suffix(""))] = read_text_file(p)
    return Tau3Data(root, db, load_documents(root), tasks, prompts, fingerprint.hexdigest())
