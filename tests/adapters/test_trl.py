"""TRL: one real GRPO step through the rollout_func (whole agent-user episodes, an env mask exactly
on the agent's tokens, tau_env's reward), one through TRL's own tool loop (environment_factory),
and one real SFT step on ``tau-env export-sft`` data; a tiny random Llama and a tokenizer trained
here, all on CPU and offline.
"""

from __future__ import annotations

import copy
import itertools
import json
import os

import pytest

pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from tau_env.adapters.trl import (  # noqa: E402
    SEND_MESSAGE,
    TauRollout,
    rollout_dataset,
    sft_dataset,
    split_trajectory,
    tau_reward,
    tool_dataset,
    tool_environment,
)
from tau_env.reference_trainers.chat_templates import SMOLLM2_TOOLS_TEMPLATE  # noqa: E402
from tau_env.reference_trainers.rollout_policy import TokenPolicy  # noqa: E402

import tau_env  # noqa: E402
from tau_env import OracleAgent, ScriptedUser, run_episode, say  # noqa: E402
from tau_env.cli import main as tau_env_cli  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ENV = "harbor-bank-v0"
TASKS = ["lost_card_standard_shipping", "damaged_card_standard_expedited"]

#: SmolLM2's ChatML tool template with {% generation %} around the assistant turns (SFT's assistant_only_loss).
GENERATION_TEMPLATE = (
    SMOLLM2_TOOLS_TEMPLATE.replace(
        "{{- '<|im_start|>assistant\\n' }}\n    {%- if message['content'] %}",
        "{{- '<|im_start|>assistant\\n' }}{% generation %}\n    {%- if message['content'] %}",
    )
    .replace(
        "{%- endfor %}\n    {{- '<|im_end|>\\n' }}\n  {%- elif message['role'] == 'tool' %}",
        "{%- endfor %}\n    {{- '<|im_end|>' }}{% endgeneration %}{{- '\\n' }}\n"
        "  {%- elif message['role'] == 'tool' %}",
    )
    .replace(
        "{%- else %}\n    {{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '')"
        " + '<|im_end|>\\n' }}",
        "{%- elif message['role'] == 'assistant' %}\n    {{- '<|im_start|>assistant\\n' }}{% generation %}"
        "{{- (message['content'] or '') + '<|im_end|>' }}{% endgeneration %}{{- '\\n' }}\n"
        "  {%- else %}\n    {{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '')"
        " + '<|im_end|>\\n' }}",
    )
)


def _corpus():
    env = tau_env.make(ENV)
    env.reset(options={"task_id": TASKS[0]})
    obs = env.observe("agent")
    text = obs["messages"][0]["content"] + json.dumps(obs["tools"])
    for t in env.task_pool[:20]:
        env.reset(options={"task_id": t})
        text += json.dumps(env.task.model_dump(mode="json"))
    return [line for line in text.splitlines() if line.strip()] * 3


