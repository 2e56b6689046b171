"""Shared pieces of the veRL tests: a tiny offline Qwen-style tokenizer and model folder (no weights)."""

from __future__ import annotations

from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CONFIGS = Path(__file__).resolve().parents[2] / "reference_trainers" / "configs"


def tiny_tokenizer():
    """A byte-level BPE with ChatML specials and the Qwen tool template, trained here (offline)."""
    from tau_env.reference_trainers.chat_templates import QWEN_TOOLS_TEMPLATE
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(['restock the widget <tool_call> {"name": "secret_restock_1234"} item_id'] * 50, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = QWEN_TOOLS_TEMPLATE
    return fast


def tiny_model_dir(path: Path):
    """A folder veRL's HFModelConfig reads: the tokenizer and a Qwen2 config (no weights are loaded)."""
    from transformers import Qwen2Config

    tok = tiny_tokenizer()
    tok.save_pretrained(path)
    Qwen2Config(
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        architectures=["Qwen2ForCausalLM"],
    ).save_pretrained(path)
    return tok
