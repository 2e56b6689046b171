"""tau3-banking: the public benchmark's ``banking_knowledge`` domain as a tau_env domain pack.

The data comes from the user's own copy of the benchmark (``data_dir=PATH`` or
``$TAU3_BANKING_DATA``); the tools reproduce the benchmark's behaviour on tau_env's SQLite core,
so replays give the same outputs and the same final database, many times faster.

    env = tau_env.make("tau3-banking", data_dir="path/to/banking_knowledge", retrieval="bm25")
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tau_env.db import EpisodeDB, Schema
from tau_env.diskcache import DiskCache, cache_key, code_fingerprint
from tau_env.domain import Domain
from tau_env.domains.tau3_banking import agent_tools as _agent_tools  # noqa: F401  (registers the tools)
from tau_env.domains.tau3_banking import discoverable as _discoverable  # noqa: F401
from tau_env.domains.tau3_banking import interface
from tau_env.domains.tau3_banking import user_tools as _user_tools  # noqa: F401
from tau_env.domains.tau3_banking.data import load as load_data
from tau_env.domains.tau3_banking.data import resolve_data_dir
from tau_env.domains.tau3_banking.store import DDL, Store, apply_initialization, initialization_plan, load_seed
from tau_env.domains.tau3_banking.toolkit import AGENT_TOOLS, NOW, USER_TOOLS, Tau3Context
from tau_env.error import DomainError
from tau_env.knowledge.embed import require_embed
from tau_env.knowledge.tools import unknown_retrieval
from tau_env.tasks import Task
from tau_env.tools import Tool, Toolbox, raw_tool

__all__ = ["Tau3Domain", "load", "check_retrieval"]


def _not_found(name: str, active: list[str]) -> str:
    return f"Error: Tool '{name}' not found."


def _schema_of(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    types = {"string": "string", "number": "number", "integer": "integer", "boolean": "boolean"}
    props = {p: {"type": types.get(t, "string"), "description": d} for p, t, _, d in spec["params"]}
    required = [p for p, _, req, _ in spec["params"]]
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": spec["description"],
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }


def _tools() -> list[Tool]:
    """Every tool as a raw tau_env tool: base tools in the schema, discoverable ones callable but hidden."""
    kinds = {**interface.BASE_KINDS, **interface.USER_KINDS}
    tools = []
    for schema in interface.AGENT_SCHEMAS:
        name = schema["function"]["name"]
        tools.append(raw_tool(AGENT_TOOLS[name].fn, schema, kind="read" if kinds[name] == "read" else "write"))
    for schema in interface.USER_SCHEMAS:
        name = schema["function"]["name"]
        tools.append(
            raw_tool(USER_TOOLS[name].fn, schema, side="user", kind="read" if kinds[name] == "read" else "write")
        )
    for name, spec in interface.DISCOVERABLE_AGENT.items():
        if name in AGENT_TOOLS:
            tools.append(raw_tool(AGENT_TOOLS[name].fn, _schema_of(name, spec), kind="write", hidden=True))
    for name, spec in interface.DISCOVERABLE_USER.items():
        params = [(p, "string", req, "") for p, req in spec["params"]]
        sch = _schema_of(name, {"description": spec["description"], "params": params})
        tools.append(raw_tool(USER_TOOLS[name].fn, sch, side="user", kind="write", hidden=True))
    return tools


@dataclass
class Tau3Domain(Domain):
    """The benchmark's domain: JSON-row tables, deep-merged initial states, the benchmark's tools."""

    data_root: Path | None = None
    db_json: dict[str, Any] = field(default_factory=dict, repr=False)
    prompts: dict[str, str] = field(default_factory=dict, repr=False)
    # Caches, built on first use: each task's initialization plan, the benchmark's BM25 index,
    # and the agent prompts that do not depend on the task (by retrieval configuration).
    _init_plans: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    _bm25: Any = field(default=None, init=False, repr=False, compare=False)
    _prompt_cache: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)
    #: Endpoint settings of the embedding and reranker configurations (see ``prompts.retrieval_options``).
    retrieval_options: dict[str, Any] = field(default_factory=dict, repr=False)
    # Embedding indexes, built when an env of such a configuration is first made (by endpoint).
    _retrievers: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def load_seed(self, conn: sqlite3.Connection) -> None:
        load_seed(conn, self.db_json)

    def initializer(self, task: Task | None):  # type: ignore[override]
        if task is None or not task.metadata.get("agent_data"):
            return None
        return lambda conn: self.apply_initial_state(conn, task)

    def apply_initial_state(self, conn: sqlite3.Connection, task: Task) -> None:
        plans = self._init_plans
        plan = plans.get(task.id)
        if plan is None:
            try:
                plan = plans[task.id] = initialization_plan(self.db_json, task.metadata["agent_data"])
            except ValueError as e:
                raise DomainError(f"Task {task.id}: {e}") from e
        apply_initialization(conn, plan)

    def context(self, db: EpisodeDB, task: Task | None, toolbox: Toolbox) -> Tau3Context:
        allow = frozenset(task.metadata.get("read_log_allowlist", ())) if task is not None else frozenset()
        return Tau3Context(
            conn=db.conn,
            now=NOW,
            task_id=task.id if task else None,
            kb=self.kb,
            active=toolbox.initial_active(),
            toolbox=toolbox,
            read_log_allowlist=allow,
        )

    def toolbox(self, retrieval: str | None = None) -> Toolbox:
        from tau_env.domains.tau3_banking.prompts import retrieval_tools

        key = retrieval or self.retrieval
        box = self._toolboxes.get(key) if isinstance(key, str) else None
        if box is None:
            if key != "all":  # every knowledge tool, for replays and checks
                check_retrieval(key)
            # the benchmark lists its knowledge tools before the banking tools
            box = self._toolboxes[key] = Toolbox(
                [*retrieval_tools(self, key), *self.tools], unknown_tool_message=_not_found
            )
        return box

    #: ``golden_retrieval`` puts the task's documents in the prompt (the others are cached per configuration).
    prompt_depends_on_task = True

    def system_prompt(self, retrieval: str | None = None, task: Task | None = None) -> str:
        from tau_env.domains.tau3_banking.prompts import RETRIEVAL, build_prompt

        key = retrieval or self.retrieval
        if not (isinstance(key, str) and key in RETRIEVAL):
            check_retrieval(key)  # raises the error every domain raises
        return build_prompt(self, key, task)

    def export_db(self, db: EpisodeDB) -> dict[str, Any]:
        """The database in the benchmark's layout: ``{table: {"data": {row_id: row}, "notes": str}}``."""
        return Store(db.conn).dump()


