"""Domain-agnostic templates: one per write tool, derived from the tools' schemas and the database.

``templates(domain)`` gives a template per write tool of any domain (tau3-banking's 40-odd, a new
domain's). A template instantiates a plan as:

1. a new customer in the initial state: a seed customer's rows cloned under fresh, plan-derived ids
   with a new identity (``generic_db.clone_customer``), so no task shares a customer or a record with
   the domain's own tasks;
2. the opening the domain's tools need: a lookup that finds the customer by what the user says
   (when one exists), identity verification with the customer's real facts (and the clock's time
   when the verifier wants one);
3. the write call, its arguments searched among candidates from the schema (enums), the
   descriptions (listed values, formats) and the customer's records (matched to parameters by
   name); each trial is replayed, and an error text steers the next trial (a value it names, a
   record field it blames, which is then set to a value the tool's description or the error names);
4. lookups that produce record ids the agent cannot know otherwise, the unlock before a
   discoverable tool, the hand-over before a user tool (``generic_tools.Mechanics``).

Every argument carries a derivation (``records.py``); the whole chain is replayed before the draft
is returned (no tool error, the write changes the state). Nested JSON arguments (a dispatcher's
``arguments``) get ``{"kind": "json", "fields": {name: derivation}}``.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tau_env import Action, Scenario, Task
from tau_env.error import Error

from ..errors import SynthesisError
from ..records import Plan
from . import BaseTemplate, Draft, IdAllocator, SynthContext
from .generic_ask import customer_goal, describe_record, detail, looked_up, nonsense, noun_of, rule_value
from .generic_db import DBView, Identity, clone_customer, identity_kind, short_hash, words
from .generic_tools import (
    Cand,
    Mechanics,
    column_matches,
    default_candidates,
    derived_value,
    id_tables,
    literals,
    params_of,
    table_score,
)

__all__ = ["GenericTemplate", "Analysis", "templates", "draft_task", "synthesize", "leakage", "tool_error"]

_ERROR = re.compile(r"^\s*(error|failed|failure)\b", re.I)
MAX_TRIALS = 30
PROBE = "__probe__"
_TOKEN = re.compile(r"^[A-Za-z][\w-]*$")
MAX_DONORS = 4
_SNAKE_FIELD = re.compile(r"\b[a-z]+(?:_[a-z]+)+\b")
_NEGATED = re.compile(r"\b(not|no|never|without)\b", re.I)


def _stem(w: str) -> str:
    for suffix in ("ed", "s"):
        if len(w) > 4 and w.endswith(suffix):
            return w[: -len(suffix)]
    return w


def tool_error(output: str, flagged: bool) -> bool:
    """Whether a tool's output is an error (flagged by the toolbox, or a benchmark's ``Error: ...`` text)."""
    return flagged or bool(_ERROR.match(output or ""))


def fact_key(column: str) -> str:
    return column.replace("_", " ").strip()


def _first_sentence(text: str) -> str:
    s = re.split(r"(?<=[.!?])\s|\n", (text or "").strip(), maxsplit=1)[0]
    return s.rstrip(".") or "make a change"


@dataclass
class Analysis:
    """What every generic template of a domain shares: the rows, the mechanics, and probes."""

    domain: Any
    view: DBView
    mech: Mechanics
    finder: tuple[str, dict[str, str]] | None = None  # (tool, {param: customer column})
    lookups: dict[str, tuple[str, str]] = field(default_factory=dict)  # table -> (read tool, param)
    _n: int = 0
    _fields: list[str] | None = None
    _graph: Any = None

    @classmethod
    def of(cls, domain: Any) -> Analysis:
        return cls(domain, DBView.of(domain), Mechanics.of(domain))

    # --- replays ---------------------------------------------------------------------------------
    def run(
        self, rows: dict, actions: list[Action], meta: dict | None = None
    ) -> tuple[list[tuple[str, bool]], list[bool]]:
        """Replay ``actions`` over s0 with ``rows``: each output with its error flag, and whether each
        action changed the database.
        """
        init, extra = self.view.patch(rows)
        self._n += 1
        task = Task(
            id=f"__generic_probe_{self._n}",
            scenario=Scenario(requests=["-"]),
            initial_state=init,
            actions=actions,
            metadata={**extra, **(meta or {})},
        )
        dom = self.domain.with_tasks([task])
        try:
            db = dom.start_db(task)
        except Error as e:  # the patch does not fit the schema: the constraint names what would
            text = str(e).rsplit("does not fit table", 1)[-1]
            n = len(actions)
            return [("", False)] * (n - 1) + [(f"Error: {text.strip()}", True)], [False] * n
        try:
            box = dom.toolbox("all")
            tctx = dom.context(db, task, box)
            outs, changed = [], []
            for a in actions:
                before = db.digest()
                res = box.call(tctx, a.requestor, a.name, dict(a.arguments))
                outs.append((res.content, tool_error(res.content, res.error)))
                changed.append(db.digest() != before)
            return outs, changed
        finally:
            db.close()

    def graph(self, given: Any = None) -> Any:
        """The entity graph the documents' values come from: the run's, else one built once without a model."""
        if given is not None:
            return given
        if self._graph is None:
            from ..derive import entity_graph_of

            self._graph = entity_graph_of(self.domain)
        return self._graph

    def field_names(self) -> list[str]:
        """Record fields the documents and tool descriptions name (``snake_case`` words), domain-wide."""
        if self._fields is None:
            texts = [d.text or "" for d in self.domain.documents]
            texts += [t.description or "" for t in self.mech.tools.values()]
            found: dict[str, None] = {}
            for text in texts:
                for m in _SNAKE_FIELD.finditer(text):
                    found.setdefault(m.group(0), None)
            self._fields = list(found)
        return self._fields

    def find_finder(self, rows: dict, cid: str) -> None:
        """The read tool that finds a customer by what they say (name, email), if the domain has one."""
        if self.finder is not None or self.view.customer_table is None:
            return
        crow = rows[self.view.customer_table][cid]
        for name, t in self.mech.tools.items():
            ps = params_of(t)
            if t.hidden or t.side != "agent" or not self.mech.is_read(name) or not ps:
                continue
            fill: dict[str, str] = {}
            for p in ps:
                cols = [c for c in column_matches(p, crow) if identity_kind(c)]
                if cols:
                    fill[p] = cols[0]
            if set(fill) != set(ps) or (set(t.required) - set(fill)):
                continue
            outs, _ = self.run(rows, [Action(name=name, arguments={p: crow[c] for p, c in fill.items()})])
            if not outs[0][1] and cid in outs[0][0]:
                key = sorted(fill.items(), key=lambda kv: (identity_kind(kv[1]) != "name", kv[0]))
                self.finder = (name, dict(key))
                return
        self.finder = ("", {})


def _same_cell(rows: dict, c: Cand) -> bool:
    """Whether a ``db`` candidate's value is its cell's value as stored (not reshaped)."""
    cell = rows.get(c.where.get("table"), {}).get(c.where.get("rid"), {}).get(c.where.get("column"))
    return cell == c.value or str(cell) == str(c.value)


def finding_query(domain: Any, query: str, docs: list[str], depth: int = 10) -> str:
    """``query`` with what each required document is about (its title, then its headings) added
    until the domain's BM25 search finds every one of ``docs`` in its top ``depth`` (the verifier's
    test), as far as the documents' own words can.
    """
    kb = getattr(domain, "kb", None)
    if kb is None or not docs:
        return query
    by_id = {d.id: d for d in domain.documents}

    def missing(q: str) -> list[str]:
        hits = {h.doc_id for h in kb.search(q, k=depth, method="bm25")}
        return [d for d in docs if d not in hits]

    for doc in docs:
        d = by_id.get(doc)
        if d is None:
            continue
        about = [re.sub(r"^\s*(internal|faq|policy)\s*:\s*", "", d.title or "", flags=re.I)]
        about += [h.strip() for h in re.findall(r"^#{1,3}\s+(.+)$", d.text or "", flags=re.M)][:4]
        for words_ in about:
            if doc not in missing(query):
                break
            clean = re.sub(r"[^A-Za-z0-9 ,()-]+", " ", words_).strip()
            if clean and clean.lower() not in query.lower():
                query = f"{query}; {clean}"
    return query


def _json_derivation(inner: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "json", "fields": inner}


class GenericTemplate(BaseTemplate):
    """One write tool's template (see the module docstring)."""

    def __init__(self, tool: str, an: Analysis):
        t = an.mech.tools[tool]
        self.tool = tool
        self.an = an
        self.name = f"generic:{tool}"
        self.intent = _first_sentence(t.description)
        self.tools = (tool,)
        self.desc = t.description or ""
        #: Words that say which records the tool is about (its name, description and parameter names).
        self.ctxw = words(tool) | words(self.desc) | {w for p in params_of(t) for w in words(p)} - {"id"}
        self.side = t.side
        #: The documents that name the tool (its procedures), in the domain's order.
        self.docs = [d.id for d in an.domain.documents if tool in (d.text or "")]
        self.failures: Counter[str] = Counter()
        self._good_donors: list[str] = []
        self._links: dict[str, int] = {}  # donor -> how well its records join up (see _donor_links)
        self._mutations: dict[str, Any] = {}  # column -> value that made a trial pass before
        self._graph: Any = None
        #: Set to a list to record each trial (anchor id, arguments, error) while debugging.
        self.trace: list | None = None

    def _anchor_tables(self) -> list[tuple[str, ...]]:
        """For each record argument of the write, the tables it may name (a donor must own rows in one):
        the best-named table, and a second one named as well (a transaction id: card or bank
        transactions).
        """
        view = self.an.view
        ctxw = self.ctxw
        out = []
        for p in self._params()[1]:
            tables = id_tables(view, p, ctxw)
            if tables and tables[0] != view.customer_table and p != view.customer_key:
                top = table_score(view, p, tables[0], ctxw)
                out.append(tuple(t for t in tables[:2] if table_score(view, p, t, ctxw) >= top - 0.5))
        return list(dict.fromkeys(out))

    def _donor_links(self, donor: str) -> int:
        """How well a donor's records join up for the write: the most links from a record the first
        record argument may name to the records the other arguments name (see :meth:`_linked_ids`).
        """
        hit = self._links.get(donor)
        if hit is not None:
            return hit
        view = self.an.view
        ps, req = self._params()
        rows = view.owned_rows(donor)
        anchor_param = next(
            (
                p
                for p in req
                if id_tables(view, p, self.ctxw) and id_tables(view, p, self.ctxw)[0] != view.customer_table
            ),
            None,
        )
        best = 0
        if anchor_param is not None:
            links = self._linked_ids(rows, donor, [p for p in req if p != anchor_param])
            for t in next((a for a in self._anchor_tables() if a), ()):
                for row in rows.get(t, {}).values():
                    best = max(best, sum(1 for v in row.values() if isinstance(v, str) and v in links))
        self._links[donor] = best
        return best

    # --- candidates --------------------------------------------------------------------------------
    def _params(self) -> tuple[dict[str, dict], list[str]]:
        t = self.an.mech.tools[self.tool]
        ps = params_of(t)
        req = [p for p in ps if p in t.required] if t.required else list(ps)
        return ps, req

    def _candidates(self, p, spec, rows, crow, cid, anchor, chosen, rng) -> list[Cand]:
        view = self.an.view
        desc = str(spec.get("description", ""))
        ctxw = self.ctxw
        tables = id_tables(view, p, ctxw)
        out: list[Cand] = []
        if tables:
            if tables[0] == view.customer_table or p == view.customer_key:
                return [Cand(cid, "db", {"table": view.customer_table, "rid": cid, "column": view.customer_key})]
            extra = (words(p) | words(desc)) - {"id"} - {w for t in tables[:1] for w in words(t)}
            ranked = []
            ids = {rid for t, rs in rows.items() if t != view.customer_table for rid in rs}
            for rank, t in enumerate(tables[:3]):
                idc = view.id_column[t]
                for rid, row in rows.get(t, {}).items():
                    score = -1.5 * rank  # the best-named table first, unless the anchor names another's row
                    if anchor and (rid in anchor[2].values() or anchor[1] in row.values()):
                        score += 4
                    if anchor and rid == anchor[1]:
                        score += 6
                    if anchor and any(
                        isinstance(v, str) and v != cid and v in anchor[2].values() and v in ids for v in row.values()
                    ):
                        score += 2  # shares a record with the anchor (a card on the transaction's account)
                    if any(rid == c.value for c in chosen.values()):
                        score -= 20
                    vals = {w.rstrip("s") for v in row.values() if isinstance(v, str) for w in words(v)}
                    score += sum(1 for w in extra if w.rstrip("s") in vals)
                    ranked.append((score, rng.random(), rid, t, idc))
            for _, _, rid, t, idc in sorted(ranked, key=lambda x: (-x[0], x[1])):
                out.append(Cand(rid, "db", {"table": t, "rid": rid, "column": idc}))
            return out
        if spec.get("enum"):
            vals = list(spec["enum"])
            rng.shuffle(vals)
            return [Cand(v, "enum") for v in vals]
        lits = [x for x in literals(desc) if not (words(x) <= words(p)) and x.lower() not in ("id", "usd")]
        if spec.get("type", "string") == "string" and len(lits) >= 2:
            rng.shuffle(lits)
            out += [Cand(x, "literal", {"why": f"named in {self.tool}'s description of {p}"}) for x in lits]
        srcs = ([anchor] if anchor else []) + [(view.customer_table, cid, crow)]
        if identity_kind(p):
            srcs = srcs[::-1]
        for t, rid, row in srcs:
            for col in column_matches(p, row, spec)[:2]:
                for v in self._shaped(p, row[col], desc, spec):
                    out.append(Cand(v, "db", {"table": t, "rid": rid, "column": col}))
        listed = {x.lower() for x in lits}
        if len(listed) >= 2:  # the record's own value first when it is one of the listed ones
            mine = [c for c in out if c.source == "db" and isinstance(c.value, str) and c.value.lower() in listed]
            out = mine + [
                c for c in out if c not in mine and str(c.value).lower() not in {m.value.lower() for m in mine}
            ]
        kind = identity_kind(p)
        if kind and spec.get("type", "string") == "string":  # a new value (a changed email)
            like = crow.get(next((c for c in crow if identity_kind(c) == kind), ""), "")
            out.append(Cand(Identity.make(rng, short_hash(cid, p)).value(kind, like), "fact"))
        if not out and spec.get("type", "string") == "string" and lits:
            out += [Cand(x, "literal", {"why": f"named in {self.tool}'s description of {p}"}) for x in lits]
        if not out and spec.get("type", "string") == "string":
            best = None  # a categorical column that names the same thing (a product type)
            for t, rs in view.tables.items():
                for col in column_matches(p, next(iter(rs.values()), {}), spec):
                    if "id" in words(col) - words(p):
                        continue
                    vals = [v for v in view.distinct(t, col, limit=17) if isinstance(v, str) and v]
                    if 1 < len(vals) <= 16 and len(rs) >= 2 * len(vals):
                        score = (len(words(p) & words(col)), len(rs))
                        if best is None or score > best[0]:
                            best = (score, t, col, vals)
            if best is not None:
                _, t, col, vals = best
                rng.shuffle(vals)
                finer = self._finer(p, t, col, vals, chosen, rng)
                if finer is not None:  # the column holds another argument's values: a finer one names ours
                    col, vals = finer
                out += [Cand(v, "literal", {"why": f"a value of {t}.{col} in the database"}) for v in vals]
        if not out and spec.get("type", "string") == "string":
            out += self._free_text(p, spec, rng)
        pdw = words(p) | words(desc)
        if (
            any(w.startswith("digit") or w == "last4" for w in pdw)
            and spec.get("type", "string") == "string"
            and not out
        ):
            n = 3 if "3" in pdw else 4
            out.append(Cand("".join(str(rng.randint(0, 9)) for _ in range(n)), "fact"))
        out += default_candidates(p, spec, desc, rng, self.an.domain.clock)
        seen, uniq = set(), []
        for c in out:
            k = json.dumps(c.value, sort_keys=True, default=str)
            if k not in seen:
                seen.add(k)
                uniq.append(c)
        return uniq

    def _finer(self, p: str, table: str, col: str, vals: list[str], chosen: dict[str, Cand], rng: random.Random):
        """When ``table.col``'s values are another argument's listed values (an account's class
        'checking' is what ``account_type`` lists), ``p`` wants a finer category of the same records:
        the column whose every value falls in one value of ``col`` (the level 'Blue Account'), its
        values ordered to agree with the other argument's chosen value. None when there is none.
        """
        view = self.an.view
        ps = self._params()[0]
        stems = {v.lower().rstrip("s"): v for v in vals}
        other = None
        for q, spec in ps.items():
            listed = {
                x.lower().rstrip("s") for x in [*(spec.get("enum") or []), *literals(spec.get("description", ""))]
            }
            if q != p and len(set(stems) & listed) >= 2:
                other = q
                break
        if other is None:
            return None
        rows = list(view.tables.get(table, {}).values())
        best = None
        for c2 in view.columns(table):
            if c2 in (col, view.id_column.get(table)) or identity_kind(c2):
                continue
            vs = [r.get(c2) for r in rows]
            if not all(isinstance(v, str) and v and not re.search(r"\d", v) for v in vs):
                continue
            fine: dict[str, dict] = {}  # value -> the coarse values of its records, in seed order
            for r in rows:
                fine.setdefault(r[c2], {})[r.get(col)] = None
            mixed = sum(1 for x in fine.values() if len(x) > 1)  # a level two classes share
            if len(fine) <= len(set(stems)) or 2 * len(fine) > len(rows) or 5 * mixed > len(fine):
                continue
            if best is None or len(fine) > len(best[1]):
                best = (c2, fine)
        if best is None:
            return None
        c2, fine = best
        want = str(chosen[other].value).lower().rstrip("s") if other in chosen else None
        coarse = {v: str(next(iter(fine[v]), "")) for v in fine}
        rank = {v: i for i, v in enumerate(vals)}
        some = list(fine)
        rng.shuffle(some)
        return c2, sorted(some, key=lambda v: (coarse[v].lower().rstrip("s") != want, rank.get(coarse[v], 0)))

    def _free_text(self, p: str, spec: dict, rng: random.Random) -> list[Cand]:
        """Values the user says for a free-text argument that a column of the same name holds across
        the database (a merchant's name): a few of them, the user's to give (no record names them).
        """
        view = self.an.view
        for t, rs in view.tables.items():
            tw = {w.rstrip("s") for w in words(t)}
            if t == view.customer_table or not rs or not tw & {w.rstrip("s") for w in self.ctxw}:
                continue  # a table of what the tool is about
            cols = [c for c in column_matches(p, next(iter(rs.values())), spec) if words(p) <= words(c)]
            cols = [c for c in cols if "id" not in words(c) and not identity_kind(c)]
            if not cols:
                continue
            vals = [v for v in view.distinct(t, cols[0], limit=60) if isinstance(v, str) and v.strip()]
            vals = [v for v in vals if not re.fullmatch(r"[\d\W_]+", v)]
            if len(vals) >= 3:
                rng.shuffle(vals)
                return [Cand(v, "fact") for v in vals[:3]]
        return []

    @staticmethod
    def _shaped(p: str, value: Any, desc: str, spec: dict) -> list[Any]:
        from .generic_tools import _format_like

        v = derived_value(p, value)
        typ = spec.get("type", "string")
        if typ in ("number", "integer") and isinstance(v, str):
            try:
                v = float(re.sub(r"[^\d.\-]", "", v))
            except ValueError:
                return []
        if typ == "integer" and isinstance(v, float):
            v = int(v)
        return _format_like(v, desc)

    # --- the chain -----------------------------------------------------------------------------------
    def _opening(self, rows, cid, crow) -> tuple[list[Action], list[dict], dict[str, str]]:
        """Clock, finder and verifier actions with derivations, and the identity facts they use."""
        an, mech = self.an, self.an.mech
        actions: list[Action] = []
        ders: list[dict] = []
        facts: dict[str, str] = {}
        for col, v in crow.items():
            if identity_kind(col) and isinstance(v, str):
                facts[fact_key(col)] = v
        an.find_finder(rows, cid)
        finder_i = None
        if an.finder and an.finder[0]:
            name, fill = an.finder
            actions.append(Action(name=name, arguments={p: crow[c] for p, c in fill.items()}))
            ders.append({p: {"kind": "fact", "key": fact_key(c)} for p, c in fill.items()})
            finder_i = 0
        if mech.verifier:
            vt = mech.tools[mech.verifier]
            args, der = {}, {}
            for p, _spec in params_of(vt).items():
                pw = words(p)
                if p == an.view.customer_key or (pw & {"user", "customer"} and "id" in pw):
                    args[p] = cid
                    der[p] = (
                        {"kind": "output", "action": finder_i}
                        if finder_i is not None
                        else {"kind": "fact", "key": fact_key(an.view.customer_key or "customer id")}
                    )
                    if finder_i is None:
                        facts[fact_key(an.view.customer_key or "customer id")] = cid
                    continue
                if pw & {"time", "timestamp"} and mech.clock:
                    outs, _ = an.run(rows, [Action(name=mech.clock, arguments={})])
                    m = re.search(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2})?(?: [A-Z]{2,4})?", outs[0][0])
                    if m:
                        actions.insert(0, Action(name=mech.clock, arguments={}))
                        ders.insert(0, {})
                        if finder_i is not None:
                            finder_i += 1
                            ders[finder_i] = dict(ders[finder_i])
                        args[p] = m.group(0)
                        der[p] = {"kind": "output", "action": 0}
                        continue
                cols = column_matches(p, crow)
                if cols:
                    args[p] = derived_value(p, crow[cols[0]])
                    der[p] = {"kind": "fact", "key": fact_key(cols[0])}
                    facts.setdefault(fact_key(cols[0]), str(crow[cols[0]]))
            if finder_i is not None:
                for d in der.values():
                    if d.get("kind") == "output" and d.get("action") == 0 and actions[0].name != mech.clock:
                        d["action"] = finder_i
            for p, d in der.items():
                if d.get("kind") == "output" and args[p] == cid and finder_i is not None:
                    d["action"] = finder_i
            actions.append(Action(name=mech.verifier, arguments=args))
            ders.append(der)
        return actions, ders, facts

    def _reach(self, args: dict, inner_ders: dict) -> tuple[list[Action], list[dict]]:
        acts, ders = [], []
        why = f"tool name found in document {self.docs[0]}" if self.docs else f"the domain's tool {self.tool}"
        for name, a, req, _role in self.an.mech.reach(self.tool, args):
            acts.append(Action(name=name, arguments=a, requestor=req))
            if name == self.tool:
                ders.append(dict(inner_ders))
                continue
            d = {}
            for k, v in a.items():
                d[k] = _json_derivation(inner_ders) if v == json.dumps(args) else {"kind": "literal", "why": why}
            ders.append(d)
        return acts, ders

    def _search(self, rows, cid, rng, opening: list[Action]):
        """Trials of the write call: the first that replays cleanly and changes the state."""
        view = self.an.view
        ps, req = self._params()
        crow = rows[view.customer_table][cid]
        active = list(req)
        ctxw = self.ctxw
        anchor_param = next(
            (p for p in active if id_tables(view, p, ctxw) and id_tables(view, p, ctxw)[0] != view.customer_table),
            None,
        )
        anchors: list[tuple[str, str, dict] | None] = [None]
        if anchor_param:
            anchors = []
            tables = id_tables(view, anchor_param, ctxw)
            top = table_score(view, anchor_param, tables[0], ctxw)
            for t in [t for t in tables[:2] if table_score(view, anchor_param, t, ctxw) >= top - 0.5]:
                some = [(t, rid, row) for rid, row in rows.get(t, {}).items()]
                rng.shuffle(some)
                anchors += some[:3]
            links = self._linked_ids(rows, cid, [p for p in active if p != anchor_param])
            anchors.sort(key=lambda a: -sum(1 for v in a[2].values() if isinstance(v, str) and v in links))
            if self.trace is not None:
                self.trace.append(("anchors", [(a[0], a[1]) for a in anchors], sorted(links)))
        for (t, col), v in self._mutations.items():
            for a in anchors:
                if a and a[0] == t and (col in a[2] or v is True):
                    a[2][col] = v
        trials = 0
        for anchor in anchors:
            mutated: dict[tuple, set] = {}
            applied: dict[tuple[str, str], Any] = {}
            chosen: dict[str, Cand] = {}
            cands: dict[str, list[Cand]] = {}
            for p in active:
                cands[p] = self._candidates(p, ps[p], rows, crow, cid, anchor, chosen, rng)
                if not cands[p]:
                    return None
                chosen[p] = cands[p][0]
            idx = dict.fromkeys(active, 0)
            rr = 0
            while trials < MAX_TRIALS:
                trials += 1
                args = {p: cands[p][idx[p]].value for p in active}
                ruled = self._ruled(ps, active, args, rows, cid)
                if ruled is None or nonsense(ps, args):  # the documents do not decide it, or no one asks that
                    movable = [p for p in active if idx[p] + 1 < len(cands[p]) and not looked_up(p, ps[p])]
                    if not movable:
                        break
                    p = movable[rr % len(movable)]
                    rr += 1
                    idx[p] += 1
                    continue
                args.update({p: v for p, (v, _ids) in ruled.items()})
                acts, _ = self._reach(args, {})
                outs, changed = self.an.run(rows, opening + acts, self._meta(opening + acts))
                bad = [o for o, e in outs if e]
                if self.trace is not None:
                    self.trace.append((anchor[1] if anchor else None, args, bad[:1] or changed[-1:]))
                if not bad and changed[-1]:
                    self._mutations.update(applied)
                    out = {p: cands[p][idx[p]] for p in active}
                    out.update({p: Cand(v, "constant", {"ids": ids}) for p, (v, ids) in ruled.items()})
                    return anchor, out
                if not bad:
                    err = "no change"
                else:
                    err = bad[0]
                    if any(e for o, e in outs[: len(opening)]):
                        return None  # the opening fails: another donor
                errw = words(err)
                new_opt = [p for p in ps if p not in active and p in err]
                if new_opt:
                    for p in new_opt:
                        active.append(p)
                        cands[p] = self._candidates(p, ps[p], rows, crow, cid, anchor, chosen, rng)
                        idx[p] = 0
                    continue
                low = err.lower()
                lits = literals(err)
                ref = next(
                    ((t, args[anchor_param], rows[t][args[anchor_param]]) for t in rows
                     if anchor_param and args.get(anchor_param) in rows[t]),
                    None,
                )  # fmt: skip
                target = self._blamed_row(rows, err) or ref or anchor
                if target and "not found" not in low and self._repair(target, err, errw, lits, mutated, applied):
                    continue
                named = [
                    p
                    for p in active
                    if p in err
                    or p.replace("_", " ") in low
                    or (isinstance(args[p], str) and len(args[p]) >= 3 and args[p] in err)
                    or (
                        isinstance(args[p], (int, float))
                        and not isinstance(args[p], bool)
                        and re.search(rf"\b{int(args[p])}\b", err)
                    )
                ]
                blamed = [p for p in named if idx[p] + 1 < len(cands[p]) or "number" in errw]
                for p in blamed:
                    if isinstance(args[p], (int, float)) and not isinstance(args[p], bool):
                        typ = int if ps[p].get("type") == "integer" else float
                        nums = [typ(float(x)) for x in re.findall(r"(?<![\w.])\$?(\d+(?:\.\d+)?)", err)]
                        have = {c.value for c in cands[p]}
                        new = [Cand(x, "fact") for x in dict.fromkeys(nums) if x != args[p] and x > 0]
                        cands[p][idx[p] + 1 : idx[p] + 1] = [c for c in new if c.value not in have] or new
                    elif ("number" in errw or "numeric" in errw) and not isinstance(args[p], (int, float)):
                        nums = self._shaped(p, args[p], "", {"type": "number"}) if isinstance(args[p], str) else []
                        nums += [
                            c.value for c in default_candidates(p, {"type": "number"}, "", rng, self.an.domain.clock)
                        ]
                        cands[p][idx[p] + 1 : idx[p] + 1] = [Cand(v, "fact") for v in nums]
                    elif ps[p].get("type", "string") == "string":
                        have = {json.dumps(c.value) for c in cands[p]}
                        add = [
                            Cand(x, "literal", {"why": f"a value {self.tool} names"})
                            for x in lits
                            if json.dumps(x) not in have and x != args[p]
                        ]
                        cands[p][idx[p] + 1 : idx[p] + 1] = add
                blamed = [p for p in blamed if idx[p] + 1 < len(cands[p])]
                if blamed:
                    p = blamed[0]
                    idx[p] += 1
                    table = cands[p][idx[p] - 1].where.get("table")
                    if "not found" in low and table:  # the record is not where we looked: another table
                        while idx[p] + 1 < len(cands[p]) and cands[p][idx[p]].where.get("table") == table:
                            idx[p] += 1
                    continue
                movable = [p for p in active if idx[p] + 1 < len(cands[p])]
                if not movable:
                    break
                p = movable[rr % len(movable)]
                rr += 1
                idx[p] += 1
        return None

    def _ruled(self, ps, active, args, rows, cid) -> dict[str, tuple[Any, list[str]]] | None:
        """The values the documents give the looked-up arguments (fees, rates, limits) of this call,
        each with the deciding constants; None when the documents do not decide one (the combination
        is not synthesized).
        """
        out: dict[str, tuple[Any, list[str]]] = {}
        todo = [p for p in active if looked_up(p, ps[p])]
        if not todo:
            return out
        if ps[todo[0]].get("type") == "boolean" and all(ps[p].get("type") == "boolean" for p in todo):
            return out  # a waiver the agent decides: kept out of what the customer says (see _draft)
        options = {
            q: [str(x) for x in (spec.get("enum") or literals(spec.get("description", "")))]
            for q, spec in ps.items()
            if q in args and (spec.get("enum") or len(literals(spec.get("description", ""))) >= 2)
        }
        record_values = [
            v
            for rid in [a for a in args.values() if isinstance(a, str)] + [cid]
            for t, rs in rows.items()
            if rid in rs
            for v in rs[rid].values()
            if isinstance(v, str)
        ]
        for p in todo:
            if ps[p].get("type") == "boolean":
                continue
            if re.search(r"\bif applicable\b", ps[p].get("description") or "", re.I):
                continue  # a conditional fee (exceeding a limit): not applicable to a first order, 0 below
            try:
                out[p] = rule_value(self._graph, self.an.domain, self.docs, p, args, options, record_values)
            except LookupError:
                self.failures[f"{p}: not decided by the documents"] += 1
                return None
        return out

    def _linked_ids(self, rows: dict, cid: str, params: list[str]) -> set[str]:
        """The record ids (not the customer's) that the records the other id parameters name hold or
        are: a transaction whose account is the debit card's account links to the card's parameters,
        one of another product line does not.
        """
        view = self.an.view
        ids = {rid for t, rs in rows.items() if t != view.customer_table for rid in rs}
        out: set[str] = set()
        for p in params:
            tables = id_tables(view, p, self.ctxw)
            if not tables or tables[0] == view.customer_table or p == view.customer_key:
                continue
            for rid, row in rows.get(tables[0], {}).items():
                out.add(rid)
                out |= {v for v in row.values() if isinstance(v, str) and v in ids and v != cid}
        return out

    def _blamed_row(self, rows, err):
        """The record an error names by its id (``Debit card 'X' is already active``), if any."""
        for t, rs in rows.items():
            for rid, row in rs.items():
                if len(rid) >= 4 and rid in err and t != self.an.view.customer_table:
                    return (t, rid, row)
        return None

    def _repair(self, target, err, errw, lits, mutated, applied) -> bool:
        """Set a field of a record that the error blames (by name, by its value, or by naming another
        value the column holds) to a value the tool's description or the error names, else to another
        value the column holds.
        """
        t, rid, row = target
        view = self.an.view
        low = err.lower()
        if self._raise_flag(target, err, mutated, applied):
            return True
        for col in row:
            v = row.get(col)
            if col == view.id_column.get(t):
                continue
            seen = [x for x in view.distinct(t, col, limit=16) if isinstance(x, str)]
            if len(view.distinct(t, col, limit=16)) >= 16:
                seen = []  # a free-text column (names, dates), not a state
            said = [x for x in seen if x != v and re.search(rf"\b{re.escape(x.lower())}s?\b", low)]
            by_value = isinstance(v, str) and len(v) >= 3 and re.search(rf"\b{re.escape(v.lower())}\b", low)
            if not (col in err or (words(col) and words(col) <= errw) or by_value or said):
                continue
            if by_value and re.fullmatch(r"-?\d+(\.\d+)?", str(v)):  # an amount the error wants another of
                dec = len(str(v).split(".")[1]) if "." in str(v) else 0
                nums = [float(x) for x in re.findall(r"(?<![\w.])\$?(\d+(?:\.\d+)?)", err)]
                said = [f"{x:.{dec}f}" if isinstance(v, str) else type(v)(x) for x in nums]
                said = [x for x in said if x != v]
            named = literals(err) + literals(self.desc)
            lower = {x.lower(): x for x in seen}
            opts = said + [lower[x.lower()] for x in named if x.lower() in lower]
            opts += [x for x in named if x.lower() not in lower and _TOKEN.match(x) and x not in view.tables] + seen
            tried = mutated.setdefault((t, rid, col), set())
            pool = mutated.setdefault((t, rid, col, "pool"), [])  # values named by earlier errors too
            pool[:] = list(dict.fromkeys(opts + pool))
            nxt = next((x for x in pool if x not in tried and x != v), None)
            if nxt is None and not view.benchmark_layout and isinstance(v, str) and PROBE not in tried:
                nxt = PROBE  # a value the schema refuses: its CHECK constraint lists the legal ones
            if nxt is not None:
                tried.add(nxt)
                row[col] = nxt
                applied[(t, col)] = nxt
                return True
        return False

    def _documents(self, rows: dict, cands: dict[str, Cand]) -> list[str]:
        """The document that names the tool and fits the task best: the one that states most of the
        values of the call and of the records it names (a savings account's level picks the savings
        closure procedure over the checking one); the domain's first on a tie.
        """
        if len(self.docs) <= 1:
            return self.docs[:1]
        values: set[str] = set()
        for c in cands.values():
            if isinstance(c.value, str) and not (
                c.where.get("table") and c.where.get("column") == self.an.view.id_column.get(c.where["table"])
            ):
                values.add(c.value)
            rec = next((rs[c.value] for rs in rows.values() if isinstance(c.value, str) and c.value in rs), None)
            for v in (rec or {}).values():
                if isinstance(v, str) and v not in rows.get(self.an.view.customer_table or "", {}):
                    values.add(v)
        values = {v.strip().lower() for v in values if len(v.strip()) >= 4 and not re.search(r"\d{3}", v)}
        texts = {d.id: (d.text or "").lower() for d in self.an.domain.documents if d.id in self.docs}

        def score(doc: str) -> int:
            return sum(1 for v in values if re.search(rf"(?<![a-z0-9]){re.escape(v)}", texts.get(doc, "")))

        return [max(self.docs, key=lambda d: (score(d), -self.docs.index(d)))]

    def _raise_flag(self, target, err, mutated, applied) -> bool:
        """A record lacks a state the error says it must have (``Debit card 'X' does not have an active
        velocity block``): set the field the documents name for it (``velocity_blocked``: all its words
        in the error, one that is no word of the tool, the table or the record's fields) to true.
        """
        t, rid, row = target
        if not _NEGATED.search(err):
            return False
        errw = {_stem(w) for w in words(err)}
        known = {_stem(w) for w in words(self.tool) | words(t) | {w for c in row for w in words(c)}}
        for name in self.an.field_names():
            fw = {_stem(w) for w in words(name)}
            if name in row or len(fw) < 2 or not fw <= errw or not (fw - known):
                continue
            tried = mutated.setdefault((t, rid, name), set())
            if True in tried:
                continue
            tried.add(True)
            row[name] = True
            applied[(t, name)] = True
            return True
        return False

    def _meta(self, actions: list[Action]) -> dict[str, Any]:
        user = sorted({a.name for a in actions if a.requestor == "user"})
        return {"user_tools": user} if user else {}

    def _lookups(self, rows, cid, opening, cands) -> tuple[list[Action], list[dict]]:
        """Read calls whose outputs hold the record ids the write names (the agent cannot know them):
        a breadth-first search from the customer's id through one-parameter read tools, keeping the
        calls that reveal a wanted id or an id a wanted record names (a card's account).
        """
        view, mech = self.an.view, self.an.mech
        where = {rid: t for t, rs in rows.items() for rid in rs}
        targets = {
            p: c
            for p, c in cands.items()
            if c.source == "db" and c.value != cid and c.where.get("column") == view.id_column.get(c.where.get("table"))
        }
        if not targets:
            return [], []
        wanted = {str(c.value) for c in targets.values()}
        parents = {
            v
            for c in targets.values()
            for v in rows[c.where["table"]][c.value].values()
            if isinstance(v, str) and v in where and v != cid and v not in wanted
        }
        outs0, _ = self.an.run(rows, opening)
        src = next((i for i, (o, _) in enumerate(outs0) if cid in o), None)
        known: dict[str, tuple[str, dict]] = {
            cid: (
                view.customer_key,
                {"kind": "output", "action": src} if src is not None else {"kind": "fact", "key": "id"},
            )
        }
        reads = [
            (name, next(iter(params_of(t))))
            for name, t in mech.tools.items()
            if t.side == "agent" and mech.is_read(name) and len(params_of(t)) == 1
            and name not in mech.mechanic_names() and name != (self.an.finder or ("",))[0]
        ]  # fmt: skip
        acts: list[Action] = []
        ders: list[dict] = []
        found: dict[str, int] = {}
        for _ in range(3):
            progress = False
            for name, q in reads:
                for v, (col, der) in list(known.items()):
                    if not (q == col or (words(q) - {"id"} and (words(q) - {"id"}) <= words(col))):
                        continue
                    old, self.tool = self.tool, name
                    la, _ = self._reach({q: v}, {})
                    self.tool = old
                    if la[-1] in acts:
                        continue
                    outs, _ = self.an.run(rows, opening + acts + la)
                    text = outs[-1][0]
                    if outs[-1][1]:
                        continue
                    hits = {x for x in wanted if x in text and x not in found}
                    more = {x for x in parents if x in text and x not in known}
                    if not (hits or more):
                        continue
                    for a in la:
                        d = {}
                        for k, val in a.arguments.items():
                            if val == v:
                                d[k] = der
                            elif val == json.dumps({q: v}):
                                d[k] = _json_derivation({q: der})
                            else:
                                d[k] = {"kind": "literal", "why": f"read tool {name} of the domain"}
                        acts.append(a)
                        ders.append(d)
                    at = len(opening) + len(acts) - 1
                    for x in hits | more:
                        found.setdefault(x, at)
                        known[x] = (view.id_column.get(where[x]) or "id", {"kind": "output", "action": at})
                    progress = True
                if wanted <= set(found) or len(acts) >= 8:
                    break
            if not progress or wanted <= set(found) or len(acts) >= 8:
                break
        for p, c in targets.items():
            if str(c.value) in found:
                cands[p] = Cand(c.value, "output", {"action": found[str(c.value)]})
        return acts, ders

    # --- instantiate -----------------------------------------------------------------------------------
    def instantiate(self, plan: Plan, ctx: SynthContext) -> Draft:
        view = self.an.view
        if view.customer_table is None:
            raise SynthesisError(f"{self.tool}: the domain has no customer table the generic templates can clone.")
        rng = random.Random(int(short_hash(plan.id, plan.seed, self.tool, n=12), 16))
        self._graph = self.an.graph(getattr(ctx, "entity_graph", None))
        tag = ctx.ids.token(plan.id) if isinstance(ctx.ids, IdAllocator) else plan.id
        need = self._anchor_tables()

        def covered(d: str) -> int:
            return sum(1 for ts in need if any(view.owned_rows(d).get(t) for t in ts))

        owners = [d for d in view.customers() if not need or covered(d)]
        owners.sort(key=lambda d: -covered(d))
        donors = self._good_donors + [d for d in owners if d not in self._good_donors]
        head, rest = donors[: len(self._good_donors)], donors[len(self._good_donors) :]
        rng.shuffle(head)
        first = [d for d in rest if covered(d) == len(need)]
        rest = [d for d in rest if d not in first]
        rng.shuffle(first)
        first.sort(key=lambda d: -self._donor_links(d))  # donors whose records join up first
        rng.shuffle(rest)
        rest = first + rest
        for donor in (head + rest)[: MAX_DONORS + len(head)]:
            cid, ident, rows = clone_customer(view, donor, f"{tag}:{donor}", rng)
            crow = rows[view.customer_table][cid]
            opening, oders, facts = self._opening(rows, cid, crow)
            found = self._search(rows, cid, rng, opening)
            if found is None:
                continue
            anchor, cands = found
            if donor not in self._good_donors:
                self._good_donors.append(donor)
            return self._draft(plan, rows, cid, crow, opening, oders, facts, cands, ident)
        self.failures["no working arguments"] += 1
        raise SynthesisError(f"{self.tool}: no trial replayed without an error for plan {plan.id}.")

    def _draft(self, plan, rows, cid, crow, opening, oders, facts, cands, ident) -> Draft:
        look, lders = self._lookups(rows, cid, opening, cands)
        prefix = opening + look
        inner: dict[str, Any] = {}
        say: dict[str, Any] = {}
        args = {p: c.value for p, c in cands.items()}
        ps = self._params()[0]
        decisive: list[str] = []
        lookups: list[str] = []
        for p, c in cands.items():
            if c.source == "constant":  # a fee / rate the documents decide: the agent looks it up
                dollars = f"${c.value:,.2f}" if "fee" in words(p) or ps.get(p, {}).get("type") == "number" else c.value
                inner[p] = {
                    "kind": "rule",
                    "ids": c.where["ids"][:1],
                    "value": {"kind": "literal", "why": f"{dollars}: the document's value, as the tool takes it"},
                }
                decisive += [i for i in c.where["ids"] if i not in decisive]
                if c.value:
                    lookups += [f"${c.value:,.2f}", f"${c.value:g}"]
                continue
            if looked_up(p, ps.get(p, {})) and re.search(r"\bif applicable\b", ps[p].get("description") or "", re.I):
                args[p] = c.value = 0.0 if ps[p].get("type") == "number" else 0
                inner[p] = {"kind": "literal", "why": "a conditional fee whose condition the records do not meet"}
                continue
            if looked_up(p, ps.get(p, {})) and c.source in ("fact", "literal", "enum"):
                inner[p] = {"kind": "literal", "why": f"the agent's decision under {self.docs[:1] or 'the policy'}"}
                continue  # a waiver the agent decides: not the customer's to say
            if c.source == "output":
                inner[p] = {"kind": "output", "action": c.where["action"]}
            elif c.source == "db":
                idc = self.an.view.id_column.get(c.where["table"]) or "id"
                src = next((i for i, a in enumerate(prefix) if str(c.value) in json.dumps(a.arguments)), None)
                if c.value == cid and src is not None:
                    inner[p] = (
                        {"kind": "output", "action": src}
                        if prefix[src].name != self.an.mech.verifier
                        else (oders[src].get(next(iter(k for k, v in prefix[src].arguments.items() if v == cid))))
                    )
                elif c.where.get("column") != idc and identity_kind(c.where.get("column", "")):
                    inner[p] = {"kind": "fact", "key": fact_key(c.where["column"])}
                elif c.where.get("column") != idc and not _same_cell(rows, c):
                    # a reshaped cell (MM/YY of a stored MM/DD/YYYY, an amount's absolute value): the
                    # customer reads it off their card or statement, so it is theirs to say
                    key = fact_key(p)
                    facts[key] = json.dumps(c.value) if isinstance(c.value, bool) else str(c.value)
                    inner[p] = {"kind": "fact", "key": key}
                    say[p] = c.value
                else:
                    inner[p] = {"kind": "db", "table": c.where["table"], "key": {idc: c.where["rid"]},
                                "column": c.where["column"]}  # fmt: skip
                    if c.where.get("column") != idc:
                        key = fact_key(p)
                        facts[key] = str(c.value)
                        say[p] = c.value
            elif c.source in ("literal", "enum"):
                inner[p] = {"kind": "enum"} if c.source == "enum" else {"kind": "literal", "why": c.where["why"]}
                say[p] = c.value
            else:
                key = fact_key(p)
                facts[key] = json.dumps(c.value) if isinstance(c.value, bool) else str(c.value)
                inner[p] = {"kind": "fact", "key": key}
                say[p] = c.value
        acts, rders = self._reach(args, inner)
        actions = prefix + acts
        outs, changed = self.an.run(rows, actions, self._meta(actions))
        if any(e for _, e in outs) or not changed[-1]:
            self.failures["final chain fails"] += 1
            raise SynthesisError(f"{self.tool}: the final chain does not replay cleanly for plan {plan.id}.")
        init, meta = self.an.view.patch(rows)
        meta.update(self._meta(actions))
        docs = self._documents(rows, cands)
        draft = Draft(
            initial_state=init,
            actions=actions,
            derivations=oders + lders + rders,
            facts=facts,
            asks=[self._ask(rows, cid, cands, say, ps)],
            persona={"name": ident.name},
            expect_no_change=False,
            required_documents=docs,
            intent_query=finding_query(self.an.domain, self.intent, docs),
            decisive=decisive,
            lookups=list(dict.fromkeys(lookups)),
            tags=["generic", self.tool],
            description=f"{self.tool} for a new customer ({plan.id}).",
        )
        draft.metadata = meta  # type: ignore[attr-defined]  # the benchmark layout's initial state
        return draft

    def _ask(self, rows, cid, cands, say, ps) -> dict[str, Any]:
        """The request as the customer makes it: the goal in their words, the records they mean told
        apart from their others (SynthesisError when nothing does), and the choices they make, each
        named by its meaning. Record cells, dates and yes/no answers stay facts the agent asks for.
        """
        view = self.an.view
        ids = {rid for rs in rows.values() for rid in rs}
        goal = customer_goal(self.desc)
        refs: list[tuple[str, str]] = []
        for p, c in cands.items():
            v = c.value
            if not isinstance(v, str) or v == cid or v not in ids:
                continue
            table = next(t for t, rs in rows.items() if v in rs)
            if table == view.customer_table:
                continue
            text = describe_record(table, v, rows, ids | {cid})
            if text is None:
                self.failures["record not identifiable"] += 1
                raise SynthesisError(f"{self.tool}: nothing tells record {v} from the customer's other {table}.")
            refs.append((p, text, table))
        if len(refs) > 1 and any(words(p) & {"source", "from"} for p, _, _ in refs):
            goal = re.sub(r"\s+from one [\w ]+? to another\b", "", goal)
        for p, text, table in refs:
            noun = noun_of(table)
            pat = r"\b(?:a|an|the|my|one)\s+(?:[\w-]+\s+){0,2}?" + r"\s+".join(map(re.escape, noun.split()[-1:]))
            pat += r"s?\b(?:\s*\([^)]*\))?"
            pw = words(p)
            if len(refs) == 1 and re.search(pat, goal, flags=re.I):
                goal = re.sub(pat, lambda _m, t=text: t, goal, count=1, flags=re.I)
            elif pw & {"source", "from"}:
                goal += f", from {text}"
            elif pw & {"destination", "to"}:
                goal += f", to {text}"
            else:
                goal += f" ({text})"
        choices = {p: v for p, v in say.items() if self._states(p, v, ps, say)}
        said = {p: detail(p, ps.get(p, {}), v) for p, v in choices.items()}
        for p in [p for p in say if p not in choices]:
            say.pop(p)
        fields = ["{" + p + "}" for p in said]
        body = ", ".join(fields[:-1]) + (" and " if len(fields) > 1 else "") + (fields[-1] if fields else "")
        pats = [
            f"Hi, I'd like to {goal}." + (f" Specifically: {body}." if body else ""),
            f"Could you help me {goal}?" + (f" I'd like {body}." if body else ""),
            f"Hello, I need to {goal}." + (f" Details: {body}." if body else ""),
        ]
        return {"intent": goal, "say": said, "claims": {}, "patterns": pats}

    def _states(self, p: str, v: Any, ps: dict, say: dict) -> bool:
        """Whether the customer states ``p`` in the request (a choice), not only when asked (a fact)."""
        spec = ps.get(p, {})
        if v == "customer request":  # a free-text placeholder: the agent may ask, the customer need not say it
            return False
        if isinstance(v, bool):  # a yes/no the agent asks for, unless it is the call's only choice
            return sum(1 for q in say if q != p) == 0
        if isinstance(v, str) and re.fullmatch(r"\d{1,2}/\d{1,2}/\d{2,4}|\d{4}-\d{2}-\d{2}", v):
            return "new" in words(p)
        if spec.get("enum") or "new" in words(p) or "reason" in words(p):
            return True
        cand_src = spec.get("type") in ("number", "integer") or isinstance(v, (str, int, float))
        return cand_src and not (words(p) & {"cvv", "last", "last4", "expiration", "digits"})


