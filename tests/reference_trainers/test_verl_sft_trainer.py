"""veRL's own SFT trainer (``torchrun -m verl.trainer.sft_trainer``) trains on the parquet our builder
writes, through our launcher (``reference_trainers/launch/sft_single_node.sh``) and overlay
(``configs/tau_sft.yaml``), on the CPU with a tiny random model: data from ``tau-env eval --agent
teacher`` and ``tau-env export-sft``, parquet from ``python -m tau_env.reference_trainers.verl_data
sft``, one optimizer step, a finite loss, a checkpoint transformers loads, and loss only on the
agent's trained turns in the dataset veRL builds from that config. Runs only where veRL is
installed (the veRL venv of .ci/run); skips elsewhere.

veRL 0.9.1 has no CPU platform, so the run needs (besides the launcher's arguments):

- ``verl_cpu_platform`` (this folder), loaded by ``VERL_USE_EXTERNAL_MODULES`` and selected by
  ``VERL_PLATFORM=cpu``: device ``cpu``, backend ``gloo``; and the one monkeypatch, of
  ``initialize_global_process_group`` (its docstring says why);
- ``VERL_ENGINE_DEVICE=cuda``: veRL's FSDP engine is registered for ``cuda`` and ``npu`` only
  (``verl/workers/engine/fsdp/transformer_impl.py:1143``); this variable picks it, and it runs on
  the CPU as it is;
- ``engine.strategy=fsdp2``: FSDP1 is built with ``sync_module_states=True``
  (``transformer_impl.py:443``), which torch refuses for CPU parameters;
- ``+model.override_config.attn_implementation=sdpa`` (veRL's default is flash_attention_2),
  ``engine.use_torch_compile=False`` (no compiler needed), ``trainer.device=cpu``.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("pyarrow")

import torch  # noqa: E402
from tau_env.reference_trainers import verl_data as vd  # noqa: E402
from tau_env.reference_trainers import verl_plugins as vp  # noqa: E402
from tau_env.reference_trainers.cpu_common import build_tiny_model  # noqa: E402
from verl_helpers import CONFIGS  # noqa: E402

from tau_env import cli  # noqa: E402

HERE = Path(__file__).resolve().parent
LAUNCHER = HERE.parents[1] / "reference_trainers" / "launch" / "sft_single_node.sh"
ENV_ID, TASKS = "harbor-bank-v0", ["update_email_and_phone", "lost_card_standard_shipping"]
CPU_ENV = {"VERL_USE_EXTERNAL_MODULES": "verl_cpu_platform", "VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cuda"}
CPU_OVERRIDES = [
    "trainer.device=cpu",
    "engine.strategy=fsdp2",
    "engine.use_torch_compile=False",
    "+model.override_config.attn_implementation=sdpa",
]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The teacher's episodes as export-sft JSONL, our SFT parquet of them, and a tiny model."""
    root = tmp_path_factory.mktemp("verl_sft")
    tasks = [a for t in TASKS for a in ("--task", t)]
    assert cli.main(["eval", ENV_ID, "--agent", "teacher", *tasks, "--out", str(root / "run"), "--quiet"]) == 0
    assert cli.main(["export-sft", str(root / "run"), "--jsonl", str(root / "sft.jsonl")]) == 0
    examples = [json.loads(line) for line in (root / "sft.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(examples) == len(TASKS)
    assert vd.main(["sft", str(root / "sft.jsonl"), str(root / "sft.parquet")]) == 0
    corpus = [json.dumps(ex["messages"]) + json.dumps(ex.get("tools")) for ex in examples] * 20
    build_tiny_model(root / "model", corpus, vocab_size=1000)
    return root, examples


def test_verl_sft_trainer_trains_one_step_on_our_parquet_on_the_cpu(data):
    root, _ = data
    ckpt = root / "ckpt"
    env = {
        **os.environ,
        **CPU_ENV,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",  # this venv's torchrun
        "PYTHONPATH": os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p),
        "MODEL": str(root / "model"),
        "TRAIN": str(root / "sft.parquet"),
        "GPUS": "1",
    }
    overrides = [
        *CPU_OVERRIDES,
        f"data.train_batch_size={len(TASKS)}",
        "data.num_workers=0",
        "trainer.total_training_steps=1",
        "trainer.resume_mode=disable",
        f"trainer.default_local_dir={ckpt}",
        "checkpoint.save_contents=[model,optimizer,extra,hf_model]",
    ]
    proc = subprocess.run(
        ["bash", str(LAUNCHER), *overrides],
        cwd=root,  # Hydra's outputs/ folder
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]

    losses = [float(x) for x in re.findall(r"train/loss:(\S+?)(?:\s| - |$)", out)]
    assert len(losses) == 1, out[-3000:]
    assert math.isfinite(losses[0]) and losses[0] > 0
    grad = [float(x) for x in re.findall(r"train/grad_norm:(\S+?)(?:\s| - |$)", out)]
    assert grad and math.isfinite(grad[0]) and grad[0] > 0  # the agent tokens carried a gradient

    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = ckpt / "global_step_1" / "huggingface"
    trained = AutoModelForCausalLM.from_pretrained(hf)
    start = AutoModelForCausalLM.from_pretrained(root / "model")
    assert AutoTokenizer.from_pretrained(hf).chat_template
    moved = [
        (a.float() - b.float()).abs().max().item()
        for a, b in zip(trained.state_dict().values(), start.state_dict().values(), strict=True)
    ]
    assert all(math.isfinite(m) for m in moved) and max(moved) > 0  # the step changed the weights
    with torch.no_grad():
        logits = trained(torch.tensor([[1, 2, 3]])).logits
    assert torch.isfinite(logits).all()


def test_examples_longer_than_max_length_are_left_out_not_met_hours_into_the_run(data, caplog):
    """With the overlay's truncation: error, veRL raised on an over-long example when its loader reached
    it; the dataset leaves those out up front (said in a warning), as the CPU trainer does."""
    from transformers import AutoTokenizer
    from verl.trainer.sft_trainer import create_sft_dataset

    root, examples = data
    tok = AutoTokenizer.from_pretrained(root / "model")
    cfg = vp.compose_config(str(CONFIGS), "tau_sft", [f"data.train_files={root / 'sft.parquet'}"])
    full = create_sft_dataset(cfg.data.train_files, cfg.data, tok, None)
    lengths = sorted(len(full[i]["input_ids"]) for i in range(len(full)))
    assert lengths[0] < lengths[-1]
    for limit, kept in ((lengths[0], 1), (lengths[-1], len(examples)), (lengths[-1] - 1, 1)):
        over = [f"data.train_files={root / 'sft.parquet'}", f"data.max_length={limit}"]
        cfg = vp.compose_config(str(CONFIGS), "tau_sft", over)
        caplog.clear()
        ds = create_sft_dataset(cfg.data.train_files, cfg.data, tok, None)
        assert len(ds) == kept
        assert all(len(ds[i]["input_ids"]) <= limit for i in range(len(ds)))  # no item raises
        said = [r.getMessage() for r in caplog.records if "data.max_length" in r.getMessage()]
        assert said == ([] if kept == len(examples) else [f"1 of 2 SFT examples are longer than data.max_length={limit}"
                                                         " tokens and are left out (with truncation: error veRL would"
                                                         " stop when its loader reached one); raise data.max_length to"
                                                         " keep them."])  # fmt: skip
    cfg = vp.compose_config(str(CONFIGS), "tau_sft", [f"data.train_files={root / 'sft.parquet'}", "data.max_length=10"])
    with pytest.raises(Exception, match="all 2 SFT examples are longer than data.max_length=10 tokens"):
        create_sft_dataset(cfg.data.train_files, cfg.data, tok, None)


def test_the_dataset_verl_builds_from_the_overlay_trains_only_flagged_turns(data):
    from transformers import AutoTokenizer
    from verl.trainer.sft_trainer import create_sft_dataset

    root, examples = data
    cfg = vp.compose_config(str(CONFIGS), "tau_sft", [f"data.train_files={root / 'sft.parquet'}"])
    tok = AutoTokenizer.from_pretrained(root / "model")
    # veRL's dynamic batching asserts each sequence fits max_token_len_per_gpu: the overlay keeps it >= max_length
    assert cfg.data.use_dynamic_bsz and cfg.data.max_token_len_per_gpu >= cfg.data.max_length
    ds = create_sft_dataset(cfg.data.train_files, cfg.data, tok, None)  # as SFTTrainer._build_dataset does
    assert type(ds).__name__ == "TauSFTDataset" and len(ds) == len(examples)
    for i, ex in enumerate(examples):
        item = ds[i]
        ids, loss = item["input_ids"], item["loss_mask"].bool()
        assert 0 < int(loss.sum()) < len(ids)
        trained, whole = tok.decode(ids[loss]), tok.decode(ids)
        assert any(m["role"] == "assistant" and not f for m, f in zip(ex["messages"], ex["train"], strict=True))
        for m, flag in zip(ex["messages"], ex["train"], strict=True):
            text = m.get("content") or ""
            if text:
                assert text in whole  # the whole conversation is context
            if m["role"] == "assistant" and flag:
                assert text in trained
                for call in m.get("tool_calls") or []:
                    assert call["function"]["name"] in trained
            elif len(text) > 20:  # the env's greeting, the user's turns, tool results: no loss
                assert text not in trained
