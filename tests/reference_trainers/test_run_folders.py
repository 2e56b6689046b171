"""The trainers' ``--out`` as a careless user drives it: a file in its place, a folder another run
is using, another trainer's run, ``--no-resume`` over an earlier run, a kill that tears a log line,
a learning rate that blows up. Each is one clear error or a clean recovery, and no run's checkpoints,
log or plot mix with another's.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tau_env.reference_trainers import grpo, sft  # noqa: E402
from tau_env.reference_trainers.checkpoint import latest_checkpoint, load_checkpoint, open_run_dir  # noqa: E402
from tau_env.reference_trainers.cpu_common import DivergedError, MetricsLog  # noqa: E402

from tau_env.error import InvalidOptionError, ResultsFolderError, TaskFileError, UnknownTaskError  # noqa: E402


def _cfg(model, data, out, **kw) -> sft.SFTConfig:
    base = dict(
        model=str(model), data=[str(data)], out=str(out), steps=2, batch_size=1, micro_batch=1, lora_rank=4,
        retrieval="none", max_new_tokens=4, progress=False, device="cpu", save_every=1,
    )  # fmt: skip
    return sft.SFTConfig(**{**base, **kw})


def _steps(out: Path) -> list[int]:
    return [r["step"] for r in MetricsLog.read(out / "metrics.jsonl")]


def test_an_out_that_is_a_file_or_under_one_is_one_line(tiny_and_data, tmp_path, capsys):
    model, data = tiny_and_data
    file = tmp_path / "afile"
    file.write_text("keep me")
    for out in (file, file / "sub"):
        for prog, argv in (
            (sft.main, ["--model", str(model), "--data", str(data), "--out", str(out), "--steps", "1"]),
            (grpo.main, ["--model", str(model), "--task-ids", "found_card_unlock", "--out", str(out), "--steps", "1"]),
        ):
            assert prog(argv) == 2
            err = capsys.readouterr().err
            assert "is a file, not a folder" in err and "Traceback" not in err
    assert file.read_text() == "keep me"


def test_the_model_named_another_way_resumes_the_run(tiny_and_data, tmp_path, monkeypatch):
    model, data = tiny_and_data
    out = tmp_path / "run"
    sft.train(_cfg(model, data, out, steps=1))
    monkeypatch.chdir(model.parent)
    for spelled in (model.name, model.name + "/", f"./{model.name}"):
        assert sft.train(_cfg(spelled, data, out, steps=1)).name == "step-000001"  # the same run, nothing to do
    assert sft.train(_cfg(f"./{model.name}/", data, out, steps=2)).name == "step-000002"
    assert _steps(out) == [1, 2]
    other = tmp_path / "other-model"
    shutil.copytree(model, other)
    with pytest.raises(ResultsFolderError, match="model: "):
        sft.train(_cfg(other, data, out, steps=3))


def test_a_folder_of_another_trainers_run_is_refused(sft_run, tmp_path):
    run = tmp_path / "sft"
    shutil.copytree(sft_run[0], run)
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    cfg = grpo.GRPOConfig(
        model=str(run), out=str(run), task_ids=["found_card_unlock"], steps=1, tasks_per_step=1, group_size=2,
        max_steps=3, max_new_tokens=4, retrieval="none", progress=False, device="cpu", lr=2e-4,
    )  # fmt: skip
    with pytest.raises(ResultsFolderError, match=r"holds a sft run \(step-000001\); grpo continues only its own"):
        grpo.train(cfg)
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before


def test_a_folder_in_use_is_refused(tiny_and_data, tmp_path):
    model, data = tiny_and_data
    out = tmp_path / "run"
    held = open_run_dir(out, "sft")
    try:
        with pytest.raises(ResultsFolderError, match="is in use by another run"):
            sft.train(_cfg(model, data, out))
        script = (
            "import sys; from tau_env.reference_trainers.sft import main; "
            f"sys.exit(main(['--model', {str(model)!r}, '--data', {str(data)!r}, '--out', {str(out)!r}]))"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and "is in use by another run (process" in done.stderr
    finally:
        held.close()
    assert not (out / "checkpoints").exists()
    sft.train(_cfg(model, data, out, steps=1))  # released: it runs


def test_two_runs_whose_checkpoints_links_lead_to_one_folder_are_refused(tiny_and_data, tmp_path):
    # checkpoints/ kept on another disk through a link: a second run linked to the same folder would
    # save, prune and clear the first one's steps while both --out locks are held
    model, data = tiny_and_data
    store = tmp_path / "disk" / "ckpts"
    store.mkdir(parents=True)
    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        out.mkdir()
        (out / "checkpoints").symlink_to(store)
    held = open_run_dir(first, "sft")
    try:
        with pytest.raises(ResultsFolderError, match=r"b/checkpoints \(.*ckpts\) is in use by another run \(process"):
            sft.train(_cfg(model, data, second))
        assert list(store.iterdir()) == [store / ".tau_env.lock"] and not (second / "metrics.jsonl").exists()
    finally:
        held.close()
    assert list(store.iterdir()) == [] and (first / "checkpoints").is_symlink()  # released, the link kept
    sft.train(_cfg(model, data, second, steps=2))
    # the same folder reached the other way round: a run there now refuses a run through the link
    shutil.rmtree(second / "checkpoints", ignore_errors=True)
    (second / "checkpoints").unlink(missing_ok=True)
    (second / "checkpoints").symlink_to(first / "checkpoints")
    (first / "checkpoints").unlink()
    (first / "checkpoints").mkdir()
    held = open_run_dir(first, "sft")
    try:
        with pytest.raises(ResultsFolderError, match="is in use by another run"):
            open_run_dir(second, "sft")
    finally:
        held.close()
    # --no-resume empties the folder but keeps the running run's lock of it: a third run is still refused
    third = tmp_path / "c"
    third.mkdir()
    (third / "checkpoints").symlink_to(store)
    held = open_run_dir(first, "sft", resume=False)
    try:
        held.clear()
        assert [p.name for p in (first / "checkpoints").iterdir()] == [".tau_env.lock"]
        (third / "checkpoints").unlink()
        (third / "checkpoints").symlink_to(first / "checkpoints")
        with pytest.raises(ResultsFolderError, match="is in use by another run"):
            open_run_dir(third, "sft")
    finally:
        held.close()


def test_a_checkpoints_link_to_nowhere_is_said(tiny_and_data, tmp_path):
    model, data = tiny_and_data
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoints").symlink_to(tmp_path / "unmounted" / "ckpts")
    with pytest.raises(InvalidOptionError, match=r"checkpoints is a link to .*unmounted/ckpts, which is no folder"):
        sft.train(_cfg(model, data, out))
    assert not (out / ".tau_env.lock").exists() and (out / "checkpoints").is_symlink()


def test_no_resume_starts_over_only_once_the_new_inputs_have_loaded(tiny_and_data, tmp_path):
    model, data = tiny_and_data
    out = tmp_path / "run"
    sft.train(_cfg(model, data, out, steps=3))
    old = sorted(p.name for p in (out / "checkpoints").iterdir())
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    for m, d in ((model, bad), (tmp_path / "no-model", data)):
        with pytest.raises((ResultsFolderError, InvalidOptionError)):
            sft.train(_cfg(m, d, out, resume=False, steps=1))
        assert sorted(p.name for p in (out / "checkpoints").iterdir()) == old and _steps(out) == [1, 2, 3]
    last = sft.train(_cfg(model, data, out, resume=False, steps=1, lr=1e-3))
    assert last.name == "step-000001" and latest_checkpoint(out) == last
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000001"] and _steps(out) == [1]
    assert load_checkpoint(last).info["config"]["lr"] == 1e-3


def test_a_torn_last_log_line_is_dropped_and_a_damaged_one_is_named(tiny_and_data, tmp_path):
    model, data = tiny_and_data
    out = tmp_path / "run"
    sft.train(_cfg(model, data, out, steps=1))
    log = out / "metrics.jsonl"
    with log.open("a") as f:
        f.write('{"step": 2, "loss": 0.')  # a kill mid-write
    sft.train(_cfg(model, data, out, steps=2))
    assert _steps(out) == [1, 2] and all(json.loads(x) for x in log.read_text().splitlines())
    log.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(ResultsFolderError, match=rf"{log}:2 is not a row of this run's log"):
        sft.train(_cfg(model, data, out, steps=3))


def test_a_diverging_run_stops_before_its_update_and_saves_nothing_non_finite(tiny_and_data, tmp_path, capsys):
    model, data = tiny_and_data
    out = tmp_path / "run"
    with pytest.raises(DivergedError, match=r"SFT step \d+: the loss .* not finite; the update was not made"):
        sft.train(_cfg(model, data, out, steps=6, lr=1e9, warmup_steps=0, grad_clip=0.0))
    text = (out / "metrics.jsonl").read_text()
    rows = [json.loads(x) for x in text.splitlines()]  # still valid JSON: no NaN written
    assert "NaN" not in text and all(math.isfinite(r["loss"]) for r in rows)
    last = latest_checkpoint(out)
    if last is not None:
        assert all(torch.isfinite(t).all() for t in load_checkpoint(last).model.state_dict().values())
    argv = ["--model", str(model), "--data", str(data), "--out", str(tmp_path / "cli"), "--steps", "6"]
    assert sft.main([*argv, "--lr", "1e9", "--warmup-steps", "0", "--grad-clip", "0", "--no-progress"]) == 2
    assert "not finite" in capsys.readouterr().err


def test_grpo_no_resume_keeps_the_run_when_the_new_task_file_cannot_be_played(tiny_and_data, tmp_path):
    """A task whose initial state the database refuses is found when the file loads, not when the
    task is drawn: --no-resume deletes nothing, and no run starts that would die at that task."""
    from tau_env.registry import registry

    model, _ = tiny_and_data
    out = tmp_path / "grpo"
    base = dict(
        model=str(model), out=str(out), task_ids=["found_card_unlock"], steps=1, tasks_per_step=1, group_size=2,
        max_steps=3, max_new_tokens=4, retrieval="none", progress=False, device="cpu", save_every=1,
    )  # fmt: skip
    grpo.train(grpo.GRPOConfig(**base))
    old = sorted(p.name for p in (out / "checkpoints").iterdir())
    task = registry.load_domain("harbor-bank-v0").task("found_card_unlock").model_dump(mode="json")
    task["initial_state"] = {"customers": [{"customer_id": "C-9", "tier": "platinum-ultra"}]}
    bad = tmp_path / "tasks.jsonl"
    bad.write_text(json.dumps(task) + "\n")
    with pytest.raises(TaskFileError, match="task 'found_card_unlock': its initial_state does not fit"):
        grpo.train(grpo.GRPOConfig(**{**base, "tasks": str(bad), "resume": False}))
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == old and _steps(out) == [1]
    with pytest.raises(UnknownTaskError, match="found_card_unlok"):  # a misspelt id: said before the run too
        grpo.train(grpo.GRPOConfig(**{**base, "task_ids": ["found_card_unlok"], "resume": False}))
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == old and _steps(out) == [1]


def test_an_update_that_makes_weights_non_finite_is_neither_saved_nor_logged(tiny_and_data, tmp_path, capsys):
    """A finite, clipped gradient times a huge learning rate: the loss and gradient pass their check,
    the weights after the step do not (the checkpoint would load, then break whatever samples it)."""
    model, data = tiny_and_data
    out = tmp_path / "run"
    with pytest.raises(DivergedError, match=r"SFT step 1: the update made trained weights non-finite"):
        sft.train(_cfg(model, data, out, steps=2, lr=1e308, warmup_steps=0))
    assert latest_checkpoint(out) is None and not (out / "metrics.jsonl").exists()
    good = sft.train(_cfg(model, data, tmp_path / "good", steps=1))
    argv = ["--model", str(model), "--data", str(data), "--out", str(tmp_path / "cli"), "--steps", "1"]
    assert sft.main([*argv, "--lr", "1e308", "--warmup-steps", "0", "--lora-rank", "4", "--no-progress"]) == 2
    assert "non-finite" in capsys.readouterr().err and latest_checkpoint(tmp_path / "cli") is None
    cfg = grpo.GRPOConfig(
        model=str(good), out=str(tmp_path / "grpo"), task_ids=["found_card_unlock"], steps=1, tasks_per_step=1,
        group_size=2, max_steps=4, max_new_tokens=4, retrieval="none", progress=False, device="cpu", lr=1e308,
        skip_zero_signal=False, save_every=1,
    )  # fmt: skip
    with pytest.raises(DivergedError, match="GRPO step 1: the update made trained weights non-finite"):
        grpo.train(cfg)
    assert latest_checkpoint(tmp_path / "grpo") is None


def test_a_context_too_short_for_the_prompt_is_said(tiny_and_data, tmp_path, caplog):
    model, _ = tiny_and_data
    cfg = grpo.GRPOConfig(
        model=str(model), out=str(tmp_path / "grpo"), task_ids=["found_card_unlock"], steps=1, tasks_per_step=1,
        group_size=2, max_steps=3, max_new_tokens=4, max_context=8, retrieval="none", progress=False, device="cpu",
    )  # fmt: skip
    with caplog.at_level("WARNING"):
        grpo.train(cfg)
    assert "every episode reached --max-context 8 before the agent's first turn" in caplog.text


def test_episodes_the_context_cut_short_are_said(tiny_and_data, tmp_path, caplog, monkeypatch):
    """Episodes that reached --max-context after a turn (the policy stops there and the episode is
    graded as it stood; tests/reference_trainers/test_rollout.py cuts them): the step says how many,
    as a composite task at the default 4096 would need. The scripted user ends these tiny episodes
    after one turn, so the policy's flag is set on the real rollouts here."""
    real = grpo.rollouts

    async def cut(policy, cfg, task_ids, seed):
        trajs, failed = await real(policy, cfg, task_ids, seed)
        for t in trajs:
            t.info["context_overflow"] = True
        return trajs, failed

    monkeypatch.setattr(grpo, "rollouts", cut)
    model, _ = tiny_and_data
    out = tmp_path / "grpo"
    cfg = grpo.GRPOConfig(
        model=str(model), out=str(out), task_ids=["found_card_unlock"], steps=1, tasks_per_step=1, group_size=2,
        max_steps=10, max_new_tokens=4, retrieval="none", progress=False, device="cpu",
    )  # fmt: skip
    with caplog.at_level("WARNING"):
        grpo.train(cfg)
    assert "step 1: 2 of 2 episodes reached --max-context 4096 before they ended" in caplog.text
    [row] = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert row["context_overflows"] == 2


