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
import re
from typing import Any

from tau_env import Domain, OracleAgent, ScriptedUser, Task, TauEnv, run_episode
from tau_env.checker import named_tool_problems, task_problems
from tau_env.error import Error, TaskFileError
from tau_env.tasks import parse_json, validation_message

from .derive import Tracer, contains_value, entity_graph_of, value_texts
from .records import Problem, Provenance

__all__ = ["CHECKS", "KIND_COMPONENT", "as_task", "contains_value", "problem", "value_texts", "verify", "verify_json"]

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
        # a composite task searches with each joined request's intent query too
        own = [q for q in prov.plan.get("intent_queries") or [] if isinstance(q, str) and q.strip()]
        queries = [query, *own, *_follow_up_queries(task, domain, prov, entity_graph)]
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
    tracer = Tracer(task, domain, entity_graph)
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
    graph = entity_graph if entity_graph is not None or not ids else entity_graph_of(domain)
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


def trace_outputs(task: Task, prov: Provenance, tracer: Tracer) -> list[Problem]:
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
    # a domain may answer a failed call with an ordinary "Error: ..." text (tau3-banking does, as its
    # benchmark), which the replay does not flag: a reference chain must not rely on one
    failed = [
        problem("replay_error", f"action {i} ({step.name}) failed in the reference replay: {step.output[:200]!r}.")
        for i, step in enumerate(steps)
        if not step.error and _ERROR_TEXT.match(step.output or "")
    ]
    if failed:
        return problems + failed
    tracer = Tracer(task, domain, None)
    tracer.outputs = [s.output for s in steps]
    return problems + trace_outputs(task, prov, tracer)


_ERROR_TEXT = re.compile(r"\s*Error\b")


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
