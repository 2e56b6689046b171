"""On-policy teacher labels (``tau_env.reference_trainers.dagger``): which turn is played, which
turns are labelled, and that every example is a valid SFT example of the teacher's turns.

Learners here are scripted stand-ins for a checkpoint (no model); one test plays a tiny random
checkpoint through the command-line entry point.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tau_env.reference_trainers.dagger import DaggerAgent, EpisodeLog, episode_examples, same_turn

import tau_env
from tau_env.error import InvalidOptionError, ResultsFolderError
from tau_env.messages import assistant_message, say, tool_call

ENV = "harbor-bank-v0"
TASK = "travel_notice_simple"


class Learner:
    """A stand-in for a checkpoint's policy: the teacher's own turn, except at the turns ``slips``
    names, where it plays ``slips[turn]`` (and its own teacher does not advance); or, at every
    turn, ``always(turn)``.

    :class:`DaggerAgent` resets the learner before every turn (a fresh trajectory); the stand-in
    keeps its episode state across those resets (the conversation tells a real model the same).
    """

    def __init__(self, slips: dict[int, dict] | None = None, always=None):
        self.slips = slips or {}
        self.always = always
        self.teacher = tau_env.TeacherAgent()
        self._key = None
        self.turn = 0

    def reset(self, task=None, seed=None):
        if task is not self._key:
            self._key = task
            self.teacher.reset(task, seed)
            self.turn = 0

    async def aact(self, obs):
        self.turn += 1
        if self.always is not None:
            return self.always(self.turn)
        if self.turn in self.slips:
            saved = copy.deepcopy(self.teacher.__dict__)
            self.teacher(obs)
            self.teacher.__dict__.update(saved)
            return copy.deepcopy(self.slips[self.turn])
        return self.teacher(obs)


def _play(learner, p=1.0, task=TASK, seed=0):
    agent = DaggerAgent(learner, p_learner=p, seed=seed)
    run = asyncio.run(
        tau_env.aevaluate(
            ENV, agent, tau_env.ScriptedUser(), task_ids=[task], concurrency=1, retrieval="grep", max_steps=40
        )
    )
    (log,) = agent.logs.values()
    record = run.results[0].to_dict()
    return log, record, episode_examples(log, record["agent_view"]["messages"])


def _teacher_episode(task=TASK):
    run = tau_env.evaluate(
        ENV, tau_env.TeacherAgent(), tau_env.ScriptedUser, task_ids=[task], retrieval="grep", max_steps=40
    )
    return run.results[0].to_dict()


def _assert_valid(example):
    messages, train = example["messages"], example["train"]
    assert len(messages) == len(train) and any(train)
    assert messages[-1]["role"] == "assistant" and train[-1]
    for m, t in zip(messages, train):
        if t:
            assert m["role"] == "assistant"
    assert example["tools"]  # the tools of the start, rendered once


def test_a_learner_that_agrees_plays_the_teachers_episode_and_labels_nothing():
    log, record, examples = _play(Learner(), p=1.0)
    teacher = _teacher_episode()
    assert record["reward"] == 1.0
    assert log.agreed == log.turns > 0 and log.learner_played == 0
    assert examples == []  # no slip: the SFT data already holds these turns
    assert record["agent_view"]["messages"] == teacher["agent_view"]["messages"]


def _lookups(turn):
    """A learner that only ever greps, for something else each turn (the loop rule ends repeats)."""
    return assistant_message(None, [tool_call("grep_documents", {"pattern": f"fee {turn}"}, id=f"gen_{turn}")])


def test_with_p_zero_the_teacher_plays_whatever_the_learner_says():
    log, record, examples = _play(Learner(always=_lookups), p=0.0)
    assert record["reward"] == 1.0 and log.learner_played == 0 and log.agreed == 0
    assert examples == []
    assert record["agent_view"]["messages"] == _teacher_episode()["agent_view"]["messages"]


def test_with_p_one_every_turn_of_a_learner_that_only_looks_up_is_labelled_with_the_teachers_turn():
    log, record, examples = _play(Learner(always=_lookups), p=1.0)
    assert record["reward"] == 0.0
    assert log.learner_played == log.turns == len(examples) > 5
    first = tau_env.TeacherAgent()
    env = tau_env.make(ENV, retrieval="grep", max_steps=40)
    env.reset(seed=0, options={"task_id": TASK})
    first.reset(env.task)
    chat = record["agent_view"]["messages"]
    for ex in examples:
        _assert_valid(ex)
        assert sum(ex["train"]) == 1
        n = len(ex["messages"]) - 1
        assert ex["messages"][:n] == chat[:n]  # the conversation the learner was in
        assert (
            same_turn(chat[n], _lookups(0)) is False
            and chat[n]["tool_calls"][0]["function"]["name"] == "grep_documents"
        )
        # every label is the teacher's first turn: a lookup is not a step of its route
        assert same_turn(ex["messages"][-1], examples[0]["messages"][-1])
    # the label of the first turn is what the teacher does on the first observation: its lookup
    want = first({"messages": examples[0]["messages"][:-1], "tools": examples[0]["tools"]})
    assert same_turn(examples[0]["messages"][-1], want)
    assert want["tool_calls"][0]["function"]["name"] == "grep_documents"


def test_after_a_slip_the_conversation_trains_the_teachers_later_turns_only():
    slip = _lookups(3)  # an extra lookup (text the scripted user does not expect ends the call)
    log, record, examples = _play(Learner(slips={3: slip}), p=1.0)
    assert record["reward"] == 1.0  # a harmless slip: the teacher's route goes on after it
    assert log.learner_played == 1 and log.agreed == log.turns - 1
    labelled, conversation = examples
    _assert_valid(labelled)
    assert sum(labelled["train"]) == 1
    _assert_valid(conversation)
    chat = record["agent_view"]["messages"]
    slip_at = len(labelled["messages"]) - 1
    assert same_turn(chat[slip_at], slip)
    assert conversation["messages"] == chat[: len(conversation["messages"])]
    trained = [i for i, t in enumerate(conversation["train"]) if t]
    assert trained and min(trained) > slip_at
    # every assistant turn after the slip is trained (the teacher's), none before it
    after = [i for i, m in enumerate(conversation["messages"]) if m["role"] == "assistant" and i > slip_at]
    assert trained == after


def _key(name, args):
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    return name, json.dumps(args, sort_keys=True)


def _carried_out(chat, before):
    """(name, arguments) of the calls in ``chat[:before]`` the env carried out (no error after them)."""
    done = collections.Counter()
    for i, m in enumerate(chat[:before]):
        for k, c in enumerate(m.get("tool_calls") or [] if m.get("role") == "assistant" else []):
            result = chat[i + 1 + k] if i + 1 + k < len(chat) else {}
            if result.get("role") == "tool" and not str(result.get("content")).startswith("Error:"):
                done[_key(c["function"]["name"], c["function"]["arguments"])] += 1
    return done


def _reference(task_id):
    env = tau_env.make(ENV, retrieval="grep", max_steps=40)
    env.reset(seed=0, options={"task_id": task_id})
    return collections.Counter(_key(a.name, a.arguments) for a in env.task.actions if a.requestor == "agent")


def _assert_teacher_repeats_nothing_done(log, chat, task_id):
    reference = _reference(task_id)
    for pos, message, trained in log.played:
        if not trained:
            continue
        before = _carried_out(chat, pos)
        for c in message.get("tool_calls") or []:
            key = _key(c["function"]["name"], c["function"]["arguments"])
            if key in reference:
                assert before[key] < reference[key], f"the teacher repeated {key} at {pos}"


def test_a_reference_call_the_learner_carried_out_is_not_repeated_by_the_teacher():
    ref = _teacher_episode()["agent_view"]["messages"]
    find = next(m for m in ref if m.get("tool_calls") and m["tool_calls"][0]["function"]["name"] == "find_customer")
    log, record, examples = _play(Learner(slips={1: copy.deepcopy(find)}), p=1.0)
    chat = record["agent_view"]["messages"]
    assert record["reward"] == 1.0
    played_find = [
        (pos, trained) for pos, m, trained in log.played if same_turn(m, find)
    ]  # the learner's slip, and again where its own teacher reaches it: never the teacher's
    assert played_find and not any(trained for _, trained in played_find)
    _assert_teacher_repeats_nothing_done(log, chat, TASK)


def test_a_reference_call_the_env_refused_is_still_played_by_the_teacher():
    ref = _teacher_episode()["agent_view"]["messages"]
    write = next(
        m for m in ref if m.get("tool_calls") and m["tool_calls"][0]["function"]["name"].startswith("set_travel_notice")
    )
    log, record, examples = _play(Learner(slips={1: copy.deepcopy(write)}), p=1.0)
    chat = record["agent_view"]["messages"]
    assert chat[4]["role"] == "tool" and chat[4]["content"].startswith("Error:")  # locked at the start
    assert record["reward"] == 1.0
    assert any(trained and same_turn(m, write) for _, m, trained in log.played)  # the teacher writes it


def test_a_played_turn_the_env_does_not_hold_where_it_was_played_is_not_trained():
    log = EpisodeLog("t", 0, tools=[{"type": "function", "function": {"name": "x"}}])
    a = say("a")
    b = assistant_message(None, [tool_call("get_x", {"id": 1}, id="teacher_1")])
    log.played = [(1, a, False), (3, b, True)]
    chat = [{"role": "assistant", "content": "hi"}, a, {"role": "user", "content": "u"}, say("rewritten")]
    assert episode_examples(log, chat) == []
    chat[3] = b
    (ex,) = episode_examples(log, chat)
    assert ex["train"] == [False, False, False, True]


def test_same_turn_compares_calls_by_name_and_parsed_arguments_and_text_by_its_words():
    one = assistant_message(None, [tool_call("f", {"a": 1, "b": [2]}, id="x")])
    two = assistant_message(None, [tool_call("f", '{"b": [2], "a": 1}', id="y")])
    assert same_turn(one, two)
    assert not same_turn(one, assistant_message(None, [tool_call("f", {"a": 2, "b": [2]})]))
    assert not same_turn(one, say('f {"a": 1}'))
    assert same_turn(say(" hello "), say("hello"))
    assert not same_turn(say("hello"), say("hello!"))
    bad = assistant_message(None, [{"type": "function", "function": {"name": "f", "arguments": "{not json"}}])
    assert same_turn(bad, copy.deepcopy(bad)) and not same_turn(bad, one)


@pytest.mark.parametrize("p", [-0.1, 1.01, math.nan, True, "0.5", None])
def test_a_probability_outside_zero_to_one_is_refused(p):
    with pytest.raises(InvalidOptionError, match="p_learner"):
        DaggerAgent(Learner(), p_learner=p)


_TURNS = st.one_of(
    st.builds(say, st.text(max_size=20)),
    st.builds(
        lambda name, args: assistant_message(None, [tool_call(name, args)]),
        st.sampled_from(["grep_documents", "get_current_time", "find_customer", "no_such_tool", "transfer_funds"]),
        st.one_of(
            st.dictionaries(
                st.sampled_from(["pattern", "customer_id", "amount_cents"]), st.integers() | st.text(max_size=8)
            ),
            st.text(max_size=10),
        ),
    ),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    slips=st.dictionaries(st.integers(min_value=1, max_value=14), _TURNS, max_size=6),
    p=st.floats(min_value=0.0, max_value=1.0),
    seed=st.integers(min_value=0, max_value=3),
    task=st.sampled_from([TASK, "found_card_unlock", "close_zero_balance_savings"]),
)
def test_any_learner_gives_valid_examples_of_the_teachers_turns_only(slips, p, seed, task):
    log, record, examples = _play(Learner(slips=slips), p=p, task=task, seed=seed)
    assert log.agreed + log.learner_played <= log.turns
    assert sum(1 for ex in examples if sum(ex["train"]) == 1 and len(ex["train"]) - 1 == ex["train"].index(True)) >= (
        log.learner_played
    )
    for ex in examples:
        _assert_valid(ex)
        json.dumps(ex)  # a JSONL line
        labelled = sum(ex["train"]) == 1 and ex["train"][-1] and ex in log.examples
        for i, (m, t) in enumerate(zip(ex["messages"], ex["train"])):
            if t and not labelled:  # the conversation: trained only where the teacher's turn was played
                assert any(pos == i and trained and same_turn(m, msg) for pos, msg, trained in log.played)
            # call ids as the env's chat holds them (it renames an id used twice): each call's result,
            # where the example holds it, answers that id
            for k, c in enumerate(m.get("tool_calls") or []):
                if i + 1 + k < len(ex["messages"]) and ex["messages"][i + 1 + k]["role"] == "tool":
                    assert ex["messages"][i + 1 + k]["tool_call_id"] == c["id"]
        if labelled:  # a label: the teacher's turn, its own call ids
            calls = ex["messages"][-1].get("tool_calls") or []
            assert all(c["id"].startswith(("teacher_", "oracle_")) for c in calls)
        for i in range(len(ex["messages"]) - 1):  # the learner's own played turns carry no loss
            if any(pos == i and not trained for pos, _, trained in log.played):
                assert not ex["train"][i]
    if log.learner_played == 0:
        assert examples == []
    _assert_teacher_repeats_nothing_done(log, record["agent_view"]["messages"], task)


def test_the_command_plays_a_checkpoint_and_writes_sft_examples(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tau_env.reference_trainers.checkpoint import base_checkpoint, checkpoint_digest
    from tau_env.reference_trainers.cpu_common import build_tiny_model, read_sft_jsonl, tokenize_sft_example
    from tau_env.reference_trainers.dagger import main

    corpus = [json.dumps(_teacher_episode()["agent_view"])] * 3
    model = build_tiny_model(tmp_path / "tiny", corpus)
    ckpt = base_checkpoint(model, tmp_path / "base", retrieval="grep", max_new_tokens=6)
    out = tmp_path / "dagger"
    # the run folder stands for its latest checkpoint, and the record names that checkpoint
    argv = ["--checkpoint", str(ckpt.parents[1]), "--out", str(out), "--task", TASK, "--p-learner", "1"]
    assert main([*argv, "--max-steps", "6"]) == 0
    configs = [json.loads(c.read_text()) for c in out.rglob("config.json")]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["checkpoint_path"] == str(ckpt.resolve())
    # the episodes' record names the checkpoint by its content, not by the path it was read from
    assert configs and all(c["dagger"]["checkpoint"] == checkpoint_digest(ckpt) for c in configs)
    assert summary["episodes"] == 1 and summary["turns"] >= 1
    assert summary["examples_file"] == str((out / "examples.jsonl").resolve())  # usable from any folder
    examples = read_sft_jsonl([out / "examples.jsonl"])
    assert len(examples) == summary["examples"] >= 1  # a random model slips at once
    from tau_env.reference_trainers.checkpoint import load_checkpoint
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(ckpt))
    template = load_checkpoint(ckpt).chat_template
    for ex in examples:
        sample = tokenize_sft_example(tok, ex, template)
        assert sum(sample.loss_mask) > 0
    # the same call again reads the folder back instead of playing again; other settings are refused
    assert main([*argv, "--max-steps", "6"]) == 0 and json.loads((out / "summary.json").read_text()) == summary
    assert main([*argv, "--max-steps", "6", "--device", "cpu"]) == 0  # where it generates is no setting
    for other in (["--max-steps", "7"], ["--max-steps", "6", "--seed", "1"], ["--max-steps", "6", "--trials", "2"]):
        assert main([*argv, *other]) == 2
    assert json.loads((out / "summary.json").read_text()) == summary
    file = tmp_path / "a-file"
    file.write_text("x")
    assert main([*argv[:2], "--out", str(file / "sub"), "--task", TASK]) == 2
    with pytest.raises(SystemExit):
        main([*argv[:4], "--p-learner", "2"])


def test_a_round_holds_the_checkpoint_it_plays_against_the_live_runs_pruning(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tau_env.reference_trainers import dagger
    from tau_env.reference_trainers.checkpoint import (
        base_checkpoint,
        checkpoint_digest,
        find_checkpoint,
        load_checkpoint,
        save_checkpoint,
    )
    from tau_env.reference_trainers.cpu_common import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny", [json.dumps(_teacher_episode()["agent_view"])] * 3)
    ckpt = base_checkpoint(model, tmp_path / "base", retrieval="grep", max_new_tokens=6)
    run, loaded, digest = ckpt.parents[1], load_checkpoint(ckpt), checkpoint_digest(ckpt)

    def save(step):  # the live run's save with --keep-checkpoints 1
        i = loaded.info
        save_checkpoint(run, step, model=loaded.model, tokenizer=loaded.tokenizer, chat_template=loaded.chat_template,
                        trainer="sft", config=i["config"], family=i["family"], agent=i["agent"], keep=1)  # fmt: skip

    from tau_env.reference_trainers import checkpoint as checkpoint_module

    real_policy, loads = checkpoint_module.checkpoint_policy, []

    def save_then_load(path, **kw):  # the run saves between the round's digest and its load
        save(1)
        loads.append(ckpt.is_dir())  # held: not pruned under the load
        return real_policy(path, **kw)

    real, seen = dagger.DaggerAgent._aact, []

    async def saving(self, obs):
        if not seen:
            save(2)  # loaded: the round lets it go, the run prunes it
        seen.append(ckpt.is_dir())
        return await real(self, obs)

    monkeypatch.setattr(checkpoint_module, "checkpoint_policy", save_then_load)
    monkeypatch.setattr(dagger.DaggerAgent, "_aact", saving)
    summary = dagger.collect(run, tmp_path / "round", task_ids=[TASK], p_learner=1.0, max_steps=4)
    assert loads == [True] and seen and not any(seen)
    assert summary["checkpoint_path"] == str(ckpt.resolve()) and find_checkpoint(run).name == "step-000002"
    assert json.loads(next((tmp_path / "round").rglob("config.json")).read_text())["dagger"]["checkpoint"] == digest
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000002"]  # no lock left either


def test_a_round_cut_short_goes_on_where_it_stopped_and_gives_what_one_run_gives(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tau_env.reference_trainers import dagger
    from tau_env.reference_trainers.checkpoint import base_checkpoint
    from tau_env.reference_trainers.cpu_common import build_tiny_model

    corpus = [json.dumps(_teacher_episode()["agent_view"])] * 3
    model = build_tiny_model(tmp_path / "tiny", corpus)
    ckpt = base_checkpoint(model, tmp_path / "base", retrieval="grep", max_new_tokens=6)
    tasks = [TASK, "found_card_unlock", "update_email_and_phone"]
    kwargs = {"task_ids": tasks, "p_learner": 1.0, "max_steps": 4}

    calls: list[tuple[str, int]] = []
    real = dagger.DaggerAgent._aact

    async def counted(self, obs):
        calls.append((self._log.task_id, self._log.seed))
        return await real(self, obs)

    monkeypatch.setattr(dagger.DaggerAgent, "_aact", counted)
    whole = dagger.collect(ckpt, tmp_path / "whole", **kwargs)
    per_episode = collections.Counter(calls)
    assert whole["episodes"] == 3 and whole["resumed_episodes"] == 0 and len(per_episode) == 3

    # cut the round short in its second episode (as Ctrl-C does)
    calls.clear()

    async def interrupted(self, obs):
        calls.append((self._log.task_id, self._log.seed))
        if len(set(calls)) == 2:
            raise KeyboardInterrupt
        return await real(self, obs)

    monkeypatch.setattr(dagger.DaggerAgent, "_aact", interrupted)
    out = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        dagger.collect(ckpt, out, **kwargs)
    assert not (out / "summary.json").exists() and (out / "round.json").is_file()
    done = {k for k in calls if calls.count(k) == per_episode[k]} - {calls[-1]}
    assert len(done) == 1

    # other settings are refused on the unfinished round; the same ones play only what is left
    with pytest.raises(dagger.ResultsFolderError, match="unfinished DAgger round"):
        dagger.collect(ckpt, out, **{**kwargs, "max_steps": 5})
    calls.clear()
    monkeypatch.setattr(dagger.DaggerAgent, "_aact", counted)
    moved = tmp_path / "elsewhere" / "step"  # the same checkpoint, named by another path
    shutil.copytree(ckpt, moved)
    monkeypatch.chdir(moved.parent)
    resumed = dagger.collect(Path("step"), out, **kwargs)
    assert set(calls) == set(per_episode) - done  # the finished episode is not played again
    assert resumed["resumed_episodes"] == 1
    for key in ("episodes", "turns", "agreed", "learner_played", "examples", "trained_turns", "pass@1_mixed"):
        assert resumed[key] == whole[key], key
    lines = lambda p: sorted((p / "examples.jsonl").read_text().splitlines())  # noqa: E731
    assert lines(out) == lines(tmp_path / "whole")

    # a finished episode whose log is gone cannot give its examples: said, not skipped
    (out / "summary.json").unlink()
    for f in (out / "logs").iterdir():
        f.write_text("{not json")
    with pytest.raises(dagger.ResultsFolderError, match="log is missing or damaged"):
        dagger.collect(ckpt, out, **kwargs)


def test_an_episode_that_ends_before_the_agents_first_turn_resumes_too(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tau_env.reference_trainers import dagger
    from tau_env.reference_trainers.checkpoint import base_checkpoint
    from tau_env.reference_trainers.cpu_common import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny", [json.dumps(_teacher_episode()["agent_view"])] * 3)
    ckpt = base_checkpoint(model, tmp_path / "base", retrieval="grep", max_new_tokens=6)
    kwargs = {"task_ids": [TASK, "found_card_unlock"], "max_steps": 1}  # the user's first line spends the budget
    first = dagger.collect(ckpt, tmp_path / "d", **kwargs)
    assert first["episodes"] == 2 and first["turns"] == 0
    (tmp_path / "d" / "summary.json").unlink()  # as if killed after the last record
    again = dagger.collect(ckpt, tmp_path / "d", **kwargs)
    assert again["resumed_episodes"] == 2 and again["episodes"] == 2 and again["examples"] == first["examples"]


_text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=8)
_message = st.fixed_dictionaries({"role": st.sampled_from(["assistant", "user", "tool"]), "content": _text})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    task_id=_text,
    seed=st.integers(-(2**63), 2**63 - 1),
    played=st.lists(st.tuples(st.integers(0, 50), _message, st.booleans()), max_size=4),
    examples=st.lists(st.fixed_dictionaries({"messages": st.lists(_message, max_size=3)}), max_size=2),
)
def test_an_episode_log_reads_back_as_it_was_saved_whatever_text_it_holds(tmp_path, task_id, seed, played, examples):
    """Lone surrogates (a model can write one as a JSON escape), any task id, any seed."""
    from tau_env.reference_trainers.dagger import load_log, save_log

    log = EpisodeLog(task_id, seed, tools=[{"name": task_id}], examples=examples, played=played, turns=len(played))
    save_log(log, tmp_path / "logs")
    assert load_log(tmp_path / "logs", task_id, seed) == log


def test_a_command_that_fails_on_its_inputs_leaves_nothing_that_blocks_the_corrected_one(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tau_env.reference_trainers import dagger
    from tau_env.reference_trainers.checkpoint import base_checkpoint
    from tau_env.reference_trainers.cpu_common import build_tiny_model

    from tau_env.error import UnknownTaskError
    from tau_env.harness.results import LOCK_NAME, FolderLock

    model = build_tiny_model(tmp_path / "tiny", [json.dumps(_teacher_episode()["agent_view"])] * 3)
    ckpt = base_checkpoint(model, tmp_path / "base", retrieval="grep", max_new_tokens=6)
    out = tmp_path / "d"
    with pytest.raises(UnknownTaskError, match="travel_notice_simpel"):  # a typo: said before anything is recorded
        dagger.collect(ckpt, out, task_ids=["travel_notice_simpel"], max_steps=4)
    with pytest.raises(InvalidOptionError, match="bogus"):
        dagger.collect(ckpt, out, task_ids=[TASK], max_steps=4, retrieval="bogus")
    assert not (out / "round.json").exists() and not (out / "episodes").exists()
    first = dagger.collect(ckpt, out, task_ids=[TASK], max_steps=4)
    assert first["episodes"] == 1
    # another round in the same folder: refused, naming --restart; --restart plays it there
    with pytest.raises(ResultsFolderError, match="--restart"):
        dagger.collect(ckpt, out, task_ids=[TASK], max_steps=5)
    again = dagger.collect(ckpt, out, task_ids=[TASK], max_steps=5, restart=True)
    assert again["settings"]["max_steps"] == 5 and again["resumed_episodes"] == 0
    assert dagger.collect(ckpt, out, task_ids=[TASK], max_steps=5) == again  # read back
    # --restart whose inputs fail removes nothing
    with pytest.raises(UnknownTaskError):
        dagger.collect(ckpt, out, task_ids=["nope"], max_steps=6, restart=True)
    assert json.loads((out / "summary.json").read_text())["settings"]["max_steps"] == 5
    # one command per folder at a time
    lock = FolderLock(out / LOCK_NAME, lambda pid: AssertionError("held"))
    try:
        with pytest.raises(ResultsFolderError, match="in use by another DAgger command"):
            dagger.collect(ckpt, out, task_ids=[TASK], max_steps=5)
    finally:
        lock.release()


def test_ctrl_c_in_dagger_says_the_same_command_goes_on(tmp_path, monkeypatch, capsys):
    from tau_env.reference_trainers import dagger

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(dagger, "_collect_and_print", interrupted)
    pytest.importorskip("torch")
    assert dagger.main(["--checkpoint", str(tmp_path), "--out", str(tmp_path / "o")]) == 130
    err = capsys.readouterr().err
    assert "the same command goes on from there" in err and "--no-resume" not in err


def test_restart_removes_only_a_rounds_own_files(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tau_env.reference_trainers import dagger
    from tau_env.reference_trainers.checkpoint import base_checkpoint
    from tau_env.reference_trainers.cpu_common import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny", [json.dumps(_teacher_episode()["agent_view"])] * 3)
    ckpt = base_checkpoint(model, tmp_path / "base", retrieval="grep", max_new_tokens=6)
    kw = {"task_ids": [TASK], "max_steps": 4}
    # a user's folder that happens to hold logs/ and a summary.json: not a round's, so never removed
    mine = tmp_path / "project"
    (mine / "logs").mkdir(parents=True)
    (mine / "logs" / "keep.log").write_text("mine")
    (mine / "summary.json").write_text('{"settings": {"lr": 1}}')
    for restart in (False, True):
        with pytest.raises(ResultsFolderError, match="no DAgger round's settings") as e:
            dagger.collect(ckpt, mine, restart=restart, **kw)
        assert "--restart" not in str(e.value)
    assert (mine / "logs" / "keep.log").read_text() == "mine" and (mine / "summary.json").exists()
    # a round whose episodes and logs are links to folders elsewhere: --restart drops the links, not their targets
    out = tmp_path / "d"
    dagger.collect(ckpt, out, **kw)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("episodes", "logs"):
        (out / name).rename(elsewhere / name)
        (out / name).symlink_to(elsewhere / name)
    again = dagger.collect(ckpt, out, restart=True, **{**kw, "max_steps": 5})
    assert again["resumed_episodes"] == 0 and again["episodes"] == 1
    assert not (out / "episodes").is_symlink() and any((elsewhere / "episodes").iterdir())


@pytest.mark.parametrize("where", ["at", "inside", "next_step"])
def test_a_round_is_never_written_into_the_checkpoint_or_its_runs_checkpoints(sft_run, tmp_path, where):
    # the round's files in the model's folder changed its digest: the same round and its evaluations
    # were then refused as of other settings
    from tau_env.reference_trainers import dagger
    from tau_env.reference_trainers.checkpoint import checkpoint_digest

    from tau_env.error import InvalidOptionError

    run = tmp_path / "run"
    shutil.copytree(sft_run[0], run)
    ckpt = run / "checkpoints" / "step-000001"
    digest = checkpoint_digest(ckpt)
    out = {"at": ckpt, "inside": ckpt / "round", "next_step": run / "checkpoints" / "step-000002"}[where]
    with pytest.raises(InvalidOptionError, match="the checkpoint being read|the checkpoints folder of the run"):
        dagger.collect(ckpt, out, task_ids=[TASK], max_steps=4)
    assert checkpoint_digest(ckpt) == digest and not (ckpt / "round").exists()
    assert not (run / "checkpoints" / "step-000002").exists()
