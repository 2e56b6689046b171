#!/usr/bin/env bash
# GRPO on tau_env tasks, one GPU node, with veRL's own launcher (verl.trainer.main_ppo).
#
#   MODEL=/path/to/hf_model TRAIN=rl.parquet [VAL=val.parquet] [GPUS=8] \
#     reference_trainers/launch/grpo_single_node.sh [more Hydra overrides]
#
# Data: python -m tau_env.reference_trainers.verl_data rl harbor-bank-v0 rl.parquet [--tasks FILE]
# Needs an environment with verl==0.9.1 (+ its vllm extra) and tau-env installed; the tau_env plugin
# (estimator tau_loo_group, agent loop tau_agent) is loaded in every process by the package's
# verl.plugins entry point, or by VERL_USE_EXTERNAL_MODULES below.
set -euo pipefail
CONFIGS="$(cd "$(dirname "$0")/../configs" && pwd)"
. "$(dirname "$0")/hydra_quote.sh"
require MODEL "a Hugging Face model folder or id"
require TRAIN "an RL parquet"
count GPUS
no_interpolation MODEL TRAIN VAL CONFIGS
PY="${PYTHON:-python}"
export VERL_USE_EXTERNAL_MODULES="${VERL_USE_EXTERNAL_MODULES:-tau_env.reference_trainers.verl_plugins}"

ARGS=(
  actor_rollout_ref.model.path="$(hq "$MODEL")"
  data.train_files="$(hq "$TRAIN")"
  data.val_files="$(hq "${VAL:-$TRAIN}")"
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.agent.agent_loop_config_path="$(hq "$CONFIGS/tau_agent_loop.yaml")"
  trainer.nnodes=1
  trainer.n_gpus_per_node="${GPUS:-8}"
  "$@"
)
# start-up check: the plugin is registered and the composed config runs the recipe's GRPO
"$PY" -m tau_env.reference_trainers.verl_plugins --config-dir "$CONFIGS" --config-name tau_grpo -- "${ARGS[@]}"
exec "$PY" -m verl.trainer.main_ppo --config-path "$CONFIGS" --config-name tau_grpo "${ARGS[@]}"
