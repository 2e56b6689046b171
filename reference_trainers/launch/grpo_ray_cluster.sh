#!/usr/bin/env bash
# GRPO on tau_env tasks across a Ray cluster, submitted with Ray's job API to veRL's launcher.
#
# On the head node:    ray start --head --dashboard-host=0.0.0.0
# On each worker node: ray start --address=<head>:6379
# (every node needs the same environment: verl==0.9.1 with its vllm extra, tau-env installed at the same
#  path, the model and the data at the same paths, or on shared storage)
# Then, from any machine that reaches the head's dashboard (the job uses the cluster's tau-env configs):
#
#   RAY_ADDRESS=http://<head>:8265 MODEL=/shared/model TRAIN=/shared/rl.parquet NNODES=4 [GPUS=8] \
#     reference_trainers/launch/grpo_ray_cluster.sh [more Hydra overrides]
set -euo pipefail
CONFIGS="$(cd "$(dirname "$0")/../configs" && pwd)"
. "$(dirname "$0")/hydra_quote.sh"
require RAY_ADDRESS "the head node dashboard, e.g. http://10.0.0.1:8265"
require MODEL "a model folder every node can read"
require TRAIN "an RL parquet every node can read"
require NNODES "the number of GPU nodes"
count GPUS NNODES
no_interpolation MODEL TRAIN VAL CONFIGS
PY="${PYTHON:-python}"
PLUGIN="${VERL_USE_EXTERNAL_MODULES:-tau_env.reference_trainers.verl_plugins}"

COMMON=(
  actor_rollout_ref.model.path="$(hq "$MODEL")"
  data.train_files="$(hq "$TRAIN")"
  data.val_files="$(hq "${VAL:-$TRAIN}")"
  actor_rollout_ref.rollout.name=vllm
  trainer.nnodes="$NNODES"
  trainer.n_gpus_per_node="${GPUS:-8}"
)
LOOP=actor_rollout_ref.rollout.agent.agent_loop_config_path
# checked here with this checkout's configs ...
VERL_USE_EXTERNAL_MODULES="$PLUGIN" "$PY" -m tau_env.reference_trainers.verl_plugins \
  --config-dir "$CONFIGS" --config-name tau_grpo -- "${COMMON[@]}" "$LOOP=$(hq "$CONFIGS/tau_agent_loop.yaml")" "$@"
# ... run with those of the tau-env installed on the cluster (@tau_env_configs: verl_launch resolves it
# there). Ray runs the entrypoint through a shell: the arguments travel base64-encoded, as one plain word
ENTRY=$("$PY" -m tau_env.reference_trainers.verl_launch --encode --config-path @tau_env_configs \
  --config-name tau_grpo "${COMMON[@]}" "$LOOP=@tau_env_configs/tau_agent_loop.yaml" "$@")
exec ray job submit --address="$RAY_ADDRESS" \
  --runtime-env-json="{\"env_vars\": {\"VERL_USE_EXTERNAL_MODULES\": \"$PLUGIN\"}}" \
  -- "$PY" -m tau_env.reference_trainers.verl_launch "$ENTRY"
