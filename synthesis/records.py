"""The records every synthesis stage reads and writes.

A synthesized task is an ordinary :class:`tau_env.Task`; what the pipeline knows about it lives in
``task.metadata["synthesis"]`` (a :class:`Provenance` as a dict), so task files stay plain task
files that ``tau-env check`` and ``tau-env eval`` play, and a later stage can re-derive anything.

Derivations say where each reference argument comes from, so the verifier can trace it:

- ``{"kind": "fact", "key": K}``: the user gives it: ``scenario.facts[K]`` holds the value (its
  text), or the value's text is in one of ``scenario.requests``.
- ``{"kind": "db", "table": T, "key": {COL: VAL}, "column": C}``: a cell of the initial database s0.
- ``{"kind": "output", "action": I}``: the value's text is in the output of reference action I (< this one).
- ``{"kind": "constant", "ids": [CID, ...], "op": OP}``: computed from entity-graph constants;
  ``op`` is ``"value"`` (one constant), ``"sum"`` or ``"percent_of"`` (``inputs`` holds the base's
  derivation).
- ``{"kind": "rule", "ids": [CID, ...], "value": DERIVATION}``: a rule whose constants decide the
  value, which itself comes from ``value`` (another derivation, or ``{"kind": "literal"}`` for a
  value the rule names outright, such as 0).
- ``{"kind": "literal", "why": TEXT}``: a value of the tool's legal domain (an enum member, a
  tool name found in a document) chosen by the plan; the verifier checks it is legal.
- ``{"kind": "enum"}``: shorthand for a literal that must be a member of the argument's enum.
- ``{"kind": "json", "fields": {FIELD: DERIVATION}}``: a JSON-text argument (e.g. the arguments a
  dispatcher tool passes on), each field with its own derivation.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from tau_env import Task

#: What a plan's task ends in.
OUTCOMES = ("success", "refusal", "transfer", "clarification")
#: The failure modes the benchmark's authors name; a plan exercises at most one.
FAILURE_MODES = ("multi_doc", "implicit_order", "contradicting_claim", "underspecified")
#: Where a candidate's problems are fixed: the reviewer's critiques and the verifier's problems name one.
COMPONENTS = ("scenario", "actions", "initial_state", "plan")


@dataclass
class Plan:
    """What one task should be, before any wording or ids exist.

    Attributes:
        id: Unique within a run (``p-<round>-<n>``).
        template: The template that instantiates it (e.g. ``"replace_card"``).
        intent: The user's goal in a few words (also the search query that must find the rule).
        tools: The write tools the reference chain must call.
        outcome: One of :data:`OUTCOMES`.
        failure_mode: One of :data:`FAILURE_MODES`, or None.
        persona: Attributes of the simulated user (tier, temperament, ...).
        rule_keys: Entity-graph constant ids the plan wants decisive.
        seed: Seed of everything random in this plan's instantiation.
    """

    id: str
    template: str
    intent: str
    tools: list[str] = field(default_factory=list)
    outcome: str = "success"
    failure_mode: str | None = None
    persona: dict[str, Any] = field(default_factory=dict)
    rule_keys: list[str] = field(default_factory=list)
    seed: int = 0

    @property
    def cell(self) -> str:
        """The coverage cell: template / outcome / failure mode."""
        return f"{self.template}/{self.outcome}/{self.failure_mode or '-'}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass
class Provenance:
    """``task.metadata["synthesis"]``: how a synthesized task was made.

    Attributes:
        plan: The plan (``Plan.to_dict()``).
        derivations: One dict per reference action: argument name -> derivation (module docstring).
        user_facts: The ``scenario.facts`` keys the user must give for the chain to be reachable.
        intent_query: A search query for the plan's intent; the domain's search must find every
            required document with it.
        outcome: The plan's outcome (repeated for readers of the task file).
        failure_mode: The plan's failure mode, or None.
        decisive: Entity-graph constant ids that decide the reference chain.
        components: Task ids of the single-request tasks a composite task joins (empty for one request).
        versions: Which prompt / weights versions and backend made it (``{"prompts": 3, "backend": "template"}``).
        regenerations: How many times each component was regenerated after a review.
    """

    plan: dict[str, Any]
    derivations: list[dict[str, dict[str, Any]]] = field(default_factory=list)
    user_facts: list[str] = field(default_factory=list)
    intent_query: str = ""
    outcome: str = "success"
    failure_mode: str | None = None
    decisive: list[str] = field(default_factory=list)
    components: list[str] = field(default_factory=list)
    versions: dict[str, Any] = field(default_factory=dict)
    regenerations: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Provenance:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    @classmethod
    def of(cls, task: Task) -> Provenance:
        """The provenance of a synthesized task (KeyError if the task carries none)."""
        return cls.from_dict(task.metadata["synthesis"])


@dataclass
class Problem:
    """One reason a candidate is rejected (by the verifier or the reviewer).

    Attributes:
        check: Which check found it (e.g. ``"replay_error"``, ``"untraceable_argument"``, ``"review"``).
        component: The part to regenerate: one of :data:`COMPONENTS`.
        message: What is wrong, for a person and for the regeneration prompt.
    """

    check: str
    component: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def chain_signature(task: Task) -> str:
    """A digest of the reference chain: each action's requestor, name and arguments, in order.

    Two tasks with the same signature are duplicates, whatever their wording.
    """
    chain = [[a.requestor, a.name, a.arguments] for a in task.actions]
    text = json.dumps(chain, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def called_tool(name: str, arguments: Any) -> str:
    """The tool an action really calls: the action's own name, or, for a dispatcher that calls a
    discoverable tool by name (tau3-banking's ``call_discoverable_agent_tool(agent_tool_name=X, ...)``),
    the tool it names. Meta tools that unlock or hand over a tool by name do not call it.
    """
    if name.startswith("call_") and isinstance(arguments, dict):
        for key, value in arguments.items():
            if (key == "tool_name" or key.endswith("_tool_name")) and isinstance(value, str) and value:
                return value
    return name


def called_tools(task: Any) -> list[str]:
    """Every tool a task's reference chain calls (dispatchers resolved, see :func:`called_tool`), in order."""
    return [called_tool(a.name, a.arguments) for a in task.actions]


def write_tools(task: Task, write_names: set[str]) -> list[str]:
    """The write tools a task's reference chain calls, in order, each once (dispatchers resolved)."""
    return list(dict.fromkeys(n for n in called_tools(task) if n in write_names))
