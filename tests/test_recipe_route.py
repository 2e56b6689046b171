"""The CPU recipe's route diagnostics (benchmarks/recipe_cpu.py: ``route``): which steps of the
reference route an evaluated agent made, counted from its episode records."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import tau_env

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "recipe_cpu.py"
_spec = importlib.util.spec_from_file_location("recipe_cpu_route", SCRIPT)
recipe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recipe)

VERIFY = {"name": "verify_identity", "arguments": {"customer_id": "C-1", "phone_last4": "0192"}, "requestor": "agent"}
UNLOCK = {"name": "unlock_tool", "arguments": {"tool_name": "close_account_8837"}, "requestor": "agent"}
CLOSE = {"name": "close_account_8837", "arguments": {"account_id": "SAV-1", "reason": "empty"}, "requestor": "agent"}
REF = {"t": [VERIFY, UNLOCK, CLOSE]}


def episode(task: str, *calls: tuple[str, object]) -> dict:
    """An episode record whose agent made ``calls`` (arguments as the model sent them: dicts are
    JSON-encoded, strings kept as they are), with a user turn between them."""
    events = [{"step": 0, "seat": "user", "message": {"role": "assistant", "content": "Please close my savings."}}]
    for i, (name, args) in enumerate(calls):
        text = args if isinstance(args, str) else json.dumps(args)
        call = {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": text}}
        events.append({"step": i + 1, "seat": "agent", "message": {"role": "assistant", "tool_calls": [call]}})
    return {"task_id": task, "reward": 0.0, "events": events}


def counts(result: dict) -> dict:
    return {k: (v["episodes"], v["of"]) for k, v in result.items() if isinstance(v, dict)}


def test_the_whole_route_counts_everywhere():
    r = recipe.route([episode("t", *((a["name"], a["arguments"]) for a in REF["t"]))], REF)
    assert counts(r) == {k: (1, 1) for k in counts(r)}
    assert r["reference_calls_made"] == 1.0


def test_a_step_counts_only_with_the_reference_arguments():
    wrong_verify = {**VERIFY["arguments"], "phone_last4": "9999"}
    wrong_unlock = {"tool_name": "close_account"}
    rec = episode("t", ("verify_identity", wrong_verify), ("unlock_tool", wrong_unlock), ("close_account_8837", {}))
    r = recipe.route([rec], REF)
    assert counts(r) == {
        "identity_verified": (0, 1),
        "tool_unlocked": (0, 1),
        "last_call_named": (1, 1),
        "last_call_exact": (0, 1),
    }
    assert r["reference_calls_made"] == 0.0


def test_arguments_that_are_not_json_match_nothing_and_break_nothing():
    rec = episode("t", ("verify_identity", '{"customer_id": "C-1", '), ("close_account_8837", "not json"))
    r = recipe.route([rec], REF)
    assert counts(r)["identity_verified"] == (0, 1)
    assert counts(r)["last_call_named"] == (1, 1)
    assert r["reference_calls_made"] == 0.0


def test_a_call_made_twice_matches_one_reference_call():
    ref = {"t": [CLOSE, CLOSE]}
    once = recipe.route([episode("t", (CLOSE["name"], CLOSE["arguments"]))], ref)
    twice = recipe.route([episode("t", *[(CLOSE["name"], CLOSE["arguments"])] * 2)], ref)
    assert once["reference_calls_made"] == 0.5
    assert twice["reference_calls_made"] == 1.0


def test_denominators_are_the_episodes_whose_reference_has_the_step():
    decline = {"name": "list_cards", "arguments": {"customer_id": "C-1"}, "requestor": "agent"}
    deposit = {"name": "deposit_check_in_app", "arguments": {"amount_cents": 1}, "requestor": "user"}
    refs = {**REF, "decline": [VERIFY, decline], "user_only": [deposit], "nothing": []}
    recs = [episode(t) for t in ("t", "t", "decline", "user_only", "nothing", "not_a_reference_task")]
    r = recipe.route(recs, refs)
    # the user's own step and tasks without agent actions are not the agent's route: left out
    assert counts(r) == {
        "identity_verified": (0, 3),
        "tool_unlocked": (0, 2),
        "last_call_named": (0, 3),
        "last_call_exact": (0, 3),
    }
    assert recipe.route([episode("nothing")], refs)["reference_calls_made"] is None


name = st.sampled_from(["verify_identity", "unlock_tool", "close_account_8837", "list_cards", "x"])
args = st.one_of(
    st.sampled_from([VERIFY["arguments"], UNLOCK["arguments"], CLOSE["arguments"], {}]),
    st.text(max_size=20),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)


@given(st.lists(st.lists(st.tuples(name, args), max_size=8), min_size=1, max_size=6))
def test_counts_are_bounded_and_the_reference_calls_complete_any_episode(episodes):
    recs = [episode("t", *calls) for calls in episodes]
    r = recipe.route(recs, REF)
    for made, of in counts(r).values():
        assert 0 <= made <= of == len(recs)
    assert 0.0 <= r["reference_calls_made"] <= 1.0
    # whatever else an episode did, making the reference's calls as well meets the whole route
    full = recipe.route(
        [episode("t", *calls, *((a["name"], a["arguments"]) for a in REF["t"])) for calls in episodes], REF
    )
    assert all(made == of for made, of in counts(full).values())
    assert full["reference_calls_made"] == 1.0


def test_teacher_episodes_on_the_held_out_tasks_meet_the_route():
    heldout = list(recipe.HELDOUT)
    run = tau_env.evaluate(
        recipe.ENV, tau_env.TeacherAgent(lookup="early"), tau_env.ScriptedUser, task_ids=heldout, retrieval="grep"
    )
    recs = [r.to_dict() for r in run.results]
    assert [r["reward"] for r in recs] == [1.0] * len(heldout)
    r = recipe.route(recs, recipe.references_of(heldout))
    assert all(made == of > 0 for made, of in counts(r).values())
    assert r["reference_calls_made"] == 1.0
    # a model that only talks makes none of it
    silent = tau_env.evaluate(recipe.ENV, tau_env.NoopAgent(), tau_env.ScriptedUser, task_ids=heldout)
    r = recipe.route([x.to_dict() for x in silent.results], recipe.references_of(heldout))
    assert all(made == 0 for made, _ in counts(r).values())


def test_references_of_a_task_file(tmp_path):
    env = tau_env.make(recipe.ENV)
    try:
        task = next(t for t in env.domain.tasks if t.id == "close_zero_balance_savings")
    finally:
        env.close()
    path = tmp_path / "tasks.jsonl"
    tau_env.save_tasks([task.model_copy(update={"id": "indist-x"})], path)
    refs = recipe.references_of(["indist-x", "absent"], path)
    assert list(refs) == ["indist-x"]
    assert refs["indist-x"][-1]["name"] == "close_account_8837"
