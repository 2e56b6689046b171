"""The database side of the generic templates: rows of any domain, its customers, and clones of them.

A domain's seed comes in one of two layouts: tau_env's (``Domain.seed`` ``{table: [row]}`` with the
primary keys in ``Domain.schema``; a task's patch is ``Task.initial_state``) or a benchmark's
(a ``db_json`` ``{table: {"data": {id: row}}}``, as tau3-banking's; a task's patch is
``metadata["agent_data"]`` in the same layout, deep-merged). :class:`DBView` reads both as
``{table: {row_id: row}}`` and writes a patch in the domain's own layout.

New customers are *clones*: a seed customer's rows (the customer, the rows that name it, and the
rows that name those) copied under fresh ids, with a new identity (name, email, phone, birth date,
address). The donor is only a shape: no id, name or contact detail of it survives, so a synthesized
task never shares a customer or a record with the domain's own tasks.
"""

from __future__ import annotations

import copy
import hashlib
import random
import re
from dataclasses import dataclass, field
from typing import Any

#: Columns that hold a person's identity, by what they are (matched on the column name's words).
IDENTITY_KINDS = {
    "name": ("name", "full_name", "customer_name"),
    "email": ("email",),
    "phone": ("phone", "phone_number"),
    "dob": ("date_of_birth", "dob", "birth_date"),
    "address": ("address", "mailing_address"),
}

FIRST = (
    "Amara", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Keiko", "Lars",
    "Maya", "Nikhil", "Olga", "Pablo", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wen", "Ximena", "Yusuf",
    "Zoe", "Anders", "Bianca", "Caleb", "Dalia", "Emil", "Fatima", "Gideon", "Hana", "Ivo", "Jada", "Kofi",
    "Lena", "Mateo", "Noor", "Oren", "Priya", "Rafael", "Sana", "Tomas", "Uma", "Viktor", "Willa", "Yara",
)  # fmt: skip
LAST = (
    "Abara", "Brennan", "Castellano", "Dufresne", "Ekwueme", "Fitzgerald", "Galloway", "Haddad", "Ilves",
    "Jorgensen", "Kowalczyk", "Lindqvist", "Moreau", "Nakagawa", "Okafor", "Petrakis", "Quintero", "Rasmussen",
    "Sorensen", "Takahashi", "Uribe", "Valdivia", "Whitaker", "Xu", "Yilmaz", "Zielinski", "Achterberg",
    "Bergstrom", "Carvalho", "Delacroix", "Esposito", "Falkner", "Gustafsson", "Halvorsen", "Iqbal", "Janssen",
)  # fmt: skip
STREETS = (
    "Alder Court", "Birchwood Lane", "Cedar Ridge Road", "Dogwood Way", "Elm Hollow Drive", "Fernbank Street",
    "Granite Pass", "Harbor View Terrace", "Ironwood Place", "Juniper Bend", "Kestrel Avenue", "Linden Row",
)  # fmt: skip
CITIES = (
    ("Boise", "ID", "83702"), ("Madison", "WI", "53703"), ("Eugene", "OR", "97401"), ("Tucson", "AZ", "85701"),
    ("Raleigh", "NC", "27601"), ("Omaha", "NE", "68102"), ("Spokane", "WA", "99201"), ("Savannah", "GA", "31401"),
)  # fmt: skip


def words(name: str) -> set[str]:
    """The lower-case words of a snake_case / camelCase name (``"card_last_4_digits"`` -> {card, last, 4, digits})."""
    name = re.sub(r"([a-z])([A-Z])", r"\1_\2", name)
    return {w for w in re.split(r"[^a-z0-9]+", name.lower()) if w}


def identity_kind(column: str) -> str | None:
    """Which identity a column holds (``name``, ``email``, ``phone``, ``dob``, ``address``), or None."""
    low = column.lower()
    for kind, names in IDENTITY_KINDS.items():
        if low in names:
            return kind
    w = words(column)
    if "email" in w:
        return "email"
    if "phone" in w and not ({"last4", "last"} & w):
        return "phone"
    if "birth" in w or "dob" in w:
        return "dob"
    if "address" in w:
        return "address"
    return None


def short_hash(*parts: Any, n: int = 10) -> str:
    """A deterministic hex digest of ``parts`` (stable across processes, unlike ``hash``)."""
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:n]