def test_grpo_takes_the_starting_checkpoints_retrieval_and_warns_when_episodes_run_out_of_steps(
    sft_run, tmp_path, caplog
):
    """README: grpo --model runs/sft ...: the prompt and tools SFT trained with, unless --retrieval
    says otherwise; a step budget no episode finishes in is said (every group would be zero-signal)."""
    base = dict(
        model=str(sft_run[0]), task_ids=["found_card_unlock"], steps=1, tasks_per_step=1, group_size=2,
        max_new_tokens=4, progress=False, device="cpu",
    )  # fmt: skip
    with caplog.at_level("WARNING"):
        last = grpo.train(grpo.GRPOConfig(**base, out=str(tmp_path / "g1"), max_steps=1))
    assert load_checkpoint(last).info["agent"]["retrieval"] == "none"  # the SFT run's (sft_run: retrieval none)
    assert "every episode ran out of --max-steps 1" in caplog.text
    assert (
        "4 of 4 episodes ended before the agent's first turn" in caplog.text or "2 of 2 episodes ended" in caplog.text
    )
    last = grpo.train(grpo.GRPOConfig(**base, out=str(tmp_path / "g2"), max_steps=3, retrieval="grep"))
    assert load_checkpoint(last).info["agent"]["retrieval"] == "grep"


