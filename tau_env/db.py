"""Per-episode SQLite state.

A domain's initial state (schema + seed rows + a task's initial state) is built once into an
*image* (``sqlite3.Connection.serialize()``); episodes start from it in microseconds.

Digests are kept up to date *incrementally*: triggers on every table add or subtract a
128-bit hash of each inserted, updated or deleted row into ``_tau_digest`` (rows' hashes summed
modulo 2**128, so row order does not matter). A table's digest is therefore one lookup, and
grading costs the same whatever the tables' sizes. The triggers run inside the same
transaction as the write, so a rolled-back call rolls its digest change back too. A row's
hash is SHA-256 of ``repr`` of its values, which keeps ``1`` and ``1.0`` apart and is exact for
floats: two states have equal digests iff their rows are equal value by value and type by type
(up to a 2**-128 collision chance).
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tau_env.error import DomainError, did_you_mean
from tau_env.messages import clip

DIGEST_TABLE = "_tau_digest"
_MOD = 1 << 128
DELETE_KEY = "_delete"

Patch = Mapping[str, Sequence[Mapping[str, Any]]]


@dataclass(frozen=True)
class TableInfo:
    name: str
    columns: tuple[str, ...]
    primary_key: tuple[str, ...]

    @property
    def state_columns(self) -> tuple[str, ...]:
        """Columns that make up the state; a column named ``_...`` is bookkeeping outside the digest
        (e.g. a display-order copy of a row).
        """
        return tuple(c for c in self.columns if not c.startswith("_"))

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
        """The tables ``ddl`` creates; raises DomainError naming the statement (see :func:`run_ddl`)."""
        conn = sqlite3.connect(":memory:", isolation_level=None)
        run_ddl(conn, ddl)
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


#: What schema DDL may do (``sqlite3`` authorizer action codes): create, alter and drop tables,
#: indexes, views and triggers, and read and write rows, all in the main database; never ATTACH
#: (nor ``VACUUM INTO``, which attaches), DETACH, temporary or virtual tables, transactions, or a
#: PRAGMA outside ``DDL_PRAGMAS``. So a domain folder's schema.sql cannot write outside the folder.
_DDL_ACTIONS = {
    getattr(sqlite3, name)
    for name in (
        "SQLITE_CREATE_INDEX SQLITE_CREATE_TABLE SQLITE_CREATE_TRIGGER SQLITE_CREATE_VIEW SQLITE_DELETE "
        "SQLITE_DROP_INDEX SQLITE_DROP_TABLE SQLITE_DROP_TRIGGER SQLITE_DROP_VIEW SQLITE_INSERT SQLITE_READ "
        "SQLITE_SELECT SQLITE_UPDATE SQLITE_ALTER_TABLE SQLITE_REINDEX SQLITE_ANALYZE SQLITE_FUNCTION "
        "SQLITE_RECURSIVE"
    ).split()
}
#: The PRAGMAs schema DDL may run: read-only introspection.
DDL_PRAGMAS = frozenset({"table_info", "table_xinfo", "index_list", "index_info", "foreign_key_list"})
#: SQLite virtual-machine steps schema DDL may take (a recursive INSERT would otherwise run forever).
DDL_MAX_STEPS = 10_000_000
_ACTION_NAMES = {v: k.removeprefix("SQLITE_") for k, v in vars(sqlite3).items() if k.startswith("SQLITE_")}


def ddl_statements(ddl: str) -> list[tuple[int, str]]:
    """``ddl`` split into statements (a trigger's body stays whole), each with its first line's number."""
    out, buf, line = [], "", 1
    for part in re.split(r"(?<=;)", ddl):
        buf += part
        if sqlite3.complete_statement(buf):
            stripped = buf.lstrip()
            out.append((line + buf[: len(buf) - len(stripped)].count("\n"), stripped))
            line += buf.count("\n")
            buf = ""
    if buf.strip():
        stripped = buf.lstrip()
        out.append((line + buf[: len(buf) - len(stripped)].count("\n"), stripped))
    return out


def run_ddl(conn: sqlite3.Connection, ddl: str) -> None:
    """Run schema DDL statement by statement under an authorizer (``_DDL_ACTIONS``, ``DDL_PRAGMAS``)
    and a step budget (``DDL_MAX_STEPS``). Any problem raises DomainError naming the statement's
    line and text and what went wrong: invalid SQL, or an action schema DDL may not take.
    """
    if "\x00" in ddl:
        line = ddl.count("\n", 0, ddl.index("\x00")) + 1
        raise DomainError(f"line {line}: a NUL character; a schema is SQL text.")
    denied: list[str] = []

    def authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, _source: str | None) -> int:
        if db not in (None, "main"):
            why = f"{_ACTION_NAMES.get(action, action)} in database {db!r} (only main is allowed)"
        elif action == sqlite3.SQLITE_PRAGMA and arg1 in DDL_PRAGMAS:
            return sqlite3.SQLITE_OK
        elif action in _DDL_ACTIONS:
            return sqlite3.SQLITE_OK
        elif action == sqlite3.SQLITE_PRAGMA:
            why = f"PRAGMA {arg1} (only {sorted(DDL_PRAGMAS)})"
        else:
            why = " ".join(str(a) for a in (_ACTION_NAMES.get(action, action), arg1) if a)
        denied.append(why)
        return sqlite3.SQLITE_DENY

    steps = [0]

    def budget() -> int:
        steps[0] += 1
        return steps[0] * 1_000 > DDL_MAX_STEPS

    conn.set_authorizer(authorize)
    conn.set_progress_handler(budget, 1_000)
    try:
        for line, stmt in ddl_statements(ddl):
            denied.clear()
            try:
                conn.execute(stmt)
            except sqlite3.Error as e:
                if denied:
                    problem = (
                        f"not allowed in a schema: {denied[0]}; "
                        "a schema may only create tables, indexes, views and triggers"
                    )
                elif steps[0] * 1_000 > DDL_MAX_STEPS:
                    problem = f"stopped after {DDL_MAX_STEPS:,} SQLite steps (a schema should only create tables)"
                else:
                    problem = f"not valid SQL ({e})"
                raise DomainError(f"line {line}: {clip(' '.join(stmt.split()), 120)!r}: {problem}.") from e
    finally:
        conn.set_authorizer(None)
        conn.set_progress_handler(None, 0)


def row_hash(*values: Any) -> int:
    """128-bit hash of one row (a tuple of SQLite values)."""
    digest = hashlib.sha256(repr(values).encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:16], "big")


def _tau_add(acc: str, sign: int, *values: Any) -> str:
    return format((int(acc, 16) + sign * row_hash(*values)) % _MOD, "032x")


def _tau_update(acc: str, *old_and_new: Any) -> str:
    half = len(old_and_new) // 2
    delta = row_hash(*old_and_new[half:]) - row_hash(*old_and_new[:half])
    return format((int(acc, 16) + delta) % _MOD, "032x")


def _connect() -> sqlite3.Connection:
    # isolation_level=None: no implicit transactions; we open savepoints ourselves.
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.create_function("tau_add", -1, _tau_add, deterministic=True)
    conn.create_function("tau_update", -1, _tau_update, deterministic=True)
    # REPLACE deletes the old row; only with recursive triggers does that fire the delete trigger.
    conn.execute("PRAGMA recursive_triggers = ON")
    return conn


def _full_digest(conn: sqlite3.Connection, info: TableInfo) -> str:
    acc = 0
    for row in conn.execute(f"SELECT {', '.join(map(_q, info.state_columns))} FROM {_q(info.name)}"):
        acc = (acc + row_hash(*row)) % _MOD
    return format(acc, "032x")


def _install_digest_triggers(conn: sqlite3.Connection, schema: Schema) -> None:
    conn.execute(f"CREATE TABLE {DIGEST_TABLE} (name TEXT PRIMARY KEY, acc TEXT NOT NULL) WITHOUT ROWID")
    for t, info in schema.tables.items():
        conn.execute(f"INSERT INTO {DIGEST_TABLE} VALUES (?, ?)", (t, _full_digest(conn, info)))
        lit = "'" + t.replace("'", "''") + "'"
        cols = info.state_columns
        new = ", ".join(f"NEW.{_q(c)}" for c in cols)
        old = ", ".join(f"OLD.{_q(c)}" for c in cols)
        upd = f"UPDATE {DIGEST_TABLE} SET acc = {{}} WHERE name = {lit}"
        for ev, expr in (
            ("INSERT", f"tau_add(acc, 1, {new})"),
            ("DELETE", f"tau_add(acc, -1, {old})"),
            ("UPDATE", f"tau_update(acc, {old}, {new})"),
        ):
            conn.execute(
                f"CREATE TRIGGER {_q(f'_tau_{ev.lower()}_{t}')} AFTER {ev} ON {_q(t)} BEGIN {upd.format(expr)}; END"
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


def build_image(
    schema: Schema, seed: Patch, *patches: Patch | None, init: Callable[[sqlite3.Connection], None] | None = None
) -> bytes:
    """Build the serialized initial state: schema, seed rows, each patch in order, then ``init``."""
    conn = _connect()
    run_ddl(conn, schema.ddl)
    apply_patch(conn, schema, seed)
    for p in patches:
        if p:
            apply_patch(conn, schema, p)
    if init is not None:
        init(conn)
    # Digests of the loaded rows, then the triggers that keep them up to date.
    _install_digest_triggers(conn, schema)
    conn.execute("VACUUM")
    image = conn.serialize()
    conn.close()
    return image


class savepoint:  # lower case: used like a function, ``with savepoint(conn):``
    """Run a block in an SQLite savepoint: ``with savepoint(conn, keep=...):``.

    Any exception leaving the block (``KeyboardInterrupt`` included) rolls every change of the
    block back and propagates. A block that ends otherwise (``return`` included) keeps its
    changes if ``keep`` and rolls them back if not (a read that must leave no trace); the block
    may set ``keep`` on the object ``with ... as sp`` gives it (a failure reported as a value
    rather than raised: ``sp.keep = False; return error``). Savepoints nest; the
    connection must be in autocommit mode (``isolation_level=None``, as :func:`_connect` makes
    it), so that a savepoint outside a transaction starts one and ``RELEASE`` commits it.

    A small class rather than a ``@contextmanager`` generator, which costs more: it runs on every
    tool call.

    Args:
        conn: The connection.
        name: The savepoint's name: a fixed SQL identifier from code (never model text).
        keep: Whether a block that ends normally keeps its changes.
    """

    __slots__ = ("conn", "name", "keep", "_begin", "_rollback", "_release")

    def __init__(self, conn: sqlite3.Connection, name: str = "tau_call", *, keep: bool = True):
        self.conn = conn
        self.name = name
        self.keep = keep
        # The default name's statements are constants: formatting them on every tool call, and
        # SQLite's statement cache looking up new strings, cost about 0.2 us a call.
        self._begin, self._rollback, self._release = (
            _TAU_CALL if name == "tau_call" else (f"SAVEPOINT {name}", f"ROLLBACK TO {name}", f"RELEASE {name}")
        )

    def __enter__(self) -> savepoint:
        self.conn.execute(self._begin)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None or not self.keep:
            self.conn.execute(self._rollback)
        self.conn.execute(self._release)


_TAU_CALL = ("SAVEPOINT tau_call", "ROLLBACK TO tau_call", "RELEASE tau_call")


def combine_digests(table_digests: Mapping[str, str]) -> str:
    h = hashlib.sha256()
    for name in sorted(table_digests):
        h.update(f"{name}={table_digests[name]};".encode())
    return h.hexdigest()


class EpisodeDB:
    """One episode's in-memory database.

    ``start(base, init)`` begins an episode: the domain's base image plus the task's initial
    state, inside one transaction. The next ``start`` on the same base just rolls that
    transaction back (a few microseconds, schema and prepared statements kept); another base,
    or a state that was snapshotted or restored, is loaded into a fresh connection.

    A fresh connection must read its schema (the tables and their digest triggers) before its
    first query: about half a millisecond of CPU, paid by every new env, a thousand times at once
    when a harness starts a thousand episodes. ``schema_pending`` says that a connection has not
    yet been asked to read it; :meth:`read_schema` reads it now, so that a caller with idle time
    (the harness, while episodes wait for their models) can take the cost off the first query.
    """

    def __init__(self, schema: Schema, image: bytes | None = None):
        self.schema = schema
        self._conn: sqlite3.Connection | None = None  # opened on first use or by restore()
        self.schema_pending = False  # a new connection that has run no query yet (see read_schema)
        self._base: bytes | None = None  # the image the open transaction started from
        self._closed = False
        if image is not None:
            self._conn = _connect()
            self._conn.deserialize(image)

    @property
    def conn(self) -> sqlite3.Connection:
        """The connection holding the state (a new one after ``restore``)."""
        conn = self._conn
        if conn is None:
            if self._closed:
                raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
            conn = self._conn = _connect()
        return conn

    # --- state -------------------------------------------------------------------------
    def start(self, base: bytes, init: Callable[[sqlite3.Connection], None] | None = None) -> None:
        """Begin an episode on ``base`` with ``init`` (the task's initial state) applied."""
        conn = self._conn
        if self._base is base and conn is not None and conn.in_transaction:
            conn.execute("ROLLBACK")
        else:
            self.restore(base)
            self._base = base
            conn = self._conn
        conn.execute("BEGIN")
        if init is not None:
            init(conn)
            self.schema_pending = False  # the initial state's writes have read it

    def restore(self, image: bytes) -> None:
        """Replace the whole state by ``image`` (from ``build_image`` or ``snapshot``).

        The state goes into a *new* connection (about 20 µs, and the schema to read on first use,
        see the class doc): SQLite 3.40's ``deserialize`` frees the schema that statements in
        Python's statement cache still point to, so reusing one connection across a restore reads
        freed memory. ``conn`` changes here.
        """
        self._drop()
        self._closed = False
        conn = _connect()
        conn.deserialize(image)
        self._conn, self._base = conn, None
        self.schema_pending = True

    def read_schema(self) -> None:
        """Make SQLite read the connection's schema now, if no query has yet (see the class doc)."""
        if self.schema_pending:
            self.schema_pending = False
            self.conn.execute("SELECT 1 FROM sqlite_master LIMIT 0").fetchall()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        self.schema_pending = False
        if conn is not None:
            conn.close()

    def snapshot(self) -> bytes:
        """Serialize the current state; ``restore`` brings it back (in this or another EpisodeDB)."""
        if self.conn.in_transaction:
            # serialize() sees only committed pages: commit the episode so far. The base image is
            # then no longer under the transaction, so the next start() loads it afresh.
            self.conn.execute("COMMIT")
            self._base = None
        return self.conn.serialize()

    def close(self) -> None:
        """Close the connection; ``conn`` then raises ``sqlite3.ProgrammingError`` until a ``restore``."""
        self._drop()
        self._closed = True

    def savepoint(self, name: str = "tau_call", *, keep: bool = True) -> savepoint:
        """Run a block atomically on this episode's connection: ``with db.savepoint():`` (see
        :class:`savepoint`).
        """
        return savepoint(self.conn, name, keep=keep)

    # --- reading -----------------------------------------------------------------------
    def rows(self, table: str) -> list[tuple[Any, ...]]:
        info = self.schema.table(table)
        return self.conn.execute(f"SELECT * FROM {_q(table)} ORDER BY {info.order_by}").fetchall()

    def table_digest(self, table: str) -> str:
        """Digest of one table's rows (kept up to date by triggers)."""
        self.schema.table(table)
        return self.conn.execute(f"SELECT acc FROM {DIGEST_TABLE} WHERE name = ?", (table,)).fetchone()[0]

    def table_digests(self) -> dict[str, str]:
        """Digest of every table."""
        return dict(self.conn.execute(f"SELECT name, acc FROM {DIGEST_TABLE}").fetchall())

    def digest(self) -> str:
        """Canonical digest of the whole state."""
        return combine_digests(self.table_digests())

    def recompute_digests(self) -> dict[str, str]:
        """Digests computed from scratch by reading every row (to check the incremental ones)."""
        return {t: _full_digest(self.conn, info) for t, info in self.schema.tables.items()}

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        """All rows as ``{table: [row dict]}`` in primary-key order."""
        out = {}
        for t, info in self.schema.tables.items():
            out[t] = [dict(zip(info.columns, r)) for r in self.rows(t)]
        return out


def _same_row(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Equal value by value and type by type (1 and 1.0 differ, as in the digest)."""
    return a == b and list(map(type, a)) == list(map(type, b))


def diff_rows(
    info: TableInfo, actual: list[tuple[Any, ...]], expected: list[tuple[Any, ...]], limit: int = 20
) -> dict[str, Any]:
    """A readable diff of one table: rows missing, unexpected, and fields that differ."""
    key_idx = [info.columns.index(c) for c in info.primary_key] if info.primary_key else list(range(len(info.columns)))
    if len(key_idx) == 1:
        i = key_idx[0]

        def key(r: tuple[Any, ...]) -> str:
            return str(r[i])
    else:

        def key(r: tuple[Any, ...]) -> str:
            return "|".join(str(r[j]) for j in key_idx)

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
