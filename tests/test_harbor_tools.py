"""Behaviour of individual Harbor Bank tools (through the env, as a model would call them)."""

import json

import pytest

import tau_env
from tau_env import RandomAgent, ScriptedUser, call, run_episode, say


@pytest.fixture
def bank_env():
    env = tau_env.make("harbor-bank-v0")
    env.reset(options={"task_index": 0})
    env.step(say("hello"))
    return env


def _call(env, name, **args):
    env.step(call(name, **args))
    return env.observe("agent")["messages"][-1]["content"]


def _verify(env, cid, dob, last4):
    assert _call(env, "verify_identity", customer_id=cid, date_of_birth=dob, phone_last4=last4).startswith(
        "Identity verified"
    )


def test_writes_need_verification_and_wrong_details_fail(bank_env):
    out = _call(bank_env, "lock_card", card_id="CARD-4001")
    assert out.startswith("Error: Customer 'C-1001' has not been verified")
    out = _call(bank_env, "verify_identity", customer_id="C-1001", date_of_birth="1986-04-12", phone_last4="0000")
    assert out.startswith("Error: Verification failed")
    _verify(bank_env, "C-1001", "1986-04-12", "4417")
    assert _call(bank_env, "lock_card", card_id="CARD-4001") == "Card CARD-4001 is now locked."


def test_find_customer_ignores_case_spacing_and_accents_casefold(bank_env):
    out = _call(bank_env, "find_customer", full_name="  maria   LOPEZ ", date_of_birth="1986-04-12")
    assert json.loads(out) == [{"customer_id": "C-1001", "full_name": "Maria Lopez"}]
    assert _call(bank_env, "find_customer", full_name="Maria Lopez", date_of_birth="1986-04-13").startswith("No ")


def test_cd_transfers_only_after_maturity(bank_env):
    _verify(bank_env, "C-1016", "1949-04-02", "5567")
    accounts = {a["account_id"]: a for a in json.loads(_call(bank_env, "list_accounts", customer_id="C-1016"))}
    other = next(a for a, v in accounts.items() if v["product"] != "cd_12_month" and v["status"] == "open")
    out = _call(bank_env, "transfer_funds", from_account_id="CD-6116", to_account_id=other, amount_cents=100)
    assert "before maturity" in out  # opened 2025-01-10: matures 2026-01-10
    out = _call(bank_env, "transfer_funds", from_account_id="CD-6016", to_account_id=other, amount_cents=100)
    assert "before maturity" in out  # opened 2024-09-01: matures 2025-09-01
    bank_env.db.conn.execute("UPDATE accounts SET opened_on = '2024-06-02' WHERE account_id = 'CD-6016'")
    out = _call(bank_env, "transfer_funds", from_account_id="CD-6016", to_account_id=other, amount_cents=100)
    assert out.startswith("Transferred $1.00")  # matured on its anniversary, today


def test_transfer_to_human_records_the_reason_and_ends(bank_env):
    bank_env.step(call("transfer_to_human", summary="anything", reason="complaint"))
    assert bank_env.termination_reason == "transfer"
    rows = bank_env.db.conn.execute("SELECT reason FROM handoffs").fetchall()
    assert rows == [("complaint",)]


def test_wire_flow_needs_the_customers_approval(bank_env):
    _verify(bank_env, "C-1002", "1979-11-30", "0192")
    _call(bank_env, "unlock_tool", tool_name="initiate_wire_9150")
    _call(bank_env, "unlock_tool", tool_name="release_wire_9152")
    out = _call(
        bank_env,
        "initiate_wire_9150",
        account_id="CHK-2002",
        beneficiary_name="Ada Okafor",
        beneficiary_account="99120044",
        amount_cents=200000,
        fee_cents=1500,
    )
    wire_id = out.split()[1]
    assert json.loads(_call(bank_env, "list_wires", customer_id="C-1002"))[-1]["status"] == "awaiting_approval"
    assert "must approve it in the app first" in _call(bank_env, "release_wire_9152", wire_id=wire_id)
    _call(bank_env, "hand_over_tool", tool_name="approve_wire_in_app")
    bank_env.step(say(f"Please approve {wire_id} with approve_wire_in_app"))
    bank_env.step(call("approve_wire_in_app", wire_id=wire_id))
    assert bank_env.observe("user")["messages"][-1]["content"].startswith("You approved wire")
    bank_env.step(say("done"))
    assert _call(bank_env, "release_wire_9152", wire_id=wire_id) == f"Wire {wire_id} sent."


def test_calculate_is_safe(bank_env):
    assert _call(bank_env, "calculate", expression="(1250 + 75) * 2") == "2650"
    assert _call(bank_env, "calculate", expression="__import__('os')").startswith("Error: Only numbers")
    assert _call(bank_env, "calculate", expression="9**9**9").startswith("Error: Only numbers")
    assert _call(bank_env, "calculate", expression="1/0") == "Error: Division by zero."


def test_seeded_random_runs_are_identical_on_the_bank():
    def play():
        env = tau_env.make("harbor-bank-v0", max_steps=80)
        r = run_episode(env, RandomAgent(), ScriptedUser(), seed=11)
        return r.events, r.reward, env.db_digest()

    assert play() == play()