def test_keep_checkpoints_sets_how_many_stay(tiny_and_data, tmp_path):
    model, data = tiny_and_data
    out = tmp_path / "run"
    sft.train(_cfg(model, data, out, steps=4, keep_checkpoints=0))
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [f"step-00000{i}" for i in range(1, 5)]
    sft.train(_cfg(model, data, out, steps=6, keep_checkpoints=2))  # a resumed run may change it
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000005", "step-000006"]


def test_no_resume_starts_over_a_run_whose_latest_record_is_damaged(tiny_and_data, tmp_path):
    model, data = tiny_and_data
    out = tmp_path / "run"
    sft.train(_cfg(model, data, out, steps=2))
    info = out / "checkpoints" / "step-000002" / "tau_env_trainer.json"
    info.write_text('{"family": "smollm2", "agent": {"max_steps": 0}}')
    with pytest.raises(ResultsFolderError, match="is damaged"):
        sft.train(_cfg(model, data, out, steps=3))  # resuming it: refused
    assert sft.train(_cfg(model, data, out, steps=1, resume=False)).name == "step-000001"
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000001"]


def test_reading_no_sft_file_at_all_is_said():
    from tau_env.reference_trainers.cpu_common import read_sft_jsonl

    with pytest.raises(ResultsFolderError, match="No SFT data given"):
        read_sft_jsonl([])