@dataclass
class DBView:
    """A domain's seed as ``{table: {row_id: row}}``, with each table's id column and its customers.

    Attributes:
        tables: The seed rows by table and id.
        id_column: Each table's id column (None when no column holds the row id).
        benchmark_layout: True for a ``db_json`` domain (patches go to ``metadata["agent_data"]``).
        customer_table: The table of people (the one with the most identity columns).
        customer_key: Its id column.
    """

    tables: dict[str, dict[str, dict[str, Any]]]
    id_column: dict[str, str | None]
    benchmark_layout: bool
    customer_table: str | None = None
    customer_key: str | None = None
    _owned: dict[tuple[str, int], dict[str, dict[str, dict[str, Any]]]] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, domain: Any) -> DBView:
        db_json = getattr(domain, "db_json", None)
        tables: dict[str, dict[str, dict[str, Any]]] = {}
        id_column: dict[str, str | None] = {}
        if isinstance(db_json, dict) and db_json:
            for t, table in db_json.items():
                data = (table or {}).get("data") or {}
                tables[t] = {str(k): dict(v) for k, v in data.items() if isinstance(v, dict)}
                id_column[t] = _id_column_of(tables[t])
            view = cls(tables, id_column, True)
        else:
            for t, info in domain.schema.tables.items():
                pk = info.primary_key[0] if len(info.primary_key) == 1 else None
                rows = domain.seed.get(t) or []
                tables[t] = {str(r[pk]) if pk else str(i): dict(r) for i, r in enumerate(rows)}
                id_column[t] = pk
            view = cls(tables, id_column, False)
        view._find_customers()
        return view

    def _find_customers(self) -> None:
        best, score = None, 0
        for t, rows in self.tables.items():
            if not rows or self.id_column.get(t) is None:
                continue
            cols = next(iter(rows.values())).keys()
            kinds = {identity_kind(c) for c in cols} - {None}
            if len(kinds) > score:
                best, score = t, len(kinds)
        if best is not None and score >= 2:
            self.customer_table, self.customer_key = best, self.id_column[best]

    def customers(self) -> list[str]:
        """The seed customers' ids, in seed order."""
        return list(self.tables.get(self.customer_table or "", {}))

    def columns(self, table: str) -> list[str]:
        cols: dict[str, None] = {}
        for row in self.tables.get(table, {}).values():
            cols.update(dict.fromkeys(row))
        return list(cols)

    def distinct(self, table: str, column: str, limit: int = 40) -> list[Any]:
        """The distinct scalar values of a column, in seed order (at most ``limit``)."""
        seen: dict[Any, None] = {}
        for row in self.tables.get(table, {}).values():
            v = row.get(column)
            if isinstance(v, (str, int, float)) and not isinstance(v, bool):
                seen.setdefault(v, None)
                if len(seen) >= limit:
                    break
        return list(seen)

    def owned_rows(self, customer_id: str, depth: int = 2) -> dict[str, dict[str, dict[str, Any]]]:
        """The customer's row and the rows that name it or its rows (``depth`` hops), by table and id."""
        cached = self._owned.get((customer_id, depth))
        if cached is not None:
            return cached
        out: dict[str, dict[str, dict[str, Any]]] = {}
        self._owned[(customer_id, depth)] = out
        ct = self.customer_table
        if ct is None or customer_id not in self.tables[ct]:
            return out
        out[ct] = {customer_id: self.tables[ct][customer_id]}
        frontier = {customer_id}
        known = {customer_id}
        for _ in range(depth):
            found: set[str] = set()
            for t, rows in self.tables.items():
                for rid, row in rows.items():
                    if rid in out.get(t, {}):
                        continue
                    if any(isinstance(v, str) and v in frontier for v in row.values()):
                        out.setdefault(t, {})[rid] = row
                        if rid not in known:
                            found.add(rid)
            known |= found
            frontier = found
            if not frontier:
                break
        return out

    def patch(self, rows: dict[str, dict[str, dict[str, Any]]]) -> tuple[dict[str, Any], dict[str, Any]]:
        """``rows`` as the domain's patch: ``(initial_state, metadata)``."""
        if self.benchmark_layout:
            return {}, {"agent_data": {t: {"data": copy.deepcopy(r)} for t, r in rows.items() if r}}
        return {t: [copy.deepcopy(r) for r in rs.values()] for t, rs in rows.items() if rs}, {}


def _id_column_of(rows: dict[str, dict[str, Any]]) -> str | None:
    """The column whose value is each row's id (None if no column is)."""
    if not rows:
        return None
    first_id, first = next(iter(rows.items()))
    for col, v in first.items():
        if v == first_id and all(r.get(col) == rid for rid, r in list(rows.items())[:20]):
            return col
    return None


