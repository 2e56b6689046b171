"""The CPU recipe's GRPO draws only tasks whose teacher episode fits the context
(benchmarks/recipe_cpu.py: ``fitting_tasks``): a rollout stops where the context ends."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tau_env.reference_trainers.cpu_common import (  # noqa: E402
    build_tiny_model,
    chat_template_for,
    tokenize_sft_example,
    tokenizer_family,
)

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "recipe_cpu.py"
_spec = importlib.util.spec_from_file_location("recipe_cpu", SCRIPT)
recipe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recipe)


def example(task_id: str, words: int) -> dict:
    messages = [
        {"role": "system", "content": "You are the bank's agent."},
        {"role": "assistant", "content": "Hello, how can I help?"},
        {"role": "user", "content": " ".join(["card"] * words)},
        {"role": "assistant", "content": "Let me look."},
    ]
    return {"task_id": task_id, "trial": 0, "reward": 1.0, "messages": messages, "tools": [], "train": [0, 0, 0, 1]}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    corpus = ["You are the bank's agent. Hello, how can I help? card card Let me look."] * 20
    return build_tiny_model(path / "model", corpus, vocab_size=300)


def test_only_episodes_within_max_len_tokens_are_drawn(tiny, tmp_path):
    from transformers import AutoTokenizer

    examples = [example("short", 2), example("medium", 40), example("long", 400), example("long", 2)]
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps(e) + "\n" for e in examples), encoding="utf-8")
    tokenizer = AutoTokenizer.from_pretrained(str(tiny))
    template = chat_template_for(tokenizer, tokenizer_family(tokenizer))
    lengths = [len(tokenize_sft_example(tokenizer, e, template).input_ids) for e in examples]
    assert lengths[0] < lengths[1] < lengths[2]
    # a limit between each pair of lengths keeps exactly the episodes at or under it
    assert recipe.fitting_tasks(data, tiny, lengths[0] - 1) == set()
    assert recipe.fitting_tasks(data, tiny, lengths[0]) == {"short", "long"}  # "long"'s second episode fits
    assert recipe.fitting_tasks(data, tiny, lengths[1]) == {"short", "medium", "long"}
    data.write_text("".join(json.dumps(e) + "\n" for e in examples[:3]), encoding="utf-8")
    assert recipe.fitting_tasks(data, tiny, lengths[2] - 1) == {"short", "medium"}
    assert recipe.fitting_tasks(data, tiny, lengths[2]) == {"short", "medium", "long"}
