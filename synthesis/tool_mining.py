"""Mining the tool graph's edges from a domain's reference tasks (see :mod:`tau_env.synthesis.tool_graph`).

Each task's reference chain is replayed step by step on its own database, recording each call's
output and each write's effect (rows inserted and deleted, cells updated). From that:

- ``unlock`` / ``handover``: ``unlock_tool(tool_name=X)`` / ``hand_over_tool(tool_name=U)`` before X / U;
- ``produces``: an argument of a later write equals an id-like token of an earlier call's output
  (the earliest such call that did not take the value as an argument itself);
- ``requires``: undoing an earlier write's effect just before a later call makes that call fail
  (and the earlier call did not produce one of its arguments);
- ``follow_up``: in every task (at least two) where P runs, Q runs later and requires P or takes
  an argument P produced;
- ``conflict``: probes on the state before a reference write A, with another write tool B re-bound
  to the same task's records: both succeed alone but not in both orders, or the two orders end in
  different states, or B (possible only after A) restores a cell A changed (mutual exclusion);
- constant links: an argument value equal to an entity-graph constant (or the sum of two) of the
  task's required documents.
"""

from __future__ import annotations

import itertools
import json
import re
import sqlite3
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from .tool_graph import Edge, _db_column

#: An id-like token of a tool's output.
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]*[A-Za-z0-9]")
#: Most probes of one (tool, tool) pair without finding a conflict before giving up on it.
MAX_PAIR_PROBES = 12
#: Most re-bindings of one tool's arguments per probe state.
MAX_BINDINGS = 6
#: Most conflict probes in one build.
MAX_PROBES = 1500


