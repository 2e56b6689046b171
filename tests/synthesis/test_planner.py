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


def test_floors_outlast_low_weights():
    low = {t: 0.01 for t in ("wire", "refund_fee", "deposit_check", "update_contact")}
    p = Planner(hb.TEMPLATES, weights=low, seed=2, min_share=0.0, min_tool_share=0.05)
    calls = Counter(t for pl in p.plan(400) for t in pl.tools)
    assert all(calls[t] >= 20 for t in p.write_tools())
    bare = Planner(hb.TEMPLATES, weights=low, seed=2, min_share=0.0, min_tool_share=0.0)
    assert Counter(t for pl in bare.plan(400) for t in pl.tools)["deposit_check_in_app"] < 20


def test_cell_tools_are_what_the_chain_calls():
    p = Planner(hb.TEMPLATES)
    assert p.tools_of(("wire", "refusal", None)) == ()
    assert "transfer_funds" in p.tools_of(("wire", "success", "implicit_order"))
    assert "transfer_funds" not in p.tools_of(("wire", "success", None))
    assert p.tools_of(("refund_fee", "transfer", None)) == ("transfer_to_human",)


def test_want_rules_and_tools_come_first():
    p = Planner(hb.TEMPLATES, seed=1)
    fee = "fee_schedule_2025/account_activity_fees/stop_payment_fee"
    plans = p.plan(6, want_rules=[fee, "no/such/rule"], want_tools={"deposit_check_in_app": 2})
    assert plans[0].template == "refund_fee" and plans[0].rule_keys == [fee] and plans[0].outcome == "refusal"
    assert all("deposit_check_in_app" in pl.tools for pl in plans[1:3])
    assert p.rule_templates("no/such/rule") == []


def test_rounds_differ():
    a = Planner(hb.TEMPLATES, seed=0).plan(50, round=0)
    b = Planner(hb.TEMPLATES, seed=0).plan(50, round=1)
    assert {x.seed for x in a}.isdisjoint({x.seed for x in b})


def test_coverage_wants():
    from tau_env.synthesis.planner import coverage_wants

    from tau_env import Action, Scenario, Task

    t = Task(
        id="t",
        scenario=Scenario(requests=["x"]),
        actions=[Action(name="lock_card", arguments={})],
        metadata={"synthesis": {"decisive": ["a/b"]}},
    )
    tools, rules = coverage_wants([t] * 5, write_tools=["lock_card", "unlock_card"], rule_ids=["a/b", "c/d"])
    assert tools == {"lock_card": 20, "unlock_card": 26} and rules == ["c/d"]
