"""Fixtures of the reference trainers' tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_and_data(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny random model folder and SFT data (the oracle's episode of found_card_unlock): (model, data)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tau_env.reference_trainers.cpu_common import build_tiny_model

    import tau_env
    from tau_env.sft import to_example

    result = tau_env.evaluate(
        "harbor-bank-v0", tau_env.OracleAgent, tau_env.ScriptedUser, task_ids=["found_card_unlock"]
    )
    examples = [to_example(r.to_dict()) for r in result.results]
    data = tmp_path_factory.mktemp("data") / "sft.jsonl"
    data.write_text("".join(json.dumps(ex) + "\n" for ex in examples), encoding="utf-8")
    model = build_tiny_model(tmp_path_factory.mktemp("tiny"), [json.dumps(ex) for ex in examples] * 3)
    return model, data


@pytest.fixture(scope="session")
def sft_run(tmp_path_factory, tiny_and_data) -> tuple[Path, Path]:
    """A one-step SFT run (LoRA rank 4, retrieval "none") on a tiny random model: (its folder, its data)."""
    from tau_env.reference_trainers import sft

    model, data = tiny_and_data
    out = tmp_path_factory.mktemp("run") / "sft"
    sft.train(
        sft.SFTConfig(
            model=str(model), data=[str(data)], out=str(out), steps=1, batch_size=1, micro_batch=1, lora_rank=4,
            retrieval="none", max_new_tokens=4, progress=False, device="cpu",
        )
    )  # fmt: skip
    return out, data
