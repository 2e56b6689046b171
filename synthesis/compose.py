"""The composer: multi-request sessions from verified single-request tasks.

A composite task joins 2 to 4 single-request tasks of one customer profile into one conversation:

- no two components whose write tools are joined by a conflict edge of the tool graph;
- one customer: components 2..k are rewritten onto component 1's customer (its id and identifying
  values replaced in initial state, actions, derivations, facts and wording; their customer rows
  dropped), so only tasks with an equal profile (``plan.persona[profile_key]``) and clock are joined;
- collision-free record ids: a join whose initial states hold one record id with different rows is refused;
- a single identity check: a repeated identity call of the same customer (``find_customer``,
  ``verify_identity``, ...) and a repeated unlock of the same tool are dropped, and the derivations
  that point at actions by index are re-indexed;
- one multi-intent scenario: the template backend concatenates the requests with connectives and
  merges the facts (component 1's persona); with an ``llm``, role ``"composition"`` rewrites the
  persona, requests and instructions, validated so that no looked-up value leaks into them.

Joins follow the tool graph: a component that shares a dependency edge or a required document with
the session is preferred, then the session is filled at random (seeded). The caller verifies and
reviews the composites again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tau_env import Action, Scenario, Task, check_task
from tau_env.error import CheckError

from .errors import SynthesisError
from .records import Provenance

#: Identity tools whose repeat for the same customer is dropped.
IDENTITY_TOOLS = frozenset(
    {"find_customer", "verify_identity", "get_customer", "log_verification", "get_user_details", "find_user"}
)
#: Tools that unlock or hand over another tool: a repeat for the same tool is dropped.
UNLOCK_TOOLS = frozenset(
    {"unlock_tool", "hand_over_tool", "unlock_discoverable_agent_tool", "give_discoverable_user_tool"}
)
#: Table names tried, in order, for the customer table when none is given.
CUSTOMER_TABLES = ("customers", "users", "clients", "customer", "user", "accounts_holders")
CONNECTIVES = ("Also, ", "One more thing: ", "And finally, ")
COMPOSITION_PROMPT = (
    "You merge several customer-service requests of one customer into one coherent conversation. "
    "Write the customer's persona (one or two sentences), their requests in the given order (one message "
    "per request, natural, each may refer to the earlier ones) and instructions for a user simulator. "
    "Keep every detail the customer gives; never add a value the agent must look up (ids, balances, fees, "
    "dates from the bank's records). Answer with one JSON object: "
    '{"persona": str, "requests": [str, ...], "instructions": str}.'
)


@dataclass
class _Single:
    """What the composer knows of one single-request task."""

    task: Task
    prov: Provenance
    profile: Any
    writes: frozenset[str]
    customer: str | None
    customer_row: dict[str, Any] | None
    ends: bool
    docs: frozenset[str]
    template: str = ""
    on_customer: frozenset[str] = frozenset()
    uses: int = 0
    #: Decided by its own customer's age or seniority: joined only as the first component.
    pinned: bool = False


# --- small helpers -------------------------------------------------------------------------------
def _walk_replace(value: Any, mapping: dict[str, str], pattern: re.Pattern[str] | None) -> Any:
    """``value`` with every mapped string replaced (whole values, and whole-token occurrences in text)."""
    if pattern is None:
        return value
    if isinstance(value, str):
        if value in mapping:
            return mapping[value]
        return pattern.sub(lambda m: mapping[m.group(0)], value)
    if isinstance(value, dict):
        return {_walk_replace(k, mapping, pattern): _walk_replace(v, mapping, pattern) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk_replace(v, mapping, pattern) for v in value]
    return value


def _pattern(mapping: dict[str, str]) -> re.Pattern[str] | None:
    if not mapping:
        return None
    alts = "|".join(re.escape(k) for k in sorted(mapping, key=len, reverse=True))
    return re.compile(rf"(?<![A-Za-z0-9$])(?:{alts})(?![A-Za-z0-9]|[.,]\d)")


def _texts_of(args: dict[str, Any]) -> set[str]:
    return {str(v) for v in args.values() if isinstance(v, str | int) and not isinstance(v, bool)}


def _digits(s: str) -> str:
    return "".join(c for c in s if c.isdigit())


def _pk(table: str, row: dict[str, Any], domain: Any) -> str | None:
    """The primary-key column of ``table`` (the domain's schema, else the first ``*id`` column)."""
    if domain is not None:
        info = domain.schema.tables.get(table)
        if info is not None and len(info.primary_key) == 1:
            return info.primary_key[0]
    for col in row:
        if col == "id" or col.endswith("_id"):
            return col
    return next(iter(row), None)


def _canon(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, ensure_ascii=False, default=str)


def _provenance(task: Task) -> Provenance:
    try:
        return Provenance.of(task)
    except (KeyError, TypeError):
        return Provenance(plan={})


def _profile(prov: Provenance, profile_key: str | Sequence[str], row: dict[str, Any] | None = None) -> Any:
    """The values that must be equal across a composite: from the customer's own row when it holds
    the key (the tier the chain was computed for), else from the plan's persona.
    """
    persona = prov.plan.get("persona") or {}
    keys = [profile_key] if isinstance(profile_key, str) else list(profile_key)
    return tuple(json.dumps(row[k] if row and k in row else persona.get(k), sort_keys=True, default=str) for k in keys)


#: Decisive constants about the customer's age or seniority: a chain they decide was computed for
#: its own customer's birth date or start date, which moving it onto another customer would change.
_PERSONAL_RULE = re.compile(r"(^|[/_~])(age|ages|aged|account_age|since|seniority|birthday)([/_~]|$)")


def _pinned(prov: Provenance) -> bool:
    """Whether the chain depends on its customer beyond the profile (so it may only come first)."""
    return any(_PERSONAL_RULE.search(str(c)) for c in prov.decisive)


def _customer_table(domain: Any, tasks: Iterable[Task]) -> str | None:
    names: list[str] = list(domain.schema.tables) if domain is not None else []
    if not names:
        names = sorted({t for task in tasks for t in task.initial_state})
    for cand in CUSTOMER_TABLES:
        if cand in names:
            return cand
    return next((n for n in names if "customer" in n or n.endswith("users")), None)


class _Info:
    """Settings shared by the analysis of every single."""

    def __init__(self, tool_graph: Any, domain: Any, customer_table: str | None, customer_key: str | None) -> None:
        self.graph = tool_graph
        self.domain = domain
        self.table = customer_table
        self.key = customer_key
        writes = getattr(tool_graph, "write_tools", None)
        self.graph_writes: set[str] | None = set(writes()) if callable(writes) else None
        self.ends: set[str] = set()
        nodes = getattr(tool_graph, "nodes", None)
        if isinstance(nodes, dict):
            self.ends = {n for n, node in nodes.items() if getattr(node, "ends_episode", False)}
        if domain is not None:
            box = domain.toolbox("all")
            self.ends |= {n for n, t in box.tools.items() if t.ends_episode}
        self._near: dict[str, set[str]] = {}

    def near(self, tool: str) -> set[str]:
        """The tools a dependency edge joins to ``tool`` (cached)."""
        if tool not in self._near:
            deps = getattr(self.graph, "dependencies", None)
            edges = deps(tool) if callable(deps) else []
            self._near[tool] = {x for e in edges for x in (getattr(e, "src", None), getattr(e, "dst", None))} - {tool}
        return self._near[tool]

    def writes_of(self, task: Task, prov: Provenance) -> frozenset[str]:
        names = set(prov.plan.get("tools") or [])
        acts = {a.name for a in task.actions}
        names |= acts & self.graph_writes if self.graph_writes is not None else acts
        return frozenset(names - IDENTITY_TOOLS - UNLOCK_TOOLS)  # the shared identity check is deduplicated

    def customer_of(self, task: Task) -> tuple[str | None, dict[str, Any] | None]:
        """The task's customer id and row (from its initial state, else the domain's seed)."""
        if self.table is None:
            return None, None
        rows = [r for r in task.initial_state.get(self.table, []) if not r.get("_delete")]
        key = self.key or (_pk(self.table, rows[0], self.domain) if rows else None)
        if len(rows) == 1 and key in rows[0]:
            return str(rows[0][key]), rows[0]
        if rows:
            return None, None  # several customers: not composable
        if key is None and self.domain is not None:
            seed_rows = self.domain.seed.get(self.table) or [{}]
            key = _pk(self.table, seed_rows[0], self.domain)
        ids = {str(a.arguments[key]) for a in task.actions if key and key in a.arguments}
        if len(ids) != 1:
            return None, None
        cid = ids.pop()
        if self.domain is not None:
            for r in self.domain.seed.get(self.table, []):
                if str(r.get(key)) == cid:
                    return cid, dict(r)
        return cid, None

    def single(self, task: Task, profile_key: str | Sequence[str]) -> _Single:
        prov = _provenance(task)
        cid, row = self.customer_of(task)
        writes = self.writes_of(task, prov)
        return _Single(
            task=task,
            prov=prov,
            profile=(_profile(prov, profile_key, row), task.clock),
            pinned=_pinned(prov),
            writes=writes,
            customer=cid,
            customer_row=row,
            ends=any(a.name in self.ends for a in task.actions),
            docs=frozenset(task.required_documents),
            template=str(prov.plan.get("template") or task.id),
            on_customer=frozenset(a.name for a in task.actions if a.name in writes and cid in _texts_of(a.arguments)),
        )

    def conflict(self, a: _Single, b: _Single) -> bool:
        """Conflict edges between their writes, or one write tool both call on their customer's own row
        (one row once they share the customer: e.g. two contact-details updates).
        """
        return bool(a.on_customer & b.on_customer) or any(self.graph.conflict(x, y) for x in a.writes for y in b.writes)

    def linked(self, a: _Single, b: _Single) -> int:
        """How strongly ``b`` follows ``a`` along the tool graph: dependency edges, then shared documents."""
        score = sum(2 * len(self.near(w) & b.writes) for w in a.writes)
        return score + len(a.docs & b.docs)


# --- rewriting one component onto the session's customer -----------------------------------------
def _customer_mapping(first: _Single, other: _Single, key: str | None) -> dict[str, str] | None:
    """Replacements that move ``other`` onto ``first``'s customer; None when that is impossible."""
    if first.customer is None or other.customer is None:
        return None
    if first.customer == other.customer:
        return {}
    if first.customer_row is None or other.customer_row is None:
        return None
    t = other.task
    used = json.dumps([[a.arguments for a in t.actions], t.scenario.model_dump()], ensure_ascii=False, default=str)
    mapping = {other.customer: first.customer}
    for col, v in other.customer_row.items():
        w = first.customer_row.get(col)
        if col == key or not isinstance(v, str) or not isinstance(w, str) or v == w or len(v) < 3:
            continue
        dv, dw = _digits(v), _digits(w)
        last4 = len(dv) >= 7 and len(dw) >= 7 and dv[-4:] != dw[-4:] and dv[-4:] in used
        if v not in used and not last4:
            continue  # not an identifying value this task uses (e.g. a tenure date): left alone
        mapping[v] = w
        if last4:
            mapping.setdefault(dv[-4:], dw[-4:])
        if "name" in col and " " in v.strip() and " " in w.strip():
            if v.split()[0] != w.split()[0]:
                mapping.setdefault(v.split()[0], w.split()[0])
    return mapping


def _rewrite(s: _Single, mapping: dict[str, str], table: str | None, domain: Any) -> tuple[Task, Provenance]:
    """``s``'s task and provenance with ``mapping`` applied and its own customer row dropped."""
    pat = _pattern(mapping)
    data = _walk_replace(s.task.model_dump(), mapping, pat)
    prov = Provenance.from_dict(_walk_replace(s.prov.to_dict(), mapping, pat))
    if mapping and table in data["initial_state"]:
        rows = data["initial_state"][table]
        target = mapping.get(str(s.customer), s.customer)
        kept = [r for r in rows if str(r.get(_pk(table, r, domain) or "")) != target]
        if kept:
            data["initial_state"][table] = kept
        else:
            del data["initial_state"][table]
    return Task.model_validate(data), prov


def _records(task: Task, domain: Any) -> dict[tuple[str, str], str]:
    out = {}
    for table, rows in task.initial_state.items():
        for r in rows:
            k = _pk(table, r, domain)
            if k is not None and k in r:
                out[(table, str(r[k]))] = _canon(r)
    return out


def _remap(deriv: Any, index: dict[int, int], facts: dict[str, str]) -> Any:
    """A derivation with ``output`` action indices and ``fact`` keys moved to the composite's."""
    if isinstance(deriv, list):
        return [_remap(d, index, facts) for d in deriv]
    if not isinstance(deriv, dict):
        return deriv
    out = {k: _remap(v, index, facts) for k, v in deriv.items()}
    if out.get("kind") == "output" and isinstance(deriv.get("action"), int):
        out["action"] = index.get(deriv["action"], deriv["action"])
    if out.get("kind") == "fact" and isinstance(deriv.get("key"), str):
        out["key"] = facts.get(deriv["key"], deriv["key"])
    return out


_GREETING = re.compile(r"^(hi|hello|hey|good (morning|afternoon|evening))( there)?[,.!]*\s+", re.I)


def _lead(text: str, connective: str) -> str:
    """A later request opened by a connective (its greeting dropped: the chat has begun)."""
    text = _GREETING.sub("", text.strip()) or text
    first = text.split(maxsplit=1)[0] if text.strip() else ""
    keep = first.rstrip(",.!?") in ("I", "I'm", "I've", "I'd", "I'll") or first.isupper() or not first[:2].isalpha()
    return connective + (text if keep else text[:1].lower() + text[1:])


_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth")


@dataclass
class _Parts:
    """A composite before its wording."""

    tasks: list[Task]
    provs: list[Provenance]
    actions: list[Action]
    derivations: list[dict[str, Any]]
    facts: dict[str, str]
    user_facts: list[str]
    unknown: list[str]
    initial_state: dict[str, list[dict[str, Any]]]


def _assemble(parts: list[tuple[Task, Provenance]]) -> _Parts:
    actions: list[Action] = []
    derivs: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    facts: dict[str, str] = {}
    user_facts: list[str] = []
    unknown: list[str] = []
    state: dict[str, list[dict[str, Any]]] = {}
    for task, prov in parts:
        rename: dict[str, str] = {}
        intent = str(prov.plan.get("intent") or task.id)
        for k, v in task.scenario.facts.items():
            if k not in facts:
                facts[k] = v
            elif facts[k] != v:
                new = f"{k} ({intent})"
                rename[k] = new
                facts[new] = v
        for k in prov.user_facts:
            k = rename.get(k, k)
            if k not in user_facts:
                user_facts.append(k)
        unknown += [u for u in task.scenario.unknown if u not in unknown]
        index: dict[int, int] = {}
        for i, a in enumerate(task.actions):
            if a.name in IDENTITY_TOOLS or a.name in UNLOCK_TOOLS:
                key = json.dumps([a.requestor, a.name, a.arguments], sort_keys=True, default=str)
                if key in seen:
                    index[i] = seen[key]
                    continue
                seen[key] = len(actions)
            index[i] = len(actions)
            actions.append(a)
        for i in range(len(task.actions)):
            if index[i] == len(derivs):  # a kept action (dropped ones point back at earlier ones)
                d = prov.derivations[i] if i < len(prov.derivations) else {}
                derivs.append(_remap(d, index, rename))
        for table, rows in task.initial_state.items():
            have = state.setdefault(table, [])
            canon = {_canon(r) for r in have}
            have += [r for r in rows if _canon(r) not in canon]
    return _Parts([t for t, _ in parts], [p for _, p in parts], actions, derivs, facts, user_facts, unknown, state)


def _template_wording(p: _Parts) -> dict[str, Any]:
    requests: list[str] = []
    k = len(p.tasks)
    for i, t in enumerate(p.tasks):
        text = " ".join(r.strip() for r in t.scenario.requests)
        if i > 0:
            conn = CONNECTIVES[2] if i == k - 1 and k > 2 else CONNECTIVES[0] if i == 1 else CONNECTIVES[1]
            text = _lead(text, conn)
        requests.append(text)  # one message per component: the oracle's closing line repeats once per message
    instr, said = [], set()
    for i, t in enumerate(p.tasks):
        sentences = [x for x in re.split(r"(?<=[.!?])\s+", t.scenario.instructions.strip()) if x and x not in said]
        said |= set(sentences)
        if sentences:
            lead = f"For your {_ORDINALS[min(i, len(_ORDINALS) - 1)]} request: " if len(p.tasks) > 1 else ""
            instr.append(lead + " ".join(sentences))
    return {"persona": p.tasks[0].scenario.persona, "requests": requests, "instructions": " ".join(instr)}


def _composite_id(ids: Sequence[str]) -> str:
    joined = "+".join(ids)
    if len(joined) <= 120:
        return f"c[{joined}]"
    return "c-" + hashlib.sha256("\x1f".join(ids).encode("utf-8", "surrogatepass")).hexdigest()[:20]


def _build(p: _Parts, wording: dict[str, Any], backend: str, seed: int) -> Task:
    ids = [t.id for t in p.tasks]
    cid = _composite_id(ids)
    plans = [pr.plan for pr in p.provs]
    outcomes = [pr.outcome for pr in p.provs]
    outcome = "transfer" if "transfer" in outcomes else "success" if "success" in outcomes else outcomes[-1]
    tools = list(dict.fromkeys(x for pl in plans for x in (pl.get("tools") or [])))
    plan = {
        "id": cid,
        "template": "composite",
        "intent": " + ".join(str(pl.get("intent") or t.id) for pl, t in zip(plans, p.tasks, strict=True)),
        "tools": tools,
        "outcome": outcome,
        "failure_mode": next((pr.failure_mode for pr in p.provs if pr.failure_mode), None),
        "persona": dict(plans[0].get("persona") or {}),
        "rule_keys": list(dict.fromkeys(x for pl in plans for x in (pl.get("rule_keys") or []))),
        "seed": seed,
        "intent_queries": [pr.intent_query for pr in p.provs],  # one search per component (the verifier's)
    }
    prov = Provenance(
        plan=plan,
        derivations=p.derivations,
        user_facts=p.user_facts,
        intent_query=" ; ".join(pr.intent_query for pr in p.provs if pr.intent_query),
        outcome=outcome,
        failure_mode=plan["failure_mode"],
        decisive=list(dict.fromkeys(x for pr in p.provs for x in pr.decisive)),
        components=ids,
        versions={**p.provs[0].versions, "backend": backend, "composer": 1},
    )
    scenario = Scenario(
        persona=wording["persona"],
        requests=wording["requests"],
        facts=p.facts,
        unknown=p.unknown,
        instructions=wording["instructions"],
    )
    return Task(
        id=cid,
        description="Composite of " + "; ".join(t.description or t.id for t in p.tasks),
        scenario=scenario,
        initial_state=p.initial_state,
        actions=p.actions,
        expect_no_change=all(t.expect_no_change for t in p.tasks),
        required_documents=list(dict.fromkeys(d for t in p.tasks for d in t.required_documents)),
        tags=list(dict.fromkeys([*(x for t in p.tasks for x in t.tags), "composite"])),
        clock=p.tasks[0].clock,
        metadata={"synthesis": prov.to_dict()},
    )


# --- choosing the joins --------------------------------------------------------------------------
class _Joiner:
    def __init__(self, info: _Info, singles: list[_Single]) -> None:
        self.info = info
        self.singles = singles
        self.conflicts: dict[tuple[int, int], bool] = {}

    def _conflict(self, i: int, j: int) -> bool:
        key = (min(i, j), max(i, j))
        if key not in self.conflicts:
            self.conflicts[key] = self.info.conflict(self.singles[i], self.singles[j])
        return self.conflicts[key]

    def compatible(self, members: list[int], j: int) -> bool:
        s = self.singles[j]
        if j in members or s.customer is None:
            return False
        first = self.singles[members[0]]
        if s.profile != first.profile or (s.pinned and s.customer != first.customer):
            return False
        if s.ends and any(self.singles[m].ends for m in members):
            return False
        if any(self._conflict(m, j) for m in members):
            return False
        return s.customer == first.customer or (s.customer_row is not None and first.customer_row is not None)

    def join(self, members: list[int]) -> list[tuple[Task, Provenance]] | None:
        """The rewritten components, ends-episode one last; None when their record ids collide."""
        order = [m for m in members if not self.singles[m].ends] + [m for m in members if self.singles[m].ends]
        if order[0] != members[0]:  # keep the first customer's profile as the session's
            order = [members[0]] + [m for m in order if m != members[0]]
            if self.singles[members[0]].ends:
                return None
        first = self.singles[order[0]]
        parts: list[tuple[Task, Provenance]] = []
        seen: dict[tuple[str, str], str] = {}
        for m in order:
            s = self.singles[m]
            mapping = _customer_mapping(first, s, self.info.key) if m != order[0] else {}
            if mapping is None:
                return None
            task, prov = _rewrite(s, mapping, self.info.table, self.info.domain)
            for rec, canon in _records(task, self.info.domain).items():
                if seen.get(rec, canon) != canon:
                    return None  # one record id, two different rows
                seen[rec] = canon
            parts.append((task, prov))
        return parts


def _choose(joiner: _Joiner, n: int, sizes: tuple[int, int], rng: random.Random) -> Iterator[list[int]]:
    lo, hi = sizes
    singles = joiner.singles
    groups: dict[Any, list[int]] = {}
    for i, s in enumerate(singles):
        if s.customer is not None:
            groups.setdefault(s.profile, []).append(i)
    pool = [i for g in groups.values() if len(g) >= lo for i in g]
    made: set[tuple[int, ...]] = set()
    attempts = 0
    while pool and attempts < 20 * n + 100:
        attempts += 1
        least = min(singles[i].uses for i in pool)
        seeds = [i for i in pool if singles[i].uses == least and not singles[i].ends]
        if not seeds:
            seeds = [i for i in pool if not singles[i].ends] or pool
        members = [rng.choice(seeds)]
        size = rng.randint(lo, hi)
        group = groups[singles[members[0]].profile]
        while len(members) < size:
            cands = [j for j in group if joiner.compatible(members, j)]
            if not cands:
                break
            used = {singles[m].template for m in members}
            cands = [j for j in cands if singles[j].template not in used] or cands  # other intents first
            score = {j: sum(joiner.info.linked(singles[m], singles[j]) for m in members) for j in cands}
            best = max(score.values())
            if best > 0 and rng.random() < 0.75:
                cands = [j for j in cands if score[j] == best]
            else:  # fill at random, the less used first
                fewest = min(singles[j].uses for j in cands)
                cands = [j for j in cands if singles[j].uses == fewest]
            members.append(rng.choice(cands))
        key = tuple(sorted(members))
        if len(members) < lo or key in made:
            continue
        made.add(key)
        for m in members:
            singles[m].uses += 1
        yield members


def _plan(
    tasks: Sequence[Task],
    tool_graph: Any,
    n: int,
    seed: int,
    sizes: tuple[int, int],
    profile_key: str | Sequence[str],
    domain: Any,
    customer_table: str | None,
    customer_key: str | None,
) -> list[_Parts]:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise SynthesisError(f"compose: n must be an integer >= 0, got {n!r}.")
    lo, hi = sizes
    if not (isinstance(lo, int) and isinstance(hi, int) and 2 <= lo <= hi):
        raise SynthesisError(f"compose: sizes must be two integers 2 <= lo <= hi, got {sizes!r}; e.g. sizes=(2, 4).")
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})[:5]
        raise SynthesisError(f"compose: task ids must be unique, got repeats {dup}; pass each single once.")
    table = customer_table or _customer_table(domain, tasks)
    info = _Info(tool_graph, domain, table, customer_key)
    singles = [info.single(t, profile_key) for t in tasks]
    joiner = _Joiner(info, singles)
    rng = random.Random(seed)
    out: list[_Parts] = []
    for members in _choose(joiner, n, sizes, rng):
        if len(out) >= n:
            break
        parts = joiner.join(members)
        if parts is None:
            continue
        p = _assemble(parts)
        if domain is not None and _replay_fails(domain, p):
            continue
        out.append(p)
    return out


