"""The reviewer: a judge that accepts a verified task, or rejects it with component-level critiques.

With a model (:class:`~tau_env.synthesis.llm.SynthLLM`, role ``"review"``), the judge sees the
policy excerpts of the required documents, the scenario, and the reference chain with each
argument's derivation and each action's replay output, and answers
``{"accept": bool, "critiques": [{"component", "kind", "message"}]}``. A reply that breaks this
shape (an unknown component or kind, a rejection without a critique) is answered with a correction
and asked again; after ``attempts`` replies the task is rejected with a ``review:malformed``
problem saying what the judge kept getting wrong.

Without a model, a rule-based judge checks the same categories (:data:`KINDS`) on the task's data:
an expected write the plan calls for but the chain lacks, a write the customer's several matching
records leave ambiguous, a fact the user must give yet does not know, a refusal without guidance
on how the user reacts, a write before the identity check.

Each critique becomes a :class:`~tau_env.synthesis.records.Problem` whose ``check`` is
``"review:<kind>"``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tau_env import Domain, Task
from tau_env.error import Error

from .errors import SynthesisError
from .records import COMPONENTS, Problem, Provenance

#: The critique kinds a judge may give.
KINDS = (
    "wrong_expected_action",
    "ambiguous_instruction",
    "impossible_constraint",
    "missing_fallback",
    "policy_loophole",
)
#: The judge's instructions (``prompts["review"]``, e.g. a reflection's addition, is appended).
SYSTEM = """You review synthetic training tasks for a customer-service agent benchmark. A task has a
scenario (what the simulated customer wants, knows and says), an initial database patch, and a
reference chain of tool calls: the one correct way to serve the customer under the policy. The
agent is graded only on the final database equalling the reference chain's result.

Judge whether the reference chain is the single correct outcome under the policy excerpts, and
whether a careful agent could reach it from the scenario. Critique kinds:
- wrong_expected_action: the policy requires a different action, argument or amount than the chain.
- ambiguous_instruction: the scenario allows more than one reasonable final state (e.g. which card
  or account is meant, which option the customer wants).
- impossible_constraint: the customer asks for something no tool or policy permits, or must give a
  fact they do not have.
- missing_fallback: a refusal or partial outcome without guidance on how the customer reacts, or no
  alternative where the policy offers one.
- policy_loophole: the chain skips a mandatory step (identity verification, confirmation,
  hand-over) or the policy can be read to allow a different outcome.
