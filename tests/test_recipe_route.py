"""The CPU recipe's diagnostics (benchmarks/recipe_cpu.py): ``route``, which steps of the reference
route an evaluated agent made, counted from its episode records; ``turn_report``, which trained
turns of a teacher-forced episode greedy decoding would write exactly."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
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


STEPS = ("identity_verified", "tool_unlocked", "last_call_named", "last_call_exact")


def counts(result: dict) -> dict:
    """The route's step counts, (episodes, of) each."""
    return {k: (result[k]["episodes"], result[k]["of"]) for k in STEPS}


def rewarded(rec: dict, *errors: bool) -> dict:
    """``rec`` with reward 1, its agent calls' results failing where ``errors`` says so."""
    calls = [e for e in rec["events"] if e["seat"] == "agent"]
    for event, error in zip(calls, errors):
        event["tool_results"] = [
            {"tool_call_id": tc["id"], "name": tc["function"]["name"], "content": "x", "error": error}
            for tc in event["message"]["tool_calls"]
        ]
    return {**rec, "reward": 1.0}


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


def test_rewarded_with_error_counts_the_wins_where_a_call_failed():
    ok = rewarded(episode("t", ("list_cards", {}), ("close_account_8837", {})), False, False)
    refused = rewarded(episode("t", ("list_cards", {}), ("transfer_funds", {"card_id": "C"})), False, True)
    failed_but_lost = episode("t", ("transfer_funds", {"card_id": "C"}))
    failed_but_lost["events"][1]["tool_results"] = [{"error": True}]
    r = recipe.route([ok, refused, failed_but_lost, episode("t")], REF)
    assert r["rewarded_with_error"] == {"episodes": 1, "of": 2}
    # tasks outside the references count too: the reward is the grader's, not the route's
    r = recipe.route([refused, {**refused, "task_id": "elsewhere"}], REF)
    assert r["rewarded_with_error"] == {"episodes": 2, "of": 2}
    # a record without events: its tool_errors count
    bare = {"task_id": "t", "reward": 1.0, "tool_errors": 2}
    assert recipe.route([bare], REF)["rewarded_with_error"] == {"episodes": 1, "of": 1}
    assert recipe.route([], REF)["rewarded_with_error"] == {"episodes": 0, "of": 0}


def test_a_refused_write_on_a_decline_task_is_rewarded_and_counted():
    """The class this diagnostic is for, on the real env: a decline task's right outcome is no change,
    so an episode whose only write is refused by the tool earns the reward."""
    from tau_env.agents import OracleAgent
    from tau_env.messages import assistant_message, tool_call

    class RefusedWriteOracle(OracleAgent):
        """The reference actions, then a write the tool refuses (a card id where an account goes)."""

        def reset(self, task=None, seed=None):
            super().reset(task, seed)
            self._sent = False

        def __call__(self, obs):
            if self._i >= len(self._actions) and not self._sent:
                self._sent = True
                bad = {"card_id": "CARD-4010", "amount_cents": 100}
                return assistant_message(None, [tool_call("transfer_funds", bad, id="bad")])
            return super().__call__(obs)

    run = tau_env.evaluate(recipe.ENV, RefusedWriteOracle(), tau_env.ScriptedUser, task_ids=["limit_above_max_decline"])
    rec = run.results[0].to_dict()
    assert rec["reward"] == 1.0 and rec["tool_errors"] == 1
    r = recipe.route([rec], recipe.references_of(["limit_above_max_decline"]))
    assert r["rewarded_with_error"] == {"episodes": 1, "of": 1}


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