@dataclass
class Identity:
    """A new person's identity facts."""

    name: str
    email: str
    phone: str
    dob: str
    address: str

    @classmethod
    def make(cls, rng: random.Random, tag: str) -> Identity:
        first, last = rng.choice(FIRST), rng.choice(LAST)
        city, state, zipc = rng.choice(CITIES)
        street = f"{rng.randint(100, 9899)} {rng.choice(STREETS)}"
        return cls(
            name=f"{first} {last}",
            email=f"{first.lower()}.{last.lower()}.{tag[:4]}@example.net",
            phone=f"{rng.randint(201, 989)}-555-{rng.randint(1000, 9999):04d}",
            dob=f"{rng.randint(1, 12):02d}/{rng.randint(1, 28):02d}/{rng.randint(1950, 2001)}",
            address=f"{street}, {city}, {state} {zipc}",
        )

    def value(self, kind: str, like: Any) -> Any:
        """This identity's ``kind`` in the shape of the donor's value ``like`` (upper case, ISO date...)."""
        v = getattr(self, kind)
        if isinstance(like, str):
            if kind == "dob" and re.fullmatch(r"\d{4}-\d{2}-\d{2}", like):
                m, d, y = v.split("/")
                return f"{y}-{m}-{d}"
            if kind == "phone" and re.fullmatch(r"\+?\d+", like):
                return re.sub(r"\D", "", v)
            if like.isupper() and kind == "name":
                return v.upper()
        return v


def new_id(old: str, tag: str) -> str:
    """A fresh id shaped like ``old``: its alphabetic prefix kept (``chk_``, ``C-``), then a digest."""
    m = re.match(r"^([A-Za-z]+[_-])", old)
    prefix = m.group(1) if m else ""
    digest = short_hash(tag, old)
    if not prefix and old.isdigit():
        return str(int(digest[:8], 16) % 10**9).rjust(max(len(old), 6), "7")
    return f"{prefix}{digest}"


def clone_customer(
    view: DBView, donor: str, tag: str, rng: random.Random
) -> tuple[str, Identity, dict[str, dict[str, dict[str, Any]]]]:
    """Copy ``donor``'s rows under fresh ids (derived from ``tag``) with a new identity.

    Returns:
        The new customer's id, its identity, and the new rows ``{table: {id: row}}``.
    """
    rows = view.owned_rows(donor)
    ident = Identity.make(rng, short_hash(tag, "ident"))
    mapping: dict[str, str] = {}
    for rs in rows.values():
        for rid in rs:
            mapping.setdefault(rid, new_id(rid, tag))
    donor_row = rows[view.customer_table][donor]
    swaps: dict[str, Any] = {}
    for col, v in donor_row.items():
        kind = identity_kind(col)
        if kind and isinstance(v, str) and v:
            swaps[v] = ident.value(kind, v)
            if kind == "name":
                swaps[v.upper()] = ident.name.upper()
                swaps[v.lower()] = ident.name.lower()

    def remap(v: Any) -> Any:
        if isinstance(v, str):
            if v in mapping:
                return mapping[v]
            if v in swaps:
                return swaps[v]
            for old, new in mapping.items():  # ids inside other ids (txn_<account>_...) keep no trace
                if len(old) >= 6 and old in v:
                    v = v.replace(old, new)
            return v
        if isinstance(v, list):
            return [remap(x) for x in v]
        if isinstance(v, dict):
            return {k: remap(x) for k, x in v.items()}
        return v

    fresh: dict[tuple[str, str], str] = {}  # (kind, donor's digits) -> the clone's

    def renumber(col: str, v: Any) -> Any:
        kind = secret_kind(col)
        if kind is None or not isinstance(v, str) or not v.isdigit():
            return v
        if (kind, v) not in fresh:
            new = v
            while new == v or new in fresh.values():
                new = "".join(str(rng.randint(0, 9)) for _ in range(len(v)))
            fresh[(kind, v)] = new
        return fresh[(kind, v)]

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for t, rs in rows.items():
        for rid, row in rs.items():
            out.setdefault(t, {})[mapping[rid]] = {c: renumber(c, v) for c, v in remap(row).items()}
    return mapping[donor], ident, out


def secret_kind(column: str) -> str | None:
    """Which card secret a column holds (``last4``, ``cvv``, ``number``, ``pin``), or None: a clone's
    cards get fresh digits, so no two customers share a card's last four digits or its CVV.
    """
    w = words(column)
    if w & {"cvv", "cvc", "cvv2"}:
        return "cvv"
    if "last4" in w or ({"last", "4"} <= w) or ({"last", "four"} <= w):
        return "last4"
    if "pin" in w:
        return "pin"
    if {"card", "number"} <= w:
        return "number"
    return None
