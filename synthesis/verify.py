"""The verifier: deterministic checks a synthesized task must pass before anyone reviews it.

:func:`verify` runs the checks cheapest first, in stages; a stage with problems ends the run (the
loop regenerates the named component and verifies again, so later, dearer checks would only
repeat what the fix changes):

1. ``task_model``: a dict or JSON line is a valid :class:`tau_env.Task`; ``provenance``: it carries
   ``metadata["synthesis"]`` (:class:`~tau_env.synthesis.records.Provenance`) with one derivation
   per reference action.
2. Static checks, no replay: everything :func:`tau_env.checker.task_problems` finds before a replay
   (``unknown_tool``, ``wrong_side``, ``episode_end``, ``named_tool``, ``missing_document``);
   ``document_not_found``: each required document is in the domain's BM25 top 10 for the plan's
   intent query, or for one of the follow-up searches an agent makes (each decisive rule constant,
   each discoverable tool of the chain by name, each of the customer's requests);
   ``missing_user_fact``: the facts the user must give are in the scenario's facts;
   ``missing_derivation`` / ``untraceable_argument`` for the derivations that need no replay
   (fact, db, constant, rule, literal, enum, and the fields of a ``json`` derivation:
   ``{"kind": "json", "fields": {name: derivation}}`` for an argument holding JSON text, such as
   a dispatcher's ``arguments``). A record id (``*_id``) is never a literal.
3. Replay on isolated databases: the rest of ``task_problems`` (``replay_error``,
   ``nondeterministic``, ``noop_passes``, ``unexpected_change``, ``refusal_changes_state``),
   the do-nothing agent (the initial state's digests against the target's: they must differ
   unless the outcome is a refusal that changes nothing, where they must be equal), and the
   ``output`` derivations (the value's text is in an earlier action's output).
4. ``oracle_play``: the oracle agent with the scripted user reaches reward 1 through the env.

Every :class:`~tau_env.synthesis.records.Problem` names the component to regenerate.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from tau_env import Domain, OracleAgent, ScriptedUser, Task, TauEnv, run_episode
from tau_env.checker import named_tool_problems, task_problems
from tau_env.error import Error, TaskFileError
from tau_env.tasks import parse_json, validation_message
from tau_env.tools import ArgumentError

from .records import Problem, Provenance

#: Every check name :func:`verify` reports, with the component it blames.
CHECKS = {
    "task_model": "plan",
    "provenance": "plan",
    "unknown_tool": "actions",
    "wrong_side": "actions",
    "episode_end": "actions",
    "named_tool": "actions",
    "missing_document": "plan",
    "document_not_found": "plan",
    "missing_user_fact": "scenario",
    "missing_derivation": "actions",
    "untraceable_argument": "actions",
    "replay_error": "actions",
    "nondeterministic": "actions",
    "noop_passes": "actions",
    "unexpected_change": "actions",
    "refusal_changes_state": "actions",
    "oracle_play": "scenario",
    "check_task": "actions",
}
#: The component an untraceable argument blames, by derivation kind.
KIND_COMPONENT = {
    "fact": "scenario",
    "db": "initial_state",
    "output": "actions",
    "constant": "actions",
    "rule": "actions",
    "literal": "actions",
    "enum": "actions",
    "json": "actions",
}
#: How many search hits must contain every required document.
SEARCH_DEPTH = 10

# task_problems' sentences -> check names (its wording is tau_env's; an unknown sentence is "check_task").
_CHECKER_PATTERNS = [
    (re.compile(r"^action \d+: no tool named"), "unknown_tool"),
    (re.compile(r"^action \d+: .* is a \w+ tool but the requestor"), "wrong_side"),
    (re.compile(r"ends the episode, so it must be the last action"), "episode_end"),
    (re.compile(r"names no discoverable|must be a tool name"), "named_tool"),
    (re.compile(r"^required document .* does not exist"), "missing_document"),
    (re.compile(r"failed in the reference replay"), "replay_error"),
    (re.compile(r"^expect_no_change is set but"), "unexpected_change"),
    (re.compile(r"leave the database unchanged"), "noop_passes"),
    (re.compile(r"two replays of the reference actions differ"), "nondeterministic"),
]


def problem(check: str, message: str, component: str | None = None) -> Problem:
    """A :class:`Problem` of ``check``, blaming its usual component unless ``component`` is given."""
    return Problem(check, component or CHECKS.get(check, "actions"), message)


def verify_json(
    line: str | bytes, domain: Domain, entity_graph: Any = None, tool_graph: Any = None, *, play: bool = True
) -> list[Problem]:
    """:func:`verify` of one JSON text (a task file's line); unreadable JSON is a ``task_model`` problem."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as e:
            return [problem("task_model", f"the task is not UTF-8 text ({e.reason} at byte {e.start}).")]
    try:
        obj = parse_json(line, "task", TaskFileError)
    except Error as e:
        return [problem("task_model", f"{e} Expected one JSON object per task.")]
    return verify(obj, domain, entity_graph, tool_graph, play=play)


def as_task(task: Task | dict[str, Any] | str) -> tuple[Task | None, list[Problem]]:
    """``task`` as a :class:`Task` (a dict or JSON text is validated), or None and the problem."""
    if isinstance(task, Task):
        return task, []
    if isinstance(task, (str, bytes)):
        try:
            task = parse_json(task if isinstance(task, str) else task.decode("utf-8", "replace"), "task", TaskFileError)
        except Error as e:
            return None, [problem("task_model", f"{e} Expected one JSON object per task.")]
    if not isinstance(task, dict):
        return None, [problem("task_model", f"a task must be a JSON object, got {type(task).__name__}.")]
    try:
        return Task.model_validate(task), []
    except ValueError as e:  # pydantic's ValidationError is a ValueError
        msg = validation_message(e, "task") if hasattr(e, "errors") else str(e)
        return None, [problem("task_model", f"not a valid task: {msg}")]


def verify(
    task: Task | dict[str, Any] | str,
    domain: Domain,
    entity_graph: Any = None,
    tool_graph: Any = None,
    *,
    play: bool = True,
) -> list[Problem]:
    """Every problem of a synthesized task, cheapest checks first (empty: verified).

    Args:
        task: The task, its dict or its JSON text.
        domain: The domain it is played on (its tasks are not used: the task needs not be one of them).
        entity_graph: The domain's entity graph (for ``constant`` and ``rule`` derivations); built
            without a model when None and a derivation needs it.
        tool_graph: The domain's tool graph (unused by the checks so far; accepted for the contract).
        play: Run the oracle-with-scripted-user episode (the dearest check, last).
    """
    t, problems = as_task(task)
    if t is None:
        return problems
    prov, problems = _provenance(t)
    if problems:
        return problems
    problems = _static_problems(t, domain, prov, entity_graph)
    if problems:
        return problems
    d = domain.with_tasks([t])
    problems = _replay_problems(t, d, prov)
    if problems or not play:
        return problems
    return _play_problems(t, d)


# --- stage 1: the provenance --------------------------------------------------------------------
def _provenance(task: Task) -> tuple[Provenance | None, list[Problem]]:
    raw = task.metadata.get("synthesis")
    if not isinstance(raw, dict):
        return None, [
            problem("provenance", "metadata.synthesis is missing: a synthesized task carries its Provenance.")
        ]
    try:
        prov = Provenance.from_dict(raw)
    except TypeError as e:
        return None, [problem("provenance", f"metadata.synthesis is not a Provenance: {e}.")]
    if not isinstance(prov.plan, dict):
        return None, [problem("provenance", "metadata.synthesis.plan must be an object (Plan.to_dict()).")]
    derivs = prov.derivations
    if not isinstance(derivs, list) or not all(isinstance(d, dict) for d in derivs):
        return None, [problem("provenance", "metadata.synthesis.derivations must be a list of objects.")]
    if len(derivs) != len(task.actions):
        return None, [
            problem(
                "missing_derivation",
                f"{len(task.actions)} reference actions but {len(derivs)} derivation entries; "
                "expected one {argument: derivation} object per action.",
            )
        ]
    if not isinstance(prov.user_facts, list) or not isinstance(prov.intent_query, str):
        return None, [problem("provenance", "metadata.synthesis.user_facts must be a list and intent_query a string.")]
    return prov, []


# --- stage 2: static checks ---------------------------------------------------------------------
def _classify(messages: list[str], prov: Provenance | None = None) -> list[Problem]:
    out = []
    for m in messages:
        check = next((c for pat, c in _CHECKER_PATTERNS if pat.search(m)), "check_task")
        if check == "unexpected_change" and prov is not None and prov.outcome == "refusal":
            check = "refusal_changes_state"
        out.append(problem(check, m))
    return out


def _static_problems(task: Task, domain: Domain, prov: Provenance, entity_graph: Any) -> list[Problem]:
    problems = _classify(_checker_static(domain, task), prov)
    if problems:
        return problems
    query = prov.intent_query or str(prov.plan.get("intent", ""))
    if task.required_documents and not query.strip():
        problems.append(problem("document_not_found", "the provenance has no intent_query to search with."))
    elif task.required_documents:
        queries = [query, *_follow_up_queries(task, domain, prov, entity_graph)]
        found: set[str] = set()
        for q in queries:
            found.update(h.doc_id for h in domain.kb.search(q, k=SEARCH_DEPTH, method="bm25"))
            if found.issuperset(task.required_documents):
                break
        for doc in task.required_documents:
            if doc not in found:
                problems.append(
                    problem(
                        "document_not_found",
                        f"required document {doc!r} is not among the top {SEARCH_DEPTH} BM25 hits for the "
                        f"intent query {query!r}, nor for the {len(queries) - 1} follow-up searches (decisive rules, "
                        "the chain's tools, the requests); make the intent query name what the document is about.",
                    )
                )
    for key in prov.user_facts:
        if not str(task.scenario.facts.get(key, "")).strip():
            problems.append(
                problem(
                    "missing_user_fact",
                    f"the user must give {key!r} but scenario.facts has no such key "
                    f"(it has {sorted(task.scenario.facts)}).",
                )
            )
    if problems:
        return problems
    tracer = _Tracer(task, domain, entity_graph)
    for i, (action, derivs) in enumerate(zip(task.actions, prov.derivations, strict=True)):
        for arg, value in action.arguments.items():
            d = derivs.get(arg)
            if not isinstance(d, dict) or "kind" not in d:
                problems.append(
                    problem(
                        "missing_derivation",
                        f"action {i} ({action.name}): argument {arg!r} has no derivation "
                        "(expected {'kind': fact|db|output|constant|rule|literal|enum, ...}).",
                    )
                )
                continue
            why = tracer.trace(i, action.name, arg, value, d, replayed=False)
            if why:
                problems.append(_untraceable(i, action.name, arg, value, d, why))
    return problems


def _follow_up_queries(task: Task, domain: Domain, prov: Provenance, entity_graph: Any) -> list[str]:
    """The searches an agent makes after the intent's: each decisive rule constant (its section, name
    and determining attributes), each discoverable tool the chain calls (by name), and each of the
    customer's requests (their own words).
    """
    ids = list(prov.decisive)
    for derivs in prov.derivations:
        for d in derivs.values():
            while isinstance(d, dict):
                ids += [i for i in d.get("ids", []) if isinstance(i, str)] if isinstance(d.get("ids"), list) else []
                d = (
                    d.get("value")
                    if d.get("kind") == "rule"
                    else d.get("inputs")
                    if d.get("kind") == "constant"
                    else None
                )
    queries = []
    graph = entity_graph if entity_graph is not None or not ids else _entity_graph(domain)
    for cid in dict.fromkeys(ids):
        try:
            c = graph.by_id(cid)
        except (AttributeError, KeyError, TypeError):
            continue
        attrs = getattr(c, "attributes", {}) or {}
        words = [attrs.get("section", ""), getattr(c, "name", "")]
        words += [str(v) for k, v in attrs.items() if k not in ("section", "row", "column", "label", "quote")]
        queries.append(" ".join(w for w in words if w))
    box = domain.toolbox("all").tools
    queries += [a.name for a in task.actions if a.name in box and box[a.name].discoverable]
    queries += task.scenario.requests
    return list(dict.fromkeys(q for q in queries if q.strip()))


def _checker_static(domain: Domain, task: Task) -> list[str]:
    """The checks :func:`~tau_env.checker.task_problems` makes before its replay, in its words (it
    runs them again in stage 3; here they come before the dearer static checks).
    """
    box = domain.toolbox("all")
    problems: list[str] = []
    for i, a in enumerate(task.actions):
        t = box.tools.get(a.name)
        if t is None:
            problems.append(f"action {i}: no tool named {a.name[:80]!r}.")
        elif t.side != a.requestor:
            problems.append(f"action {i}: {a.name!r} is a {t.side} tool but the requestor is {a.requestor!r}.")
        elif t.ends_episode and i != len(task.actions) - 1:
            problems.append(f"action {i}: {a.name!r} ends the episode, so it must be the last action.")
        else:
            problems += named_tool_problems(box, i, a)
    for doc in task.required_documents:
        if domain.kb.get(doc) is None:
            problems.append(f"required document {doc!r} does not exist.")
    return problems


def _untraceable(i: int, name: str, arg: str, value: Any, d: dict[str, Any], why: str) -> Problem:
    kind = str(d.get("kind"))
    return problem(
        "untraceable_argument",
        f"action {i} ({name}): argument {arg!r} = {json.dumps(value, ensure_ascii=False)[:80]} is untraceable "
        f"by its {kind} derivation: {why}",
        KIND_COMPONENT.get(kind, "actions"),
    )


# --- derivations --------------------------------------------------------------------------------
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


class _Tracer:
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
            self._graph = _entity_graph(self.domain)
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


def trace_outputs(task: Task, prov: Provenance, tracer: _Tracer) -> list[Problem]:
    """The ``output`` derivations (also inside rules and JSON fields), once ``tracer.outputs`` holds
    the replay's outputs.
    """
    problems = []
    for i, (action, derivs) in enumerate(zip(task.actions, prov.derivations, strict=True)):
        for arg, value in action.arguments.items():
            d = derivs.get(arg)
            if isinstance(d, dict):
                why = tracer.trace(i, action.name, arg, value, d, replayed=True)
                if why:
                    problems.append(_untraceable(i, action.name, arg, value, d, why))
    return problems


_GRAPHS: dict[int, tuple[Domain, Any]] = {}


def _entity_graph(domain: Domain) -> Any:
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


# --- stage 3: replay ------------------------------------------------------------------------------
def _replay_problems(task: Task, domain: Domain, prov: Provenance) -> list[Problem]:
    problems = _classify(task_problems(domain, task, play=False), prov)
    if problems:
        return problems
    start = domain.start_db(task)
    initial = start.table_digests()
    start.close()
    target = domain.grader.target(task).digests
    refusal_no_change = prov.outcome == "refusal" and task.expect_no_change
    if refusal_no_change and initial != target:
        changed = sorted(k for k in target if target[k] != initial.get(k))
        problems.append(
            problem(
                "refusal_changes_state", f"a refusal that changes nothing, but the reference actions change {changed}."
            )
        )
    elif not refusal_no_change and initial == target:
        problems.append(
            problem(
                "noop_passes",
                f"a do-nothing agent would pass: the target state equals the initial state (outcome {prov.outcome!r}); "
                "only a refusal may leave the database as it is.",
            )
        )
    db, steps = domain.replay(task)
    db.close()
    tracer = _Tracer(task, domain, None)
    tracer.outputs = [s.output for s in steps]
    return problems + trace_outputs(task, prov, tracer)


# --- stage 4: play --------------------------------------------------------------------------------
def _play_problems(task: Task, domain: Domain) -> list[Problem]:
    env = TauEnv(domain, max_steps=max(domain.max_steps, 4 * len(task.actions) + 20))
    try:
        r = run_episode(env, OracleAgent(), ScriptedUser(), task.id)
    finally:
        env.close()
    if r.reward == 1.0:
        return []
    return [
        problem(
            "oracle_play",
            f"the oracle agent with the scripted user scored {r.reward} (ended by {r.termination_reason}); "
            f"differing tables: {r.grade.get('differing_tables') if r.grade else None}. The scripted user sends "
            "the requests in order and reveals a fact only when asked by its key.",
        )
    ]
