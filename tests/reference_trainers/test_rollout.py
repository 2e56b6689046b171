"""The token-in/token-out rollout: the incremental sequence equals the template's render, masks mark
exactly the generated tokens, and the policies play real tau_env episodes (in process and against a
scripted completions server on loopback).
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tau_env.reference_trainers.chat_templates import QWEN_TOOLS_TEMPLATE, SMOLLM2_TOOLS_TEMPLATE  # noqa: E402
from tau_env.reference_trainers.rollout import (  # noqa: E402
    RolloutError,
    TokenTrajectory,
    TrajectoryBuilder,
    parse_generation,
)
from tau_env.reference_trainers.rollout_policy import (  # noqa: E402
    LocalTokenPolicy,
    ServerTokenPolicy,
    TokenPolicy,
    parse_completion,
)

import tau_env  # noqa: E402
from tau_env.error import InfrastructureError, InvalidOptionError  # noqa: E402

SMOLLM2 = Path.home() / ".cache" / "tau_env_e2e" / "smollm2"
ENV_ID = "harbor-bank-v0"
TASK = "update_email_and_phone"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_item",
            "description": "Show an item.",
            "parameters": {"type": "object", "properties": {"item_id": {"type": "string"}}, "required": ["item_id"]},
        },
    }
]


def _call(i: int, name: str, args: dict) -> dict:
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


CONVERSATION = [
    {"role": "system", "content": "You are the agent of a shop. Be brief."},
    {"role": "assistant", "content": "Hi! How can I help?"},  # the env's fixed greeting: not generated
    {"role": "user", "content": "How many apples are left? And pears?"},
    {"role": "assistant", "content": None, "tool_calls": [_call(1, "get_item", {"item_id": "apple"})]},
    {"role": "tool", "tool_call_id": "c1", "content": "apple: 3"},
    {
        "role": "assistant",
        "content": "Checking pears.",
        "tool_calls": [_call(2, "get_item", {"item_id": "pear"}), _call(3, "get_item", {"item_id": "fig"})],
    },
    {"role": "tool", "tool_call_id": "c2", "content": "pear: 0"},
    {"role": "tool", "tool_call_id": "c3", "content": "Error: Item 'fig' not found."},
    {"role": "assistant", "content": "3 apples, no pears."},
    {"role": "user", "content": "Thanks! ###STOP###"},
]


# --- tokenizers --------------------------------------------------------------------------------------
def _corpus() -> list[str]:
    env = tau_env.make(ENV_ID)
    env.reset(seed=0, options={"task_id": TASK})
    obs = env.observe("agent")
    text = [m["content"] for m in obs["messages"]] + [json.dumps(t) for t in obs["tools"]]
    text += [json.dumps(m) for m in CONVERSATION] + [QWEN_TOOLS_TEMPLATE]
    return text * 3 + ['<tool_call>\n{"name": "find_customer", "arguments": {}}\n</tool_call>'] * 20


@pytest.fixture(scope="module")
def qwen_tok():
    """A Qwen-style tokenizer trained here (byte-level BPE, ChatML specials): offline and in CI."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = QWEN_TOOLS_TEMPLATE
    return fast


@pytest.fixture(scope="module")
def smol_tok():
    if not (SMOLLM2 / "tokenizer.json").exists():
        pytest.skip("SmolLM2 is not exported here (tests/e2e/setup_vllm_cpu.sh makes it)")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(SMOLLM2), local_files_only=True)
    tok.chat_template = SMOLLM2_TOOLS_TEMPLATE
    return tok


@pytest.fixture(params=["qwen", "smollm2"])
def family_tok(request):
    return request.param, request.getfixturevalue("qwen_tok" if request.param == "qwen" else "smol_tok")


