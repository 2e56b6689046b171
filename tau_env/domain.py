"""A Domain: schema + seed data + tools + knowledge + policy + tasks.

Building a domain is cheap; the per-task initial images and grading targets are computed on
first use and cached on the Domain, which every env of that domain shares.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tau_env.db import EpisodeDB, Patch, Schema, apply_patch, build_image
from tau_env.error import DomainError, UnknownTaskError, did_you_mean
from tau_env.knowledge import Document, KnowledgeBase, load_documents
from tau_env.knowledge.tools import RETRIEVAL_CONFIGS, knowledge_tools
from tau_env.tasks import Task, load_tasks
from tau_env.tools import Tool, Toolbox, ToolContext, ToolResult

DEFAULT_GREETING = "Hi! How can I help you today?"


@dataclass
class ReplayStep:
    """One replayed reference action and what it returned."""

    name: str
    requestor: str
    output: str
    error: bool


@dataclass
class Domain:
    """Everything that defines a domain.

    Attributes:
        name: Short name, e.g. ``"harbor-bank"``.
        schema: Tables of the database (SQL DDL).
        seed: Initial rows ``{table: [row]}`` shared by every task.
        tools: Domain tools of both seats (``@tool`` functions).
        documents: The knowledge base.
        policy: The agent's system prompt (``{retrieval_instructions}`` is filled per configuration).
        tasks: The tasks.
        clock: "Now" for tools, unless a task sets its own.
        greeting: The agent's fixed first message, or None to let the user speak first.
        retrieval: Default retrieval configuration (see ``RETRIEVAL_CONFIGS``).
        user_guidelines: How a simulated user should behave; prepended to its scenario.
    """

    name: str
    schema: Schema
    seed: Patch
    tools: Sequence[Tool]
    documents: Sequence[Document]
    policy: str
    tasks: Sequence[Task]
    clock: datetime = datetime(2025, 6, 2, 9, 30)
    greeting: str | None = DEFAULT_GREETING
    retrieval: str = "bm25"
    user_guidelines: str = ""
    max_steps: int = 100
    #: How replay records name the agent seat (a benchmark may call it "assistant").
    agent_requestor: str = "agent"
    _images: dict[str, bytes] = field(default_factory=dict, repr=False)
    _toolboxes: dict[str, Toolbox] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.kb = KnowledgeBase(self.documents)
        self.task_index = {t.id: t for t in self.tasks}
        if len(self.task_index) != len(self.tasks):
            raise DomainError(f"Domain {self.name!r}: task ids are not unique.")
        self._seed_image = build_image(self.schema, {}, init=self.load_seed)
        from tau_env.grading import Grader

        self.grader = Grader(self)

    # --- tasks and state ---------------------------------------------------------------
    def task(self, task_id: str) -> Task:
        try:
            return self.task_index[task_id]
        except KeyError:
            raise UnknownTaskError(
                f"Domain {self.name!r} has no task {task_id!r} ({len(self.tasks)} tasks)."
                + did_you_mean(task_id, self.task_index)
            ) from None

    @property
    def seed_image(self) -> bytes:
        """The serialized seed state shared by every task (episodes start from it)."""
        return self._seed_image

    def initializer(self, task: Task | None) -> Callable[[sqlite3.Connection], None] | None:
        """A function applying ``task``'s initial state over the seed, or None if it has none.

        Override ``apply_initial_state`` to give a domain other semantics (e.g. a deep merge).
        """
        if task is None or not task.initial_state:
            return None
        return lambda conn: self.apply_initial_state(conn, task)

    def load_seed(self, conn: sqlite3.Connection) -> None:
        """Write the seed rows into an empty database (override for another seed format)."""
        apply_patch(conn, self.schema, self.seed)

    def apply_initial_state(self, conn: sqlite3.Connection, task: Task) -> None:
        """Upsert the task's ``initial_state`` rows (a row with ``"_delete": true`` is deleted)."""
        apply_patch(conn, self.schema, task.initial_state)

    def image(self, task: Task | None) -> bytes:
        """The serialized initial state s0 of ``task`` (seed data plus the task's initial state)."""
        init = self.initializer(task)
        if init is None:
            return self._seed_image
        img = self._images.get(task.id)
        if img is None:

            def seed_then_task(conn: sqlite3.Connection) -> None:
                self.load_seed(conn)
                init(conn)

            img = self._images[task.id] = build_image(self.schema, {}, init=seed_then_task)
        return img

    def clock_for(self, task: Task | None) -> datetime:
        return datetime.fromisoformat(task.clock) if task is not None and task.clock else self.clock

    def toolbox(self, retrieval: str | None = None) -> Toolbox:
        """Domain tools plus the knowledge tools of ``retrieval`` (cached)."""
        key = retrieval or self.retrieval
        box = self._toolboxes.get(key)
        if box is None:
            box = self._toolboxes[key] = Toolbox([*self.tools, *knowledge_tools(key)])
        return box

    def context(self, db: EpisodeDB, task: Task | None, toolbox: Toolbox) -> ToolContext:
        return ToolContext(
            conn=db.conn,
            now=self.clock_for(task),
            task_id=task.id if task else None,
            kb=self.kb,
            active=toolbox.initial_active(),
            toolbox=toolbox,
        )

    def system_prompt(self, retrieval: str | None = None, task: Task | None = None) -> str:
        key = retrieval or self.retrieval
        if key not in RETRIEVAL_CONFIGS:
            knowledge_tools(key)  # raises with the list of configurations
        hints = {
            "none": "You have no access to the policy documents; rely on this policy alone.",
            "grep": "Use grep_documents to find the policy documents' rules before acting.",
        }
        text = hints.get(
            key,
            "Search the policy documents for the rules that apply before acting; "
            "they also name the specialised tools you can unlock.",
        )
        return self.policy.replace("{retrieval_instructions}", text)

    # --- replay ------------------------------------------------------------------------
    def replay_record(self, task: Task) -> dict[str, Any]:
        """A task's reference replay as data: each action's output and error flag, and the final database."""
        db, steps = self.replay(task)
        names = {"agent": self.agent_requestor, "user": "user"}
        record = {
            "task_id": task.id,
            "actions": [
                {"name": s.name, "requestor": names[s.requestor], "output": s.output, "error": s.error} for s in steps
            ],
            "final_db": self.export_db(db),
        }
        db.close()
        return record

    def export_db(self, db: EpisodeDB) -> dict[str, Any]:
        """The database as plain data (``tau-env replay`` prints it); override for a benchmark's layout."""
        return db.dump()

    def replay(self, task: Task, strict: bool = False) -> tuple[EpisodeDB, list[ReplayStep]]:
        """Replay the task's reference actions on s0; returns the final database and each output."""
        db = self.start_db(task)
        return db, self.run_actions(db, task, strict)

    def start_db(self, task: Task | None) -> EpisodeDB:
        """A new database holding s0 of ``task``."""
        db = EpisodeDB(self.schema)
        db.start(self._seed_image, self.initializer(task))
        return db

    def run_actions(self, db: EpisodeDB, task: Task, strict: bool = False) -> list[ReplayStep]:
        """Run the task's reference actions on ``db`` through the full toolbox."""
        box = self.toolbox("all")
        ctx = self.context(db, task, box)
        steps = []
        for a in task.actions:
            res: ToolResult = box.call(ctx, a.requestor, a.name, dict(a.arguments), strict=strict)
            steps.append(ReplayStep(a.name, a.requestor, res.content, res.error))
        return steps


