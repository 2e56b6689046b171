"""veRL's real AgentLoopWorker runs tau_env episodes through the tau_agent loop against a scripted
token server: masks 1 exactly on generated tokens, the engine's log-probabilities kept, the grader's
reward in rm_scores. Runs only where veRL is installed (its own venv); skips elsewhere.
"""

from __future__ import annotations

import asyncio
import re

import pytest

pytest.importorskip("verl")
pytest.importorskip("verl.experimental.agent_loop.agent_loop")

import numpy as np  # noqa: E402
from tau_env.reference_trainers import verl_data, verl_plugins  # noqa: E402
from tau_env.reference_trainers.verl_agent_loop import TauAgentLoop, VerlTokenPolicy, to_output  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, _agent_loop_registry  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402
from verl_helpers import CONFIGS, tiny_model_dir  # noqa: E402

import tau_env  # noqa: E402
from tau_env.error import InvalidOptionError  # noqa: E402
from tests.conftest import make_domain  # noqa: E402

UNLOCK = '<tool_call>\n{"name": "unlock_tool", "arguments": {"tool_name": "secret_restock_1234"}}\n</tool_call>'
RESTOCK = '<tool_call>\n{"name": "secret_restock_1234", "arguments": {"item_id": "widget"}}\n</tool_call>'
GOOD = [UNLOCK, RESTOCK, "Done: the widget is restocked."]
BAD = ["I cannot help with that."]
LOGPROB = -0.25


class ScriptedServer:
    """veRL's server manager, scripted: each episode (request id) gets the next script, turn by turn."""

    def __init__(self, tokenizer, scripts):
        self.tok, self.todo, self.scripts, self.calls = tokenizer, list(scripts), {}, []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        if request_id not in self.scripts:
            self.scripts[request_id] = list(self.todo.pop(0))
        script = self.scripts[request_id]
        text = script.pop(0) if script else "Is there anything else?"
        ids = self.tok.encode(text + "<|im_end|>", add_special_tokens=False)[: sampling_params["max_tokens"]]
        self.calls.append((request_id, list(prompt_ids), dict(sampling_params)))
        return TokenOutput(token_ids=ids, log_probs=[LOGPROB] * len(ids), stop_reason="completed")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_qwen")
    return path, tiny_model_dir(path)


def _config(model_dir, response_length=2048):
    return verl_plugins.compose_config(
        str(CONFIGS),
        "tau_grpo",
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.rollout.name=vllm",
            "data.max_prompt_length=4096",
            f"data.max_response_length={response_length}",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={CONFIGS / 'tau_agent_loop.yaml'}",
        ],
    )


def _run(cfg, server, rows):
    async def main():
        worker = AgentLoopWorker(cfg, llm_client=server)
        nt = {k: np.array([r[k] for r in rows], dtype=object) for k in ("agent_name", "data_source", "reward_model")}
        nt["extra_info"] = np.empty(len(rows), dtype=object)
        nt["extra_info"][:] = [r["extra_info"] for r in rows]
        nt["raw_prompt"] = np.empty(len(rows), dtype=object)
        nt["raw_prompt"][:] = [r["prompt"] for r in rows]
        nt["index"] = np.array([r["extra_info"]["index"] for r in rows], dtype=object)
        return await worker.generate_sequences(DataProto(non_tensor_batch=nt, meta_info={}))

    with tau_env.registry.scoped():
        tau_env.register("tiny-v0", make_domain)
        return asyncio.run(main())


def test_the_loop_is_registered():
    assert "tau_agent" in _agent_loop_registry
    assert _agent_loop_registry["tau_agent"]["_target_"].endswith("verl_agent_loop.TauAgentLoop")
    verl_plugins.require_registered()