def _turn_text(tok, messages: list[dict], k: int) -> str:
    """The template's text of assistant message ``k`` up to and including its end-of-turn token:
    what a model that writes exactly that message generates.
    """
    head = tok.apply_chat_template(messages[:k], tools=TOOLS, tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template(messages[: k + 1], tools=TOOLS, tokenize=False)
    assert full.startswith(head)
    return full[len(head) :].removesuffix("\n")


def _play(tok, messages: list[dict], truncate: set[int] = frozenset()) -> tuple[TrajectoryBuilder, dict[int, list]]:
    """Feed ``messages`` through a builder as an episode would: observations via sync, assistant
    turns after the first observation generated (their template text's ids; cut before the
    end-of-turn for the turns in ``truncate``).
    """
    first = next(i for i, m in enumerate(messages) if i > 1 and m["role"] == "assistant")
    b = TrajectoryBuilder(tok, TOOLS)
    generated = {}
    for k in range(first, len(messages)):
        if messages[k]["role"] != "assistant":
            continue
        b.sync(messages[:k])
        text = _turn_text(tok, messages, k)
        if k in truncate:
            text = text.removesuffix("<|im_end|>")
        ids = tok.encode(text, add_special_tokens=False)
        generated[k] = ids
        b.add_generated(ids, [-0.5] * len(ids), "length" if k in truncate else "stop")
    b.close(messages)
    return b, generated


def _segments(ids: list[int], mask: list[int]) -> list[list[int]]:
    out, cur = [], []
    for t, m in zip(ids, mask, strict=True):
        if m:
            cur.append(t)
        elif cur:
            out.append(cur)
            cur = []
    return out + ([cur] if cur else [])


# --- the builder ----------------------------------------------------------------------------------
def test_incremental_sequence_is_the_full_render(family_tok):
    family, tok = family_tok
    b, generated = _play(tok, CONVERSATION)
    t = b.trajectory(reward=1.0)
    full = tok.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False)
    assert tok.decode(t.input_ids, skip_special_tokens=False) == full
    assert len(t.input_ids) == len(t.agent_mask) == len(t.rollout_logprobs)
    # mask 1 exactly on the generated ids, in order, with their log-probabilities
    assert _segments(t.input_ids, t.agent_mask) == list(generated.values())
    assert t.num_agent_tokens == sum(map(len, generated.values()))
    assert all((lp == -0.5) == bool(m) for lp, m in zip(t.rollout_logprobs, t.agent_mask, strict=True))
    assert t.info["eot_added"] == 0 and t.info["turns"] == 3
    assert t.info["generated_messages"] == [3, 5, 8]
    assert t.messages == CONVERSATION and t.reward == 1.0
    # the prompt of the first observation is the template's, token for token
    head = tok.apply_chat_template(CONVERSATION[:3], tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert t.input_ids[: len(tok.encode(head, add_special_tokens=False))] == tok.encode(head, add_special_tokens=False)
    assert TokenTrajectory.from_dict(json.loads(json.dumps(t.to_dict()))) == t


def test_a_turn_cut_short_gets_its_end_of_turn_with_mask_zero(family_tok):
    _, tok = family_tok
    b, generated = _play(tok, CONVERSATION, truncate={5})
    t = b.trajectory()
    assert tok.decode(t.input_ids, skip_special_tokens=False) == tok.apply_chat_template(
        CONVERSATION, tools=TOOLS, tokenize=False
    )
    assert t.info["eot_added"] == 1 and t.info["finish_reasons"] == ["stop", "length", "stop"]
    assert _segments(t.input_ids, t.agent_mask) == list(generated.values())
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    # the eot right after the cut turn is there, not generated
    end = [i for i in range(1, len(t.input_ids)) if t.agent_mask[i - 1] == 1 and t.agent_mask[i] == 0]
    cut = end[1]
    assert t.input_ids[cut] == eot and t.agent_mask[cut] == 0


_text = st.text(alphabet="abc xyz.,!?\n:{}\"'0123456789", max_size=30)


@st.composite
def conversations(draw):
    msgs = [{"role": "system", "content": draw(_text)}, {"role": "assistant", "content": "Hi!"}]
    msgs.append({"role": "user", "content": draw(_text)})
    n = 0
    for _ in range(draw(st.integers(1, 4))):
        ncalls = draw(st.integers(0, 2))
        calls = [_call(n + i, "get_item", {"item_id": draw(_text)}) for i in range(ncalls)]
        n += ncalls
        msg = {"role": "assistant", "content": draw(st.one_of(st.none(), _text)) if calls else draw(_text)}
        if calls:
            msg["tool_calls"] = calls
        msgs.append(msg)
        if calls:
            msgs += [{"role": "tool", "tool_call_id": c["id"], "content": draw(_text)} for c in calls]
        else:
            msgs.append({"role": "user", "content": draw(_text)})
    return msgs


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(msgs=conversations(), cut=st.sets(st.integers(0, 20), max_size=2))
def test_any_conversation_rebuilds_token_by_token(family_tok, msgs, cut):
    _, tok = family_tok
    b, generated = _play(tok, msgs, truncate=cut)
    t = b.trajectory()
    full = tok.apply_chat_template(msgs, tools=TOOLS, tokenize=False)
    assert tok.decode(t.input_ids, skip_special_tokens=False) == full
    assert _segments(t.input_ids, t.agent_mask) == [g for g in generated.values() if g]
    assert t.info["eot_added"] == len(cut & set(generated))


def test_a_template_that_rewrites_earlier_turns_is_refused(qwen_tok):
    counting = "{{ messages | length }}" + QWEN_TOOLS_TEMPLATE  # the header changes with every message
    b = TrajectoryBuilder(qwen_tok, TOOLS, counting)
    b.start(CONVERSATION[:3])
    b.add_generated([5, 6], [-1.0, -1.0])
    with pytest.raises(RolloutError, match="renders the conversation's earlier turns differently"):
        b.add_messages([{"role": "user", "content": "more"}])


def test_builder_misuse_is_explained(qwen_tok):
    b = TrajectoryBuilder(qwen_tok, TOOLS)
    with pytest.raises(RolloutError, match="call start"):
        b.add_generated([1], [0.0])
    b.start(CONVERSATION[:3])
    with pytest.raises(InvalidOptionError, match="one log-probability per token"):
        b.add_generated([1, 2], [0.0])
    b.add_generated([1], [0.0])
    with pytest.raises(RolloutError, match="Two generated turns"):
        b.add_generated([1], [0.0])
    with pytest.raises(RolloutError, match="does not extend"):
        b.sync([{"role": "system", "content": "another episode"}] + CONVERSATION[1:5])
    with pytest.raises(RolloutError, match="has started already"):
        b.start(CONVERSATION[:3])


# --- parsing ----------------------------------------------------------------------------------------
def test_parse_generation_reads_hermes_tool_calls():
    text = 'Let me look.\n<tool_call>\n{"name": "get_item", "arguments": {"item_id": "apple"}}\n</tool_call><|im_end|>'
    for family in ("qwen", "smollm2", "hermes"):
        msg = parse_generation(text, family)
        assert msg["content"] == "Let me look."
        [call] = msg["tool_calls"]
        assert call["function"]["name"] == "get_item"
        assert json.loads(call["function"]["arguments"]) == {"item_id": "apple"}
    assert parse_generation("Hello there.<|im_end|>", "smollm2") == {"role": "assistant", "content": "Hello there."}
    bad = parse_generation("<tool_call>{not json</tool_call>", "qwen")
    assert bad["tool_calls"][0]["function"]["name"] == ""  # the env answers it with a tool error
    with pytest.raises(InvalidOptionError, match="Unknown tokenizer family"):
        parse_generation("x", "llama")


def test_parse_completion_reads_both_vllm_shapes():
    lp = {"token_logprobs": [-0.1, -0.2], "tokens": ["token_id:7", "token_id:9"]}
    assert parse_completion({"choices": [{"logprobs": lp, "finish_reason": "length"}]}) == (
        [7, 9],
        [-0.1, -0.2],
        "length",
    )
    assert parse_completion({"choices": [{"token_ids": [3, 4], "logprobs": lp, "finish_reason": "stop"}]})[0] == [3, 4]
    with pytest.raises(ValueError, match="2 token ids but 1"):
        parse_completion({"choices": [{"token_ids": [3, 4], "logprobs": {"token_logprobs": [0.0]}}]})


# --- real episodes --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_model(qwen_tok):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(qwen_tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=16384,
        eos_token_id=qwen_tok.eos_token_id,
        pad_token_id=qwen_tok.pad_token_id,
    )
    return LlamaForCausalLM(cfg).eval()


