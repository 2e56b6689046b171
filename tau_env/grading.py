"""Exact-match grading: reward 1 iff the final database equals Exec(s0, A*).

The target of each task (its state after replaying the reference actions on s0) is computed
once and cached as per-table digests. Grading a live episode re-hashes only the tables that
the episode's writes touched; every other table still equals s0, so its digest is known.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tau_env.db import EpisodeDB, diff_rows

if TYPE_CHECKING:
    from tau_env.domain import Domain
    from tau_env.tasks import Task


@dataclass(frozen=True)
class Target:
    """A task's cached expected state.

    The explanation caches fill on the first failed grade: the target's rows of a table, the
    task's initial digests, and the diff of each table an episode left as it started (the same
    diff for every such episode of the task, kept as JSON text so that no caller can change it).
    """

    image: bytes
    digests: dict[str, str]
    rows: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict, compare=False)
    initial_digests: dict[str, str] = field(default_factory=dict, compare=False)
    untouched_diffs: dict[str, str] = field(default_factory=dict, compare=False)


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
    """Grades episodes of one domain against cached targets."""

    def __init__(self, domain: Domain):
        self.domain = domain
        self._targets: dict[str, Target] = {}

    def target(self, task: Task) -> Target:
        t = self._targets.get(task.id)
        if t is None:
            db = self.domain.start_db(task)
            self.domain.run_actions(db, task)
            t = Target(db.snapshot(), db.table_digests())
            db.close()
            self._targets[task.id] = t
        return t

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
