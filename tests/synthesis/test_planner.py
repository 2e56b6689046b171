"""The planner covers every cell first, then samples by weight; it is seeded."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tau_env.synthesis.errors import SynthesisError
from tau_env.synthesis.planner import Planner
from tau_env.synthesis.templates import harbor_bank as hb


def test_coverage_first():
    p = Planner(hb.TEMPLATES, seed=3)
    n = len(p.cells())
    plans = p.plan(n)
    assert len({pl.cell for pl in plans}) == n
    assert len({pl.id for pl in plans}) == n


def test_weights_steer_sampling():
    cells = Planner(hb.TEMPLATES).cells()
    p = Planner(hb.TEMPLATES, weights={"wire": 20.0, "outcome:refusal": 0.0}, seed=1)
    plans = p.plan(len(cells) + 400)[len(cells) :]
    c = Counter(pl.template for pl in plans)
    assert c["wire"] > 200
    assert all(pl.outcome != "refusal" for pl in plans)
    p.set_weights({"wire/success/-": 1.0, **{Planner.key(x): 0.0 for x in cells if x != ("wire", "success", None)}})
    assert {pl.cell for pl in p.plan(20)} == {"wire/success/-"}


def test_zero_weights_refused():
    p = Planner(hb.TEMPLATES, weights={t: 0.0 for t in hb.TEMPLATES})
    with pytest.raises(SynthesisError):
        p.plan(3)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 80))
def test_seeded(seed, n):
    a = [x.to_dict() for x in Planner(hb.TEMPLATES, seed=seed).plan(n)]
    b = [x.to_dict() for x in Planner(hb.TEMPLATES, seed=seed).plan(n)]
    assert a == b
    assert all(x["persona"]["temperament"] and x["persona"]["tier"] for x in a)


def test_rule_keys_cycle():
    p = Planner({"wire": hb.TEMPLATES["wire"]}, seed=0)
    keys = [pl.rule_keys[0] for pl in p.plan(6)]
    assert set(keys) == set(hb.TEMPLATES["wire"].rule_keys)