@dataclass
class Effect:
    """What one write did: rows inserted (table, key), deleted (table, key, row), cells updated."""

    inserted: list[tuple[str, tuple, tuple]] = field(default_factory=list)
    deleted: list[tuple[str, tuple, tuple]] = field(default_factory=list)
    updated: list[tuple[str, tuple, str, Any, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.inserted or self.deleted or self.updated)


@dataclass
class Call:
    """One call as made (``actual``, ``actual_args``) and as meant: a dispatcher's call
    (``call_discoverable_agent_tool(agent_tool_name=X, arguments=...)``) means X with those
    arguments; an enabler's (``unlock_tool(tool_name=X)``) enables X.

    Attributes:
        name: The tool meant.
        requestor: The seat.
        args: The arguments meant.
        actual: The tool called.
        actual_args: The arguments it was called with.
        mode: ``"call"``, ``"dispatch"``, ``"unlock"`` or ``"handover"``.
    """

    name: str
    requestor: str
    args: dict[str, Any]
    actual: str
    actual_args: dict[str, Any]
    mode: str = "call"

    def with_args(self, args: dict[str, Any]) -> Call:
        """The same call with other meant arguments."""
        if self.mode == "dispatch":
            raw = self.actual_args.get("arguments")
            packed = json.dumps(args) if isinstance(raw, str) or raw is None else args
            return Call(
                self.name, self.requestor, args, self.actual, {**self.actual_args, "arguments": packed}, self.mode
            )
        if self.mode == "call":
            return Call(self.name, self.requestor, args, self.actual, args, self.mode)
        return self


@dataclass
class Step:
    call: Call
    output: str
    error: bool
    effect: Effect | None = None

    @property
    def name(self) -> str:
        return self.call.name

    @property
    def args(self) -> dict[str, Any]:
        return self.call.args

    @property
    def meta(self) -> bool:
        return self.call.mode in ("unlock", "handover")


class _Runner:
    """One task's database and context, and calls with their effects."""

    def __init__(self, domain: Any, task: Any):
        self.domain = domain
        self.box = domain.toolbox("all")
        self.db = domain.start_db(task)
        self.ctx = domain.context(self.db, task, self.box)
        self.schema = domain.schema

    def close(self) -> None:
        self.db.close()

    def _key(self, table: str, row: tuple) -> tuple:
        info = self.schema.tables[table]
        if info.primary_key:
            return tuple(row[info.columns.index(c)] for c in info.primary_key)
        return row

    def _rows(self, tables: list[str]) -> dict[str, dict[tuple, tuple]]:
        return {t: {self._key(t, r): r for r in self.db.rows(t)} for t in tables}

    def call(self, c: Call) -> Any:
        return self.box.call(self.ctx, c.requestor, c.actual, dict(c.actual_args))

    def call_effect(self, c: Call) -> tuple[Any, Effect]:
        """Run a call and return its result and database effect (a write runs twice: once to see
        which tables change, rolled back, then for real).
        """
        tool = self.box.tools.get(c.actual)
        if tool is None or tool.kind != "write":
            return self.call(c), Effect()
        saved = self.ctx.copy_state()
        before = self.db.table_digests()
        with self.db.savepoint("tg_look", keep=False):
            self.call(c)
            after = self.db.table_digests()
        self.ctx.active, self.ctx.state = saved
        changed = [t for t in after if t in self.schema.tables and after[t] != before.get(t)]
        if not changed:
            return self.call(c), Effect()
        old = self._rows(changed)
        res = self.call(c)
        new = self._rows(changed)
        eff = Effect()
        for t in changed:
            cols = self.schema.tables[t].columns
            for k, r in new[t].items():
                if k not in old[t]:
                    eff.inserted.append((t, k, r))
                elif r != old[t][k]:
                    for c, a, b in zip(cols, old[t][k], r):
                        if a != b or type(a) is not type(b):
                            eff.updated.append((t, k, c, a, b))
            eff.deleted.extend((t, k, r) for k, r in old[t].items() if k not in new[t])
        return res, eff

    def _where(self, table: str, key: tuple) -> tuple[str, tuple]:
        info = self.schema.tables[table]
        cols = info.primary_key or info.columns
        return " AND ".join(f'"{c}" IS ?' for c in cols), key

    def undo(self, eff: Effect) -> None:
        """Revert ``eff`` on the current state (cells only where they still hold the new value)."""
        for t, k, _ in eff.inserted:
            where, params = self._where(t, k)
            self.db.conn.execute(f'DELETE FROM "{t}" WHERE {where}', params)
        for t, k, c, a, b in eff.updated:
            where, params = self._where(t, k)
            self.db.conn.execute(f'UPDATE "{t}" SET "{c}" = ? WHERE {where} AND "{c}" IS ?', (a, *params, b))
        for t, _, r in eff.deleted:
            marks = ", ".join("?" * len(r))
            self.db.conn.execute(f'INSERT OR IGNORE INTO "{t}" VALUES ({marks})', r)

    def all_active(self) -> None:
        for seat in self.ctx.active:
            self.ctx.active[seat] = {n for n, t in self.box.tools.items() if t.side == seat}


def _values(args: dict[str, Any]) -> set[str]:
    return {str(v) for v in args.values() if isinstance(v, (str, int)) and not isinstance(v, bool)}


def _in_output(value: str, output: str) -> bool:
    if len(value) < 3 or value not in output:
        return False
    return re.search(rf"(?<![A-Za-z0-9_-]){re.escape(value)}(?![A-Za-z0-9_-])", output) is not None


def _words(text: str) -> set[str]:
    """Lower-case word stems (a trailing "s" dropped) of ``text``, for matching constants to tools."""
    return {w[:-1] if w.endswith("s") and len(w) > 3 else w for w in re.findall(r"[a-z]{3,}", text.lower())}


def _producer(steps: list[Step], j: int, value: str) -> int | None:
    """The latest step before ``j`` whose output gives ``value`` without taking it as an argument."""
    for i in reversed(range(j)):
        s = steps[i]
        if s.error or s.meta or value in _values(s.args):
            continue
        if _in_output(value, s.output):
            return i
    return None


class _Miner:
    def __init__(self, domain: Any, entity_graph: Any):
        self.domain = domain
        self.eg = entity_graph
        self.box = domain.toolbox("all")
        self.tools = self.box.tools
        self.edges: dict[tuple, Edge] = {}
        self.tasks_of: dict[tuple, set[str]] = defaultdict(set)
        self.links: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.chains: list[tuple[Any, list[Step]]] = []
        self.stats: dict[str, Any] = defaultdict(int)
        self.param_cols: dict[tuple[str, str], tuple[str, str]] = {}
        self.enablers: dict[str, Call] = {}  # tool -> a reference call that enables it
        self.pool: list[Call] = []
        self.conflict_done: set[frozenset[str]] = set()
        self.pair_probes: dict[frozenset[str], int] = defaultdict(int)

    def add(self, task_id: str, src: str, dst: str, kind: str, why: str, param: str | None = None) -> None:
        e = Edge(src, dst, kind, why, "mined", param)
        if e.key not in self.edges:
            self.edges[e.key] = e
        self.tasks_of[e.key].add(task_id)

    def is_write(self, name: str) -> bool:
        t = self.tools.get(name)
        return t is not None and t.kind == "write"

    def meant(self, requestor: str, name: str, args: dict[str, Any]) -> Call:
        """What a call means: a dispatcher's target, an enabler's target, or itself."""
        t = self.tools.get(name)
        plain = Call(name, requestor, args, name, args)
        if t is None:
            return plain
        props = t.parameters.get("properties", {})
        target = next(
            (v for k, v in args.items() if k != "arguments" and isinstance(v, str) and v != name and v in self.tools),
            None,
        )
        if target is None:
            return plain
        if self.tools[target].side != t.side:  # the agent hands a tool of the user's seat over
            return Call(target, requestor, {}, name, args, "handover")
        if "arguments" in props:
            raw = args.get("arguments") or {}
            if isinstance(raw, str):
                try:
                    raw = json.loads(raw)
                except ValueError:
                    raw = {}
            return Call(target, requestor, raw if isinstance(raw, dict) else {}, name, args, "dispatch")
        return Call(target, requestor, {}, name, args, "unlock")

    # --- one task's chain ---------------------------------------------------------------------
    def chain(self, task: Any) -> None:
        run = _Runner(self.domain, task)
        steps: list[Step] = []
        try:
            for a in task.actions:
                c = self.meant(a.requestor, a.name, dict(a.arguments))
                if c.mode in ("unlock", "handover"):
                    self.enablers.setdefault(c.name, c)
                elif steps:
                    self.requires_probes(run, task, steps, c)
                res, eff = run.call_effect(c)
                steps.append(Step(c, res.content, res.error, eff))
        except sqlite3.Error as e:
            self.stats["replay_failures"] += 1
            self.stats.setdefault("replay_errors", []).append(f"{task.id}: {e}")
            return
        finally:
            run.close()
        self.chains.append((task, steps))
        self.meta_and_produces(task, steps)
        self.constant_links(task, steps)

    def requires_probes(self, run: _Runner, task: Any, steps: list[Step], c: Call) -> None:
        """Undo each earlier write's effect just before this call; a failure means it requires that write."""
        for p in steps:
            if p.error or not p.effect or p.meta or p.name == c.name:
                continue
            saved = run.ctx.copy_state()
            try:
                with run.db.savepoint("tg_probe", keep=False):
                    run.undo(p.effect)
                    res = run.call(c)
            except sqlite3.Error:
                continue
            finally:
                run.ctx.active, run.ctx.state = saved
            self.stats["requires_probes"] += 1
            if not res.error:
                continue
            if any(_in_output(v, p.output) and v not in _values(p.args) for v in _values(c.args)):
                continue  # it produced an argument: a produces edge, found below
            self.add(task.id, p.name, c.name, "requires", f"undoing {p.name}'s effect makes {c.name} fail")

    def meta_and_produces(self, task: Any, steps: list[Step]) -> None:
        for j, s in enumerate(steps):
            if s.error:
                continue
            if s.meta:
                if any(t.name == s.name and not t.meta for t in steps[j + 1 :]):
                    why = f"{s.call.actual}({s.name}) before {s.name}"
                    self.add(task.id, s.call.actual, s.name, s.call.mode, why)
                continue
            if not self.is_write(s.name):
                continue
            props = self.tools[s.name].parameters.get("properties", {})
            for p, v in s.args.items():
                # an id or a date: enum members and free text come from the user or the documents
                if not isinstance(v, str) or "enum" in props.get(p, {}):
                    continue
                if (s.name, p) not in self.param_cols and not any(ch.isdigit() for ch in v):
                    continue
                i = _producer(steps, j, v)
                if i is not None:
                    src = steps[i].name
                    self.add(task.id, src, s.name, "produces", f"{src}'s output gives {s.name}.{p}", p)

    def constant_links(self, task: Any, steps: list[Step]) -> None:
        """Link numeric and enum arguments to the constants of the task's documents that equal them
        (or two that sum to them); of several, those whose words best match the tool's.
        """
        if self.eg is None:
            return
        docs = set(task.required_documents)
        consts = [c for c in self.eg.constants if c.doc in docs]
        nums = [c for c in consts if isinstance(c.value, (int, float)) and not isinstance(c.value, bool)]
        for s in steps:
            if s.error or s.meta or s.name not in self.tools:
                continue
            tool = self.tools[s.name]
            props = tool.parameters.get("properties", {})
            for p, v in s.args.items():
                if isinstance(v, bool) or v is None or v in (0, 1):
                    continue
                groups: list[list[Any]] = []
                if isinstance(v, (int, float)):
                    groups = [[c] for c in nums if c.value == v]
                    if not groups:
                        pairs = itertools.combinations(nums, 2)
                        groups = [[a, b] for a, b in pairs if a.unit == b.unit and a.value + b.value == v]
                elif isinstance(v, str) and "enum" in props.get(p, {}):
                    groups = [[c] for c in consts if isinstance(c.value, str) and c.value.casefold() == v.casefold()]
                if not groups:
                    continue
                words = _words(f"{s.name} {p} {tool.description} {props.get(p, {}).get('description', '')}")
                scored = [(sum(len(words & _words(f"{c.id} {c.name}")) for c in g) / len(g), g) for g in groups]
                best = max(sc for sc, _ in scored)
                if best <= 0:
                    continue
                for sc, g in scored:
                    if sc == best:
                        for c in g:
                            self.links[(s.name, p)][c.id] += 1

    # --- conflicts -----------------------------------------------------------------------------
    def conflict_probes(self, task: Any, steps: list[Step]) -> None:
        """Probe each reference write against other write tools re-bound to this task's records."""
        tokens: set[str] = set()
        for s in steps:
            tokens |= _values(s.args)
            tokens |= set(_TOKEN.findall(s.output))
        run = _Runner(self.domain, task)
        try:
            for s in steps:
                if s.effect and not s.error and self.stats["conflict_probes"] < MAX_PROBES:
                    self.probe_state(run, task, s, tokens)
                run.call(s.call)
        except sqlite3.Error:
            return
        finally:
            run.close()

    def probe_state(self, run: _Runner, task: Any, s: Step, tokens: set[str]) -> None:
        saved = run.ctx.copy_state()
        run.all_active()
        for b in self.pool:
            if b.name == s.name:
                continue
            pair = frozenset((s.name, b.name))
            if pair in self.conflict_done or self.pair_probes[pair] >= MAX_PAIR_PROBES:
                continue
            for bound in self.bindings(run, b, tokens, s.args):
                self.pair_probes[pair] += 1
                self.stats["conflict_probes"] += 1
                why = self.probe(run, s.call, bound)
                if why:
                    self.add(task.id, s.name, b.name, "conflict", why)
                    self.conflict_done.add(pair)
                    break
        run.ctx.active, run.ctx.state = saved

    def bindings(self, run: _Runner, b: Call, tokens: set[str], a_args: dict) -> list[Call]:
        """``b`` with its record arguments re-bound to records of this task that ``a_args`` shares."""
        options: dict[str, list[Any]] = {}
        a_vals = _values(a_args)
        for p in b.args:
            col = self.param_cols.get((b.name, p))
            if col is None:
                continue
            t, c = col
            cands = []
            for tok in sorted(tokens, key=lambda x: (x not in a_vals, x)):
                try:
                    sql = f'SELECT 1 FROM "{t}" WHERE "{c}" = ? LIMIT 1'
                    hit = run.db.conn.execute(sql, (tok,)).fetchone()
                except sqlite3.Error:
                    hit = None
                if hit:
                    cands.append(tok)
                if len(cands) >= 4:
                    break
            if cands:
                options[p] = cands
        keys = list(options)
        out = []
        for combo in itertools.product(*(options[k] for k in keys)) if keys else ():
            if len(set(combo)) < len(combo):
                continue
            bound = {**b.args, **dict(zip(keys, combo))}
            if _values(bound) & a_vals:  # about the same record as A
                out.append(b.with_args(bound))
            if len(out) >= MAX_BINDINGS:
                break
        return out

    def probe(self, run: _Runner, a: Call, b: Call) -> str:
        """Why A and B conflict on the current state, or "" if this probe shows no conflict."""
        sp = run.db.savepoint

        def one(first: Call, second: Call) -> tuple[bool, bool, str, Effect, Effect]:
            with sp("tg_c1", keep=False):
                r1, e1 = run.call_effect(first)
                if r1.error:
                    return False, False, "", e1, Effect()
                r2, e2 = run.call_effect(second)
                return True, not r2.error, run.db.digest(), e1, e2

        try:
            with sp("tg_c0", keep=False):
                for x in (a, b):
                    if x.name in self.enablers and x.mode == "dispatch":
                        run.call(self.enablers[x.name])
                ok_a, ab_ok, dig_ab, eff_a, eff_b_after = one(a, b)
                ok_b, ba_ok, dig_ba, _, _ = one(b, a)
        except sqlite3.Error:
            return ""
        if ok_a and ok_b:
            if not ab_ok:
                return f"{a.name} breaks {b.name}'s precondition (each succeeds alone; {b.name} fails after {a.name})"
            if not ba_ok:
                return f"{b.name} breaks {a.name}'s precondition (each succeeds alone; {a.name} fails after {b.name})"
            if dig_ab != dig_ba:
                return (
                    f"{a.name} and {b.name} write the same cells differently (the two orders end in different states)"
                )
            return ""
        if ok_a and ab_ok:
            before = {(t, k, c): old for t, k, c, old, _ in eff_a.updated}
            for t, k, c, _, new in eff_b_after.updated:
                if (t, k, c) in before and before[(t, k, c)] == new:
                    return f"{b.name} undoes {a.name} ({t}.{c}): mutually exclusive on the same record"
        return ""

    # --- all tasks -------------------------------------------------------------------------------
    def run(self) -> None:
        for name, t in self.tools.items():
            for p in t.parameters.get("properties", {}):
                col = _db_column(self.domain.schema, p)
                if col:
                    self.param_cols[(name, p)] = col
        for task in self.domain.tasks:
            self.chain(task)
        # the probe pool: up to two distinct reference calls per tool whose calls changed the database
        pool: dict[str, list[Call]] = defaultdict(list)
        for _, steps in self.chains:
            for s in steps:
                seen = [c.args for c in pool[s.name]]
                if s.effect and not s.error and not s.meta and len(seen) < 2 and s.args not in seen:
                    pool[s.name].append(s.call)
        self.pool = [c for calls in pool.values() for c in calls]
        for task, steps in list(self.chains):
            self.conflict_probes(task, steps)
        self.follow_ups()

    def follow_ups(self) -> None:
        occurs: dict[str, list[tuple[Any, list[Step], int]]] = defaultdict(list)
        for task, steps in self.chains:
            for i, s in enumerate(steps):
                if s.effect and not s.error and not s.meta:
                    occurs[s.name].append((task, steps, i))
        dep = {(k[0], k[1]): self.tasks_of[k] for k in self.edges if k[2] in ("requires", "produces")}
        for p, occ in occurs.items():
            tasks_p = {t.id for t, _, _ in occ}
            if len(tasks_p) < 2:
                continue
            later: set[str] | None = None
            for _, steps, i in occ:
                names = {s.name for s in steps[i + 1 :] if not s.error and s.effect and not s.meta}
                later = names if later is None else later & names
            for q in sorted(later or ()):
                if q != p and tasks_p <= dep.get((p, q), set()):
                    for t in tasks_p:
                        self.add(t, p, q, "follow_up", f"every task that calls {p} goes on with {q}, which needs it")


def mine_tool_graph(domain: Any, entity_graph: Any = None) -> tuple[list[Edge], dict, dict[str, Any]]:
    """Mine edges and constant links from ``domain``'s reference tasks.

    Returns:
        (edges, links, stats): mined edges (``support`` = tasks that showed each), links
        ``{(tool, param): {constant id: count}}``, and counts and seconds.
    """
    t0 = time.perf_counter()
    m = _Miner(domain, entity_graph)
    m.run()
    edges = []
    for k, e in m.edges.items():
        e.support = len(m.tasks_of[k])
        e.why = f"{e.why} (in {e.support} task{'s' * (e.support != 1)}: {', '.join(sorted(m.tasks_of[k])[:3])})"
        edges.append(e)
    stats = dict(m.stats)
    stats["tasks_mined"] = len(m.chains)
    stats["mining_seconds"] = round(time.perf_counter() - t0, 3)
    return edges, {k: dict(v) for k, v in m.links.items()}, stats
