"""Per-episode SQLite state.

A domain's initial state (schema + seed rows + a task's patch) is built once into an *image*
(``sqlite3.Connection.serialize()``); each episode restores it with ``deserialize`` in
microseconds. Triggers record which tables a write touched, so the digest of a live episode
re-hashes only those tables. ``snapshot()``/``restore()`` fork a live episode.

Digests are SHA-256 over ``repr`` of each table's rows ordered by primary key: ``repr`` keeps
``1`` and ``1.0`` apart and is exact for floats, so two states have equal digests iff their
rows are equal value by value and type by type.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tau_env.error import DomainError, did_you_mean

DIRTY_TABLE = "_tau_dirty"
DELETE_KEY = "_delete"

Patch = Mapping[str, Sequence[Mapping[str, Any]]]


@dataclass(frozen=True)
class TableInfo:
    name: str
    columns: tuple[str, ...]
    primary_key: tuple[str, ...]

    @property
    def order_by(self) -> str:
        cols = self.primary_key or ("rowid",)
        return ", ".join(_q(c) for c in cols)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass
class Schema:
    """The tables of a domain, read from its DDL."""

    ddl: str
    tables: dict[str, TableInfo] = field(default_factory=dict)

    @classmethod
    def from_ddl(cls, ddl: str) -> Schema:
        conn = sqlite3.connect(":memory:")
        try:
            conn.executescript(ddl)
        except sqlite3.Error as e:
            raise DomainError(f"The domain schema is not valid SQL: {e}") from e
        tables = {}
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        for name in names:
            if name.startswith("_tau"):
                raise DomainError(f"Table name {name!r} is reserved (prefix '_tau').")
            info = conn.execute(f"PRAGMA table_info({_q(name)})").fetchall()
            cols = tuple(r[1] for r in info)
            pk = tuple(r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5]))
            tables[name] = TableInfo(name, cols, pk)
        conn.close()
        return cls(ddl, tables)

    def table(self, name: str) -> TableInfo:
        try:
            return self.tables[name]
        except KeyError:
            raise DomainError(
                f"Unknown table {name!r}; the schema has {sorted(self.tables)}.{did_you_mean(name, self.tables)}"
            ) from None


def _connect() -> sqlite3.Connection:
    # isolation_level=None: no implicit transactions; we open savepoints ourselves.
    return sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)


def _install_dirty_triggers(conn: sqlite3.Connection, schema: Schema) -> None:
    conn.execute(f"CREATE TABLE {DIRTY_TABLE} (name TEXT PRIMARY KEY) WITHOUT ROWID")
    for t in schema.tables:
        lit = "'" + t.replace("'", "''") + "'"
        for ev in ("INSERT", "UPDATE", "DELETE"):
            conn.execute(
                f"CREATE TRIGGER {_q(f'_tau_{ev.lower()}_{t}')} AFTER {ev} ON {_q(t)} "
                f"BEGIN INSERT OR IGNORE INTO {DIRTY_TABLE} VALUES ({lit}); END"
            )


def apply_patch(conn: sqlite3.Connection, schema: Schema, patch: Patch) -> None:
    """Upsert rows table by table; a row with ``"_delete": true`` deletes by primary key."""
    for table, rows in patch.items():
        info = schema.table(table)
        for row in rows:
            if not isinstance(row, Mapping):
                raise DomainError(f"Rows of table {table!r} must be objects, got {row!r:.100}.")
            unknown = [k for k in row if k not in info.columns and k != DELETE_KEY]
            if unknown:
                raise DomainError(
                    f"Table {table!r} has no column {unknown[0]!r}; columns are {list(info.columns)}."
                    + did_you_mean(unknown[0], info.columns)
                )
            if row.get(DELETE_KEY):
                keys = info.primary_key or info.columns
                missing = [k for k in keys if k not in row]
                if missing:
                    raise DomainError(f"A delete in {table!r} needs the primary key {list(keys)}; missing {missing}.")
                where = " AND ".join(f"{_q(k)} = ?" for k in keys)
                conn.execute(f"DELETE FROM {_q(table)} WHERE {where}", [row[k] for k in keys])
                continue
            cols = [k for k in row if k != DELETE_KEY]
            sql = (
                f"INSERT OR REPLACE INTO {_q(table)} ({', '.join(map(_q, cols))}) VALUES ({', '.join('?' * len(cols))})"
            )
            try:
                conn.execute(sql, [row[c] for c in cols])
            except (sqlite3.Error, OverflowError) as e:
                raise DomainError(f"Row {dict(row)!r:.200} does not fit table {table!r}: {e}") from e


def build_image(schema: Schema, seed: Patch, *patches: Patch | None) -> bytes:
    """Build the serialized initial state: schema, seed rows, then each patch in order."""
    conn = _connect()
    conn.executescript(schema.ddl)
    apply_patch(conn, schema, seed)
    for p in patches:
        if p:
            apply_patch(conn, schema, p)
    # Dirty-tracking triggers go in last, so the image starts with no table marked.
    _install_dirty_triggers(conn, schema)
    conn.execute("VACUUM")
    image = conn.serialize()
    conn.close()
    return image


def hash_rows(rows: list[tuple[Any, ...]]) -> str:
    return hashlib.sha256(repr(rows).encode("utf-8", "surrogatepass")).hexdigest()


def combine_digests(table_digests: Mapping[str, str]) -> str:
    h = hashlib.sha256()
    for name in sorted(table_digests):
        h.update(f"{name}={table_digests[name]};".encode())
    return h.hexdigest()


class EpisodeDB:
    """One episode's in-memory database, restored from an image."""

    def __init__(self, schema: Schema, image: bytes | None = None):
        self.schema = schema
        self.conn = _connect()
        if image is not None:
            self.conn.deserialize(image)

    # --- state -------------------------------------------------------------------------
    def restore(self, image: bytes) -> None:
        """Replace the whole state by ``image`` (from ``build_image`` or ``snapshot``).

        The state goes into a *new* connection (about 20 µs): SQLite 3.40's ``deserialize``
        frees the schema that statements in Python's statement cache still point to, so
        reusing one connection across a restore reads freed memory. ``conn`` changes here.
        """
        self.conn.close()
        self.conn = _connect()
        self.conn.deserialize(image)

    def snapshot(self) -> bytes:
        """Serialize the current state; ``restore`` brings it back (in this or another EpisodeDB)."""
        return self.conn.serialize()

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def savepoint(self, name: str = "tau_call") -> Iterator[None]:
        """Run a block atomically: any exception rolls every change of the block back."""
        self.conn.execute(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException:
            self.conn.execute(f"ROLLBACK TO {name}")
            self.conn.execute(f"RELEASE {name}")
            raise
        self.conn.execute(f"RELEASE {name}")

    # --- reading -----------------------------------------------------------------------
    def rows(self, table: str) -> list[tuple[Any, ...]]:
        info = self.schema.table(table)
        return self.conn.execute(f"SELECT * FROM {_q(table)} ORDER BY {info.order_by}").fetchall()

    def dirty_tables(self) -> set[str]:
        return {r[0] for r in self.conn.execute(f"SELECT name FROM {DIRTY_TABLE}")}

    def table_digest(self, table: str) -> str:
        return hash_rows(self.rows(table))

    def table_digests(self, tables: Sequence[str] | None = None) -> dict[str, str]:
        return {t: self.table_digest(t) for t in (self.schema.tables if tables is None else tables)}

    def digest(self) -> str:
        """Canonical digest of the whole state."""
        return combine_digests(self.table_digests())

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        """All rows as ``{table: [row dict]}`` in primary-key order."""
        out = {}
        for t, info in self.schema.tables.items():
            out[t] = [dict(zip(info.columns, r)) for r in self.rows(t)]
        return out


def _same_row(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Equal value by value and type by type (1 and 1.0 differ, as in the digest)."""
    return len(a) == len(b) and all(type(x) is type(y) and x == y for x, y in zip(a, b))


def diff_rows(
    info: TableInfo, actual: list[tuple[Any, ...]], expected: list[tuple[Any, ...]], limit: int = 20
) -> dict[str, Any]:
    """A readable diff of one table: rows missing, unexpected, and fields that differ."""
    key_idx = [info.columns.index(c) for c in info.primary_key] if info.primary_key else list(range(len(info.columns)))

    def key(r: tuple[Any, ...]) -> str:
        k = tuple(r[i] for i in key_idx)
        return str(k[0]) if len(k) == 1 else "|".join(map(str, k))

    a = {key(r): r for r in actual}
    e = {key(r): r for r in expected}
    out: dict[str, Any] = {}
    missing = [dict(zip(info.columns, e[k])) for k in e if k not in a]
    extra = [dict(zip(info.columns, a[k])) for k in a if k not in e]
    changed = {}
    for k in e:
        if k in a and not _same_row(a[k], e[k]):
            fields = {}
            for c, av, ev in zip(info.columns, a[k], e[k]):
                if av != ev or type(av) is not type(ev):
                    fields[c] = {"expected": ev, "actual": av}
            changed[k] = fields
    if missing:
        out["missing_rows"] = missing[:limit]
    if extra:
        out["unexpected_rows"] = extra[:limit]
    if changed:
        out["changed_rows"] = dict(list(changed.items())[:limit])
    return out
