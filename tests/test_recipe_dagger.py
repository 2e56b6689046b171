"""The CPU recipe's DAgger stage (benchmarks/recipe_cpu.py: ``--dagger``, ``dagger_data``): settings
refused out of range, and the continued SFT's data: every labelled example, as many replayed from
the SFT data, nothing else. (``--quick`` runs the whole stage: tests/test_benchmarks.py.)"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "recipe_cpu.py"
_spec = importlib.util.spec_from_file_location("recipe_cpu_dagger", SCRIPT)
recipe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recipe)


@pytest.mark.parametrize(
    "argv",
    [
        ["--dagger", "-1"],
        ["--dagger", "10001"],
        ["--dagger-p", "1.5"],
        ["--dagger-p", "-0.1"],
        ["--dagger-p", "nan"],
        ["--dagger-steps", "-3"],
        ["--dagger", "two"],
    ],
)
def test_dagger_settings_out_of_range_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        recipe.main([*argv, "--model", "/nonexistent"])
    assert e.value.code == 2 and "--dagger" in capsys.readouterr().err


def _example(tag: str) -> str:
    return json.dumps(
        {"task_id": tag, "messages": [{"role": "assistant", "content": tag}], "tools": [], "train": [True]}
    )


def test_the_continued_sft_data_is_every_label_and_as_many_replayed(tmp_path, monkeypatch):
    args = argparse.Namespace(
        seed=0,
        dagger=4,
        dagger_p=0.5,
        eval_temperature=0.3,
        workers=2,
        max_new_tokens=8,
        retrieval="grep",
        device="cpu",
    )
    ckpt = tmp_path / "sft" / "checkpoints" / "step-000010"
    pool = ["a", "b", "c", "d", "e"]
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(_example(f"orig{i}") + "\n" for i in range(50)), encoding="utf-8")
    folder = tmp_path / "dagger_step-000010_4-p0.5-t0.3-s0-w2"
    labels = {0: ["l0", "l1", "l2"], 1: ["l3"]}
    for k, tags in labels.items():  # the shards already played: read back, not played again
        shard = folder / f"shard-{k}"
        shard.mkdir(parents=True)
        (shard / "examples.jsonl").write_text("".join(_example(t) + "\n" for t in tags), encoding="utf-8")
        summary = {
            "episodes": 2,
            "turns": 10,
            "agreed": 6,
            "learner_played": len(tags),
            "trained_turns": len(tags),
            "examples_file": str(shard / "examples.jsonl"),
        }
        (shard / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    ran = []  # every shard's command runs (the command reads a finished shard back, refuses another)
    monkeypatch.setattr(recipe, "run_workers", lambda folder, cmds, *a, **k: ran.extend(cmds))
    mix, stats = recipe.dagger_data(tmp_path, ckpt, tmp_path / "synth", pool, data, args)
    assert mix.parent == folder
    assert [k for k, _ in ran] == [0, 1]
    shard_tasks = [[cmd[i + 1] for i, w in enumerate(cmd) if w == "--task"] for _, cmd in ran]
    assert sorted(t for ts in shard_tasks for t in ts) == sorted(set(t for ts in shard_tasks for t in ts))
    assert sum(map(len, shard_tasks)) == 4 and all(t in pool for ts in shard_tasks for t in ts)
    tags = [json.loads(x)["task_id"] for x in mix.read_text(encoding="utf-8").splitlines()]
    assert sorted(t for t in tags if t.startswith("l")) == ["l0", "l1", "l2", "l3"]
    replayed = [t for t in tags if t.startswith("orig")]
    assert len(replayed) == 4 and len(set(replayed)) == 4 and len(tags) == 8
    assert stats["labelled_examples"] == 4 and stats["replayed_examples"] == 4
    assert stats["episodes"] == 4 and stats["learner_played"] == 4 and stats["tasks"] == 4
