"""Loading the benchmark's ``banking_knowledge`` data folder from a path the user gives."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tau_env.domains.tau3_banking import interface
from tau_env.error import DomainError
from tau_env.knowledge import Document
from tau_env.tasks import Action, Scenario, Task

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
    missing = [name for name, p in expected.items() if not (p.is_file() if name == "db.json" else p.is_dir())]
    if missing:
        raise DomainError(
            f"{root} is not a tau3-banking data folder: expected db.json, documents/, tasks/ and prompts/ in it; "
            f"missing {', '.join(missing)}. Point data_dir (or {ENV_VAR}) at tau2-bench's "
            "data/tau2/domains/banking_knowledge."
        )
    return root


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise DomainError(f"{path}: not readable JSON ({e}).") from e


def load_documents(root: Path) -> list[Document]:
    docs = []
    # The benchmark loads documents in the folder's listing order (not sorted), and BM25 ties keep
    # that order; so do we.
    for p in (root / "documents").glob("*.json"):
        d = _json(p)
        if not isinstance(d, dict) or not {"id", "title", "content"} <= d.keys():
            raise DomainError(f"{p}: a document must be an object with 'id', 'title' and 'content'.")
        docs.append(Document(str(d["id"]), str(d["title"]), str(d["content"])))
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
    """A benchmark task as a tau_env Task; the benchmark's own fields go to ``metadata``."""
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
    except (KeyError, TypeError, ValueError) as e:
        raise DomainError(f"{where}: not a tau3-banking task ({e}).") from e


def load(root: Path) -> Tau3Data:
    db = _json(root / "db.json")
    if not isinstance(db, dict):
        raise DomainError(f"{root / 'db.json'}: expected an object of tables.")
    task_files = sorted((root / "tasks").glob("task_*.json"))
    if not task_files:
        raise DomainError(f"{root / 'tasks'} holds no task_*.json files.")
    tasks = [convert_task(_json(p), str(p)) for p in task_files]
    prompts = {}
    for p in sorted((root / "prompts").rglob("*.md")):
        prompts[str(p.relative_to(root / "prompts").with_suffix(""))] = p.read_text(encoding="utf-8")
    return Tau3Data(root, db, load_documents(root), tasks, prompts)
