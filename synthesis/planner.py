"""Plans for coverage: wanted rules and tools, every cell, floors, then by weight.

A cell is a template together with one (outcome, failure mode) pair it supports. ``Planner.plan``
fills ``n`` plans in this order:

1. ``want_rules``: one plan per rule constant id, of a template that covers it, with the id as its
   rule key (the template picks the product / tier / fee the id names);
2. ``want_tools``: ``{tool: k}``, k plans of cells whose chain calls the write tool;
3. every cell not yet planned (seeded order);
4. floors that reflection's weights cannot lower: each template gets ``min_share`` of the ``n``
   plans and each write tool ``min_tool_share`` (counting what steps 1-3 gave them);
5. the rest sampled by weight.

:func:`coverage_wants` computes ``want_tools`` and ``want_rules`` from the tasks accepted so far.
Weights (reflection updates them) are keyed by a cell (``"wire/refusal/multi_doc"``), a template
(``"wire"``), an outcome (``"outcome:refusal"``) or a failure mode (``"failure:multi_doc"``;
``"failure:-"`` for the cells with none, the plain variants); a cell's weight is its own if given,
else the product of the others (1 when absent). With ``weighted_coverage`` (a run given weights of its
own), step 2's plans for a tool go to the cells that call it in proportion to their weights, not in
turn. Each plan has a seed, a persona (temperament, verbosity, a wished tier) and the rule constants
it wants decisive, cycling through the template's ``rule_keys`` so every constant gets its turn.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import SynthesisError
from .records import Plan, called_tools

TEMPERAMENTS = ("polite", "impatient", "anxious", "confident", "chatty")
VERBOSITY = ("brief", "terse", "detailed")
TIERS = ("standard", "preferred", "private")


class Planner:
    """Coverage-first, then weighted, seeded plan sampling.

    Args:
        templates: The domain's templates (name -> template, or an iterable of templates); each has
            ``name``, ``intent``, ``tools``, ``rule_keys`` and ``cells()`` (or ``outcomes`` and
            ``failure_modes``, all pairs supported); optionally ``cell_tools(outcome, mode)`` (the
            write tools a cell calls) and ``covers(rule_id)``.
        weights: Cell / template / ``outcome:X`` / ``failure:Y`` -> weight (>= 0).
        seed: Seed of every random choice.
        min_share: The share of each ``plan`` call every template gets however low its weight (a
            cell weighted exactly 0 is never planned).
        min_tool_share: The share of each ``plan`` call every write tool gets (plans of cells that call it).
        weighted_coverage: Pick ``want_tools``' cells by weight (the default: in turn, whatever the weights).
    """

    def __init__(
        self,
        templates: Mapping[str, Any] | Iterable[Any],
        weights: dict[str, float] | None = None,
        seed: int = 0,
        *,
        min_share: float = 0.01,
        min_tool_share: float = 0.03,
        weighted_coverage: bool = False,
    ):
        tpls = dict(templates) if isinstance(templates, Mapping) else {t.name: t for t in templates}
        if not tpls:
            raise SynthesisError("The planner got no templates; expected at least one for the domain.")
        self.templates = tpls
        self.weights = dict(weights or {})
        self.seed = seed
        self.rng = random.Random(f"planner:{seed}")
        self.counts: Counter[str] = Counter()
        self.rule_turn: Counter[str] = Counter()
        self.n = 0
        if not (0 <= min_share <= 1 and 0 <= min_tool_share <= 1):
            raise SynthesisError(
                f"min_share and min_tool_share must lie in [0, 1], got {min_share!r} and {min_tool_share!r}."
            )
        self.min_share = min_share
        self.min_tool_share = min_tool_share
        self.weighted_coverage = weighted_coverage

    def cells(self) -> list[tuple[str, str, str | None]]:
        """Every (template, outcome, failure mode) cell, in a stable order."""
        out = []
        for name in sorted(self.templates):
            t = self.templates[name]
            pairs = t.cells() if hasattr(t, "cells") else [(o, f) for o in t.outcomes for f in t.failure_modes]
            out += [(name, o, f) for o, f in pairs]
        return out

    @staticmethod
    def key(cell: tuple[str, str, str | None]) -> str:
        return f"{cell[0]}/{cell[1]}/{cell[2] or '-'}"

    def weight(self, cell: tuple[str, str, str | None]) -> float:
        """The sampling weight of ``cell``."""
        k = self.key(cell)
        if k in self.weights:
            return max(0.0, float(self.weights[k]))
        w = float(self.weights.get(cell[0], 1.0))
        w *= float(self.weights.get(f"outcome:{cell[1]}", 1.0))
        w *= float(self.weights.get(f"failure:{cell[2] or '-'}", 1.0))
        return max(0.0, w)

    def weight_keys(self) -> set[str]:
        """Every key :meth:`weight` reads for some cell: the templates, the cells, ``outcome:X`` and
        ``failure:Y`` (``failure:-``) of the outcomes and failure modes the cells use.
        """
        cells = self.cells()
        return (
            {c[0] for c in cells}
            | {self.key(c) for c in cells}
            | {f"outcome:{c[1]}" for c in cells}
            | {f"failure:{c[2] or '-'}" for c in cells}
        )

    def set_weights(self, weights: dict[str, float]) -> None:
        """Replace the weights (reflection's update)."""
        self.weights = dict(weights)

    def tools_of(self, cell: tuple[str, str, str | None]) -> tuple[str, ...]:
        """The write tools a plan of ``cell`` calls (the plan's ``tools``)."""
        t = self.templates[cell[0]]
        if hasattr(t, "cell_tools"):
            return tuple(t.cell_tools(cell[1], cell[2]))
        return tuple(getattr(t, "tools", ()))

    def write_tools(self) -> list[str]:
        """Every write tool some cell calls, sorted."""
        return sorted({x for c in self.cells() for x in self.tools_of(c)})

    def rule_templates(self, rule_id: str) -> list[str]:
        """The templates that can make ``rule_id`` decisive."""
        out = []
        for name in sorted(self.templates):
            t = self.templates[name]
            ok = t.covers(rule_id) if hasattr(t, "covers") else rule_id in (getattr(t, "rule_keys", ()) or ())
            if ok:
                out.append(name)
        return out

    def plan(
        self,
        n: int,
        round: int = 0,
        *,
        want_rules: Iterable[str] = (),
        want_tools: Mapping[str, int] | None = None,
    ) -> list[Plan]:
        """``n`` plans: wanted rules, wanted tools, unplanned cells, floors, then by weight (module docstring).

        Args:
            n: How many plans.
            round: The round (in plan ids, and in the seed, so rounds differ).
            want_rules: Rule constant ids to make decisive, one plan each (ids no template covers
                are skipped: :meth:`rule_templates` says which are covered).
            want_tools: Write tool -> how many plans should call it.
        """
        self.rng = random.Random(f"planner:{self.seed}:{round}:{self.n}")
        cells = self.cells()
        live = [c for c in cells if self._floored(c)]
        chosen: list[tuple[tuple[str, str, str | None], str | None]] = []  # (cell, wanted rule key)
        for rid in want_rules:
            if len(chosen) >= n:
                break
            names = self.rule_templates(rid)
            if names:
                name = names[self.rule_turn[f"want:{rid}"] % len(names)]
                self.rule_turn[f"want:{rid}"] += 1
                own = [c for c in cells if c[0] == name]
                chosen.append((self._rule_cell(own, rid), rid))
        for tool, k in sorted((want_tools or {}).items()):
            calling = [c for c in live if tool in self.tools_of(c)]
            calling = [c for c in calling if c[1] == "success"] or calling
            ws = [self.weight(c) for c in calling]
            by_weight = self.weighted_coverage and len(set(ws)) > 1
            for i in range(min(k, n - len(chosen)) if calling else 0):
                pick = self.rng.choices(calling, weights=ws)[0] if by_weight else calling[(self.n + i) % len(calling)]
                chosen.append((pick, None))
        fresh = [c for c in cells if self.counts[self.key(c)] == 0 and self.weight(c) > 0]
        self.rng.shuffle(fresh)
        chosen += [(c, None) for c in fresh[: max(0, n - len(chosen))]]
        chosen += [(c, None) for c in self._floors(n, live, [c for c, _ in chosen])][: max(0, n - len(chosen))]
        rest = n - len(chosen)
        if rest > 0:
            ws = [self.weight(c) for c in cells]
            if sum(ws) <= 0:
                raise SynthesisError("Every cell has weight 0; expected at least one positive weight.")
            chosen += [(c, None) for c in self.rng.choices(cells, weights=ws, k=rest)]
        return [self._make(c, round, rid) for c, rid in chosen[:n]]

    def _floored(self, cell: tuple[str, str, str | None]) -> bool:
        """A cell the floors may plan: any weight above 0 (a weight of exactly 0 excludes the cell)."""
        return self.weight(cell) > 0

    def _rule_cell(self, own: list[tuple[str, str, str | None]], rid: str) -> tuple[str, str, str | None]:
        t = self.templates[own[0][0]]
        if hasattr(t, "cell_for_rule"):
            pair = t.cell_for_rule(rid)
            if pair is not None:
                return (own[0][0], pair[0], pair[1])
        plain = [c for c in own if c[1] == "success" and c[2] is None] or [c for c in own if c[1] == "success"] or own
        return plain[0]

    def _floors(
        self, n: int, live: list[tuple[str, str, str | None]], have: list[tuple[str, str, str | None]]
    ) -> list[tuple[str, str, str | None]]:
        """Extra cells so every template and write tool reaches its share of ``n``."""
        extra: list[tuple[str, str, str | None]] = []
        per_t = Counter(c[0] for c in have)
        per_tool = Counter(x for c in have for x in self.tools_of(c))
        t_floor, tool_floor = int(self.min_share * n), int(self.min_tool_share * n)
        for name in sorted(self.templates):
            own = [c for c in live if c[0] == name and self._floored(c)]
            for _ in range(max(0, t_floor - per_t[name]) if own else 0):
                c = own[self.rng.randrange(len(own))]
                extra.append(c)
                per_tool.update(self.tools_of(c))
        for tool in self.write_tools():
            calling = [c for c in live if tool in self.tools_of(c) and self._floored(c)]
            success = [c for c in calling if c[1] == "success"] or calling
            for _ in range(max(0, tool_floor - per_tool[tool]) if success else 0):
                c = success[self.rng.randrange(len(success))]
                extra.append(c)
                per_tool.update(self.tools_of(c))
        self.rng.shuffle(extra)
        return extra

    def _make(self, cell: tuple[str, str, str | None], round: int, wanted: str | None = None) -> Plan:
        name, outcome, mode = cell
        t = self.templates[name]
        self.counts[self.key(cell)] += 1
        keys = list(getattr(t, "rule_keys", ()) or ())
        rule_keys = []
        if wanted is not None:
            rule_keys = [wanted]
        elif keys:
            rule_keys = [keys[self.rule_turn[name] % len(keys)]]
            self.rule_turn[name] += 1
        persona = {
            "temperament": self.rng.choice(TEMPERAMENTS),
            "verbosity": self.rng.choice(VERBOSITY),
            "tier": self.rng.choice(TIERS),
        }
        plan = Plan(
            id=f"p-{round}-{self.n}",
            template=name,
            intent=getattr(t, "intent", name),
            tools=list(self.tools_of(cell)),
            outcome=outcome,
            failure_mode=mode,
            persona=persona,
            rule_keys=rule_keys,
            seed=self.rng.randrange(2**31),
        )
        self.n += 1
        return plan


def coverage_wants(
    tasks: Iterable[Any],
    *,
    write_tools: Iterable[str],
    rule_ids: Iterable[str] = (),
    min_per_tool: int = 20,
    slack: float = 1.3,
) -> tuple[dict[str, int], list[str]]:
    """What the accepted ``tasks`` still lack: ``(want_tools, want_rules)`` for :meth:`Planner.plan`.

    ``want_tools[t]`` is how many more plans should call write tool ``t`` for it to reach
    ``min_per_tool`` accepted tasks (times ``slack`` for the ones the verifier or reviewer reject);
    ``want_rules`` the rule constant ids no accepted task has made decisive yet.
    """
    calls: Counter[str] = Counter()
    decisive: set[str] = set()
    for task in tasks:
        calls.update(set(called_tools(task)))
        meta = (getattr(task, "metadata", None) or {}).get("synthesis") or {}
        decisive.update(str(c) for c in meta.get("decisive") or [])
    want_tools = {t: math.ceil((min_per_tool - calls[t]) * slack) for t in write_tools if calls[t] < min_per_tool}
    want_rules = [r for r in dict.fromkeys(rule_ids) if r not in decisive]
    return want_tools, want_rules