def test_worker_runs_episodes_with_masks_logprobs_and_rewards(model):
    path, tok = model
    cfg = _config(path)
    server = ScriptedServer(tok, [GOOD, BAD])
    with tau_env.registry.scoped():
        tau_env.register("tiny-v0", make_domain)
        rows = verl_data.rl_rows("tiny-v0", task_ids=["restock"]) * 2
    out = _run(cfg, server, rows)
    b = out.batch
    prompt_len = cfg.actor_rollout_ref.rollout.prompt_length
    # the grader's reward, on the last response token
    assert b["rm_scores"].sum(-1).tolist() == [1.0, 0.0]
    assert list(out.non_tensor_batch["acc"]) == [1.0, 0.0]
    for i, script in enumerate([GOOD, BAD]):
        resp, mask = b["responses"][i], b["response_mask"][i].bool()
        n = int(b["attention_mask"][i, prompt_len:].sum())
        assert b["rm_scores"][i, n - 1] == b["rm_scores"][i].sum()
        # mask 1 exactly on what the server generated, in order, one server call per scripted turn
        rid = list(server.scripts)[i]
        calls = [c for c in server.calls if c[0] == rid]
        expected = "".join(t + "<|im_end|>" for t in script)
        assert tok.decode(resp[mask]) == expected
        assert len(calls) == len(script)
        # the engine's log-probabilities on generated tokens, 0 elsewhere
        lp = b["rollout_log_probs"][i]
        assert (lp[mask] == LOGPROB).all() and (lp[~mask] == 0).all()
        # the full sequence is the prompt the server last saw, then its reply
        last_prompt = calls[-1][1]
        seq = b["input_ids"][i][b["attention_mask"][i].bool()].tolist()
        assert seq[: len(last_prompt)] == last_prompt
        # ... and nothing after it but the template's end of that turn: what the env said after the
        # last agent turn (the user's goodbye) spends no response budget
        assert tok.decode(seq[len(last_prompt) :]) == script[-1] + "<|im_end|>\n"
    text = tok.decode(b["responses"][0][b["attention_mask"][0, prompt_len:].bool()])
    assert "<tool_response>\nrestocked\n</tool_response>" in text  # the tool ran in the env, mask 0
    assert all(p["logprobs"] is True and p["max_tokens"] >= 1 for _, _, p in server.calls)


def test_turns_are_capped_by_the_response_budget(model):
    path, tok = model
    long = ["word " * 400] * 5
    server = ScriptedServer(tok, [long])
    with tau_env.registry.scoped():
        tau_env.register("tiny-v0", make_domain)
        rows = verl_data.rl_rows("tiny-v0", task_ids=["restock"])
    cfg = _config(path, response_length=300)
    out = _run(cfg, server, rows)
    assert int(out.batch["response_mask"].sum()) <= 300
    assert sum(len(tok.encode(t, add_special_tokens=False)) for t in long) > 300
    first_prompt = len(server.calls[0][1])
    assert all(len(p) + c["max_tokens"] <= first_prompt + 300 for _, p, c in server.calls)
    # every turn leaves room for the template's end of a turn cut at its limit ("<|im_end|>\n"), the first too
    assert server.calls[0][2]["max_tokens"] <= 300 - 2
    # the episode ran out of budget: said as truncated, not as a plain failure
    assert list(out.non_tensor_batch["truncated"]) == [1.0]


def test_an_episode_within_budget_is_not_truncated_and_every_env_is_closed(model, monkeypatch):
    from tau_env.reference_trainers import verl_agent_loop

    path, tok = model
    made, real = [], verl_agent_loop.make_env

    def counted(spec):
        env = real(spec)
        made.append(env)
        return env

    monkeypatch.setattr(verl_agent_loop, "make_env", counted)
    with tau_env.registry.scoped():
        tau_env.register("tiny-v0", make_domain)
        rows = verl_data.rl_rows("tiny-v0", task_ids=["restock"]) * 2
    out = _run(_config(path), ScriptedServer(tok, [GOOD, BAD]), rows)
    assert list(out.non_tensor_batch["truncated"]) == [0.0, 0.0]
    assert len(made) == 2 and all(env.__dict__["_closed"] for env in made)


def test_auto_family_is_the_one_the_sft_data_picks(model):
    from tau_env.reference_trainers.cpu_common import tokenizer_family
    from tau_env.reference_trainers.verl_agent_loop import loop_family

    _, tok = model
    assert loop_family("auto", tok) == tokenizer_family(tok)  # verl_data's TauSFTDataset with tau_family null
    assert loop_family("hermes", tok) == "hermes"
    text = (CONFIGS / "tau_agent_loop.yaml").read_text()
    assert "\n  family: auto\n" in text  # the overlay's default: SFT and RL render with one tool template


def test_to_output_refuses_a_prompt_holding_generated_tokens():
    from tau_env.reference_trainers.rollout import TokenTrajectory

    t = TokenTrajectory("t", 0, [1, 2, 3, 4], [0, 1, 1, 0], [0.0, -1.0, -1.0, 0.0], 1.0, [], {"turns": 1})
    out = to_output(t, 1, 10, 1.0)
    assert out.response_mask == [1, 1, 0] and out.prompt_ids == [1] and out.reward_score == 1.0
    with pytest.raises(InvalidOptionError, match="generated tokens"):
        to_output(t, 2, 10, 1.0)
    short = to_output(t, 1, 2, 0.0)
    assert short.response_ids == [2, 3] and short.extra_fields["reward_extra_info"]["truncated"] == 1.0