def test_turn_report_by_hand():
    ids = [7, 1, 2, 3, 9, 4, 4, 8]
    mask = [0, 1, 1, 0, 0, 1, 1, 1]
    predicted = [-1, 1, 2, 0, 0, 4, 5, 8]  # the second turn goes wrong at its second token
    nll = [0.0, 0.2, 0.4, 9.0, 9.0, 0.1, 2.0, 0.3]
    rows = recipe.turn_report(ids, mask, predicted, nll)
    assert [(r["start"], r["tokens"], r["exact"], r["first_miss"]) for r in rows] == [
        (1, 2, True, None),
        (5, 3, False, 1),
    ]
    assert rows[0]["nll"] == pytest.approx(0.3)
    assert rows[1]["nll"] == pytest.approx(0.8)
    # untrained tokens' predictions never count
    assert recipe.turn_report(ids, mask, [*predicted[:3], 1, 1, *predicted[5:]], nll)[0]["exact"]
    with pytest.raises(ValueError, match="first token"):
        recipe.turn_report([1, 2], [1, 0], [1, 2], [0.0, 0.0])


@given(st.lists(st.integers(0, 1), max_size=40))
def test_turn_spans_are_the_runs_of_ones(mask):
    spans = recipe.turn_spans(mask)
    covered = [i for a, b in spans for i in range(a, b)]
    assert covered == [i for i, m in enumerate(mask) if m]
    assert all(a < b for a, b in spans)
    assert all(b1 < a2 for (_, b1), (a2, _) in zip(spans, spans[1:]))  # runs are maximal: a 0 between


@given(st.lists(st.integers(0, 1), min_size=2, max_size=40).map(lambda m: [0, *m]), st.data())
def test_a_turn_is_exact_iff_every_prediction_in_it_is_right(mask, data):
    ids = data.draw(st.lists(st.integers(0, 5), min_size=len(mask), max_size=len(mask)))
    predicted = data.draw(st.lists(st.integers(0, 5), min_size=len(mask), max_size=len(mask)))
    rows = recipe.turn_report(ids, mask, predicted, [1.0] * len(mask))
    for r, (a, b) in zip(rows, recipe.turn_spans(mask)):
        assert r["exact"] == (predicted[a:b] == ids[a:b])
        assert r["exact"] == (r["first_miss"] is None)
        assert r["exact"] or predicted[a + r["first_miss"]] != ids[a + r["first_miss"]]
        assert r["nll"] == pytest.approx(1.0)


class _Reader:
    """A stand-in model that reads the sequence it is given: at each position its most likely next
    token is the true next one, except at the positions in ``wrong`` (given as the index of the
    predicted token), where it is another."""

    def __init__(self, wrong: set[int] = frozenset(), vocab: int = 5000):
        self.wrong, self.vocab = wrong, vocab

    def eval(self):
        return self

    def __call__(self, ids):
        import torch

        n = ids.shape[1]
        logits = torch.zeros(1, n, self.vocab)
        for i in range(n - 1):
            nxt = int(ids[0, i + 1])
            logits[0, i, (nxt + 1) % self.vocab if i + 1 in self.wrong else nxt] = 10.0
        return type("Out", (), {"logits": logits})()


