"""The generic templates' driver: a template-backend wording, a batch run with checks, and leakage.

``synthesize(domain, n)`` instantiates ``n`` plans round-robin over ``generic.templates(domain)``,
words each draft (:func:`draft_task`), checks it with :func:`tau_env.checker.task_problems` (replay
and the oracle agent with the scripted user), and counts failures per tool. ``leakage(tasks,
benchmark)`` lists the tasks that share a chain signature, a customer or a record id with an
evaluation set.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from typing import Any

from tau_env import Scenario, Task

from ..errors import SynthesisError
from ..records import Plan, chain_signature
from . import Draft, IdAllocator, SynthContext
from .generic import fact_key, templates


def draft_task(domain: Any, draft: Draft, plan: Plan) -> Task:
    """A draft worded by the template backend (a stand-in for the synthesizer, for checks and benchmarks)."""
    name = draft.persona.get("name", "a customer")
    ask = draft.asks[0] if draft.asks else {"intent": plan.intent, "say": {}}
    details = "; ".join(f"{fact_key(k)}: {json.dumps(v) if isinstance(v, bool) else v}" for k, v in ask["say"].items())
    request = f"Hi, I'm {name}. I'd like you to {ask['intent'][0].lower()}{ask['intent'][1:]}."
    if details:
        request += f" Details: {details}."
    meta = dict(getattr(draft, "metadata", {}) or {})
    meta["synthesis"] = {"plan": plan.to_dict(), "derivations": draft.derivations, "intent_query": draft.intent_query}
    return Task(
        id=f"synth-{plan.id}",
        scenario=Scenario(
            persona=f"{name}, a customer.",
            requests=[request],
            facts=draft.facts,
            instructions=f"You are {name}. {request} Give your details when asked.",
        ),
        initial_state=draft.initial_state,
        actions=draft.actions,
        expect_no_change=draft.expect_no_change,
        required_documents=draft.required_documents,
        tags=draft.tags,
        metadata=meta,
    )


def synthesize(
    domain: Any, n: int, *, seed: int = 0, tool_graph: Any = None, entity_graph: Any = None, play: bool = True
) -> tuple[list[Task], dict[str, Any]]:
    """``n`` plans round-robin over the generic templates, each instantiated, worded and checked.

    Returns:
        The verified tasks (no two with the same chain) and statistics: ``tried``, ``verified``,
        ``tools`` (verified tasks per write tool), ``failures`` (per tool and reason), ``seconds``.
    """
    from tau_env.checker import task_problems

    start = time.perf_counter()
    tpls = templates(domain, entity_graph, tool_graph)
    names = sorted(tpls)
    ctx = SynthContext(domain, entity_graph, tool_graph, IdAllocator(f"g{seed}"), random.Random(seed))
    tasks: list[Task] = []
    sigs: set[str] = set()
    fails: Counter[str] = Counter()
    per_tool: Counter[str] = Counter()
    for i in range(n):
        tpl = tpls[names[i % len(names)]] if names else None
        if tpl is None:
            break
        plan = Plan(id=f"g{seed}-{i}", template=tpl.name, intent=tpl.intent, tools=list(tpl.tools), seed=seed)
        try:
            draft = tpl.instantiate(plan, ctx)
        except SynthesisError:
            fails[f"{tpl.tool}: no draft"] += 1
            continue
        task = draft_task(domain, draft, plan)
        sig = chain_signature(task)
        problems = task_problems(domain.with_tasks([task]), task, play=play)
        if problems or sig in sigs:
            fails[f"{tpl.tool}: {'duplicate' if not problems else 'check'}"] += 1
            continue
        sigs.add(sig)
        tasks.append(task)
        per_tool[tpl.tool] += 1
    secs = time.perf_counter() - start
    return tasks, {
        "tried": n,
        "verified": len(tasks),
        "templates": len(names),
        "tools": dict(per_tool),
        "distinct_tools": len(per_tool),
        "failures": dict(fails),
        "seconds": secs,
        "seconds_per_verified": secs / max(1, len(tasks)),
    }


def _ids_of(task: Task) -> set[str]:
    """Customer and record ids a task names: its initial rows' ids and its id-like arguments."""
    out: set[str] = set()
    for _t, table in ((task.metadata or {}).get("agent_data") or {}).items():
        out.update(((table or {}).get("data") or {}).keys())
    for rows in (task.initial_state or {}).values():
        for r in rows:
            out.update(str(v) for k, v in r.items() if k.endswith("_id") and v)
    for a in task.actions:
        args = dict(a.arguments)
        for k in ("arguments",):
            if isinstance(args.get(k), str):
                try:
                    args.update(json.loads(args[k]))
                except (ValueError, TypeError):
                    pass
        out.update(str(v) for k, v in args.items() if (k.endswith("_id") or k.endswith("_ids")) and v)
    return out


def leakage(tasks: list[Task], benchmark: list[Task]) -> list[str]:
    """Why any of ``tasks`` leaks ``benchmark`` (the evaluation set): a shared chain signature, or a
    shared customer or record id. Empty when nothing leaks.
    """
    sigs = {chain_signature(t): t.id for t in benchmark}
    ids: dict[str, str] = {}
    for t in benchmark:
        for i in _ids_of(t):
            ids.setdefault(i, t.id)
    out = []
    for t in tasks:
        s = chain_signature(t)
        if s in sigs:
            out.append(f"{t.id}: same chain as {sigs[s]}")
        for i in sorted(_ids_of(t) & set(ids)):
            out.append(f"{t.id}: id {i!r} also in {ids[i]}")
    return out
