"""tau3-banking: the public benchmark's ``banking_knowledge`` domain as a tau_env domain pack.

The data comes from the user's own copy of the benchmark (``data_dir=PATH`` or
``$TAU3_BANKING_DATA``); the tools reproduce the benchmark's behaviour on tau_env's SQLite core,
so replays give the same outputs and the same final database, many times faster.

    env = tau_env.make("tau3-banking", data_dir="path/to/banking_knowledge", retrieval="bm25")

The seats' prompts are the benchmark's by default (``prompt_style="benchmark"``, see
:mod:`~tau_env.domains.tau3_banking.benchmark_prompts`); ``prompt_style="tau_env"`` gives tau_env's own.
"""

from __future__ import annotations

import os
import sqlite3
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tau_env.db import EpisodeDB, Schema
from tau_env.diskcache import DiskCache, cache_key, code_fingerprint
from tau_env.domain import Domain
from tau_env.domains.tau3_banking import agent_tools as _agent_tools  # noqa: F401  (registers the tools)
from tau_env.domains.tau3_banking import benchmark_prompts as bp
from tau_env.domains.tau3_banking import discoverable as _discoverable  # noqa: F401
from tau_env.domains.tau3_banking import interface
from tau_env.domains.tau3_banking import user_tools as _user_tools  # noqa: F401
from tau_env.domains.tau3_banking.data import load as load_data
from tau_env.domains.tau3_banking.data import resolve_data_dir
from tau_env.domains.tau3_banking.store import DDL, Store, apply_initialization, initialization_plan, load_seed
from tau_env.domains.tau3_banking.toolkit import AGENT_TOOLS, NOW, USER_TOOLS, Tau3Context
from tau_env.error import DomainError, InvalidOptionError
from tau_env.knowledge import Document
from tau_env.knowledge.embed import require_embed
from tau_env.knowledge.tools import unknown_retrieval
from tau_env.tasks import Task, read_json_file
from tau_env.tools import Tool, Toolbox, raw_tool

__all__ = ["Tau3Domain", "load", "check_retrieval", "document_order_ids", "ordered_documents"]


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