def _episode(policy, seed: int = 3, user=None):
    env = tau_env.make(ENV_ID)
    user = user if user is not None else tau_env.ScriptedUser()
    return asyncio.run(tau_env.arun_episode(env, policy, user, task_id=TASK, seed=seed))


def _chatty_user(obs):
    """A scripted user that talks three times, then stops (so a model that never asks gets several turns)."""
    said = sum(m["role"] == "assistant" for m in obs["messages"])
    return {"role": "assistant", "content": "Please go on." if said < 3 else "Bye. ###STOP###"}


def test_local_policy_plays_an_episode_with_a_random_model(qwen_tok, tiny_model):
    policy = LocalTokenPolicy(tiny_model, qwen_tok, family="qwen", temperature=1.0, max_new_tokens=12)
    result = _episode(policy, user=_chatty_user)
    assert result.termination_reason is not None and result.error is None
    [t] = policy.trajectories([result])
    assert policy.trajectories() == []  # handed out once
    assert t.task_id == TASK and t.seed == result.seed and t.reward == result.reward
    assert t.info["termination_reason"] == str(result.termination_reason)
    assert t.info["turns"] >= 3 and result.usage["agent"]["completion_tokens"] == t.num_agent_tokens
    # the env's final chat, with the generated text in place of each parsed turn, renders to the sequence
    env = tau_env.make(ENV_ID)
    env.reset(seed=result.seed, options={"task_id": TASK})
    tools = env.observe("agent")["tools"]
    msgs = [dict(m) for m in t.messages]
    segs = _segments(t.input_ids, t.agent_mask)
    assert len(segs) == t.info["turns"] == len(t.info["generated_messages"])
    for k, seg in zip(t.info["generated_messages"], segs, strict=True):
        assert msgs[k]["role"] == "assistant"
        msgs[k] = {"role": "assistant", "content": qwen_tok.decode(seg, skip_special_tokens=False)}
        msgs[k]["content"] = msgs[k]["content"].removesuffix("<|im_end|>")
    full = qwen_tok.apply_chat_template(msgs, tools=tools, tokenize=False)
    assert qwen_tok.decode(t.input_ids, skip_special_tokens=False) == full
    # the recorded log-probabilities are the model's own (temperature 1) on exactly this sequence
    with torch.no_grad():
        logits = tiny_model(torch.tensor([t.input_ids])).logits[0].float()
    lp = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(t.input_ids[1:])[:, None])[:, 0]
    mask = torch.tensor(t.agent_mask[1:], dtype=torch.bool)
    recorded = torch.tensor(t.rollout_logprobs[1:])
    assert torch.allclose(lp[mask], recorded[mask], atol=1e-4)


