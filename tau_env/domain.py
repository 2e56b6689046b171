"""A Domain: schema + seed data + tools + knowledge + policy + tasks.

Building a domain is cheap; the per-task initial images and grading targets are computed on
first use and cached on the Domain, which every env of that domain shares.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from tau_env.db import EpisodeDB, Patch, Schema, apply_patch, build_image
from tau_env.error import DomainError, TaskFileError, UnknownTaskError, did_you_mean
from tau_env.knowledge import Document, KnowledgeBase, load_documents
from tau_env.knowledge.tools import RETRIEVAL_CONFIGS, knowledge_tools
from tau_env.tasks import Task, json_path, load_tasks, read_json_file, read_text_file, type_name
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
        max_steps: Default step budget of an episode.
        agent_requestor: How replay records name the agent seat.

    Built from those (not arguments): ``kb`` (the :class:`~tau_env.KnowledgeBase` of ``documents``),
    ``task_index`` (task id -> task) and ``grader``. The caches of per-task initial images and of
    toolboxes per retrieval configuration are filled on first use; they are not arguments, not
    shown in ``repr`` and not compared by ``==``.

    Hook for subclasses: ``prompt_depends_on_task`` (class attribute), see below.
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
    #: Serialized initial state of each task with an initial state (see ``image``).
    _images: dict[str, bytes] = field(default_factory=dict, init=False, repr=False, compare=False)
    #: Toolbox of each retrieval configuration (see ``toolbox``).
    _toolboxes: dict[str, Toolbox] = field(default_factory=dict, init=False, repr=False, compare=False)

    #: Whether ``system_prompt`` depends on its ``task`` argument. False (the default): an env
    #: builds the agent's prompt once per retrieval configuration and reuses it for every task.
    #: A subclass whose ``system_prompt(retrieval, task)`` reads the task (e.g. puts the task's
    #: documents in the prompt) sets it True, and the env builds the prompt at every ``reset``.
    prompt_depends_on_task: ClassVar[bool] = False

    def __post_init__(self) -> None:
        self.kb = KnowledgeBase(self.documents)
        self.task_index = {t.id: t for t in self.tasks}
        if len(self.task_index) != len(self.tasks):
            raise DomainError(f"Domain {self.name!r}: task ids are not unique.")
        self._seed_image = build_image(self.schema, {}, init=self.load_seed)
        from tau_env.grading import Grader

        self.grader = Grader(self)

    #: Caches keyed by task id (reset by ``with_tasks``); a subclass adds its own.
    task_caches: ClassVar[tuple[str, ...]] = ("_images",)

    # --- tasks and state ---------------------------------------------------------------
    def with_tasks(self, tasks: Sequence[Task] | str | Path) -> Domain:
        """This domain with other tasks: a list of :class:`Task`, or the path of a task file
        (``.json`` or ``.jsonl``, e.g. a synthesis run's ``tasks.jsonl``).

        The copy shares what does not depend on the tasks (documents and their search indexes,
        tools, seed image), so it is cheap; its per-task caches and grader are its own, so a task
        that reuses an id of the original's is never graded against the original's target. A task
        file is loaded and checked once per content: the same file again (every env a run makes)
        gives the same copy, an edited one is loaded again.

        Raises:
            TaskFileError: The file is missing or malformed, two tasks share an id, or (a file) a
                task's reference actions name a tool the domain lacks or its required documents one
                the knowledge base lacks (:func:`~tau_env.checker.static_task_problems`).
        """
        import copy

        from tau_env.grading import Grader

        path, key = None, None
        if isinstance(tasks, (str, Path)):
            path = tasks
            key = _file_key(Path(path))  # the same file's content again: the domain built for it
            loaded = self.__dict__.setdefault("_file_domains", {})
            if key is not None and key in loaded:
                return loaded[key]
            tasks = load_tasks(tasks)
        elif isinstance(tasks, Task):
            tasks = [tasks]
        elif isinstance(tasks, Iterable) and not isinstance(tasks, (bytes, bytearray, dict)):
            tasks = list(tasks)
        else:
            raise TaskFileError(
                f"tasks must be a task file's path or a list of tau_env.Task, got {type(tasks).__name__}."
            )
        bad = next((t for t in tasks if not isinstance(t, Task)), None)
        if bad is not None:
            raise TaskFileError(
                f"tasks must be a task file's path or a list of tau_env.Task, got an item of type {type(bad).__name__}."
            )
        index = {t.id: t for t in tasks}
        if len(index) != len(tasks):
            dup = next(t.id for i, t in enumerate(tasks) if any(u.id == t.id for u in tasks[:i]))
            raise TaskFileError(f"Domain {self.name!r}: two tasks share the id {dup!r}.")
        new = copy.copy(self)
        new._file_domains = {}  # its own: a copy of this one is another domain
        new.tasks = tasks
        new.task_index = index
        for name in type(self).task_caches:
            setattr(new, name, {})
        new.grader = Grader(new)
        if path is not None:  # a user's file: refused on what cannot run (a list is the caller's own to check)
            from tau_env.checker import first_problem, static_task_problems
            from tau_env.db import EpisodeDB

            scratch = EpisodeDB(new.schema)  # each task's initial state over the seed, rolled back
            try:
                for t in tasks:
                    problems = static_task_problems(new, t, scratch)
                    if problems:
                        raise TaskFileError(
                            f"{path}: task {t.id!r}: {first_problem(problems)} `tau-env check ENV_ID --tasks {path}` "
                            "lists every problem."
                        )
            finally:
                scratch.close()
            if key is not None:
                self._file_domains[key] = new
        return new

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
        box = self._toolboxes.get(key) if isinstance(key, str) else None
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
        if not isinstance(key, str) or key not in RETRIEVAL_CONFIGS:
            knowledge_tools(key)  # raises InvalidOptionError with the list of configurations
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

    # --- the seats' chats (hooks) ---------------------------------------------------------
    def user_system_prompt(self, task: Task) -> str:
        """The user seat's system message for ``task`` (a hook: a benchmark's domain may give its own
        simulator's prompt). Default: tau_env's simulator prompt, :func:`tau_env.users.user_system_prompt`.
        """
        from tau_env.users import user_system_prompt

        return user_system_prompt(self, task.scenario)

    def own_message(self, message: dict[str, Any]) -> dict[str, Any]:
        """How a seat's own action (canonical, as the trajectory records it) appears in that seat's chat,
        the history its model is sent next (a hook: a benchmark may lay messages out its own way).
        Default: the action itself.
        """
        return message

    def tool_message(self, call_id: str, name: str, content: str) -> dict[str, Any]:
        """How a tool result appears in the caller's chat (a hook, as ``own_message``)."""
        return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}

    def prompt_config(self) -> dict[str, Any]:
        """What identifies the seats' prompts in a run's ``config.json`` (a hook; keys are added to the
        config, and identify the run). Default: tau_env's prompt style and user-simulator prompt version.
        """
        from tau_env.users import USER_PROMPT_VERSION

        return {"prompt_style": "tau_env", "user_prompt_version": USER_PROMPT_VERSION}

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


