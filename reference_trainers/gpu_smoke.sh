#!/usr/bin/env bash
# One GRPO step on a GPU: vLLM rollouts of a small model through tau_env's agent loop (tau_agent),
# the leave-one-out estimator (tau_loo_group) and the rollout correction (token IS weight, C = 2;
# seq_mean_k1 mask, delta = 0.1), with veRL's own launcher. Prints veRL's step metrics.
#
#   MODEL=/path/to/small/instruct/model [PYTHON=python] [GPUS=1] reference_trainers/gpu_smoke.sh [overrides]
#
# Needs an environment with verl==0.9.1 and its vllm extra (vllm 0.24), and tau-env installed
# (pip install -e .): this cannot run on a CPU (veRL's rollout replicas are vLLM/SGLang only).
# A Qwen2.5/Qwen3 instruct model of 0.5-1.5B fits one GPU; the family (tool-call printing) is qwen.
# What it printed on a lent GPU goes in benchmarks/README.md.
set -euo pipefail
PY="${PYTHON:-python}"
ROOT="$(cd "$(dirname "$0")" && pwd)"
CONFIGS="$ROOT/configs"
. "$ROOT/launch/hydra_quote.sh"
require MODEL "a small Hugging Face instruct model folder (e.g. Qwen2.5-0.5B-Instruct)"
count GPUS
WORK="${WORK:-$(mktemp -d)}"
export VERL_USE_EXTERNAL_MODULES="${VERL_USE_EXTERNAL_MODULES:-tau_env.reference_trainers.verl_plugins}"
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"

# 4 Harbor Bank tasks, G = 4 rollouts each, the scripted user
"$PY" -m tau_env.reference_trainers.verl_data rl harbor-bank-v0 "$WORK/rl.parquet" \
  --task-id update_email_and_phone --task-id lost_card_standard_shipping \
  --task-id damaged_card_standard_expedited --task-id found_card_unlock

ARGS=(
  actor_rollout_ref.model.path="$(hq "$MODEL")"
  data.train_files="$(hq "$WORK/rl.parquet")"
  data.val_files="$(hq "$WORK/rl.parquet")"
  data.train_batch_size=4
  data.max_prompt_length=8192
  data.max_response_length=4096
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.n=4
  actor_rollout_ref.rollout.gpu_memory_utilization=0.4
  actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1
  actor_rollout_ref.rollout.agent.num_workers=1
  actor_rollout_ref.rollout.agent.agent_loop_config_path="$(hq "$CONFIGS/tau_agent_loop.yaml")"
  actor_rollout_ref.actor.ppo_mini_batch_size=4
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1
  actor_rollout_ref.actor.use_dynamic_bsz=true
  actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384
  actor_rollout_ref.model.enable_gradient_checkpointing=true
  trainer.nnodes=1
  trainer.n_gpus_per_node="${GPUS:-1}"
  trainer.total_training_steps=1
  trainer.val_before_train=false
  trainer.test_freq=-1
  trainer.save_freq=-1
  trainer.logger='[console]'
  trainer.default_local_dir="$(hq "$WORK/checkpoints")"
  "$@"
)
"$PY" -m tau_env.reference_trainers.verl_plugins --config-dir "$CONFIGS" --config-name tau_grpo \
  --is-cap 2.0 --mask-delta 0.1 -- "${ARGS[@]}"
"$PY" -m verl.trainer.main_ppo --config-path "$CONFIGS" --config-name tau_grpo "${ARGS[@]}" 2>&1 \
  | tee "$WORK/smoke.log"
grep -E "step:1 |critic/rewards/mean|rollout_corr/|actor/pg_loss" "$WORK/smoke.log" | tail -20 || true
echo "gpu_smoke: one GRPO step done; log in $WORK/smoke.log"
