#!/usr/bin/env bash
# SFT on tau_env teacher trajectories, one GPU node, with veRL's own trainer (torchrun -m verl.trainer.sft_trainer).
#
#   MODEL=/path/to/hf_model TRAIN=sft.parquet [GPUS=8] reference_trainers/launch/sft_single_node.sh [overrides]
#
# Data: tau-env export-sft RUN --jsonl sft.jsonl (or a synthesis run's sft/sft.jsonl), then
#       python -m tau_env.reference_trainers.verl_data sft sft.jsonl sft.parquet
# Several nodes: torchrun --nnodes=N --node_rank=R --master_addr=... with the same arguments on each.
set -euo pipefail
CONFIGS="$(cd "$(dirname "$0")/../configs" && pwd)"
. "$(dirname "$0")/hydra_quote.sh"
require MODEL "a Hugging Face model folder or id"
require TRAIN "an SFT parquet"
count GPUS
no_interpolation MODEL TRAIN VAL CONFIGS
PY="${PYTHON:-$(command -v python || command -v python3 || echo python)}"
# start-up check, once, before torchrun starts a process per GPU that would each fail the same way; the same
# Python then runs torchrun (torch.distributed.run), so the check and the launch see one environment
if ! why=$("$PY" -c "import verl.trainer.sft_trainer, tau_env.reference_trainers.verl_data" 2>&1); then
  echo "sft_single_node.sh: $PY cannot import veRL's SFT trainer and tau-env (${why##*$'\n'}); install verl==0.9.1 and tau-env there (pip install 'tau-env[verl]') or set PYTHON" >&2
  exit 2
fi
exec "$PY" -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node="${GPUS:-8}" -m verl.trainer.sft_trainer \
  --config-path "$CONFIGS" --config-name tau_sft \
  model.path="$(hq "$MODEL")" data.train_files="$(hq "$TRAIN")" data.val_files="$(hq "${VAL:-$TRAIN}")" \
  trainer.n_gpus_per_node="${GPUS:-8}" "$@"