def _replay_fails(domain: Any, p: _Parts) -> bool:
    """Whether the composite's reference chain fails a replay (an id a component's tool derives from
    content it no longer has, a precondition an earlier component broke).
    """
    probe = _build(p, _template_wording(p), "template", 0)
    try:
        check_task(domain, probe, play=False)
    except CheckError:
        return True
    return False


def compose(
    tasks: Sequence[Task],
    tool_graph: Any,
    n: int,
    *,
    seed: int = 0,
    sizes: tuple[int, int] = (2, 4),
    profile_key: str | Sequence[str] = "tier",
    domain: Any = None,
    customer_table: str | None = None,
    customer_key: str | None = None,
) -> list[Task]:
    """Up to ``n`` composite tasks of ``sizes[0]``..``sizes[1]`` requests from verified singles (template wording).

    Args:
        tasks: Verified single-request tasks (their ``metadata["synthesis"]`` a :class:`Provenance`).
        tool_graph: A ``ToolGraph`` (or any object with ``conflict(a, b)``; ``write_tools()``,
            ``dependencies(tool)`` and ``nodes`` are used when present).
        n: How many composites to make (fewer come back when the pool allows no more).
        seed: Seed of the joins.
        sizes: Fewest and most requests per composite.
        profile_key: The ``plan.persona`` key (or keys) that must be equal across a composite.
        domain: The domain (its schema names the customer table and primary keys, its seed rows
            the customers tasks do not create, its tools those that end an episode); with it, a
            join whose reference chain fails a replay is left out.
        customer_table: The customers' table (default: found from the domain or the tasks).
        customer_key: The customers' id column (default: the table's primary key).

    Returns:
        The composites; each task's provenance lists its components.
    """
    parts = _plan(tasks, tool_graph, n, seed, sizes, profile_key, domain, customer_table, customer_key)
    return [_build(p, _template_wording(p), "template", seed) for p in parts]