def test_missing_logprobs_are_refused(model):
    _, tok = model

    class NoLogprobs:
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kw):
            return TokenOutput(token_ids=[1, 2], log_probs=None)

    policy = VerlTokenPolicy(tok, NoLogprobs(), sampling_params={"temperature": 1.0}, response_length=100)
    with pytest.raises(InvalidOptionError, match="calculate_log_probs"):
        asyncio.run(policy._generate([1, 2, 3], 10, 0))


@pytest.mark.parametrize("response_length", [1, 2])
def test_a_response_length_with_no_room_for_a_turn_is_refused(model, response_length):
    """Below the template's end of a turn, every sample would come out truncated with no agent token."""
    from tau_env.reference_trainers.rollout import TrajectoryBuilder

    _, tok = model
    calls = []

    class Server:
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kw):
            calls.append(sampling_params)
            return TokenOutput(token_ids=[1], log_probs=[-0.1])

    policy = VerlTokenPolicy(tok, Server(), sampling_params={"temperature": 1.0}, response_length=response_length)
    policy._builder = TrajectoryBuilder(tok)
    prompt = policy._builder.start([{"role": "user", "content": "Hi, I lost my card."}])
    end = policy._builder.end_of_turn_tokens
    assert end >= response_length  # the tiny model's template ends a turn in 2 tokens
    with pytest.raises(InvalidOptionError, match=f"response_length is {response_length}: .* {end} end-of-turn"):
        asyncio.run(policy._generate(prompt, 10, 0))
    assert calls == []
    roomy = VerlTokenPolicy(tok, Server(), sampling_params={"temperature": 1.0}, response_length=end + 1)
    roomy._builder = TrajectoryBuilder(tok)
    roomy._builder.start([{"role": "user", "content": "Hi, I lost my card."}])
    asyncio.run(roomy._generate(prompt, 10, 0))
    assert calls[-1]["max_tokens"] == 1


@pytest.mark.parametrize(
    "ids, logprobs, said",
    [
        ([1, 2], [-0.5, float("nan")], "log-probability nan"),
        ([1, 2], [-0.5, 0.3], "log-probability 0.3"),
        ([1, 10**6], [-0.5, -0.5], "token id 1000000, outside the tokenizer's vocabulary"),
        ([1, -3], [-0.5, -0.5], "token id -3, outside"),
        ([1, 2, 3], [-0.5], "3 tokens but 1 log-probabilities"),
    ],
)
def test_a_server_turn_that_cannot_be_trained_on_is_refused(model, ids, logprobs, said):
    """As the CPU trainer's server policy refuses them: a NaN went into rollout_log_probs unnoticed."""
    from tau_env.error import InfrastructureError

    _, tok = model

    class Bad:
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kw):
            return TokenOutput(token_ids=ids, log_probs=logprobs)

    policy = VerlTokenPolicy(tok, Bad(), sampling_params={"temperature": 1.0}, response_length=100)
    with pytest.raises(InfrastructureError, match=said) as e:
        asyncio.run(policy._generate([1, 2, 3], 10, 0))
    assert "calculate_log_probs" not in str(e.value)


def test_llm_user_needs_a_model():
    loop = TauAgentLoop.__new__(TauAgentLoop)
    loop.user_kind, loop.user_model = "llm", None
    spec = verl_data.EpisodeSpec(env_id="harbor-bank-v0", task_id="x")
    with pytest.raises(InvalidOptionError, match="user_model"):
        loop._user(spec)
    loop.user_kind = "nobody"
    with pytest.raises(InvalidOptionError, match="scripted"):
        loop._user(spec)


@pytest.mark.parametrize(
    "settings, said",
    [
        ({"max_new_token": 64}, "'max_new_token' is not one (did you mean 'max_new_tokens'?)"),
        ({"usr": "llm"}, "'usr' is not one (did you mean 'user'?)"),
        ({"family": "llama"}, "family must be auto or one of"),
        ({"max_new_tokens": 0}, "max_new_tokens must be a whole number of at least 1, not 0"),
        ({"max_new_tokens": "lots"}, "max_new_tokens must be a whole number of at least 1, not 'lots'"),
        ({"user": "llm"}, "user 'llm' needs user_model"),
        ({"user_temperature": -1}, "user_temperature must be a number >= 0"),
        ({"user": "human"}, "user must be 'scripted' or 'llm'"),
    ],
)
def test_a_misspelt_or_unknown_loop_setting_is_refused(settings, said):
    """veRL hands any yaml key to the loop and its base class takes anything: a typo would run with
    the default silently."""
    with pytest.raises(InvalidOptionError, match=re.escape(said)):
        TauAgentLoop(**settings)
