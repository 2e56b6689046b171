"""tau3-banking's tables on SQLite: schemaless JSON rows that keep their field order and types.

Each benchmark table is an SQLite table ``(id, canon, _data)``: ``_data`` is the row as JSON in
its field order (what tools print), ``canon`` the same row with sorted keys (what the digest
covers, as the benchmark's hash sorts keys). Rows keep insertion order through the rowid. Values
round-trip exactly through JSON: ``1500.0`` stays a float, ``"$842.15"`` a string.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from typing import Any

#: The benchmark's 23 tables, in its model's field order.
TABLES = (
    "users", "accounts", "debit_cards", "referrals", "credit_card_applications", "user_discoverable_tools",
    "user_discoverable_tool_calls", "verification_history", "credit_card_transaction_history",
    "cash_back_disputes", "bank_account_transaction_history", "credit_card_accounts", "agent_discoverable_tools",
    "task_config", "human_transfer_requests", "transaction_disputes", "credit_card_orders", "debit_card_orders",
    "credit_card_closure_reasons", "credit_card_account_flags", "credit_limit_increase_requests",
    "payment_history", "debit_card_disputes",
)  # fmt: skip

NOTES_TABLE = "table_notes"

DDL = "\n".join(
    [f'CREATE TABLE "{t}" (id TEXT PRIMARY KEY, canon TEXT NOT NULL, _data TEXT NOT NULL);' for t in TABLES]
    + [f"CREATE TABLE {NOTES_TABLE} (name TEXT PRIMARY KEY, notes TEXT NOT NULL);"]
)


def _dump(row: Mapping[str, Any]) -> str:
    return json.dumps(row, ensure_ascii=False)


def _canon(row: Mapping[str, Any]) -> str:
    return json.dumps(row, ensure_ascii=False, sort_keys=True)


def _is_key(rid: Any) -> bool:
    """Whether ``rid`` can be a row id, with the benchmark's dict semantics for the ids a model sends.

    The benchmark's tables are dicts keyed by strings: looking up an unhashable id (a list, an
    object) raises Python's ``TypeError: unhashable type``, which its discovery tools report as
    ``Error: Invalid arguments ...``; any other non-string id (a number, a boolean, null) finds
    nothing. SQLite would instead fail to bind the first or compare the second as text.
    """
    if isinstance(rid, str):
        return True
    hash(rid)  # TypeError: unhashable type: 'list', as the benchmark's lookup raises
    return False


class Store:
    """Row access for the benchmark's tools, with the benchmark's semantics.

    ``insert`` never overwrites (a silent no-op on an existing id, as the benchmark's inserts),
    ``update`` sets fields in place (new fields go last), ``put`` assigns a whole row (in place if
    it exists). Lookups by an id that is not a string behave as the benchmark's dict lookups.
    """

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def get(self, table: str, rid: str) -> dict[str, Any] | None:
        if not _is_key(rid):
            return None
        r = self.conn.execute(f'SELECT _data FROM "{table}" WHERE id = ?', (rid,)).fetchone()
        return json.loads(r[0]) if r else None

    def exists(self, table: str, rid: str) -> bool:
        if not _is_key(rid):
            return False
        return self.conn.execute(f'SELECT 1 FROM "{table}" WHERE id = ?', (rid,)).fetchone() is not None

    def insert(self, table: str, rid: str, row: Mapping[str, Any]) -> bool:
        """Add a row unless the id exists; True if it was added."""
        cur = self.conn.execute(
            f'INSERT OR IGNORE INTO "{table}" (id, canon, _data) VALUES (?, ?, ?)', (rid, _canon(row), _dump(row))
        )
        return cur.rowcount == 1

    def put(self, table: str, rid: str, row: Mapping[str, Any]) -> None:
        """Assign a whole row: replaced in place if the id exists, appended otherwise."""
        cur = self.conn.execute(
            f'UPDATE "{table}" SET canon = ?, _data = ? WHERE id = ?', (_canon(row), _dump(row), rid)
        )
        if cur.rowcount == 0:
            self.conn.execute(
                f'INSERT INTO "{table}" (id, canon, _data) VALUES (?, ?, ?)', (rid, _canon(row), _dump(row))
            )

    def update(self, table: str, rid: str, fields: Mapping[str, Any]) -> dict[str, Any] | None:
        """Set fields of an existing row (new fields go last); returns the row, or None if absent."""
        row = self.get(table, rid)
        if row is None:
            return None
        row.update(fields)
        self.put(table, rid, row)
        return row

    def rows(self, table: str) -> list[tuple[str, dict[str, Any]]]:
        """All rows as (id, row) in insertion order."""
        return [(rid, json.loads(d)) for rid, d in self.conn.execute(f'SELECT id, _data FROM "{table}" ORDER BY rowid')]

    def where(self, table: str, **equal: Any) -> list[tuple[str, dict[str, Any]]]:
        """Rows whose fields equal the given values (Python equality), in insertion order."""
        if not equal:
            return self.rows(table)
        (field, value), *rest = equal.items()
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            # SQLite narrows the scan; Python equality below decides, as in the benchmark.
            cur = self.conn.execute(
                f'SELECT id, _data FROM "{table}" WHERE json_extract(canon, ?) = ? ORDER BY rowid',
                ("$." + json.dumps(field), value),
            )
            found = [(rid, json.loads(d)) for rid, d in cur]
        else:
            found = self.rows(table)
        return [
            (rid, row) for rid, row in found
            if field in row and row[field] == value and all(k in row and row[k] == v for k, v in rest)
        ]  # fmt: skip

    def count(self, table: str) -> int:
        return self.conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]

    def notes(self, table: str) -> str:
        r = self.conn.execute(f"SELECT notes FROM {NOTES_TABLE} WHERE name = ?", (table,)).fetchone()
        return r[0] if r else ""

    def set_notes(self, table: str, notes: str) -> None:
        self.conn.execute(f"INSERT OR REPLACE INTO {NOTES_TABLE} VALUES (?, ?)", (table, notes))

    def dump(self) -> dict[str, dict[str, Any]]:
        """The whole database in the benchmark's layout: ``{table: {"data": {id: row}, "notes": str}}``."""
        return {t: {"data": dict(self.rows(t)), "notes": self.notes(t)} for t in TABLES}

    def iter_tables(self) -> Iterator[str]:
        return iter(TABLES)


def load_seed(conn: sqlite3.Connection, db: Mapping[str, Any]) -> None:
    """Load ``db.json`` content (``{table: {"data": {...}, "notes": str}}``) into empty tables."""
    store = Store(conn)
    for t in TABLES:
        table = db.get(t) or {}
        for rid, row in (table.get("data") or {}).items():
            store.insert(t, rid, row)
        store.set_notes(t, table.get("notes") or "")


def deep_merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``update`` into ``base`` recursively: nested objects merge, other values replace.

    Existing keys keep their position and new keys go last, as the benchmark's deep update does.
    """
    for k, v in update.items():
        if k in base and isinstance(base[k], dict) and isinstance(v, Mapping):
            deep_merge(base[k], v)
        else:
            base[k] = json.loads(json.dumps(v)) if isinstance(v, (dict, list)) else v
    return base


def initialization_plan(db: Mapping[str, Any], agent_data: Mapping[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """What deep-merging ``agent_data`` over the seed ``db`` writes, as ``(table, id, canon, data, notes)``
    rows (``notes`` only for the notes pseudo-row), computed once per task so that resets replay it
    without JSON work.
    """
    plan = []
    for t, table in agent_data.items():
        if t not in TABLES:
            # internal: the only caller (Tau3Domain.apply_initial_state) names the task, raises DomainError
            raise ValueError(f"initialization data names an unknown table {t!r}; tables are {list(TABLES)}.")
        seed_rows = (db.get(t) or {}).get("data") or {}
        for rid, row in ((table or {}).get("data") or {}).items():
            current = json.loads(json.dumps(seed_rows[rid])) if rid in seed_rows else {}
            merged = deep_merge(current, row)
            plan.append((t, rid, _canon(merged), _dump(merged), ""))
        if "notes" in (table or {}):
            plan.append((NOTES_TABLE, t, "", "", table["notes"]))
    return plan


def apply_initialization(conn: sqlite3.Connection, plan: list[tuple[str, str, str, str, str]]) -> None:
    """Write an :func:`initialization_plan` (rows in place if they exist, appended otherwise)."""
    for t, rid, canon, data, notes in plan:
        if t == NOTES_TABLE:
            conn.execute(f"INSERT OR REPLACE INTO {NOTES_TABLE} VALUES (?, ?)", (rid, notes))
            continue
        if conn.execute(f'UPDATE "{t}" SET canon = ?, _data = ? WHERE id = ?', (canon, data, rid)).rowcount == 0:
            conn.execute(f'INSERT INTO "{t}" (id, canon, _data) VALUES (?, ?, ?)', (rid, canon, data))
