"""tau_env.synthesis: verified training tasks from a domain's documents and tools.

Install with the ``synth`` extra (``pip install 'tau-env[synth]'``); ``import tau_env`` never
imports this package, and importing this package loads its parts only when first used.

The stages, each a function over a run folder (``tau-env synth <stage>`` calls the same)::

    from tau_env.synthesis import run_graphs, run_tasks, run_compose, run_decontaminate, run_report

    run_tasks("synth/run1", "harbor-bank-v0", n=1000)      # graphs too, when missing
    run_compose("synth/run1", n=300)
    run_report("synth/run1")

The parts, for your own pipeline: :func:`build_entity_graph`, :func:`build_tool_graph`,
:class:`Planner`, :func:`synthesize`, :func:`verify`, :func:`review`, :class:`Reflector`,
:func:`compose`, :func:`decontaminate`, :func:`build_sft`, :func:`build_rl`, :class:`SynthLLM`,
:class:`RunFolder`, and the records (:class:`Plan`, :class:`Provenance`, :class:`Problem`).
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the module that defines it (imported on first use).
_WHERE = {
    "run_graphs": "pipeline",
    "run_tasks": "pipeline",
    "run_compose": "pipeline",
    "run_sft": "pipeline",
    "run_rl": "pipeline",
    "run_decontaminate": "pipeline",
    "run_report": "pipeline",
    "build_entity_graph": "entity_graph",
    "EntityGraph": "entity_graph",
    "Constant": "entity_graph",
    "build_tool_graph": "tool_graph",
    "ToolGraph": "tool_graph",
    "rule_constants": "tool_graph",
    "Planner": "planner",
    "synthesize": "synthesizer",
    "regenerate": "synthesizer",
    "templates_for": "templates",
    "SynthContext": "templates",
    "Draft": "templates",
    "verify": "verify",
    "review": "review",
    "Reflector": "reflect",
    "compose": "compose",
    "acompose": "compose",
    "decontaminate": "decontam",
    "DecontamReport": "decontam",
    "build_sft": "datasets",
    "build_rl": "datasets",
    "SynthLLM": "llm",
    "RunFolder": "run",
    "write_report": "report",
    "Plan": "records",
    "Provenance": "records",
    "Problem": "records",
    "chain_signature": "records",
    "SynthesisError": "errors",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'tau_env.synthesis' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