# --- LLM wording ---------------------------------------------------------------------------------
_USER_KINDS = frozenset({"fact", "literal", "enum"})


def _texts(value: Any) -> list[str]:
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    text = str(value)
    return [text] if len(text) >= 3 else []


def looked_up_values(p: _Parts) -> set[str]:
    """Texts of the reference arguments the agent must look up (not given by the user), minus any
    the template wording already says.
    """
    said = json.dumps(_template_wording(p), ensure_ascii=False) + json.dumps(p.facts, ensure_ascii=False)
    out: set[str] = set()
    for a, d in zip(p.actions, p.derivations, strict=False):
        for arg, value in a.arguments.items():
            kind = (d.get(arg) or {}).get("kind") if isinstance(d, dict) else None
            if kind is not None and kind not in _USER_KINDS:
                forms = _texts(value)
                if arg.endswith("_cents") and isinstance(value, int) and not isinstance(value, bool) and value:
                    forms += [f"${value / 100:,.2f}", f"${value / 100:.2f}"]
                    forms += [f"${value // 100:,}", f"${value // 100}"] if value % 100 == 0 else []
                out |= {t for t in forms if t not in said}
    return out


def wording_problems(p: _Parts, reply: Any) -> list[str]:
    """Why an LLM's composition reply is unusable (empty when it is fine)."""
    if not isinstance(reply, dict):
        return [f"expected a JSON object, got {type(reply).__name__}"]
    probs = []
    for key in ("persona", "instructions"):
        if not isinstance(reply.get(key, ""), str):
            probs.append(f"{key!r} must be a string")
    reqs = reply.get("requests")
    if not isinstance(reqs, list) or not all(isinstance(r, str) and r.strip() for r in reqs):
        return [*probs, "'requests' must be a list of non-empty strings"]
    if len(reqs) != len(p.tasks):
        probs.append(f"'requests' must hold one message per request ({len(p.tasks)}), got {len(reqs)}")
    text = " ".join([str(reply.get("persona", "")), *reqs, str(reply.get("instructions", ""))])
    leaked = sorted(
        v for v in looked_up_values(p) if re.search(rf"(?<![A-Za-z0-9]){re.escape(v)}(?![A-Za-z0-9])", text)
    )
    if leaked:
        probs.append(f"the wording gives away values the agent must look up: {leaked[:5]}")
    said = " ".join(reqs)
    for value in _request_values(p):
        if value not in said:
            probs.append(f"the requests lost a value the customer gives in them: {value!r}")
    return probs