def test_processed_logprobs_are_the_sampling_distributions(qwen_tok, tiny_model):
    policy = LocalTokenPolicy(
        tiny_model, qwen_tok, family="qwen", temperature=0.5, max_new_tokens=6, logprobs_mode="processed"
    )
    result = _episode(policy, seed=5, user=_chatty_user)
    [t] = policy.trajectories([result])
    with torch.no_grad():
        logits = tiny_model(torch.tensor([t.input_ids])).logits[0].float() / 0.5
    lp = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(t.input_ids[1:])[:, None])[:, 0]
    mask = torch.tensor(t.agent_mask[1:], dtype=torch.bool)
    assert mask.sum() >= 3
    assert torch.allclose(lp[mask], torch.tensor(t.rollout_logprobs[1:])[mask], atol=1e-4)
    with pytest.raises(InvalidOptionError, match="logprobs_mode"):
        LocalTokenPolicy(tiny_model, qwen_tok, logprobs_mode="scaled")


@pytest.mark.slow
def test_local_policy_with_smollm2_records_its_own_logprobs(smol_tok):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(SMOLLM2), local_files_only=True, dtype=torch.float32)
    policy = LocalTokenPolicy(model, smol_tok, family="smollm2", temperature=0.0, max_new_tokens=8)
    result = _episode(policy)
    [t] = policy.trajectories([result])
    assert t.info["turns"] >= 1 and len(t.input_ids) == len(t.agent_mask)
    with torch.no_grad():
        logits = model(torch.tensor([t.input_ids])).logits[0].float()
    lp = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(t.input_ids[1:])[:, None])[:, 0]
    mask = torch.tensor(t.agent_mask[1:], dtype=torch.bool)
    assert torch.allclose(lp[mask], torch.tensor(t.rollout_logprobs[1:])[mask], atol=1e-3)