Components: scenario (wording, facts, instructions), actions (the reference chain), initial_state
(the database patch), plan (the task's idea itself).

Answer with one JSON object only:
{"accept": true|false, "critiques": [{"component": "...", "kind": "...", "message": "..."}]}
Accept with an empty critiques list when the task is sound; reject with at least one critique."""
#: Characters of each required document shown to the judge.
EXCERPT_CHARS = 3000
#: Characters of each replayed output shown.
OUTPUT_CHARS = 300


class MalformedReview(ValueError):
    """A judge's reply that is not a review (the message says what is wrong, for the correction)."""


async def review(
    task: Task,
    domain: Domain,
    llm: Any = None,
    prompts: dict[str, str] | None = None,
    *,
    seed: int = 0,
    attempts: int = 2,
    tool_graph: Any = None,
) -> list[Problem]:
    """The judge's critiques of ``task`` (empty: accepted).

    Args:
        task: A verified synthesized task.
        domain: Its domain.
        llm: A :class:`~tau_env.synthesis.llm.SynthLLM`, or None for the rule-based judge.
        prompts: Prompt additions by role; ``prompts["review"]`` is appended to the judge's instructions.
        seed: The model's seed (with the cache: the same reply for the same task).
        attempts: Replies asked for before a malformed review counts as a rejection.
        tool_graph: Unused by the model judge; the rule-based judge reads nothing else from it yet.
    """
    if llm is None:
        return rule_review(task, domain)
    messages = review_messages(task, domain, prompts)
    why = ""
    for _ in range(max(1, attempts)):
        try:
            reply = await llm.ajson("review", messages, seed=seed)
        except SynthesisError as e:  # no JSON object in any reply
            why = str(e)
            break
        try:
            return parse_review(reply)
        except MalformedReview as e:
            why = str(e)
            messages = [
                *messages,
                {"role": "assistant", "content": json.dumps(reply, ensure_ascii=False)[:4000]},
                {
                    "role": "user",
                    "content": f"That is not a valid review: {why}. Reply again with the JSON object only.",
                },
            ]
    return [Problem("review:malformed", "plan", f"the judge gave no valid review in {attempts} replies: {why}")]


def parse_review(reply: Any) -> list[Problem]:
    """The problems a judge's reply holds (empty: accepted); :class:`MalformedReview` if it is no review."""
    if not isinstance(reply, dict):
        raise MalformedReview(f"expected a JSON object, got {type(reply).__name__}")
    accept = reply.get("accept")
    if not isinstance(accept, bool):
        raise MalformedReview(f'"accept" must be true or false, got {json.dumps(accept)[:40]}')
    critiques = reply.get("critiques", [])
    if not isinstance(critiques, list):
        raise MalformedReview('"critiques" must be a list')
    problems = []
    for n, c in enumerate(critiques):
        if not isinstance(c, dict):
            raise MalformedReview(f"critique {n} must be an object")
        comp, kind, msg = c.get("component"), c.get("kind"), c.get("message")
        if comp not in COMPONENTS:
            raise MalformedReview(f"critique {n}: component {json.dumps(comp)[:40]} is not one of {list(COMPONENTS)}")
        if kind not in KINDS:
            raise MalformedReview(f"critique {n}: kind {json.dumps(kind)[:40]} is not one of {list(KINDS)}")
        if not isinstance(msg, str) or not msg.strip():
            raise MalformedReview(f"critique {n}: message must be a non-empty string")
        problems.append(Problem(f"review:{kind}", comp, msg.strip()))
    if accept:
        return []  # notes on an accepted task are advice, not a rejection
    if not problems:
        raise MalformedReview("a rejection must give at least one critique")
    return problems


# --- the prompt ---------------------------------------------------------------------------------------
def review_messages(task: Task, domain: Domain, prompts: dict[str, str] | None = None) -> list[dict[str, str]]:
    """The judge's messages for ``task``: instructions, then the policy excerpts, scenario and chain."""
    system = SYSTEM
    extra = (prompts or {}).get("review", "")
    if extra:
        system += "\n\nAlso:\n" + extra.strip()
    return [{"role": "system", "content": system}, {"role": "user", "content": task_view(task, domain)}]


def task_view(task: Task, domain: Domain) -> str:
    """The task as the judge reads it."""
    prov = _provenance(task)
    parts = ["# Policy excerpts"]
    for doc_id in task.required_documents:
        doc = domain.kb.get(doc_id)
        if doc is not None:
            parts.append(f"## {doc_id}: {doc.title}\n{excerpt(doc.content, task)}")
    sc = task.scenario
    parts.append("# Scenario")
    parts.append(f"Persona: {sc.persona}")
    parts += [f"Request {i + 1}: {r}" for i, r in enumerate(sc.requests)]
    parts.append(f"Facts the customer gives when asked: {json.dumps(sc.facts, ensure_ascii=False)}")
    if sc.unknown:
        parts.append(f"The customer does not know: {sc.unknown}")
    if sc.instructions:
        parts.append(f"How the customer reacts: {sc.instructions}")
    parts.append(f"Expected outcome: {prov.outcome if prov else '?'}; expect_no_change: {task.expect_no_change}")
    if task.initial_state:
        parts.append(f"# Initial database patch\n{json.dumps(task.initial_state, ensure_ascii=False)[:3000]}")
    parts.append("# Reference chain")
    outputs = _outputs(task, domain)
    derivations = prov.derivations if prov else []
    for i, a in enumerate(task.actions):
        args = json.dumps(a.arguments, ensure_ascii=False)
        line = f"{i}. [{a.requestor}] {a.name}({args})"
        if i < len(derivations) and derivations[i]:
            line += f"\n   derivations: {json.dumps(derivations[i], ensure_ascii=False)}"
        if i < len(outputs):
            line += f"\n   output: {outputs[i][:OUTPUT_CHARS]}"
        parts.append(line)
    if not task.actions:
        parts.append("(none: the correct outcome changes nothing)")
    return "\n".join(parts)


def excerpt(text: str, task: Task) -> str:
    """The sections of a document that matter to ``task`` (naming its tools, arguments or request words)."""
    if len(text) <= EXCERPT_CHARS:
        return text
    words = {a.name.lower() for a in task.actions}
    words |= {str(v).lower() for a in task.actions for v in a.arguments.values() if len(str(v)) >= 3}
    words |= {w for r in task.scenario.requests for w in re.findall(r"[a-z]{5,}", r.lower())}
    sections = re.split(r"\n(?=#)", text)
    keep = [sec for sec in sections if any(w in sec.lower() for w in words)]
    out = "\n".join(keep) if keep else text
    return out if len(out) <= EXCERPT_CHARS else out[:EXCERPT_CHARS] + " [...]"


def _outputs(task: Task, domain: Domain) -> list[str]:
    try:
        db, steps = domain.with_tasks([task]).replay(task)
    except Error as e:
        return [f"(replay failed: {e})"]
    db.close()
    return [("ERROR " if s.error else "") + s.output for s in steps]


def _provenance(task: Task) -> Provenance | None:
    try:
        return Provenance.of(task)
    except (KeyError, TypeError):
        return None


# --- the rule-based judge -------------------------------------------------------------------------------
def rule_review(task: Task, domain: Domain) -> list[Problem]:
    """The same categories as the model judge, decided by rules on the task's data (no model)."""
    prov = _provenance(task)
    outcome = prov.outcome if prov else ("refusal" if task.expect_no_change else "success")
    plan = prov.plan if prov and isinstance(prov.plan, dict) else {}
    box = domain.toolbox("all").tools
    chain = [a.name for a in task.actions]  # with the tools called by name through a dispatcher
    chain += [v for a in task.actions for k, v in a.arguments.items() if k.endswith("tool_name") and isinstance(v, str)]
    problems: list[Problem] = []

    def add(kind: str, component: str, message: str) -> None:
        problems.append(Problem(f"review:{kind}", component, message))

    planned = [t for t in plan.get("tools", []) if isinstance(t, str)]
    missing_tools = [t for t in planned if t not in box]
    if missing_tools:
        add("impossible_constraint", "plan", f"the plan asks for {missing_tools}, which no tool of the domain does.")
    if prov:
        unknown = {u.lower() for u in task.scenario.unknown}
        for key in prov.user_facts:
            if key.lower() in unknown:
                why = f"the user must give {key!r} but the scenario says they do not know it."
                add("impossible_constraint", "scenario", why)
    if outcome == "success":
        known = [t for t in planned if t in box]
        if known and not any(t in chain for t in known):  # a template's tool set may hold optional tools
            add(
                "wrong_expected_action",
                "actions",
                f"the plan's outcome is success but the chain calls none of its tools {known}.",
            )
    elif outcome in ("refusal", "clarification"):
        done = [t for t in planned if t in chain]
        if done and task.expect_no_change:
            add("wrong_expected_action", "actions", f"a {outcome} that changes nothing, yet the chain calls {done}.")
        if not task.scenario.instructions.strip():
            add(
                "missing_fallback",
                "scenario",
                f"a {outcome} task whose scenario does not say how the customer reacts when refused "
                "(accept the explanation, ask for an alternative, end the chat).",
            )
    elif outcome == "transfer":
        last = box.get(chain[-1]) if chain else None
        if last is None or not last.ends_episode:
            add("missing_fallback", "actions", "a transfer task whose chain does not end with the transfer tool.")
    problems += _loophole(task, box)
    problems += _ambiguity(task, domain, box, prov)
    return problems


_VERIFY = re.compile(r"verify|authenticat")


def _loophole(task: Task, box: dict[str, Any]) -> list[Problem]:
    """A write before the identity check, in a domain that has one."""
    checks = [n for n in box if _VERIFY.search(n)]
    if not checks:
        return []
    for i, a in enumerate(task.actions):
        t = box.get(a.name)
        if a.name in checks:
            return []
        if t is not None and t.kind == "write" and a.requestor == "agent" and not t.ends_episode:
            return [
                Problem(
                    "review:policy_loophole",
                    "actions",
                    f"action {i} ({a.name}) writes before the identity check ({', '.join(checks)}).",
                )
            ]
    return []


_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_MONTHS = "January February March April May June July August September October November December".split()


def _mentions(text: str, value: Any) -> bool:
    s = str(value)
    if len(s) < 3:
        return False
    low = text.lower()
    if s.lower() in low or s.lower().replace("_", " ") in low:
        return True
    m = _DATE.match(s)
    if m:
        month = _MONTHS[int(m.group(2)) - 1].lower()
        return re.search(rf"{month}\s+0?{int(m.group(3))}(st|nd|rd|th)?\b", low) is not None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 100:
        dollars = abs(value) / 100
        return f"${dollars:,.2f}" in low or (
            dollars.is_integer() and re.search(rf"\${int(dollars):,}\b", low) is not None
        )
    return False


def _features(row: dict[str, Any], s0: dict[str, list[dict[str, Any]]], keys: dict[str, str]) -> dict[str, Any]:
    """A row's cells, and the cells of the rows it points at (``account_id`` -> the account's product)."""
    out = dict(row)
    for col, v in row.items():
        if not col.endswith("_id") or col == "customer_id" or v is None:
            continue
        for table, rows in s0.items():
            if keys[table] == col:
                linked = next((r for r in rows if r.get(col) == v), None)
                if linked is not None:
                    out.update({f"{col}.{c}": x for c, x in linked.items() if c != col})
    return out


def _ambiguity(task: Task, domain: Domain, box: dict[str, Any], prov: Provenance | None) -> list[Problem]:
    """A write on one of the customer's several like records that the scenario does not single out."""
    text = " ".join([*task.scenario.requests, *task.scenario.facts.values(), task.scenario.instructions])
    derivations = prov.derivations if prov else []
    db = domain.start_db(task)
    try:
        s0 = db.dump()
    finally:
        db.close()
    keys = {t: info.columns[0] for t, info in domain.schema.tables.items()}
    out = []
    for i, a in enumerate(task.actions):
        t = box.get(a.name)
        if t is None or t.kind != "write":
            continue
        for arg, value in a.arguments.items():
            if not arg.endswith("_id") or arg == "customer_id" or not isinstance(value, str):
                continue
            d = derivations[i].get(arg) if i < len(derivations) and isinstance(derivations[i], dict) else None
            if isinstance(d, dict) and d.get("kind") == "fact":
                continue  # the user names it
            for table, rows in s0.items():
                row = next((r for r in rows if r.get(keys[table]) == value), None)
                if row is None or "customer_id" not in row:
                    continue
                like = [
                    r
                    for r in rows
                    if r.get("customer_id") == row["customer_id"]
                    and all(r.get(c) == row.get(c) for c in ("status", "product", "category") if c in row)
                ]
                same = {b.arguments.get(arg) for b in task.actions if b.name == a.name}
                if len(like) < 2 or all(r.get(keys[table]) in same for r in like):
                    continue  # one record, or the chain acts on every one of them
                mine = _features(row, s0, keys)
                others = [_features(r, s0, keys) for r in like if r is not row]
                own = [v for f, v in mine.items() if f != "customer_id" and all(o.get(f) != v for o in others)]
                if not any(_mentions(text, v) for v in own):
                    out.append(
                        Problem(
                            "review:ambiguous_instruction",
                            "scenario",
                            f"action {i} ({a.name}) acts on {table} {value}, but the customer has {len(like)} like "
                            f"{table} and the scenario does not say which one.",
                        )
                    )
    return out
