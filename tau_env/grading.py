"""Exact-match grading: reward 1 iff the final database equals Exec(s0, A*).

The target of each task (its state after replaying the reference actions on s0) is computed
once and cached as per-table digests; a grader with a ``store`` (a :class:`~tau_env.diskcache.DiskCache`
keyed by everything the targets depend on) also keeps the digests on disk, so that a new process
reads them instead of replaying every task. Grading a live episode compares the episode's
digests, which triggers keep up to date, with the target's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tau_env.db import EpisodeDB, diff_rows

if TYPE_CHECKING:
    from tau_env.diskcache import DiskCache
    from tau_env.domain import Domain
    from tau_env.tasks import Task

_DIGEST = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class Target:
    """A task's cached expected state: its per-table ``digests``.

    ``image`` (the serialized state) is only needed to explain a failed grade: it is built on
    first use by ``build_image`` (replaying the task) and then kept. The explanation caches also
    fill on the first failed grade: the target's rows of a table, the task's initial digests, and
    the diff of each table an episode left as it started (the same diff for every such episode of
    the task, kept as JSON text so that no caller can change it).
    """

    digests: dict[str, str]
    build_image: Callable[[], bytes] = field(repr=False, compare=False)
    rows: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict, compare=False)
    initial_digests: dict[str, str] = field(default_factory=dict, compare=False)
    untouched_diffs: dict[str, str] = field(default_factory=dict, compare=False)
    _image: list[bytes] = field(default_factory=list, init=False, repr=False, compare=False)

    @property
    def image(self) -> bytes:
        """The target state, serialized (``EpisodeDB(schema, image)`` opens it)."""
        if not self._image:
            self._image.append(self.build_image())
        return self._image[0]


@dataclass
class Grade:
    """The result of grading: ``reward`` and, on failure, which rows and fields differ."""

    reward: float
    db_match: bool
    differing_tables: list[str] = field(default_factory=list)
    diff: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "reward": self.reward,
            "db_match": self.db_match,
            "differing_tables": self.differing_tables,
            "diff": self.diff,
        }


class Grader:
    """Grades episodes of one domain against cached targets.

    ``store``: where target digests are kept between processes (None: in memory only). Its key
    must cover everything a target depends on (the domain's data, schema and tools' code), since
    the grader trusts a stored entry that passes its checks (checksum, task id, table names).
    """

    def __init__(self, domain: Domain, store: DiskCache | None = None):
        self.domain = domain
        self.store = store
        self._targets: dict[str, Target] = {}

    def target(self, task: Task) -> Target:
        t = self._targets.get(task.id)
        if t is None:
            digests = self._stored(task)
            if digests is None:
                db = self._replay(task)
                digests = db.table_digests()
                db.close()
                if self.store is not None:
                    self.store.put(task.id, json.dumps({"task": task.id, "digests": digests}).encode())
            t = self._targets[task.id] = Target(digests, lambda: self._image(task))
        return t

    def _replay(self, task: Task) -> EpisodeDB:
        """A database holding ``task``'s target state: s0 with the reference actions run on it."""
        db = self.domain.start_db(task)
        self.domain.run_actions(db, task)
        return db

    def _image(self, task: Task) -> bytes:
        db = self._replay(task)
        try:
            return db.snapshot()
        finally:
            db.close()

    def _stored(self, task: Task) -> dict[str, str] | None:
        """The task's digests from ``store``, if there and well-formed (one digest per table of the schema)."""
        raw = self.store.get(task.id) if self.store is not None else None
        if raw is None:
            return None
        try:
            entry = json.loads(raw)
            digests = entry["digests"]
            ok = (
                entry["task"] == task.id
                and isinstance(digests, dict)
                and digests.keys() == self.domain.schema.tables.keys()
                and all(isinstance(d, str) and _DIGEST.fullmatch(d) for d in digests.values())
            )
        except (ValueError, TypeError, KeyError):  # not JSON, not UTF-8, not an object
            return None
        return digests if ok else None

    def differing_tables(self, db: EpisodeDB, task: Task) -> list[str]:
        """Tables whose rows differ from the task's target (one digest lookup per table)."""
        expected = self.target(task).digests
        return [name for name, acc in db.table_digests().items() if expected[name] != acc]

    def grade(self, db: EpisodeDB, task: Task, explain: bool = True) -> Grade:
        """Compare ``db`` with the task's target; ``explain`` adds a row/field diff on failure."""
        target = self.target(task)
        actual = db.table_digests()
        differing = [name for name, acc in actual.items() if target.digests[name] != acc]
        if not differing:
            return Grade(1.0, True)
        diff = {}
        if explain:
            self._load_explanation(task, target, differing)
            tables = self.domain.schema.tables
            for name in differing:
                if actual[name] == target.initial_digests[name]:
                    # The episode left this table as it started: the task's cached diff applies.
                    text = target.untouched_diffs.get(name)
                    if text is None:
                        d = diff_rows(tables[name], self._initial_rows(task, name), target.rows[name])
                        try:
                            text = json.dumps(d)
                        except (TypeError, ValueError):  # a BLOB value: no JSON text; compute it each time
                            text = ""
                        target.untouched_diffs[name] = text
                    diff[name] = json.loads(text) if text else diff_rows(tables[name], db.rows(name), target.rows[name])
                else:
                    diff[name] = diff_rows(tables[name], db.rows(name), target.rows[name])
        return Grade(0.0, False, differing, diff)

    def _load_explanation(self, task: Task, target: Target, tables: list[str]) -> None:
        """Fill the target's rows of ``tables`` and the task's initial digests, once each."""
        missing = [name for name in tables if name not in target.rows]
        if missing:
            expected = EpisodeDB(self.domain.schema, target.image)
            for name in missing:
                target.rows[name] = expected.rows(name)
            expected.close()
        if not target.initial_digests:
            start = self.domain.start_db(task)
            target.initial_digests.update(start.table_digests())
            start.close()

    def _initial_rows(self, task: Task, table: str) -> list[tuple[Any, ...]]:
        start = self.domain.start_db(task)
        try:
            return start.rows(table)
        finally:
            start.close()