class ScriptedTokens(TokenPolicy):
    """A generator that emits scripted texts' tokens (with the end-of-turn token), log-probability -0.25 each."""

    def __init__(self, tokenizer, texts, **kw):
        super().__init__(tokenizer, **kw)
        self.texts, self.prompts = list(texts), []

    async def _generate(self, prompt, max_new_tokens, seed):
        self.prompts.append(prompt)
        text = self.texts.pop(0) if self.texts else "Is there anything else?"
        ids = self.tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)
        return ids, [-0.25] * len(ids), "stop"


def test_a_generated_tool_call_runs_and_its_result_has_mask_zero(family_tok):
    family, tok = family_tok
    call = '<tool_call>\n{"name": "find_customer", "arguments": {"name": "Nobody Atall"}}\n</tool_call>'
    policy = ScriptedTokens(tok, [call], family=family)
    result = _episode(policy)
    [ev] = [e for e in result.events if e["seat"] == "agent" and e.get("tool_results")][:1]
    assert ev["message"]["tool_calls"][0]["function"]["name"] == "find_customer"
    tool_result = ev["tool_results"][0]["content"]
    [t] = policy.trajectories([result])
    assert t.info["eot_added"] == 0
    segs = _segments(t.input_ids, t.agent_mask)
    assert tok.decode(segs[0], skip_special_tokens=False) == call + "<|im_end|>"
    # the tool's result follows the call, mask 0, and the next prompt extends the previous one exactly
    first_end = next(i for i in range(1, len(t.agent_mask)) if t.agent_mask[i - 1] and not t.agent_mask[i])
    second = policy.prompts[1]
    assert second[: len(policy.prompts[0])] == policy.prompts[0]
    assert second[len(policy.prompts[0]) : first_end] == segs[0]
    added = tok.decode(second[first_end:], skip_special_tokens=False)
    assert tool_result in added and added.endswith("<|im_start|>assistant\n")
    assert not any(t.agent_mask[first_end : len(second)])


def test_copies_share_the_episodes_of_a_run(qwen_tok):
    call = '<tool_call>\n{"name": "find_customer", "arguments": {"name": "Nobody"}}\n</tool_call>'
    policy = ScriptedTokens(qwen_tok, [call] * 10, family="qwen")
    run = asyncio.run(tau_env.aevaluate(ENV_ID, policy, tau_env.ScriptedUser(), task_ids=[TASK], trials=3))
    trajs = policy.trajectories(run.results)
    assert [(t.seed, t.info["trial"]) for t in trajs] == [(r.seed, r.trial) for r in run.results]
    assert len({t.seed for t in trajs}) == 3 and all(t.num_agent_tokens > 0 for t in trajs)
    assert [t.reward for t in trajs] == [r.reward for r in run.results]
    with pytest.raises(InvalidOptionError, match="No recorded episode"):
        policy.trajectories(run.results)  # handed out already


class _CappedTokens(TokenPolicy):
    """Emits one scripted text per turn, cut at the room it is given (log-probability -0.25 each)."""

    def __init__(self, tokenizer, text, **kw):
        super().__init__(tokenizer, **kw)
        self.text, self.turns = text, []

    async def _generate(self, prompt, max_new_tokens, seed):
        ids = self.tokenizer.encode(self.text + "<|im_end|>", add_special_tokens=False)[:max_new_tokens]
        self.turns.append(ids)
        return ids, [-0.25] * len(ids), "stop" if len(ids) < max_new_tokens else "length"


