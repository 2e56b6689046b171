"""Plans for coverage: every (template, outcome, failure mode) cell first, then by weight.

A cell is a template together with one (outcome, failure mode) pair it supports. ``Planner.plan``
first gives every cell not yet planned one plan (in a seeded order), then samples cells by weight.
Weights (reflection updates them) are keyed by a cell (``"wire/refusal/multi_doc"``), a template
(``"wire"``), an outcome (``"outcome:refusal"``) or a failure mode (``"failure:multi_doc"``); a
cell's weight is its own if given, else the product of the others (1 when absent). Each plan has a
seed, a persona (temperament, verbosity, a wished tier) and the rule constants it wants decisive,
cycling through the template's ``rule_keys`` so every constant gets its turn.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import SynthesisError
from .records import Plan

TEMPERAMENTS = ("polite", "impatient", "anxious", "confident", "chatty")
VERBOSITY = ("brief", "terse", "detailed")
TIERS = ("standard", "preferred", "private")


class Planner:
    """Coverage-first, then weighted, seeded plan sampling.

    Args:
        templates: The domain's templates (name -> template, or an iterable of templates); each has
            ``name``, ``intent``, ``tools``, ``rule_keys`` and ``cells()`` (or ``outcomes`` and
            ``failure_modes``, all pairs supported).
        weights: Cell / template / ``outcome:X`` / ``failure:Y`` -> weight (>= 0).
        seed: Seed of every random choice.
    """

    def __init__(
        self, templates: Mapping[str, Any] | Iterable[Any], weights: dict[str, float] | None = None, seed: int = 0
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
        w *= float(self.weights.get(f"failure:{cell[2]}", 1.0)) if cell[2] else 1.0
        return max(0.0, w)

    def set_weights(self, weights: dict[str, float]) -> None:
        """Replace the weights (reflection's update)."""
        self.weights = dict(weights)

    def plan(self, n: int, round: int = 0) -> list[Plan]:
        """``n`` plans: first the cells never planned (seeded order), then by weight."""
        cells = self.cells()
        fresh = [c for c in cells if self.counts[self.key(c)] == 0 and self.weight(c) > 0]
        self.rng.shuffle(fresh)
        chosen = fresh[:n]
        rest = n - len(chosen)
        if rest > 0:
            ws = [self.weight(c) for c in cells]
            if sum(ws) <= 0:
                raise SynthesisError("Every cell has weight 0; expected at least one positive weight.")
            chosen += self.rng.choices(cells, weights=ws, k=rest)
        return [self._make(c, round) for c in chosen]

    def _make(self, cell: tuple[str, str, str | None], round: int) -> Plan:
        name, outcome, mode = cell
        t = self.templates[name]
        self.counts[self.key(cell)] += 1
        keys = list(getattr(t, "rule_keys", ()) or ())
        rule_keys = []
        if keys:
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
            tools=list(getattr(t, "tools", ())),
            outcome=outcome,
            failure_mode=mode,
            persona=persona,
            rule_keys=rule_keys,
            seed=self.rng.randrange(2**31),
        )
        self.n += 1
        return plan