def _load(root: str, retrieval: str, options: tuple[tuple[str, Any], ...] = ()) -> Tau3Domain:
    """The domain of the data folder ``root`` (a resolved path) with default ``retrieval``, built once
    per (folder, retrieval) and kept in :data:`tau_env.registry.domain_cache`. Files changed on disk
    afterwards are not read again until ``tau_env.registry.clear_cache()``.
    """
    from tau_env.registry import domain_cache

    def build() -> Tau3Domain:
        data = load_data(Path(root))
        domain = Tau3Domain(
            name="tau3-banking",
            schema=Schema.from_ddl(DDL),
            seed={},
            tools=_tools(),
            documents=data.documents,
            policy="",
            tasks=data.tasks,
            clock=NOW,
            greeting="Hi! How can I help you today?",
            retrieval=retrieval,
            max_steps=200,
            agent_requestor="assistant",
            data_root=data.root,
            db_json=data.db,
            prompts=data.prompts,
            retrieval_options=dict(options),
        )
        # Targets depend on db.json, the task files and the code (schema and tools): not on the
        # folder's place, the documents, the prompts or the retrieval configuration.
        domain.grader.store = DiskCache("tau3-targets", cache_key(code_fingerprint(), data.fingerprint))
        return domain

    return domain_cache.get(("tau3-banking", root, retrieval, options), build)


def check_retrieval(key: object) -> None:
    """Check a retrieval configuration when an env is made.

    Raises:
        InvalidOptionError: ``key`` is not one of :data:`~tau_env.domains.tau3_banking.prompts.RETRIEVAL`
            (with the list and a did-you-mean, as for every domain).
        DependencyNotInstalled: its ``KB_search`` embeds queries with the offline model and the
            ``embed`` extra is missing (endpoints and the sandbox are checked when the env is made).
    """
    from tau_env.domains.tau3_banking.prompts import RETRIEVAL

    config = RETRIEVAL.get(key) if isinstance(key, str) else None
    if config is None:
        raise unknown_retrieval(key, RETRIEVAL)
    if config.embedder == "minilm":
        require_embed(f"retrieval {key!r}")


def load(
    data_dir: str | os.PathLike[str] | None = None,
    retrieval: str = "bm25",
    retrieval_options: Mapping[str, Any] | None = None,
) -> Tau3Domain:
    """The tau3-banking domain from the benchmark's data folder (``data_dir`` or ``$TAU3_BANKING_DATA``).

    ``retrieval_options``: endpoint settings of the embedding and reranker configurations; keys in
    :func:`tau_env.domains.tau3_banking.prompts.retrieval_options`. Default: the benchmark's.
    """
    from tau_env.domains.tau3_banking.prompts import retrieval_options as check_options

    check_retrieval(retrieval)
    options = tuple(sorted(check_options(retrieval_options).items()))
    return _load(str(resolve_data_dir(data_dir).resolve()), retrieval, options)