def test_teacher_forced_counts_the_turns_greedy_decoding_writes(tmp_path, monkeypatch):
    """teacher_forced against a stand-in model that predicts the true next token everywhere (every turn
    exact), everywhere but one token of the write call, or nowhere (no turn exact): the
    turns, their labels and the counts follow; the positions are the trainers' own tokenization."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tau_env.reference_trainers import checkpoint as ckpt_mod
    from tau_env.reference_trainers.cpu_common import build_tiny_model, tokenize_sft_example
    from transformers import AutoTokenizer

    task = "close_zero_balance_savings"
    [ex] = recipe.heldout_teacher_examples(tmp_path / "teacher", [task], "grep")
    tok = AutoTokenizer.from_pretrained(str(build_tiny_model(tmp_path / "tiny", [json.dumps(ex)] * 3)))
    sample = tokenize_sft_example(tok, ex, tok.chat_template)
    spans = recipe.turn_spans(sample.loss_mask)

    def run(model):
        loaded = ckpt_mod.Checkpoint(tmp_path, model, tok, {})
        monkeypatch.setattr(ckpt_mod, "load_checkpoint", lambda path, **kw: loaded)
        return recipe.teacher_forced(tmp_path, [ex])

    perfect = run(_Reader())
    rows = perfect["per_task"][task]
    assert [r["turn"] for r in rows][:2] == ["grep_documents", "unlock_tool"]
    assert [r["turn"] for r in rows][-2:] == ["close_account_8837", "text"]
    assert [(r["start"], r["start"] + r["tokens"]) for r in rows] == spans
    assert perfect["turns_exact"] == perfect["turns"] == len(spans)
    assert (perfect["first_turn_exact"], perfect["last_call_exact"], perfect["episodes"]) == (1, 1, 1)

    write = next(r for r in rows if r["turn"] == "close_account_8837")
    one_off = run(_Reader({write["start"] + 5}))
    missed = [r for r in one_off["per_task"][task] if not r["exact"]]
    assert [(r["turn"], r["first_miss"]) for r in missed] == [("close_account_8837", 5)]
    assert (one_off["first_turn_exact"], one_off["last_call_exact"]) == (1, 0)

    # a mistake outside the trained turns (in a tool result) changes nothing
    outside = next(i for i, m in enumerate(sample.loss_mask) if i > spans[0][1] and not m)
    assert run(_Reader({outside}))["turns_exact"] == len(spans)

    wrong = run(_Reader(set(range(len(sample.input_ids)))))
    assert wrong["turns_exact"] == 0 and wrong["first_turn_exact"] == wrong["last_call_exact"] == 0


def test_first_turn_keeps_the_conversation_up_to_the_first_trained_turn():
    run = tau_env.evaluate(
        recipe.ENV,
        tau_env.TeacherAgent(lookup="early"),
        tau_env.ScriptedUser,
        task_ids=["lost_card_standard_shipping", "update_email_and_phone"],
        retrieval="grep",
    )
    from tau_env.sft import to_example

    lookup, identity = (recipe.first_turn(to_example(r.to_dict())) for r in run.results)
    for ex in (lookup, identity):
        assert ex["train"][-1] and sum(ex["train"]) == 1  # one trained turn, the last message
        assert ex["messages"][-2]["role"] == "user"  # right after the request
        assert len(ex["messages"]) == len(ex["train"])
    assert lookup["messages"][-1]["tool_calls"][0]["function"]["name"] == "grep_documents"
    # the tools of the start: replace_card_5120, unlocked after the cut, is not in the prompt
    assert "replace_card_5120" not in [t["function"]["name"] for t in lookup["tools"]]
    assert len(lookup["tools"]) == len(identity["tools"])
    assert identity["messages"][-1]["content"].startswith("Before I go on")  # no lookup: the identity first
    with pytest.raises(ValueError, match="no trained agent turn"):
        recipe.first_turn({**lookup, "train": [False] * len(lookup["train"])})


@given(st.lists(st.tuples(st.sampled_from(["system", "user", "assistant", "tool"]), st.booleans()), max_size=12))
def test_first_turn_is_a_prefix_ending_at_the_first_trained_agent_turn(turns):
    ex = {"task_id": "t", "messages": [{"role": r, "content": str(i)} for i, (r, _) in enumerate(turns)]}
    ex["train"] = [t for _, t in turns]
    firsts = [i for i, (r, t) in enumerate(turns) if t and r == "assistant"]
    if not firsts:
        with pytest.raises(ValueError):
            recipe.first_turn(ex)
        return
    cut = recipe.first_turn(ex)
    assert cut["messages"] == ex["messages"][: firsts[0] + 1] and cut["train"] == ex["train"][: firsts[0] + 1]
    assert cut["task_id"] == "t"


def test_out_of_steps_counts_the_episodes_that_ended_on_the_budget():
    spent = {**episode("t", ("list_cards", {})), "termination_reason": "max_steps"}
    stopped = {**episode("t", ("list_cards", {})), "termination_reason": "user_stop"}
    unknown = episode("elsewhere")  # no reference, no reason recorded: counted in the total only
    r = recipe.route([spent, stopped, spent, unknown], REF)
    assert r["out_of_steps"] == {"episodes": 2, "of": 4}
    assert recipe.route([], REF)["out_of_steps"] == {"episodes": 0, "of": 0}