@pytest.fixture(scope="module")
def tok():
    """A ChatML byte-level BPE tokenizer trained here on Harbor text (offline, in CI)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2000,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    t.train_from_iterator(_corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=t, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = GENERATION_TEMPLATE
    fast.padding_side = "left"
    return fast


def _model(tok):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=16384,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config)


class ScriptedTokenPolicy(TokenPolicy):
    """'Generates' the oracle's turns as their template tokens (even episodes) or a polite refusal
    (odd ones), recording ids like a sampling engine: a known trajectory with reward 1 or 0.
    """

    def __init__(self, tokenizer, _shared=None, **settings):
        super().__init__(tokenizer, **settings)
        self._shared = _shared if _shared is not None else {"episodes": itertools.count(), "texts": []}
        self._oracle, self._next, self._good = OracleAgent(), None, True

    def __deepcopy__(self, memo):
        new = copy.copy(self)  # shares the tokenizer, the counter and the recorded episodes
        new._oracle = OracleAgent()
        TokenPolicy.reset(new)
        return new

    def reset(self, task=None, seed=None):
        super().reset(task, seed)
        self._oracle.reset(task, seed)
        if task is not None:
            self._good = next(self._shared["episodes"]) % 2 == 0

    async def aact(self, obs):
        self._next = self._oracle(obs) if self._good else say("Sorry, I cannot help with that.")
        return await super().aact(obs)

    async def _generate(self, prompt, max_new_tokens, seed):
        b = self._builder
        head = b.render(b.messages, add_generation_prompt=True)
        full = b.render([*b.messages, self._next])
        text = full[len(head) :].removesuffix("\n")
        self._shared["texts"].append(text)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return ids, [-1.0] * len(ids), "stop"


def _grpo_config(tmp_path, **kw):
    from trl import GRPOConfig

    base = dict(
        output_dir=str(tmp_path / "grpo"),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=8,
        max_steps=1,
        learning_rate=1e-2,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        seed=0,
    )
    return GRPOConfig(**{**base, **kw})


def _segments(ids, mask):
    out, cur = [], []
    for i, m in zip(ids, mask, strict=True):
        if m:
            cur.append(i)
        elif cur:
            out.append(cur)
            cur = []
    return out + ([cur] if cur else [])


def _replay_reward(result):
    """Play the agent's recorded messages through the env directly (no adapter): the env's reward."""
    msgs = result.agent_view["messages"]
    turns = iter([msgs[i] for i in range(len(msgs)) if msgs[i]["role"] == "assistant"][1:])  # after the greeting

    def replay(obs):
        m = next(turns)
        return {k: v for k, v in m.items() if k in ("role", "content", "tool_calls")}

    env = tau_env.make(ENV)
    r = run_episode(env, replay, ScriptedUser(), task_id=result.task_id, seed=result.seed)
    return r.reward, r.events == result.events


def test_grpo_step_with_the_rollout_func_masks_agent_tokens_and_rewards_as_the_env(tok, tmp_path):
    from trl import GRPOTrainer

    model = _model(tok)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    rollout = TauRollout(ENV, ScriptedUser, agent=lambda trainer: ScriptedTokenPolicy(tok, family="smollm2"))
    seen = {}

    def spy(prompts, trainer):
        seen["out"] = out = rollout(prompts, trainer)
        return out

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=tau_reward,
        args=_grpo_config(tmp_path),
        train_dataset=rollout_dataset(ENV, TASKS[:1]),
        processing_class=tok,
        rollout_func=spy,
    )
    trainer.train()
    out = seen["out"]
    assert out["tau_reward"] == [1.0, 0.0]  # the oracle's episode solves the task, the refusal's does not
    assert trainer.state.log_history[0]["rewards/tau_reward/mean"] == pytest.approx(0.5)
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())  # a real update happened

    for i, (result, traj) in enumerate(zip(rollout.last_results, rollout.last_trajectories, strict=True)):
        # the same reward as the env gives the same agent messages, and the same trajectory
        reward, same_events = _replay_reward(result)
        assert (reward, same_events) == (result.reward, True)
        assert reward == out["tau_reward"][i]
        # TRL's pieces are the trajectory's sequence; the mask is 1 exactly on the generated turns
        prompt, completion, mask = out["prompt_ids"][i], out["completion_ids"][i], out["env_mask"][i]
        assert prompt + completion == traj.input_ids[: len(prompt) + len(completion)]
        assert len(mask) == len(completion) == len(out["logprobs"][i])
        assert sum(mask) == traj.num_agent_tokens
        texts = [tok.decode(s, skip_special_tokens=False) for s in _segments(completion, mask)]
        assert len(texts) == traj.info["turns"]
        assert all(t.endswith("<|im_end|>") for t in texts)
        # every generated turn is what the agent said or called, and nothing of the env's is masked 1
        env_text = tok.decode([c for c, m in zip(completion, mask, strict=True) if not m], skip_special_tokens=False)
        tool_results = [m["content"] for m in result.agent_view["messages"] if m["role"] == "tool"]
        user_turns = [m["content"] for m in result.agent_view["messages"][3:] if m["role"] == "user"]
        assert all(t in env_text for t in tool_results[:-1])
        assert all(u in env_text for u in user_turns[:-1])
        assert not any(t in "".join(texts) for t in tool_results if len(t) > 20)
        # the whole sequence is the chat template's render of the agent's final chat, token by token
        direct = tau_env.make(ENV)
        direct.reset(options={"task_id": result.task_id})
        full = tok.apply_chat_template(
            result.agent_view["messages"],
            tools=direct.observe("agent")["tools"],
            chat_template=SMOLLM2_TOOLS_TEMPLATE,
            tokenize=False,
        )
        assert tok.decode(traj.input_ids, skip_special_tokens=False) == full


def test_grpo_step_with_the_trainers_own_model_sampling_the_agent(tok, tmp_path):
    from trl import GRPOTrainer

    rollout = TauRollout(ENV, ScriptedUser, max_steps=8)
    trainer = GRPOTrainer(
        model=_model(tok),
        reward_funcs=tau_reward,
        args=_grpo_config(tmp_path, max_completion_length=4, temperature=1.0),
        train_dataset=rollout_dataset(ENV, TASKS[:1]),
        processing_class=tok,
        rollout_func=rollout,
    )
    trainer.train()
    assert len(rollout.last_results) == 2
    for result, traj in zip(rollout.last_results, rollout.last_trajectories, strict=True):
        assert traj.num_agent_tokens == sum(len(s) for s in _segments(traj.input_ids, traj.agent_mask)) > 0
        pieces = split_trajectory(traj.input_ids, traj.agent_mask, traj.rollout_logprobs)
        assert sum(pieces["env_mask"]) == traj.num_agent_tokens
        assert all(lp <= 0.0 for lp, m in zip(pieces["logprobs"], pieces["env_mask"], strict=True) if m)
        assert _replay_reward(result) == (result.reward, True)
    assert "rewards/tau_reward/mean" in trainer.state.log_history[0]


def test_environment_factory_tools_and_the_simulated_user(tok, tmp_path):
    Env = tool_environment(ENV)
    names = {n for n in vars(Env) if not n.startswith("_")}
    assert {"find_customer", "verify_identity", "unlock_tool"} <= names
    # the oracle's calls through the methods (its messages through send_message_to_user) give the env's reward
    for task_id in TASKS:
        e = Env()
        opening = e.reset(task_id=task_id, prompt=[])
        direct = tau_env.make(ENV)
        reference = run_episode(direct, OracleAgent(), ScriptedUser(), task_id=task_id, seed=0)
        assert opening == reference.agent_view["messages"][2]["content"]
        oracle = OracleAgent()
        oracle.reset(e.env.task)
        while not e._over():
            action = oracle(e.env.observe("agent"))
            if action.get("tool_calls"):
                for c in action["tool_calls"]:
                    getattr(e, c["function"]["name"])(**json.loads(c["function"]["arguments"]))
            else:
                e.send_message_to_user(action["content"])
        assert e.get_reward() == reference.reward == 1.0
        assert e.env.db_digest() == direct.db_digest()

    # one real GRPO step through TRL's own tool loop
    from trl import GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    tok2 = tok.__class__.from_pretrained(_save(tok, tmp_path))
    tok2.chat_template = qwen2_5_chat_template
    tok2.padding_side = "left"
    tok2.add_special_tokens({"additional_special_tokens": ["<tool_call>", "</tool_call>"]})
    trainer = GRPOTrainer(
        model=_model(tok2),
        args=_grpo_config(tmp_path, max_completion_length=8, max_tool_calling_iterations=2),
        train_dataset=tool_dataset(ENV, TASKS[:1]),
        processing_class=tok2,
        environment_factory=Env,
    )
    assert SEND_MESSAGE in {t.__name__ for t in trainer.tools}
    trainer.train()
    assert f"rewards/{Env.__name__}/mean" in trainer.state.log_history[0]


def _save(tok, tmp_path):
    path = tmp_path / "tok"
    tok.save_pretrained(path)
    return str(path)


def test_sft_rows_hold_the_tools_of_the_start():
    r = run_episode(tau_env.make(ENV), OracleAgent(), ScriptedUser(), task_id="travel_notice_simple")
    from tau_env.sft import to_example

    rec = to_example(r.to_dict())
    tools = json.loads(sft_dataset([rec])[0]["tools"])
    names = [t["function"]["name"] for t in rec["tools"]]
    assert "set_travel_notice_3012" in names  # the record's last tools
    assert [t["function"]["name"] for t in tools] == [n for n in names if n != "set_travel_notice_3012"]


def test_sft_step_on_export_sft_data(tok, tmp_path, monkeypatch):
    from trl import SFTConfig, SFTTrainer

    monkeypatch.chdir(tmp_path)
    args = ["eval", ENV, "--agent", "oracle", "--out", "run", "--quiet"]
    assert tau_env_cli([*args, *itertools.chain.from_iterable(("--task", t) for t in TASKS)]) == 0
    assert tau_env_cli(["export-sft", "run", "--jsonl", "sft.jsonl"]) == 0
    data = sft_dataset(tmp_path / "sft.jsonl")
    assert len(data) == 2
    records = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    model = _model(tok)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = SFTTrainer(
        model=model,
        args=SFTConfig(
            output_dir=str(tmp_path / "sft"),
            use_cpu=True,
            bf16=False,
            per_device_train_batch_size=2,
            max_steps=1,
            max_length=None,
            assistant_only_loss=True,
            learning_rate=1e-2,
            report_to=[],
            save_strategy="no",
        ),
        train_dataset=data,
        processing_class=tok,
    )
    # the loss falls exactly on the trained assistant turns (not the greeting, tools or user)
    row = trainer.train_dataset[0]
    labels = [i for i, lab in zip(row["input_ids"], row["labels"], strict=True) if lab != -100]
    rec = records[0]
    trained = [m for m, t in zip(rec["messages"], rec["train"], strict=True) if t]
    text = tok.decode(labels, skip_special_tokens=False)
    assert text.count("<|im_end|>") == len(trained)
    assert "Thanks for calling" not in text and rec["messages"][4]["content"] not in text
    trainer.train()
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())