@pytest.mark.parametrize("turns_room", [1, 2])
def test_context_overflow_ends_the_trajectory_at_the_last_turn(family_tok, turns_room):
    """When the next prompt leaves no room, the trajectory ends with the last sampled turn: no dangling
    generation prompt, nothing the env added after it, within max_context, and it still decodes to the
    template's render of its (cut) chat with mask 1 exactly on the sampled tokens."""
    family, tok = family_tok
    env = tau_env.make(ENV_ID)
    env.reset(seed=3, options={"task_id": TASK})
    obs = env.observe("agent")
    from tau_env.reference_trainers.chat_templates import TEMPLATES

    first = len(TrajectoryBuilder(tok, obs["tools"], TEMPLATES[family]).sync(obs["messages"]))
    policy = _CappedTokens(tok, "Let me check that for you.", family=family, max_new_tokens=16)
    policy.max_context = first + 30 * turns_room  # room for `turns_room` turns, not for every reply after them
    result = _episode(policy, user=lambda obs: {"role": "assistant", "content": "Please go on."})
    [t] = policy.trajectories([result])
    assert t.info["context_overflow"] and t.info["turns"] == len(policy.turns) >= 1
    assert len(t.input_ids) <= policy.max_context
    assert t.messages[-1]["role"] == "assistant"  # the chat ends with the env's record of the last turn
    text = tok.decode(t.input_ids, skip_special_tokens=False)
    want = tok.apply_chat_template(t.messages, tools=obs["tools"], tokenize=False, chat_template=TEMPLATES[family])
    assert text == want
    assert "<|im_start|>assistant\n<|im_start|>" not in text and not text.endswith("<|im_start|>assistant\n")
    assert _segments(t.input_ids, t.agent_mask) == [ids for ids in policy.turns]
    assert all(lp == -0.25 for lp, m in zip(t.rollout_logprobs, t.agent_mask) if m)


def test_overflow_before_any_turn_leaves_the_first_prompt_without_its_generation_prompt(family_tok):
    family, tok = family_tok
    policy = _CappedTokens(tok, "Hello.", family=family, max_new_tokens=16, max_context=50)
    result = _episode(policy)
    [t] = policy.trajectories([result])
    assert t.info["context_overflow"] and t.num_agent_tokens == 0 and not policy.turns
    from tau_env.reference_trainers.chat_templates import TEMPLATES

    want = tok.apply_chat_template(
        t.messages, tools=t.messages and result.agent_view["tools"], tokenize=False, chat_template=TEMPLATES[family]
    )
    assert tok.decode(t.input_ids, skip_special_tokens=False) == want


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(msgs=conversations(), answered=st.integers(0, 3))
def test_env_messages_after_an_unanswered_prompt_follow_without_an_empty_header(qwen_tok, msgs, answered):
    """A prompt no turn answered (its generation prompt already in the sequence), then the env's messages
    (close, or add_messages): the sequence is still the template's render of the chat, token by token."""
    b = TrajectoryBuilder(qwen_tok, TOOLS)
    b.start(msgs[:3])
    final = [*msgs[:3], *[m for m in [{"role": "assistant", "content": ""}, {"role": "user", "content": "Hello?"}]]]
    for k in range(answered):  # prompts left unanswered, one after another
        b.add_messages([{"role": "user", "content": f"Still there {k}?"}])
        final.insert(3 + k, {"role": "user", "content": f"Still there {k}?"})
    t = b.trajectory(0.0, final)
    assert qwen_tok.decode(t.input_ids, skip_special_tokens=False) == qwen_tok.apply_chat_template(
        final, tools=TOOLS, tokenize=False
    )
    assert t.num_agent_tokens == 0


# --- the completions server -------------------------------------------------------------------------
class _Server:
    """A scripted /v1/completions server on loopback: replies with the next scripted token ids."""

    def __init__(self, replies):
        self.replies, self.requests = list(replies), []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, body))
                status, data = outer.replies.pop(0) if outer.replies else (200, outer.default)
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.default = None
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _completion(ids, *, token_ids_field=True, finish="stop"):
    lp = {"token_logprobs": [-0.5] * len(ids), "tokens": [f"token_id:{i}" for i in ids]}
    choice = {"text": "", "logprobs": lp, "finish_reason": finish}
    if token_ids_field:
        choice["token_ids"] = ids
    return {"choices": [choice]}