#: The user's tools in the benchmark's toolkit (what a task's ``user_tools`` may list).
_USER_TOOL_NAMES = frozenset(schema["function"]["name"] for schema in interface.USER_SCHEMAS)


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
    #: ``"benchmark"``: the benchmark's agent wrapper, user simulator and chat layout; ``"tau_env"``: ours.
    prompt_style: str = "benchmark"
    #: The benchmark's user-simulator guidelines from the user's copy; None when not found (the user
    #: seat then gets tau_env's simulator prompt, and ``prompt_config`` says so).
    benchmark_guidelines: bp.UserGuidelines | None = field(default=None, repr=False)
    # The benchmark-style agent prompts that do not depend on the task, by retrieval configuration.
    _agent_prompts: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)
    #: Endpoint settings of the embedding and reranker configurations (see ``prompts.retrieval_options``).
    retrieval_options: dict[str, Any] = field(default_factory=dict, repr=False)
    # Embedding indexes, built when an env of such a configuration is first made (by endpoint).
    _retrievers: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    task_caches: ClassVar[tuple[str, ...]] = ("_images", "_init_plans")

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
        active = toolbox.initial_active()
        allowed = task.metadata.get("user_tools") if task is not None else None
        if isinstance(allowed, list):  # as in the benchmark, the user has only the tools its task lists
            active["user"] &= set(allowed)
        return Tau3Context(
            conn=db.conn,
            now=NOW,
            task_id=task.id if task else None,
            kb=self.kb,
            active=active,
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
        if self.prompt_style != "benchmark":
            return build_prompt(self, key, task)
        if RETRIEVAL[key].documents == "required":  # the task's documents are in it
            return bp.agent_system_prompt(build_prompt(self, key, task))
        text = self._agent_prompts.get(key)
        if text is None:
            text = self._agent_prompts[key] = bp.agent_system_prompt(build_prompt(self, key, task))
        return text

    # --- prompt style: the user's prompt and the chat layout (see benchmark_prompts) ------------------
    def _guidelines(self) -> bp.UserGuidelines | None:
        """The guidelines the user seat's prompt uses: None for tau_env's prompt."""
        return self.benchmark_guidelines if self.prompt_style == "benchmark" else None

    def user_system_prompt(self, task: Task) -> str:
        """The benchmark's user-simulator prompt (its guidelines for a user with or without tools, then
        the scenario); tau_env's with ``prompt_style="tau_env"`` or when the guidelines were not found.
        """
        guidelines = self._guidelines()
        if guidelines is None:
            return super().user_system_prompt(task)
        allowed = task.metadata.get("user_tools")
        has_tools = not isinstance(allowed, list) or any(n in _USER_TOOL_NAMES for n in allowed)
        scenario = bp.scenario_text(task.scenario.persona, task.scenario.instructions)
        return bp.user_system_prompt(guidelines, scenario, has_tools)

    def own_message(self, message: dict[str, Any]) -> dict[str, Any]:
        return bp.own_message(message) if self.prompt_style == "benchmark" else message

    def tool_message(self, call_id: str, name: str, content: str) -> dict[str, Any]:
        if self.prompt_style == "benchmark":
            return bp.tool_message(call_id, name, content)
        return super().tool_message(call_id, name, content)

    def prompt_config(self) -> dict[str, Any]:
        """The prompt style, the user prompt's origin and the guideline files' SHA-256 (None: not used)."""
        config = {**super().prompt_config(), "prompt_style": self.prompt_style, "user_guidelines_sha256": None}
        guidelines = self._guidelines()
        if guidelines is not None:
            config["user_prompt_version"] = "tau2-bench"
            config["user_guidelines_sha256"] = guidelines.sha256()
        return config

    def export_db(self, db: EpisodeDB) -> dict[str, Any]:
        """The database in the benchmark's layout: ``{table: {"data": {row_id: row}, "notes": str}}``."""
        return Store(db.conn).dump()


def _load(
    root: str,
    retrieval: str,
    prompt_style: str,
    guidelines_dir: str | None,
    order: tuple[str, ...] | None,
    options: tuple[tuple[str, Any], ...] = (),
) -> Tau3Domain:
    """The domain of the data folder ``root`` (a resolved path) with default ``retrieval``, built once
    per setting and kept in :data:`tau_env.registry.domain_cache`. Files changed on disk afterwards
    are not read again until ``tau_env.registry.clear_cache()``.
    """
    from tau_env.registry import domain_cache

    def build() -> Tau3Domain:
        data = load_data(Path(root))
        guidelines = bp.find_guidelines(Path(root), guidelines_dir)
        if guidelines is None and prompt_style == "benchmark":
            warnings.warn(
                f"tau3-banking: tau2-bench's user-simulator guidelines are not beside the data folder "
                f"({Path(root) / bp.DEFAULT_GUIDELINES_DIR} does not exist), so the user seat gets tau_env's "
                "simulator prompt (config.json records it). Pass user_guidelines_dir=PATH (--user-guidelines-dir), "
                "PATH being your copy's data/tau2/user_simulator, for the benchmark's; or prompt_style='tau_env' "
                "(--prompt-style tau_env) for tau_env's prompts.",
                stacklevel=2,
            )
        domain = Tau3Domain(
            name="tau3-banking",
            schema=Schema.from_ddl(DDL),
            seed={},
            tools=_tools(),
            documents=data.documents if order is None else ordered_documents(data.documents, order),
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
            prompt_style=prompt_style,
            benchmark_guidelines=guidelines,
            retrieval_options=dict(options),
        )
        # Targets depend on db.json, the task files and the code (schema and tools): not on the
        # folder's place, the documents, the prompts or the retrieval configuration.
        domain.grader.store = DiskCache("tau3-targets", cache_key(code_fingerprint(), data.fingerprint))
        return domain

    return domain_cache.get(("tau3-banking", root, retrieval, prompt_style, guidelines_dir, order, options), build)


def document_order_ids(order: object) -> tuple[str, ...] | None:
    """The document ids of ``document_order``: None, a sequence of ids, or the path of a JSON file
    holding a list of ids or an object with an ``"ids"`` list (the benchmark transcripts'
    ``kb_document_load_order.json``).

    Raises:
        InvalidOptionError: Another value, or ids that are not strings.
        DomainError: The file is missing, unreadable or not such JSON.
    """
    if order is None:
        return None
    if isinstance(order, (str, os.PathLike)):
        path = Path(order).expanduser()
        raw = read_json_file(path)
        ids = raw.get("ids") if isinstance(raw, dict) else raw
        if not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
            raise DomainError(f"{path}: expected a JSON list of document ids, or an object with an 'ids' list.")
        return tuple(ids)
    if isinstance(order, Sequence) and not isinstance(order, bytes) and all(isinstance(i, str) for i in order):
        return tuple(order)
    raise InvalidOptionError(
        "document_order must be None, a list of document ids or the path of a JSON file of them, "
        f"got {type(order).__name__}."
    )


def ordered_documents(documents: Sequence[Document], order: Sequence[str]) -> list[Document]:
    """``documents`` in the order of the ids ``order``, which must name each of them exactly once.

    Raises:
        InvalidOptionError: ``order`` repeats, misses or adds an id (the first one named).
    """
    by_id = {d.id: d for d in documents}
    seen: set[str] = set()
    for i in order:
        if i not in by_id:
            raise InvalidOptionError(f"document_order names {i!r:.100}, which is not a document of the data folder.")
        if i in seen:
            raise InvalidOptionError(f"document_order names {i!r:.100} twice.")
        seen.add(i)
    missing = [d.id for d in documents if d.id not in seen]
    if missing:
        raise InvalidOptionError(
            f"document_order lacks {len(missing)} of the data folder's {len(documents)} documents, "
            f"e.g. {missing[0]!r:.100}; it must list every document once."
        )
    return [by_id[i] for i in order]


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
    prompt_style: str = "benchmark",
    user_guidelines_dir: str | os.PathLike[str] | None = None,
    document_order: str | os.PathLike[str] | Sequence[str] | None = None,
    retrieval_options: Mapping[str, Any] | None = None,
) -> Tau3Domain:
    """The tau3-banking domain from the benchmark's data folder (``data_dir`` or ``$TAU3_BANKING_DATA``).

    Args:
        data_dir: The benchmark's ``data/tau2/domains/banking_knowledge`` folder.
        retrieval: The default retrieval configuration.
        prompt_style: ``"benchmark"`` (default: the benchmark's agent wrapper, user simulator and chat
            layout) or ``"tau_env"`` (the policy text alone, tau_env's user simulator and layout).
        user_guidelines_dir: The folder of tau2-bench's user-simulator guidelines; default
            ``<data_dir>/../../user_simulator``, as in tau2-bench's layout.
        document_order: The knowledge base's load order (ids, or a JSON file of them), which orders
            search ties. Default: the data folder's listing order, as the benchmark loads it, which
            depends on the file system; give it to reproduce a run on any machine.
        retrieval_options: Endpoint settings of the embedding and reranker configurations, e.g.
            ``{"embedding_base_url": "http://127.0.0.1:8000/v1", "embedding_model": "Qwen/Qwen3-Embedding-8B",
            "embedding_api_key_env": None}``; keys in
            :func:`tau_env.domains.tau3_banking.prompts.retrieval_options`. Default: the benchmark's.
    """
    from tau_env.domains.tau3_banking.prompts import retrieval_options as check_options

    check_retrieval(retrieval)
    bp.check_style(prompt_style)
    guidelines_dir = None
    if user_guidelines_dir is not None:
        if not isinstance(user_guidelines_dir, (str, os.PathLike)):
            raise InvalidOptionError(
                "user_guidelines_dir must be a folder path (str or os.PathLike) or None, "
                f"got {type(user_guidelines_dir).__name__}."
            )
        guidelines_dir = str(Path(user_guidelines_dir).expanduser().resolve())
    order = document_order_ids(document_order)
    options = tuple(sorted(check_options(retrieval_options).items()))
    return _load(str(resolve_data_dir(data_dir).resolve()), retrieval, prompt_style, guidelines_dir, order, options)
