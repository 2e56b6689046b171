"""Tracing a reference argument to where its derivation says it comes from.

The derivation kinds are described in :mod:`tau_env.synthesis.records`; :class:`Tracer` checks one
against the task's scenario, its initial database (s0), the replay's outputs and the entity graph,
and says why it fails ('' when the value follows). The verifier (:mod:`tau_env.synthesis.verify`)
reports the failures as ``untraceable_argument`` problems.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from tau_env import Domain, Task
from tau_env.tools import ArgumentError


def value_texts(value: Any) -> list[str]:
    """How a value may be written in text: itself, and for an integer also as money from cents."""
    if isinstance(value, bool):
        return [str(value).lower()]
    texts = [str(value)]
    if isinstance(value, int):
        texts.append(f"{value / 100:.2f}")
        texts.append(f"{value / 100:,.2f}")
        if value % 100 == 0:
            texts.append(f"${value // 100:,}")
            texts.append(f"${value // 100}")
    elif isinstance(value, float) and value.is_integer():
        texts.append(str(int(value)))
    return list(dict.fromkeys(texts))


def _norm(text: str) -> str:
    return " ".join(str(text).lower().split())


def contains_value(text: str, value: Any) -> bool:
    """Whether ``text`` writes ``value`` (case- and space-insensitive; cents may be written as money)."""
    hay = _norm(text)
    for v in value_texts(value):
        needle = _norm(v)
        if not needle:
            continue
        before = r"(?<![0-9a-z])" if needle[0].isalnum() else ""
        after = r"(?![0-9a-z])" if needle[-1].isalnum() else ""
        if re.search(before + re.escape(needle) + after, hay):
            return True
    return False


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=0, abs_tol=1e-9)
    return a == b or _norm(str(a)) == _norm(str(b))


def initial_rows(domain: Domain, task: Task) -> dict[str, list[dict[str, Any]]]:
    """The task's initial database as ``{table: [row]}``; a row that keeps its record as JSON text in a
    ``_data`` column (tau3-banking's layout) also shows the record's fields as columns.
    """
    db = domain.start_db(task)
    try:
        dump = db.dump()
    finally:
        db.close()
    for rows in dump.values():
        for r in rows:
            data = r.get("_data")
            if isinstance(data, str) and data.startswith("{"):
                try:
                    fields = json.loads(data)
                except ValueError:
                    continue
                if isinstance(fields, dict):
                    r.update({k: v for k, v in fields.items() if k not in r})
    return dump


def _computed(got: Any, value: Any) -> bool:
    """``value`` is what a computation gave: equal, or an integer rounding (down, up, nearest) of it."""
    if _same(got, value):
        return True
    if isinstance(got, float) and isinstance(value, int) and not isinstance(value, bool) and math.isfinite(got):
        return value in {math.floor(got), math.ceil(got), round(got)}
    return False


class Tracer:
    """Checks derivations against the task, the domain's s0, its outputs and the entity graph."""

    def __init__(self, task: Task, domain: Domain, entity_graph: Any):
        self.task = task
        self.domain = domain
        self._graph = entity_graph
        self._s0: dict[str, list[dict[str, Any]]] | None = None
        self.outputs: list[str] = []

    @property
    def graph(self) -> Any:
        if self._graph is None:
            self._graph = entity_graph_of(self.domain)
        return self._graph

    @property
    def s0(self) -> dict[str, list[dict[str, Any]]]:
        if self._s0 is None:
            self._s0 = initial_rows(self.domain, self.task)
        return self._s0

    def trace(self, i: int, tool: str, arg: str, value: Any, d: dict[str, Any], *, replayed: bool) -> str:
        """Why ``value`` does not follow from ``d`` ('' when it does). ``output`` derivations are only
        checked once ``replayed`` (``self.outputs`` filled), the others only before.
        """
        kind = d.get("kind")
        if kind == "output":
            return self._output(i, value, d) if replayed else ""
        if kind == "rule":
            return self._rule(i, tool, arg, value, d, replayed=replayed)
        if kind == "json":
            return self._json(i, value, d, replayed=replayed)
        if replayed:
            return ""
        if kind == "fact":
            return self._fact(value, d)
        if kind == "db":
            return self._db(value, d)
        if kind == "constant":
            got, why = self.constant_value(d)
            if why:
                return why
            return "" if _computed(got, value) else f"the constants give {got!r}, not {value!r}."
        if kind in ("literal", "enum"):
            return self._literal(tool, arg, value, enum=kind == "enum")
        return f"unknown derivation kind {kind!r} (expected fact, db, output, constant, rule, literal, enum or json)."

    def _json(self, i: int, value: Any, d: dict[str, Any], *, replayed: bool) -> str:
        """``{"kind": "json", "fields": {name: derivation}}``: a JSON object argument (a dispatcher's
        ``arguments``) whose every field is traced, as an argument of the tool the action names.
        """
        fields = d.get("fields")
        if not isinstance(fields, dict):
            return "its fields must be an object {field: derivation}."
        obj = value
        if isinstance(value, str):
            try:
                obj = json.loads(value)
            except ValueError:
                return "the value is not JSON text."
        if not isinstance(obj, dict):
            return "the value is not a JSON object."
        action = self.task.actions[i]
        inner = next(
            (
                v
                for k, v in action.arguments.items()
                if (k == "tool_name" or k.endswith("_tool_name")) and isinstance(v, str)
            ),
            action.name,
        )
        for key, v in obj.items():
            fd = fields.get(key)
            if not isinstance(fd, dict) or "kind" not in fd:
                return "" if replayed else f"its field {key!r} has no derivation."
            why = self.trace(i, inner, key, v, fd, replayed=replayed)
            if why:
                return f"field {key!r}: {why}"
        return ""

    def _fact(self, value: Any, d: dict[str, Any]) -> str:
        sc = self.task.scenario
        key = d.get("key")
        if key in sc.facts and (contains_value(sc.facts[key], value) or _same(sc.facts[key], value)):
            return ""
        if any(contains_value(r, value) for r in sc.requests):
            return ""
        where = f"scenario.facts[{key!r}] = {sc.facts[key]!r}" if key in sc.facts else f"no scenario fact {key!r}"
        return f"{where}, and no request says it."

    def cell(self, d: dict[str, Any]) -> tuple[Any, str]:
        """The initial database's cell a ``db`` derivation names, or (None, why not)."""
        table, key, column = d.get("table"), d.get("key"), d.get("column")
        rows = self.s0.get(table) if isinstance(table, str) else None
        if rows is None:
            return None, f"no table {table!r} in the database."
        if not isinstance(key, dict) or not key:
            return None, "its key must be an object {column: value}."
        match = [r for r in rows if all(c in r and _same(r[c], v) for c, v in key.items())]
        if len(match) != 1:
            return None, f"{len(match)} rows of {table} match {key} in the initial database (expected exactly one)."
        if column not in match[0]:
            return None, f"table {table} has no column {column!r}."
        return match[0][column], ""

    def _db(self, value: Any, d: dict[str, Any]) -> str:
        cell, why = self.cell(d)
        if why:
            return why
        return (
            ""
            if _same(cell, value)
            else f"{d['table']}.{d['column']} of {d['key']} is {cell!r} in the initial database."
        )

    def _output(self, i: int, value: Any, d: dict[str, Any]) -> str:
        j = d.get("action")
        if not isinstance(j, int) or isinstance(j, bool) or not 0 <= j < i:
            return f"its action {j!r} must be the index of an earlier reference action (0..{i - 1})."
        return "" if contains_value(self.outputs[j], value) else f"the output of action {j} does not contain it."

    def constant_value(self, d: dict[str, Any]) -> tuple[Any, str]:
        """The value a ``constant`` derivation computes, or (None, why not)."""
        ids, op = d.get("ids"), d.get("op", "value")
        if not isinstance(ids, list) or not ids:
            return None, "its ids must be a non-empty list of entity-graph constant ids."
        values = []
        for cid in ids:
            c, why = self._constant(cid)
            if why:
                return None, why
            values.append(c.value)
        if op == "value":
            if len(values) != 1:
                return None, f"op 'value' takes one constant, got {len(values)}."
            return values[0], ""
        if op == "sum":
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                return None, f"op 'sum' needs numeric constants, got {values!r}."
            return sum(values), ""
        if op == "percent_of":
            base_d = d.get("inputs")
            if isinstance(base_d, list) and len(base_d) == 1:
                base_d = base_d[0]
            if not isinstance(base_d, dict):
                return None, "op 'percent_of' needs 'inputs': the base's derivation."
            base, why = self.resolve(base_d)
            if why:
                return None, why
            if not all(isinstance(v, (int, float)) for v in [*values, base]):
                return None, f"op 'percent_of' needs numbers, got {values!r} of {base!r}."
            exact = math.prod(values) * base / 100
            return exact, ""
        return None, f"unknown op {op!r} (expected value, sum or percent_of)."

    def resolve(self, d: dict[str, Any]) -> tuple[Any, str]:
        """The value a derivation names outright (db, constant, fact as a number); (None, why) if none."""
        kind = d.get("kind")
        if kind == "constant":
            return self.constant_value(d)
        if kind == "db":
            return self.cell(d)
        if kind == "fact":
            text = self.task.scenario.facts.get(str(d.get("key")), "")
            num = re.sub(r"[$,\s]", "", text)
            try:
                return float(num), ""
            except ValueError:
                return None, f"the base fact {d.get('key')!r} = {text!r} is not a number."
        return None, f"a base of kind {kind!r} has no value to compute with (use db, constant or fact)."

    def _constant(self, cid: Any) -> tuple[Any, str]:
        graph = self.graph
        if graph is None:
            return None, "no entity graph to look the constant up in."
        try:
            return graph.by_id(cid), ""
        except (KeyError, TypeError):
            return None, f"no entity-graph constant {cid!r}."

    def _rule(self, i: int, tool: str, arg: str, value: Any, d: dict[str, Any], *, replayed: bool) -> str:
        ids = d.get("ids")
        if not isinstance(ids, list) or not ids:
            return "" if replayed else "its ids must be a non-empty list of entity-graph constant ids."
        for cid in [] if replayed else ids:
            _, why = self._constant(cid)
            if why:
                return why
        inner = d.get("value")
        if not isinstance(inner, dict) or "kind" not in inner:
            return (
                "" if replayed else "its value must be a derivation ({'kind': 'literal'} for a value the rule names)."
            )
        return self.trace(i, tool, arg, value, inner, replayed=replayed)

    def _literal(self, tool: str, arg: str, value: Any, *, enum: bool) -> str:
        t = self.domain.toolbox("all").tools.get(tool)
        if t is None:
            return f"no tool {tool!r}."
        spec = t.parameters.get("properties", {}).get(arg)
        if spec is None:
            return f"tool {tool!r} takes no argument {arg!r}."
        if "enum" in spec:
            return "" if value in spec["enum"] else f"{value!r} is not one of {spec['enum']}."
        if enum:
            return f"{tool}.{arg} has no enum to be a member of."
        if arg == "tool_name" or arg.endswith("_tool_name"):
            if not any(str(value) in doc.text for doc in self.domain.documents):
                return f"no document names the tool {value!r}."
        elif arg.endswith("_id") or arg == "id":
            return "a record id comes from s0, an earlier output or the user (db, output, fact), not a literal."
        validator = t.validators.get(arg)
        if validator is not None:
            try:
                validator(arg, value)
            except ArgumentError as e:
                return f"not a legal value: {e}"
        return ""


_GRAPHS: dict[int, tuple[Domain, Any]] = {}


def entity_graph_of(domain: Domain) -> Any:
    """The domain's entity graph without a model (built once per domain object)."""
    hit = _GRAPHS.get(id(domain))
    if hit is not None and hit[0] is domain:
        return hit[1]
    try:
        from .entity_graph import build_entity_graph
    except ImportError:
        return None
    graph = build_entity_graph(domain)
    _GRAPHS[id(domain)] = (domain, graph)
    return graph
