"""Plans to tasks: a template instantiates the plan, the wording backend writes the scenario.

``synthesize(plan, ctx)`` gives an ordinary :class:`tau_env.Task` whose ``metadata["synthesis"]``
is the :class:`~tau_env.synthesis.records.Provenance`. ``regenerate(task, component, problems, ctx)``
redoes one component after a verifier's or reviewer's problems: the scenario (new wording, with the
critique in the prompt, or the next phrasing), the actions or the initial state (the plan
re-instantiated with a derived seed), or the plan (same cell, a new seed and persona).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

from tau_env import Task

from .errors import SynthesisError
from .records import Plan, Problem, Provenance
from .templates import Draft, SynthContext, Template, templates_for
from .wording import write_scenario

__all__ = ["build_task", "regenerate", "synthesize", "task_id", "templates_of"]


def templates_of(ctx: SynthContext) -> dict[str, Template]:
    """The context's templates (built once per context)."""
    if ctx.templates is None:
        ctx.templates = templates_for(ctx.domain, ctx.entity_graph, ctx.tool_graph)
    return ctx.templates


def task_id(plan: Plan) -> str:
    """The id of the task a plan becomes."""
    return f"syn-{plan.id}"


def draft_of(plan: Plan, ctx: SynthContext) -> Draft:
    """Instantiate ``plan`` with its template."""
    tpls = templates_of(ctx)
    tpl = tpls.get(plan.template)
    if tpl is None:
        raise SynthesisError(
            f"Plan {plan.id!r} names template {plan.template!r}, which domain {ctx.domain.name!r} does not have; "
            f"expected one of {sorted(tpls)}. Re-plan with this domain's templates."
        )
    return tpl.instantiate(plan, ctx)


def build_task(
    plan: Plan,
    draft: Draft,
    scenario: Any,
    *,
    versions: dict[str, Any] | None = None,
    regenerations: dict[str, int] | None = None,
) -> Task:
    """The task of a plan from its draft and its scenario."""
    used_facts = sorted(
        {d["key"] for ds in draft.derivations for d in _walk(ds) if d.get("kind") == "fact" and "key" in d}
    )
    prov = Provenance(
        plan=plan.to_dict(),
        derivations=draft.derivations,
        user_facts=used_facts,
        intent_query=draft.intent_query,
        outcome=plan.outcome,
        failure_mode=plan.failure_mode,
        decisive=draft.decisive,
        versions=dict(versions or {}),
        regenerations=dict(regenerations or {}),
    )
    tags = [plan.template, plan.outcome, *([plan.failure_mode] if plan.failure_mode else []), *draft.tags]
    return Task(
        id=task_id(plan),
        description=draft.description or f"{plan.intent} ({plan.cell})",
        scenario=scenario,
        initial_state=draft.initial_state,
        actions=draft.actions,
        expect_no_change=draft.expect_no_change,
        required_documents=draft.required_documents,
        tags=list(dict.fromkeys(tags)),
        clock=draft.clock,
        metadata={**draft.metadata, "synthesis": prov.to_dict()},
    )


def _walk(ds: dict[str, Any]):
    """Every derivation dict in one action's derivations (nested ``value`` / ``inputs`` included)."""
    stack = list(ds.values())
    while stack:
        d = stack.pop()
        if isinstance(d, dict):
            yield d
            stack.extend(v for k, v in d.items() if k in ("value", "inputs") and isinstance(v, dict | list))
            if isinstance(d.get("fields"), dict):  # a "json" derivation: one derivation per field
                stack.extend(d["fields"].values())
        elif isinstance(d, list):
            stack.extend(d)


def _versions(llm: Any, prompts: dict[str, Any] | None, variant: int) -> dict[str, Any]:
    return {
        "backend": "template" if llm is None else "llm",
        "prompts": (prompts or {}).get("version", 0),
        "variant": variant,
    }


async def synthesize(
    plan: Plan,
    ctx: SynthContext,
    llm: Any = None,
    prompts: dict[str, Any] | None = None,
    *,
    variant: int = 0,
    critique: str | None = None,
) -> Task:
    """The task of ``plan``: its template's draft, worded by the template backend or ``llm``.

    Raises:
        WordingError: The model's wording was rejected (its ``problems`` say why).
        SynthesisError: The plan names a template the domain does not have.
    """
    draft = draft_of(plan, ctx)
    scenario = await write_scenario(draft, plan, llm, prompts, variant=variant, critique=critique)
    return build_task(plan, draft, scenario, versions=_versions(llm, prompts, variant))


def derived_seed(seed: int, component: str, n: int) -> int:
    """A new seed for the ``n``-th regeneration of ``component``."""
    h = hashlib.sha256(f"{seed}:{component}:{n}".encode()).hexdigest()
    return int(h[:8], 16)


async def regenerate(
    task: Task,
    component: str,
    problems: list[Problem],
    ctx: SynthContext,
    llm: Any = None,
    prompts: dict[str, Any] | None = None,
) -> Task:
    """``task`` with one component redone after ``problems``.

    Args:
        task: A synthesized task (with provenance).
        component: ``scenario``: new wording (the critique goes into the model's prompt; the template
            backend takes the next phrasing); ``actions`` or ``initial_state``: the plan re-instantiated
            with a derived seed; ``plan``: the same cell re-planned (new seed and persona).
        problems: What was wrong.
        ctx: The synthesis context.
        llm: None for the template backend, else a ``SynthLLM``.
        prompts: Versioned extra instructions per role.
    """
    prov = Provenance.of(task)
    plan = Plan.from_dict(prov.plan)
    regens = dict(prov.regenerations)
    n = regens.get(component, 0) + 1
    regens[component] = n
    critique = "; ".join(p.message for p in problems) or None
    if component == "scenario":
        variant = sum(regens.values())
        draft = draft_of(plan, ctx)
        scenario = await write_scenario(draft, plan, llm, prompts, variant=variant, critique=critique)
        new = task.model_copy(deep=True)
        new.scenario = scenario
        new_prov = Provenance.from_dict(prov.to_dict())
        new_prov.regenerations = regens
        new_prov.versions = _versions(llm, prompts, variant)
        new.metadata = {**task.metadata, "synthesis": new_prov.to_dict()}
        return new
    if component not in ("actions", "initial_state", "plan"):
        raise SynthesisError(
            f"Cannot regenerate component {component!r}; expected one of scenario, actions, initial_state, plan."
        )
    new_plan = replace(plan, seed=derived_seed(plan.seed, component, n))
    if component == "plan":
        temperaments = ("polite", "impatient", "anxious", "confident", "chatty")
        persona = dict(plan.persona)
        persona["temperament"] = temperaments[new_plan.seed % len(temperaments)]
        persona.pop("tier", None)
        new_plan = replace(new_plan, persona=persona)
    draft = draft_of(new_plan, ctx)
    scenario = await write_scenario(draft, new_plan, llm, prompts, critique=critique)
    return build_task(new_plan, draft, scenario, versions=_versions(llm, prompts, 0), regenerations=regens)