def customer_asks(an: Analysis, name: str) -> bool:
    """Whether a customer would ask support for what tool ``name`` does: not a tool the documents keep
    for staff (``internal use only``), nor one the customer runs alone that no document names and
    that records their own spending (a purchase is no support request).
    """
    t = an.mech.tools[name]
    desc = (t.description or "").lower()
    if re.search(r"\b(internal|staff|agent|backend)[ -](use|only)\b", desc):
        return False
    named = any(name in (d.text or "") for d in an.domain.documents)
    own = t.side == "user" and not t.hidden and not t.handover
    return not (own and not named and words(desc) & {"transaction", "purchase"})


def templates(domain: Any, entity_graph: Any = None, tool_graph: Any = None) -> dict[str, GenericTemplate]:
    """One template per write tool of ``domain`` (the tool graph's write tools when one is given)."""
    an = Analysis.of(domain)
    allowed = None
    if tool_graph is not None and hasattr(tool_graph, "write_tools"):
        try:
            allowed = set(tool_graph.write_tools()) or None
        except Exception:  # noqa: BLE001 - an unusable graph falls back to the schema analysis
            allowed = None
    out = {}
    for name in an.mech.write_tools(allowed):
        if not customer_asks(an, name):
            continue
        t = GenericTemplate(name, an)
        out[t.name] = t
    return out


# the driver (wording stand-in, batch run, leakage) lives beside: generic_run.py
from .generic_run import draft_task, leakage, synthesize  # noqa: E402
