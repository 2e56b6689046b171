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
import re
import sqlite3
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from .tool_graph import HANDOVER, UNLOCK, Edge

#: An id-like token of a tool's output.
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]*[A-Za-z0-9]")
#: Most probes of one (tool, tool) pair without finding a conflict before giving up on it.
MAX_PAIR_PROBES = 12
#: Most re-bindings of one tool's arguments per probe state.
MAX_BINDINGS = 6
#: Most conflict probes in one build.
MAX_PROBES = 4000


@dataclass
class Effect:
    """What one write did: rows inserted (table, key), deleted (table, key, row), cells updated."""

    inserted: list[tuple[str, tuple, tuple]] = field(default_factory=list)
    deleted: list[tuple[str, tuple, tuple]] = field(default_factory=list)
    updated: list[tuple[str, tuple, str, Any, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.inserted or self.deleted or self.updated)


@dataclass
class Step:
    name: str
    requestor: str
    args: dict[str, Any]
    output: str
    error: bool
    effect: Effect | None = None


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

    def call(self, requestor: str, name: str, args: dict[str, Any]) -> Any:
        return self.box.call(self.ctx, requestor, name, dict(args))

    def call_effect(self, requestor: str, name: str, args: dict[str, Any]) -> tuple[Any, Effect]:
        """Run a call and return its result and database effect (a write runs twice: once to see
        which tables change, rolled back, then for real).
        """
        tool = self.box.tools.get(name)
        if tool is None or tool.kind != "write":
            return self.call(requestor, name, args), Effect()
        saved = self.ctx.copy_state()
        before = self.db.table_digests()
        with self.db.savepoint("tg_look", keep=False):
            self.call(requestor, name, args)
            after = self.db.table_digests()
        self.ctx.active, self.ctx.state = saved
        changed = [t for t in after if t in self.schema.tables and after[t] != before.get(t)]
        old = self._rows(changed)
        res = self.call(requestor, name, args)
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


def _producer(steps: list[Step], j: int, value: str) -> int | None:
    """The latest step before ``j`` whose output gives ``value`` without taking it as an argument."""
    for i in reversed(range(j)):
        s = steps[i]
        if s.error or s.name in (UNLOCK, HANDOVER):
            continue
        if value in _values(s.args):
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

    def add(self, task_id: str, src: str, dst: str, kind: str, why: str, param: str | None = None) -> None:
        e = Edge(src, dst, kind, why, "mined", param)
        if e.key not in self.edges:
            self.edges[e.key] = e
        self.tasks_of[e.key].add(task_id)

    def is_write(self, name: str) -> bool:
        t = self.tools.get(name)
        return t is not None and t.kind == "write"

    # --- one task's chain ---------------------------------------------------------------------
    def chain(self, task: Any) -> None:
        run = _Runner(self.domain, task)
        steps: list[Step] = []
        try:
            for j, a in enumerate(task.actions):
                args = dict(a.arguments)
                if a.name in self.tools and j:
                    self.requires_probes(run, task, steps, a.requestor, a.name, args)
                res, eff = run.call_effect(a.requestor, a.name, args)
                steps.append(Step(a.name, a.requestor, args, res.content, res.error, eff))
        except sqlite3.Error as e:
            self.stats["replay_failures"] += 1
            self.stats.setdefault("replay_errors", []).append(f"{task.id}: {e}")
            run.close()
            return
        run.close()
        self.chains.append((task, steps))
        self.meta_and_produces(task, steps)
        self.constant_links(task, steps)
        run = _Runner(self.domain, task)
        try:
            self.conflict_probes(run, task, steps)
        finally:
            run.close()

    def requires_probes(
        self, run: _Runner, task: Any, steps: list[Step], requestor: str, name: str, args: dict
    ) -> None:
        """Undo each earlier write's effect just before this call; a failure means it requires that write."""
        for p in steps:
            if p.error or not p.effect or p.name == name:
                continue
            saved = run.ctx.copy_state()
            try:
                with run.db.savepoint("tg_probe", keep=False):
                    run.undo(p.effect)
                    res = run.call(requestor, name, args)
            except sqlite3.Error:
                continue
            finally:
                run.ctx.active, run.ctx.state = saved
            self.stats["requires_probes"] += 1
            if not res.error:
                continue
            if any(_in_output(v, p.output) and v not in _values(p.args) for v in _values(args)):
                continue  # it produced an argument: a produces edge, found below
            self.add(task.id, p.name, name, "requires", f"undoing {p.name}'s effect makes {name} fail", None)

    def meta_and_produces(self, task: Any, steps: list[Step]) -> None:
        for j, s in enumerate(steps):
            if s.error:
                continue
            if s.name in (UNLOCK, HANDOVER):
                target = s.args.get("tool_name")
                if any(t.name == target for t in steps[j + 1 :]):
                    kind = "unlock" if s.name == UNLOCK else "handover"
                    self.add(task.id, s.name, str(target), kind, f"{s.name}(tool_name={target}) before {target}")
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
        if self.eg is None:
            return
        docs = set(task.required_documents)
        consts = [c for c in self.eg.constants if c.doc in docs]
        nums = [c for c in consts if isinstance(c.value, (int, float)) and not isinstance(c.value, bool)]
        for s in steps:
            if s.error or s.name in (UNLOCK, HANDOVER):
                continue
            for p, v in s.args.items():
                if isinstance(v, bool) or v in (0, 1) or v is None:
                    continue
                ids: list[str] = []
                if isinstance(v, (int, float)):
                    ids = [c.id for c in nums if c.value == v]
                    if not ids:
                        for a, b in itertools.combinations(nums, 2):
                            if a.unit == b.unit and a.value + b.value == v:
                                ids += [a.id, b.id]
                elif isinstance(v, str) and len(v) >= 4:
                    ids = [c.id for c in consts if isinstance(c.value, str) and c.value.casefold() == v.casefold()]
                for cid in dict.fromkeys(ids):
                    self.links[(s.name, p)][cid] += 1

    # --- conflicts -----------------------------------------------------------------------------
    def conflict_probes(self, run: _Runner, task: Any, steps: list[Step]) -> None:
        """Probe each reference write against other write tools re-bound to this task's records."""
        pool = self.pool
        tokens: set[str] = set()
        for s in steps:
            tokens |= _values(s.args)
            tokens |= set(_TOKEN.findall(s.output))
        for s in steps:
            if self.is_write(s.name) and not s.error and self.stats["conflict_probes"] < MAX_PROBES:
                saved = run.ctx.copy_state()
                run.all_active()
                for b_name, b_req, b_args in pool:
                    if b_name == s.name:
                        continue
                    pair = frozenset((s.name, b_name))
                    if pair in self.conflict_done or self.pair_probes[pair] >= MAX_PAIR_PROBES:
                        continue
                    for bound in self.bindings(run, b_name, b_args, tokens, s.args):
                        self.pair_probes[pair] += 1
                        self.stats["conflict_probes"] += 1
                        why = self.probe(run, (s.requestor, s.name, s.args), (b_req, b_name, bound))
                        if why:
                            self.add(task.id, s.name, b_name, "conflict", why)
                            self.conflict_done.add(pair)
                            break
                run.ctx.active, run.ctx.state = saved
            try:
                run.call(s.requestor, s.name, s.args)
            except sqlite3.Error:
                return

    def bindings(self, run: _Runner, name: str, args: dict, tokens: set[str], a_args: dict) -> list[dict]:
        """``args`` of tool ``name`` with its record arguments re-bound to records of this task."""
        options: dict[str, list[Any]] = {}
        a_vals = _values(a_args)
        for p in args:
            col = self.param_cols.get((name, p))
            if col is None:
                continue
            t, c = col
            cands = []
            for tok in sorted(tokens, key=lambda x: (x not in a_vals, x)):
                try:
                    hit = run.db.conn.execute(f'SELECT 1 FROM "{t}" WHERE "{c}" = ? LIMIT 1', (tok,)).fetchone()
                except sqlite3.Error:
                    hit = None
                if hit:
                    cands.append(tok)
                if len(cands) >= 4:
                    break
            if cands:
                options[p] = cands
        if not options:
            return []
        keys = list(options)
        out = []
        for combo in itertools.product(*(options[k] for k in keys)):
            if len(set(combo)) < len(combo):
                continue
            bound = {**args, **dict(zip(keys, combo))}
            if not (_values(bound) & a_vals):
                continue  # not about the same record as A
            out.append(bound)
            if len(out) >= MAX_BINDINGS:
                break
        return out

    def probe(self, run: _Runner, a: tuple, b: tuple) -> str:
        """Why A and B conflict on the current state, or "" if this probe shows no conflict."""
        sp = run.db.savepoint

        def one(first: tuple, second: tuple) -> tuple[bool, bool, str, Effect, Effect]:
            with sp("tg_c1", keep=False):
                r1, e1 = run.call_effect(*first)
                if r1.error:
                    return False, False, "", e1, Effect()
                r2, e2 = run.call_effect(*second)
                return True, not r2.error, run.db.digest(), e1, e2

        try:
            ok_a, ab_ok, dig_ab, eff_a, eff_b_after = one(a, b)
            ok_b, ba_ok, dig_ba, _, _ = one(b, a)
        except sqlite3.Error:
            return ""
        if ok_a and ok_b:
            if not ab_ok:
                return f"{a[1]} breaks {b[1]}'s precondition (each succeeds alone; {b[1]} fails after {a[1]})"
            if not ba_ok:
                return f"{b[1]} breaks {a[1]}'s precondition (each succeeds alone; {a[1]} fails after {b[1]})"
            if dig_ab != dig_ba:
                return f"{a[1]} and {b[1]} write the same cells differently (the two orders end in different states)"
            return ""
        if ok_a and ab_ok:
            before = {(t, k, c): old for t, k, c, old, _ in eff_a.updated}
            for t, k, c, _, new in eff_b_after.updated:
                if (t, k, c) in before and before[(t, k, c)] == new:
                    return f"{b[1]} undoes {a[1]} ({t}.{c}): mutually exclusive on the same record"
        return ""

    # --- all tasks -------------------------------------------------------------------------------
    def run(self) -> None:
        from .tool_graph import _db_column

        for name, t in self.tools.items():
            for p in t.parameters.get("properties", {}):
                col = _db_column(self.domain.schema, p) if name not in (UNLOCK, HANDOVER) else None
                if col:
                    self.param_cols[(name, p)] = col
        # the probe pool: up to two distinct reference calls per write tool
        pool: dict[str, list[tuple[str, str, dict]]] = defaultdict(list)
        for task in self.domain.tasks:
            for a in task.actions:
                if (
                    self.is_write(a.name)
                    and len(pool[a.name]) < 2
                    and dict(a.arguments) not in [x[2] for x in pool[a.name]]
                ):
                    pool[a.name].append((a.name, a.requestor, dict(a.arguments)))
        self.pool = [c for calls in pool.values() for c in calls]
        self.conflict_done: set[frozenset[str]] = set()
        self.pair_probes: dict[frozenset[str], int] = defaultdict(int)
        for task in self.domain.tasks:
            self.chain(task)
        self.follow_ups()

    def follow_ups(self) -> None:
        occurs: dict[str, list[tuple[Any, list[Step], int]]] = defaultdict(list)
        for task, steps in self.chains:
            for i, s in enumerate(steps):
                if self.is_write(s.name) and not s.error:
                    occurs[s.name].append((task, steps, i))
        dep = {(k[0], k[1]): self.tasks_of[k] for k in self.edges if k[2] in ("requires", "produces")}
        for p, occ in occurs.items():
            tasks_p = {t.id for t, _, _ in occ}
            if len(tasks_p) < 2:
                continue
            later: set[str] | None = None
            for _, steps, i in occ:
                names = {s.name for s in steps[i + 1 :] if not s.error and self.is_write(s.name)}
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