_META_KEYS = ("name", "clock", "greeting", "retrieval", "max_steps")


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

    Everything is checked here, before any episode touches it: a missing, unreadable, non-UTF-8 or
    malformed file raises :class:`DomainError` (:class:`~tau_env.error.TaskFileError`, also a
    ``TaskError``, for the tasks) naming the file, the place in it and the problem; so do seed
    rows and task initial states that do not fit the schema.
    """
    root = Path(path)
    if not root.is_dir():
        raise DomainError(f"Expected a domain folder at {root}, found none.")
    meta = _domain_meta(root / "domain.json")
    schema_file = root / "schema.sql"
    ddl = read_text_file(schema_file)
    try:
        schema = Schema.from_ddl(ddl)
    except (DomainError, ValueError) as e:  # ValueError: a NUL character in the text
        raise DomainError(f"{schema_file}: {e}") from e
    if not schema.tables:
        raise DomainError(f"{schema_file}: defines no tables.")
    seed_file = root / "seed.json"
    seed = read_json_file(seed_file)
    tasks_file = root / "tasks.json" if (root / "tasks.json").exists() else root / "tasks.jsonl"
    if not tasks_file.exists():
        raise TaskFileError(f"{root / 'tasks.json'}: no such file (nor tasks.jsonl); a domain folder needs its tasks.")
    tasks = load_tasks(tasks_file)
    _check_rows(schema, seed, seed_file, tasks, tasks_file)
    guidelines = root / "user_guidelines.md"
    kwargs: dict[str, Any] = dict(
        name=meta["name"],
        schema=schema,
        seed=seed,
        tools=list(tools),
        documents=load_documents(root / "documents"),
        policy=read_text_file(root / "policy.md"),
        tasks=tasks,
        user_guidelines=read_text_file(guidelines) if guidelines.exists() else "",
    )
    for key in ("greeting", "retrieval", "max_steps"):
        if key in meta:
            kwargs[key] = meta[key]
    if "clock" in meta:
        kwargs["clock"] = datetime.fromisoformat(meta["clock"])
    kwargs.update(overrides)
    return Domain(**kwargs)


def _domain_meta(path: Path) -> dict[str, Any]:
    """``domain.json``, checked key by key."""
    meta = read_json_file(path)
    if not isinstance(meta, dict):
        raise DomainError(f"{path}: expected an object with keys {list(_META_KEYS)}, got {type_name(meta)}.")
    unknown = [k for k in meta if k not in _META_KEYS]
    if unknown:
        hint = did_you_mean(unknown[0], _META_KEYS)
        raise DomainError(f"{path}: unknown key {unknown[0]!r}; the keys are {list(_META_KEYS)}.{hint}")

    def bad(key: str, expected: str) -> DomainError:
        return DomainError(f"{path}: {key}: expected {expected}, got {type_name(meta[key])} {meta[key]!r:.60}.")

    if not isinstance(meta.get("name"), str) or not meta["name"]:
        if "name" not in meta:
            raise DomainError(f'{path}: name: missing; give the domain a name, e.g. "my-bank".')
        raise bad("name", "a non-empty string")
    if "clock" in meta:
        try:
            datetime.fromisoformat(meta["clock"])
        except (TypeError, ValueError):
            raise bad("clock", 'an ISO date-time such as "2025-06-02T09:30:00"') from None
    if "greeting" in meta and not (meta["greeting"] is None or isinstance(meta["greeting"], str)):
        raise bad("greeting", "a string or null")
    if "retrieval" in meta and not (isinstance(meta["retrieval"], str) and meta["retrieval"] in RETRIEVAL_CONFIGS):
        raise bad("retrieval", f"one of {list(RETRIEVAL_CONFIGS)}")
    max_steps = meta.get("max_steps", 1)
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise bad("max_steps", "a positive integer")
    return meta


def _check_rows(schema: Schema, seed: Any, seed_file: Path, tasks: Sequence[Task], tasks_file: Path) -> None:
    """Load the seed rows, then each task's initial state, into a scratch database, row by row.

    A row that does not fit the schema is reported with its file and place.
    """
    if not isinstance(seed, dict):
        raise DomainError(f"{seed_file}: expected an object {{table: [rows]}}, got {type_name(seed)}.")
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(schema.ddl)

        def load(patch: dict[str, Any], where: Callable[[list[str | int]], str], error: type[DomainError]) -> None:
            for table, rows in patch.items():
                try:
                    schema.table(table)
                except DomainError as e:
                    raise error(f"{where([table])}: {e}") from e
                if not isinstance(rows, list):
                    raise error(f"{where([table])}: expected an array of rows, got {type_name(rows)}.")
                for i, row in enumerate(rows):
                    try:
                        apply_patch(conn, schema, {table: [row]})
                    except (DomainError, sqlite3.Error, OverflowError) as e:  # the last two from a delete
                        raise error(f"{where([table, i])}: {e}") from e

        load(seed, lambda loc: f"{seed_file}: {json_path(loc)}", DomainError)
        conn.commit()
        for n, task in enumerate(tasks):
            if task.initial_state:
                conn.execute("SAVEPOINT task")
                load(
                    task.initial_state,
                    lambda loc, n=n, t=task: (
                        f"{tasks_file}: {json_path(['initial_state', *loc], f'tasks[{n}]')} (task {t.id!r})"
                    ),
                    TaskFileError,
                )
                conn.execute("ROLLBACK TO task")
                conn.execute("RELEASE task")
    finally:
        conn.close()


def _file_key(path: Path) -> tuple[str, str] | None:
    """What identifies a task file's content for :meth:`Domain.with_tasks` (its resolved path and a
    SHA-256 of its bytes: another file, or this one edited, is loaded and checked again); None when
    it cannot be read (loading it then says why).
    """
    import hashlib

    try:
        if not path.is_file():  # a FIFO would block the read; anything but a file is refused by loading
            return None
        data = path.read_bytes()
    except OSError:
        return None
    return str(path.resolve()), hashlib.sha256(data).hexdigest()