def load_domain_dir(path: str | Path, tools: Sequence[Tool], **overrides: Any) -> Domain:
    """Load a domain laid out as a folder (the shipped bank is the worked example).

    Layout::

    domain.json     {"name", "clock", "greeting", "retrieval", "max_steps"}
    schema.sql      the tables
    seed.json       {table: [rows]}
    policy.md       the agent's system prompt
    user_guidelines.md (optional)
    documents/      *.md or *.json documents
    tasks.json      the tasks (or tasks.jsonl)
    """
    root = Path(path)
    meta = json.loads((root / "domain.json").read_text(encoding="utf-8"))
    tasks_file = root / "tasks.json" if (root / "tasks.json").exists() else root / "tasks.jsonl"
    guidelines = root / "user_guidelines.md"
    kwargs: dict[str, Any] = dict(
        name=meta["name"],
        schema=Schema.from_ddl((root / "schema.sql").read_text(encoding="utf-8")),
        seed=json.loads((root / "seed.json").read_text(encoding="utf-8")),
        tools=list(tools),
        documents=load_documents(root / "documents"),
        policy=(root / "policy.md").read_text(encoding="utf-8"),
        tasks=load_tasks(tasks_file),
        user_guidelines=guidelines.read_text(encoding="utf-8") if guidelines.exists() else "",
    )
    for key in ("greeting", "retrieval", "max_steps"):
        if key in meta:
            kwargs[key] = meta[key]
    if "clock" in meta:
        kwargs["clock"] = datetime.fromisoformat(meta["clock"])
    kwargs.update(overrides)
    return Domain(**kwargs)