def test_server_policy_is_tokens_in_tokens_out(qwen_tok):
    enc = lambda s: qwen_tok.encode(s, add_special_tokens=False)  # noqa: E731
    call = enc('<tool_call>\n{"name": "find_customer", "arguments": {"name": "Nobody"}}\n</tool_call><|im_end|>')
    cut = enc("I will look into it")  # a turn cut at max_tokens: no end-of-turn
    server = _Server([(200, _completion(call)), (200, _completion(cut, token_ids_field=False, finish="length"))])
    server.default = _completion(enc("Anything else?<|im_end|>"))
    try:
        policy = ServerTokenPolicy(server.url, "tiny", qwen_tok, family="qwen", temperature=0.7, max_new_tokens=64)
        result = _episode(policy)
        [t] = policy.trajectories([result])
    finally:
        server.close()
    paths = {p for p, _ in server.requests}
    assert paths == {"/v1/completions"}
    prompts = [b["prompt"] for _, b in server.requests]
    assert all(isinstance(p, list) and all(isinstance(i, int) for i in p) for p in prompts)
    assert prompts[1][: len(prompts[0])] == prompts[0]  # each prompt extends the last: tokens in
    assert prompts[1][len(prompts[0]) : len(prompts[0]) + len(call)] == call  # the sampled ids, not re-tokenized
    body = server.requests[0][1]
    assert body["return_token_ids"] and body["logprobs"] and body["temperature"] == 0.7 and body["max_tokens"] == 64
    assert body["stop_token_ids"] == [qwen_tok.convert_tokens_to_ids("<|im_end|>")]
    assert _segments(t.input_ids, t.agent_mask)[:2] == [call, cut]
    assert t.info["eot_added"] >= 1 and t.info["finish_reasons"][:2] == ["stop", "length"]
    assert all(lp == -0.5 for lp, m in zip(t.rollout_logprobs, t.agent_mask, strict=True) if m)
    assert result.events[0]["seat"] == "user"


def test_server_failure_is_an_infrastructure_error(qwen_tok):
    server = _Server([(500, {"error": "boom"}), (200, {"choices": [{"text": "no ids"}]})])
    try:
        policy = ServerTokenPolicy(server.url, "tiny", qwen_tok, family="qwen")
        with pytest.raises(InfrastructureError, match="HTTP 500"):
            _episode(policy)
        with pytest.raises(InfrastructureError, match="without token ids"):
            _episode(policy)
    finally:
        server.close()


@pytest.mark.parametrize("send_seed", [True, False])
def test_server_policy_sends_the_seed_unless_told_not_to(qwen_tok, send_seed):
    policy = ServerTokenPolicy("http://127.0.0.1:9/v1", "tiny", qwen_tok, family="qwen", send_seed=send_seed)
    body = policy.request_body([1, 2, 3], 8, seed=1234)
    assert ("seed" in body) is send_seed and body.get("seed", 1234) == 1234


def test_a_sequence_can_end_with_the_last_agent_turn_leaving_out_what_the_env_said_after_it(qwen_tok, tiny_model):
    def play(after_last_turn):
        policy = LocalTokenPolicy(tiny_model, qwen_tok, family="qwen", temperature=1.0, max_new_tokens=12)
        result = _episode(policy, user=_chatty_user)
        return result, policy.trajectories([result], after_last_turn=after_last_turn)[0]

    result, whole = play(True)
    _, cut = play(False)  # the same episode (seeded by episode and turn)
    last_agent = max(i for i, m in enumerate(whole.agent_mask) if m)
    tail = qwen_tok.decode(whole.input_ids[last_agent + 1 :], skip_special_tokens=False)
    assert "###STOP###" in tail  # the user's goodbye came after the last agent turn
    # cut: the same tokens up to the last agent turn, then only the end of that turn
    n = len(cut.input_ids)
    assert cut.input_ids == whole.input_ids[:n] and cut.agent_mask == whole.agent_mask[:n]
    end = qwen_tok.decode(cut.input_ids[last_agent + 1 :], skip_special_tokens=False)
    assert end in ("\n", "<|im_end|>\n")  # the rest of <|im_end|>\n, or all of it after a turn cut at its limit
    assert cut.num_agent_tokens == whole.num_agent_tokens and cut.rollout_logprobs == whole.rollout_logprobs[:n]
    assert cut.messages == whole.messages[: whole.info["generated_messages"][-1] + 1]
    assert cut.reward == whole.reward == result.reward