def _request_values(p: _Parts) -> list[str]:
    """Values of ``fact`` derivations that no fact holds, so the template requests carry them."""
    out = []
    for a, d in zip(p.actions, p.derivations, strict=False):
        for arg, der in (d or {}).items():
            if isinstance(der, dict) and der.get("kind") == "fact" and der.get("key") not in p.facts:
                out += [t for t in _texts(a.arguments.get(arg)) if t not in out]
    return out


async def _llm_wording(p: _Parts, llm: Any, prompts: dict[str, Any] | None, seed: int) -> dict[str, Any] | None:
    system = (prompts or {}).get("composition") or COMPOSITION_PROMPT
    components = [
        {"persona": t.scenario.persona, "requests": t.scenario.requests, "instructions": t.scenario.instructions}
        for t in p.tasks
    ]
    messages = [
        {"role": "system", "content": system},
        {
            "role": "user",
            "content": json.dumps(
                {"components": components, "facts": p.facts, "draft": _template_wording(p)}, ensure_ascii=False
            ),
        },
    ]
    for attempt in range(2):
        reply = await llm.ajson("composition", messages, seed=seed + attempt)
        probs = wording_problems(p, reply)
        if not probs:
            return {k: reply.get(k, "") for k in ("persona", "requests", "instructions")}
        messages = [
            *messages,
            {"role": "assistant", "content": json.dumps(reply, ensure_ascii=False)},
            {"role": "user", "content": "Fix these problems and answer again: " + "; ".join(probs)},
        ]
    return None


async def acompose(
    tasks: Sequence[Task],
    tool_graph: Any,
    n: int,
    *,
    seed: int = 0,
    sizes: tuple[int, int] = (2, 4),
    profile_key: str | Sequence[str] = "tier",
    domain: Any = None,
    customer_table: str | None = None,
    customer_key: str | None = None,
    llm: Any = None,
    prompts: dict[str, Any] | None = None,
) -> list[Task]:
    """:func:`compose`, with the scenario rewritten by ``llm`` (role ``"composition"``) when given.

    A reply that leaks a looked-up value, drops a value the customer gives in a request, or has
    the wrong shape is sent back once with the problems; then the template wording is used
    (``versions["backend"] == "template-fallback"``).
    """
    parts = _plan(tasks, tool_graph, n, seed, sizes, profile_key, domain, customer_table, customer_key)
    if llm is None:
        return [_build(p, _template_wording(p), "template", seed) for p in parts]
    wordings = await asyncio.gather(*(_llm_wording(p, llm, prompts, seed + i) for i, p in enumerate(parts)))
    return [
        _build(p, w, "llm", seed) if w is not None else _build(p, _template_wording(p), "template-fallback", seed)
        for p, w in zip(parts, wordings, strict=True)
    ]