def test_sft_says_how_long_the_examples_it_left_out_are(tiny_and_data, tmp_path, caplog):
    model, data = tiny_and_data
    cfg = sft.SFTConfig(
        model=str(model), data=[str(data)], out=str(tmp_path / "sft"), steps=1, batch_size=1, micro_batch=1,
        lora_rank=4, retrieval="none", progress=False, device="cpu", max_len=10**6,
    )  # fmt: skip
    with caplog.at_level("WARNING"):
        sft.train(cfg)
    assert "left out" not in caplog.text
    with pytest.raises(InvalidOptionError, match="No SFT example fits --max-len 50"):
        sft.train(sft.SFTConfig(**{**cfg.__dict__, "out": str(tmp_path / "sft2"), "max_len": 50}))
    assert "left out 1 of 1 examples longer than --max-len 50 tokens (lengths: median" in caplog.text
    assert "raise --max-len" in caplog.text


def test_sigterm_stops_a_run_as_ctrl_c_does_and_the_same_command_resumes(tiny_and_data, tmp_path):
    """What a scheduler sends before it kills: one line, exit status 143, the folder's lock released."""
    import os
    import signal
    import time

    model, data = tiny_and_data
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "tau_env.reference_trainers.sft", "--model", str(model), "--data", str(data)]
    argv += ["--out", str(out), "--batch-size", "1", "--lora-rank", "4", "--save-every", "1", "--warmup-steps", "0"]
    argv += ["--retrieval", "none", "--device", "cpu", "--no-progress", "--lr", "1e-4"]
    proc = subprocess.Popen([*argv, "--steps", "400"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while latest_checkpoint(out) is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("python -m tau_env.reference_trainers.sft: terminated (SIGTERM);")
    assert "Traceback" not in err and "Loading weights" not in err  # --no-progress: no loading bars either
    done = _steps(out)
    assert done and done == list(range(1, len(done) + 1))
    # the same command goes on (here to the step after the last saved one: --steps may grow or shrink)
    n = int(latest_checkpoint(out).name.split("-")[1]) + 1
    resumed = subprocess.run([*argv, "--steps", str(n)], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert latest_checkpoint(out).name == f"step-{n:06d}" and _steps(out) == list(range(1, n + 1))


def test_pruning_and_clearing_touch_only_the_runs_own_checkpoints(tiny_and_data, tmp_path):
    # a user's folders named step-* (without the trainer's record), and a backup copy of a checkpoint under
    # another name, were pruned by name: the run's own last checkpoint with them, `latest` left dangling
    from tau_env.reference_trainers.checkpoint import INFO_FILE

    model, data = tiny_and_data
    out = tmp_path / "proj"
    for n in (1000, 2000, 3000, 4000):
        (out / "checkpoints" / f"step-{n}").mkdir(parents=True)
    (out / "checkpoints" / "step-1000" / "weights.bin").write_text("precious")
    last = sft.train(_cfg(model, data, out, steps=1))
    assert last.is_dir() and latest_checkpoint(out) == last
    assert (out / "checkpoints" / "step-1000" / "weights.bin").read_text() == "precious"
    backup = out / "checkpoints" / "step-000001-best"
    shutil.copytree(last, backup)
    sft.train(_cfg(model, data, out, steps=5, keep_checkpoints=2))
    names = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert names == [
        "step-000001-best",
        "step-000004",
        "step-000005",
        "step-1000",
        "step-2000",
        "step-3000",
        "step-4000",
    ]
    assert (backup / INFO_FILE).is_file()
    # --no-resume: the run's steps go, the user's folders and the backup stay
    sft.train(_cfg(model, data, out, steps=1, resume=False))
    names = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert names == ["step-000001", "step-000001-best", "step-1000", "step-2000", "step-3000", "step-4000"]


def test_checkpoints_are_ordered_by_step_number_past_six_digits(tmp_path):
    from tau_env.reference_trainers.checkpoint import INFO_FILE, find_checkpoint, prune_checkpoints, run_checkpoints

    root = tmp_path / "run" / "checkpoints"
    for step in (999_998, 999_999, 1_000_000, 1_000_001):
        (root / f"step-{step:06d}").mkdir(parents=True)
        (root / f"step-{step:06d}" / INFO_FILE).write_text("{}")
    assert [p.name for p in run_checkpoints(root)] == [
        "step-999998", "step-999999", "step-1000000", "step-1000001",
    ]  # fmt: skip
    assert find_checkpoint(tmp_path / "run").name == "step-1000001"  # no `latest`: the newest by number
    prune_checkpoints(tmp_path / "run", 2)
    assert sorted(p.name for p in root.iterdir()) == ["step-1000000", "step-1000001"]


@pytest.mark.parametrize("resume", [True, False])
def test_a_folder_whose_run_named_files_are_not_a_run_is_refused_and_nothing_is_deleted(
    tiny_and_data, tmp_path, resume
):
    # --no-resume deleted a user's adapters/, metrics.jsonl, rollouts.jsonl and checkpoints/ notes in a
    # folder that held no run at all (the refusal of the other log suggested --no-resume)
    model, data = tiny_and_data
    cases = {
        "metrics.jsonl": '{"epoch": 1}\n',
        "latest": "my notes\n",
        "metrics.svg": "<svg xmlns='http://www.w3.org/2000/svg'><text>mine</text></svg>",
        "rollouts.jsonl": "",  # a grpo run's file in an sft run's folder
        "adapters/my_lora/adapter_model.safetensors": "w",
    }
    for name, text in cases.items():
        out = tmp_path / f"{resume}-{name.split('/')[0]}"
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
        (out / "checkpoints").mkdir()
        (out / "checkpoints" / "important.txt").write_text("notes")
        before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
        with pytest.raises(ResultsFolderError, match=rf"holds {name.split('/')[0]} \(.*\): not this sft run's"):
            sft.train(_cfg(model, data, out, steps=1, resume=resume))
        assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
        assert (out / name).read_text() == text


def _killed_before_its_first_save(model, data, out: Path) -> Path:
    """An SFT run in ``out`` as a kill before its first save leaves it: its log and plot, no checkpoint."""
    sft.train(_cfg(model, data, out, steps=2))
    shutil.rmtree(out / "checkpoints")
    (out / "latest").unlink()
    return out


def test_a_run_killed_before_its_first_save_is_still_its_own(tiny_and_data, tmp_path):
    # its log and plot, with no checkpoint yet, are a run's: resumed or started over, not refused
    model, data = tiny_and_data
    out = _killed_before_its_first_save(model, data, tmp_path / "run")
    assert (out / "metrics.jsonl").is_file() and (out / "metrics.svg").is_file()
    assert sft.train(_cfg(model, data, out, steps=1)).name == "step-000001"
    (out / "metrics.jsonl").unlink()  # the plot alone is known by its mark
    shutil.rmtree(out / "checkpoints")
    (out / "latest").unlink()
    assert sft.train(_cfg(model, data, out, steps=1, resume=False)).name == "step-000001"


@pytest.mark.parametrize("where", ["at", "inside"])
def test_an_out_at_or_inside_a_checkpoint_is_refused(tiny_and_data, sft_run, tmp_path, where):
    # it resumed from that checkpoint (another run's) and wrote its files into it
    model, data = tiny_and_data
    run = tmp_path / "other"
    shutil.copytree(sft_run[0], run)
    ckpt = run / "checkpoints" / "step-000001"
    before = {p.name: p.read_bytes() for p in ckpt.iterdir() if p.is_file()}
    out = ckpt if where == "at" else ckpt / "mine"
    with pytest.raises(
        InvalidOptionError, match=rf"is {'inside ' if where == 'inside' else ''}the checkpoint .*step-000001"
    ):
        sft.train(_cfg(model, data, out, steps=1))
    assert {p.name: p.read_bytes() for p in ckpt.iterdir() if p.is_file()} == before and not (ckpt / "mine").exists()


def test_an_out_that_is_not_a_utf8_path_is_refused_before_training(tiny_and_data, tmp_path):
    import os

    model, data = tiny_and_data
    out = Path(os.fsdecode(os.fsencode(tmp_path) + b"/o\xfe"))
    with pytest.raises(InvalidOptionError, match="is not a UTF-8 path"):
        sft.train(_cfg(model, data, out, steps=1))
    assert not os.path.exists(os.fsencode(out))


def test_a_resume_reads_no_starting_model_and_keeps_the_settings_it_took_from_it(sft_run, tiny_and_data, tmp_path):
    # GRPO took its retrieval configuration from --model; once that checkpoint moved, the resume was
    # refused ('retrieval: "none" there, "" now') and the advice was --no-resume, which deletes the run
    start = tmp_path / "sft_copy"
    shutil.copytree(sft_run[0], start)
    out = tmp_path / "grpo"
    base = dict(
        model=str(start), out=str(out), task_ids=["found_card_unlock"], steps=1, tasks_per_step=1, group_size=2,
        max_steps=3, max_new_tokens=4, progress=False, device="cpu", save_every=1,
    )  # fmt: skip
    grpo.train(grpo.GRPOConfig(**base))
    assert load_checkpoint(out).info["config"]["retrieval"] == "none"  # taken from the starting checkpoint
    shutil.rmtree(start)
    last = grpo.train(grpo.GRPOConfig(**{**base, "steps": 2}))
    info = load_checkpoint(last).info
    assert last.name == "step-000002" and info["config"]["retrieval"] == "none"
    assert info["config"]["model"] == str(start) and _steps(out) == [1, 2]
    # a setting given otherwise is still refused
    with pytest.raises(ResultsFolderError, match=r'retrieval: "none" there, "grep" now'):
        grpo.train(grpo.GRPOConfig(**{**base, "steps": 3, "retrieval": "grep"}))
    # SFT resumed with no --model at all: the run's own model is recorded again
    model, data = tiny_and_data
    run = tmp_path / "sft"
    sft.train(_cfg(model, data, run, steps=1))
    last = sft.train(_cfg("", data, run, steps=2))
    assert last.name == "step-000002" and load_checkpoint(last).info["config"]["model"] == str(model)


def test_a_starting_model_that_is_a_run_with_no_checkpoint_yet_is_said_as_such(tiny_and_data, tmp_path):
    model, data = tiny_and_data
    live = tmp_path / "live"
    held = open_run_dir(live, "sft")  # a run started, not saved yet
    try:
        with pytest.raises(ResultsFolderError, match="is a trainer run with no complete checkpoint yet"):
            sft.train(_cfg(live, data, tmp_path / "next", steps=1))
    finally:
        held.close()


def test_fewer_steps_than_done_and_a_task_named_twice_are_said(tiny_and_data, tmp_path, caplog):
    model, data = tiny_and_data
    out = tmp_path / "run"
    last = sft.train(_cfg(model, data, out, steps=2))
    with caplog.at_level("WARNING"):
        assert sft.train(_cfg(model, data, out, steps=1)) == last
    assert any("is at step 2 already, 1 step(s) asked: nothing to train" in r.getMessage() for r in caplog.records)
    caplog.clear()
    cfg = grpo.GRPOConfig(
        model=str(model), out=str(tmp_path / "g"), task_ids=["found_card_unlock"] * 2 + ["travel_notice_simple"]
    )
    with caplog.at_level("WARNING"):
        assert grpo.task_pool(cfg) == ["found_card_unlock", "travel_notice_simple"]
    assert any("names 1 task(s) more than once" in r.getMessage() for r in caplog.records)


def test_a_folder_in_the_way_of_a_checkpoint_is_refused_not_deleted(tiny_and_data, tmp_path):
    # save_checkpoint deleted whatever sat at checkpoints/step-N, a user's folder or eval results too
    model, data = tiny_and_data
    out = tmp_path / "run"
    (out / "checkpoints" / "step-000001").mkdir(parents=True)
    (out / "checkpoints" / "step-000001" / "notes.txt").write_text("mine")
    with pytest.raises(ResultsFolderError, match=r"checkpoints/step-000001 \(not checkpoints\)"):
        sft.train(_cfg(model, data, out, steps=1))
    assert (out / "checkpoints" / "step-000001" / "notes.txt").read_text() == "mine"
    # one put there while the run trains: the save stops with it named, nothing deleted, and the same
    # command resumes once it is moved away
    out2 = tmp_path / "run2"
    sft.train(_cfg(model, data, out2, steps=1))
    (out2 / "checkpoints" / "step-000002").mkdir()
    (out2 / "checkpoints" / "step-000002" / "notes.txt").write_text("mine")
    from tau_env.reference_trainers.checkpoint import save_checkpoint

    ckpt = load_checkpoint(out2)
    with pytest.raises(ResultsFolderError, match="step-000002 is in the way of this run's checkpoint"):
        save_checkpoint(
            out2, 2, model=ckpt.model, tokenizer=ckpt.tokenizer, chat_template=ckpt.chat_template, trainer="sft",
            config=ckpt.info["config"], family=ckpt.info["family"], agent=ckpt.info["agent"],
        )  # fmt: skip
    assert (out2 / "checkpoints" / "step-000002" / "notes.txt").read_text() == "mine"
    assert latest_checkpoint(out2).name == "step-000001"
    assert not list((out2 / "checkpoints").glob(".tmp-*"))


def test_a_relative_model_is_recorded_as_the_folder_it_named(tiny_and_data, tmp_path, monkeypatch):
    # recorded as typed, a resume from another folder with the model's absolute path was refused (and
    # pointed at --no-resume), and the same relative name from another folder was taken for the same model
    model, data = tiny_and_data
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(model, work / "tiny")
    monkeypatch.chdir(work)
    out = tmp_path / "run"
    sft.train(_cfg("tiny", data, out, steps=1))
    assert load_checkpoint(out).info["config"]["model"] == str(work / "tiny")
    monkeypatch.chdir(tmp_path)
    assert sft.train(_cfg(work / "tiny", data, out, steps=2)).name == "step-000002"
    other = tmp_path / "tiny"  # another folder of that name, here
    shutil.copytree(model, other)
    with pytest.raises(ResultsFolderError, match="a resume reads no --model: leave it out to continue that run"):
        sft.train(_cfg("tiny", data, out, steps=3))


def test_a_new_run_whose_checkpoints_link_leads_to_another_runs_is_refused(tiny_and_data, tmp_path):
    # one after the other (no lock held): b took a's checkpoints for its own, and b's --no-resume deleted them
    model, data = tiny_and_data
    disk = tmp_path / "disk2" / "ck"
    disk.mkdir(parents=True)
    a, b = tmp_path / "s" / "a", tmp_path / "s" / "b"
    a.mkdir(parents=True), b.mkdir()
    (a / "checkpoints").symlink_to("../../disk2/ck")  # relative
    (b / "checkpoints").symlink_to(disk)  # absolute: the same folder
    sft.train(_cfg(model, data, a, steps=2))
    before = sorted(p.name for p in disk.iterdir())
    for resume in (True, False):
        with pytest.raises(ResultsFolderError, match=r"holds the checkpoints of the run in .*/s/a"):
            sft.train(_cfg(model, data, b, steps=1, lr=1e-3, resume=resume))
        assert sorted(p.name for p in disk.iterdir()) == before
    assert sft.train(_cfg(model, data, a, steps=3)).name == "step-000003"  # a goes on with its own
    # a moved away (its folder gone): its checkpoints are left to b
    shutil.rmtree(a)
    assert sft.train(_cfg(model, data, b, steps=1, resume=False)).name == "step-000001"


def test_a_run_killed_before_its_first_save_is_not_taken_over_by_the_other_trainer(tiny_and_data, tmp_path):
    # GRPO emptied the log of an SFT run killed before its first checkpoint, and the SFT command was
    # then refused in its own folder
    model, data = tiny_and_data
    out = _killed_before_its_first_save(model, data, tmp_path / "run")
    log = (out / "metrics.jsonl").read_text()
    assert all(json.loads(x)["trainer"] == "sft" for x in log.splitlines())
    cfg = grpo.GRPOConfig(
        model=str(model), out=str(out), task_ids=["found_card_unlock"], steps=1, tasks_per_step=1, group_size=2,
        max_steps=3, max_new_tokens=4, retrieval="none", progress=False, device="cpu",
    )  # fmt: skip
    with pytest.raises(ResultsFolderError, match=r"holds metrics.jsonl \(a sft run's log\)"):
        grpo.train(cfg)
    assert (out / "metrics.jsonl").read_text() == log
    assert sft.train(_cfg(model, data, out, steps=2)).name == "step-000002"  # its own command goes on
