"""``tau-env eval --agent-checkpoint`` as a user drives it: a results folder is tied to the
checkpoint's content (a copy, or the same folder named another way, resumes it; the folder trained
again in place does not), flags that would configure another agent are refused, what is cheap to
check is checked before the model loads, and the checkpoint's trained settings are defaults on the
domain it was trained on only.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tau_env.reference_trainers import checkpoint as checkpoint_module  # noqa: E402

from tau_env.cli import main  # noqa: E402

ARGS = ["--task", "found_card_unlock", "--max-steps", "3", "--quiet"]


def _eval(capsys, *argv: str) -> tuple[int, str]:
    code = main(["eval", *argv])
    return code, capsys.readouterr().err


def test_a_results_folder_follows_the_checkpoints_content_not_its_path(sft_run, tmp_path, capsys, monkeypatch):
    run, _ = sft_run
    out = tmp_path / "eval"
    assert _eval(capsys, "--agent-checkpoint", str(run), *ARGS, "--out", str(out))[0] == 0
    first = (out / "trajectories.jsonl").read_text()
    # the same checkpoint named another way (relative, a copy elsewhere): the folder resumes, nothing replayed
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    monkeypatch.chdir(tmp_path)
    for where in ("copy", str(copy / "checkpoints" / "step-000001"), os.path.relpath(run, tmp_path)):
        code, err = _eval(capsys, "--agent-checkpoint", where, *ARGS, "--trials", "1", "--out", str(out))
        assert code == 0, err
        assert json.loads((out / "config.json").read_text())["resumed_episodes"] == 1
        assert (out / "trajectories.jsonl").read_text() == first
    # the copy trained again in place (other weights at the same path): refused, the digest named
    weights = copy / "checkpoints" / "step-000001" / "model.safetensors"
    from safetensors.torch import load_file, save_file

    tensors = load_file(weights)
    name = next(iter(tensors))
    tensors[name] = tensors[name] + 1.0
    save_file(tensors, weights, metadata={"format": "pt"})
    code, err = _eval(capsys, "--agent-checkpoint", "copy", *ARGS, "--out", str(out))
    assert code == 2 and "agent_checkpoint.digest: " in err and "Traceback" not in err
    assert (out / "trajectories.jsonl").read_text() == first


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--agent", "teacher"], "--agent configures another agent"),
        (["--agent-model", "m"], "--agent-model configures another agent"),
        (["--agent-base-url", "http://127.0.0.1:1/v1"], "--agent-base-url configures"),
        (["--agent-api-key-env", "K"], "--agent-api-key-env configures"),
        (["--strip-reasoning"], "--strip-reasoning configures"),
        (["--agent", "oracle", "--strip-reasoning"], "--agent and --strip-reasoning configure another agent"),
        (["--backend", "ray"], "--backend ray cannot ship it"),
        (["--agent-device", "cuda:7"], "--agent-device cuda:7: "),
        (["--agent-device", "gpu"], "--agent-device must be"),
    ],
)
def test_flags_for_another_agent_are_refused_before_anything_loads(
    sft_run, tmp_path, capsys, monkeypatch, flags, named
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(checkpoint_module, "checkpoint_policy", lambda *a, **k: pytest.fail("the model was loaded"))
    out = tmp_path / "eval"
    code, err = _eval(capsys, "--agent-checkpoint", str(sft_run[0]), *flags, *ARGS, "--out", str(out))
    assert code == 2 and named in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_the_built_in_agent_and_a_model_are_still_one_or_the_other(tmp_path, capsys):
    code, err = _eval(capsys, "--agent", "oracle", "--agent-model", "m", "--out", str(tmp_path / "o"))
    assert code == 2 and "--agent oracle and --agent-model both name the agent" in err


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--task", "no_such_task"], "no_such_task"),
        (["--retrieval", "no_such_configuration"], "no_such_configuration"),
        (["--out", "FILE"], "is a file"),
        (["--tasks", "EMPTY"], "no tasks to play: it holds none"),
        (["--domain", "no-such-env-v0"], "no-such-env-v0"),
    ],
)
def test_cheap_mistakes_are_said_before_the_model_loads(sft_run, tmp_path, capsys, monkeypatch, flags, named):
    monkeypatch.setattr(checkpoint_module, "checkpoint_policy", lambda *a, **k: pytest.fail("the model was loaded"))
    (tmp_path / "FILE").write_text("x")
    (tmp_path / "EMPTY.jsonl").write_text("")
    flags = [
        str(tmp_path / "FILE") if f == "FILE" else str(tmp_path / "EMPTY.jsonl") if f == "EMPTY" else f for f in flags
    ]
    out = ["--out", str(tmp_path / "eval")] if "--out" not in flags else []
    code, err = _eval(capsys, "--agent-checkpoint", str(sft_run[0]), *flags, *out, "--quiet")
    assert code == 2 and named in err and "Traceback" not in err, err
    assert not (tmp_path / "eval").exists()


def test_the_trained_settings_are_defaults_on_the_trained_domain_only(sft_run, tmp_path, capsys):
    run, _ = sft_run
    out = tmp_path / "same"
    assert _eval(capsys, "--agent-checkpoint", str(run), *ARGS, "--out", str(out))[0] == 0
    assert json.loads((out / "config.json").read_text())["retrieval"] == "none"  # the checkpoint's (trained with it)
    # another domain: its own default configuration, not the checkpoint's (which it may not have)
    from tau_env.cli import _trained_defaults

    class Args:
        retrieval = None
        max_steps = None

    info = {"agent": {"domain": "harbor-bank-v0", "retrieval": "none", "max_steps": 9}}
    args = Args()
    _trained_defaults(args, {"info": info}, "tau3-banking")
    assert args.retrieval is None and args.max_steps is None
    _trained_defaults(args, {"info": info}, "harbor-bank-v0")
    assert args.retrieval == "none" and args.max_steps == 9
    args.retrieval, args.max_steps = "grep", 4  # flags given win
    _trained_defaults(args, {"info": info}, "harbor-bank-v0")
    assert (args.retrieval, args.max_steps) == ("grep", 4)


def test_quiet_loads_without_progress_bars(sft_run, tmp_path, capsys):
    code, err = _eval(capsys, "--agent-checkpoint", str(sft_run[0]), *ARGS, "--out", str(tmp_path / "q"))
    assert code == 0 and "Loading weights" not in err
    from transformers.utils import logging as hf_logging

    assert hf_logging.is_progress_bar_enabled()  # put back after


def _save(run, step, ckpt, keep):
    info = ckpt.info
    return checkpoint_module.save_checkpoint(
        run, step, model=ckpt.model, tokenizer=ckpt.tokenizer, chat_template=ckpt.chat_template,
        trainer=info["trainer"], config=info["config"], family=info["family"], agent=info["agent"], keep=keep,
    )  # fmt: skip


def _steps(run):
    return sorted(p.name for p in (run / "checkpoints").iterdir())


def test_a_checkpoint_being_read_is_kept_by_the_live_runs_pruning(sft_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(sft_run[0], run)
    ckpt = checkpoint_module.load_checkpoint(run)
    lease = checkpoint_module.hold_checkpoint(run)
    assert lease.path == run / "checkpoints" / "step-000001"
    digest = checkpoint_module.checkpoint_digest(lease.path)
    _save(run, 2, ckpt, keep=1)  # --keep-checkpoints 1: step 1 would go, but it is being read
    assert (lease.path / checkpoint_module.INFO_FILE).is_file()
    assert checkpoint_module.checkpoint_digest(lease.path) == digest  # the lock lies beside it, not in it
    assert checkpoint_module.find_checkpoint(run).name == "step-000002"
    lease.release()
    lease.release()  # twice is harmless
    _save(run, 3, ckpt, keep=1)  # read no more: pruned with step 2, their locks with them
    assert _steps(run) == ["step-000003"]
    with checkpoint_module.hold_checkpoint(run / "checkpoints" / "step-000003") as held:
        assert held.path.name == "step-000003"
        with checkpoint_module.hold_checkpoint(run) as second:  # two readers at once
            assert second.path == held.path
        assert _steps(run) == [".read-step-000003.lock", "step-000003"]  # still held by the first
        _save(run, 4, ckpt, keep=1)
        assert _steps(run) == [".read-step-000003.lock", "step-000003", "step-000004"]
    assert _steps(run) == ["step-000003", "step-000004"]  # the last reader removes the lock
    _save(run, 5, ckpt, keep=1)
    assert _steps(run) == ["step-000005"]


def test_a_checkpoint_pruned_before_it_is_held_gives_the_runs_newer_one(sft_run, tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(sft_run[0], run)
    ckpt = checkpoint_module.load_checkpoint(run)
    real = checkpoint_module.resolve_checkpoint
    calls = []

    def racing(path):
        found = real(path)
        if not calls:  # the run saves and prunes between finding the latest and holding it
            _save(run, 2, ckpt, keep=1)
        calls.append(found.name)
        return found

    monkeypatch.setattr(checkpoint_module, "resolve_checkpoint", racing)
    with checkpoint_module.hold_checkpoint(run) as lease:
        assert lease.path.name == "step-000002" and calls == ["step-000001", "step-000002"]
    assert _steps(run) == ["step-000002"]  # no lock left behind, of the pruned one or of the held one


def test_eval_of_a_live_run_loads_the_checkpoint_it_found_while_the_run_saves(sft_run, tmp_path, capsys, monkeypatch):
    """The race of --keep-checkpoints 1: the run saved (and pruned) while eval read the weights; eval
    used to fail with the checkpoint's files gone under it (exit 2)."""
    run = tmp_path / "run"
    shutil.copytree(sft_run[0], run)
    ckpt = checkpoint_module.load_checkpoint(run)
    real = checkpoint_module.load_model
    saved = []

    def load_while_the_run_saves(path, **kw):
        if not saved:
            saved.append(_save(run, 2, ckpt, keep=1))
        return real(path, **kw)

    monkeypatch.setattr(checkpoint_module, "load_model", load_while_the_run_saves)
    out = tmp_path / "eval"
    code, err = _eval(capsys, "--agent-checkpoint", str(run), *ARGS, "--trials", "1", "--out", str(out))
    assert code == 0, err
    assert json.loads((out / "config.json").read_text())["agent_checkpoint"]["step"] == 1
    assert saved and (run / "checkpoints" / "step-000001").is_dir()  # kept while read
    _save(run, 3, ckpt, keep=1)  # released once loaded: the next save prunes it
    assert _steps(run) == ["step-000003"]


def test_the_lock_is_the_same_whatever_path_leads_to_the_checkpoint(sft_run, tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(sft_run[0], run)
    ckpt = checkpoint_module.load_checkpoint(run)
    (tmp_path / "link").symlink_to(run / "checkpoints" / "step-000001")
    monkeypatch.chdir(run / "checkpoints")
    for given in ("step-000001", ".", "../checkpoints/step-000001", str(tmp_path / "link")):
        if given == ".":
            monkeypatch.chdir(run / "checkpoints" / "step-000001")
        with checkpoint_module.hold_checkpoint(given):
            _save(run, 2, ckpt, keep=1)
            assert (run / "checkpoints" / "step-000001" / checkpoint_module.INFO_FILE).is_file(), given
        monkeypatch.chdir(run / "checkpoints")
    _save(run, 3, ckpt, keep=1)
    assert _steps(run) == ["step-000003"]


def test_a_step_pruned_as_it_is_opened_is_said_as_such(sft_run, tmp_path, monkeypatch):
    import time

    from tau_env.error import ResultsFolderError
    from tau_env.harness.results import fcntl

    run = tmp_path / "run"
    shutil.copytree(sft_run[0], run)
    step = run / "checkpoints" / "step-000001"
    fd = checkpoint_module._open_lock(checkpoint_module._reader_lock(step))
    fcntl.flock(fd, fcntl.LOCK_EX)  # a pruner at work on it
    try:
        with pytest.raises(ResultsFolderError, match="was deleted by its run's pruning") as e:
            checkpoint_module.hold_checkpoint(step, tries=3)  # it holds the lock through every try
        assert "pass the run folder" in str(e.value) and "\n" not in str(e.value)
        monkeypatch.setattr(time, "sleep", lambda s: shutil.rmtree(step, ignore_errors=True))  # it finishes
        with pytest.raises(ResultsFolderError, match="was deleted by its run's pruning"):
            checkpoint_module.hold_checkpoint(step, tries=3)
    finally:
        os.close(fd)


def test_where_no_lock_can_be_taken_the_checkpoint_is_read_unheld_and_pruned_as_before(sft_run, tmp_path, monkeypatch):
    import errno

    from tau_env.harness.results import fcntl

    run = tmp_path / "run"
    shutil.copytree(sft_run[0], run)
    ckpt = checkpoint_module.load_checkpoint(run)
    lock = run / "checkpoints" / ".read-step-000001.lock"
    lock.unlink(missing_ok=True)  # made by the reads above
    lock.mkdir()  # something else has the lock's name
    with checkpoint_module.hold_checkpoint(run) as lease:
        assert lease.path.name == "step-000001" and lease._fd is None
    _save(run, 2, ckpt, keep=1)  # the save does not fail on it
    assert [p for p in _steps(run) if p.startswith("step-")] == ["step-000002"]

    def no_locks(fd, op):  # a file system without flock (ENOLCK)
        raise OSError(errno.ENOLCK, "No locks available")

    before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    monkeypatch.setattr(fcntl, "flock", no_locks)
    with checkpoint_module.hold_checkpoint(run) as lease:
        assert lease.path.name == "step-000002" and lease._fd is None
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) == before  # no descriptor left open
    _save(run, 3, ckpt, keep=1)
    assert [p for p in _steps(run) if p.startswith("step-")] == ["step-000003"]

    monkeypatch.undo()
    monkeypatch.setattr(checkpoint_module, "_open_lock", lambda lock: (_ for _ in ()).throw(PermissionError(13, "no")))
    with checkpoint_module.hold_checkpoint(run) as lease:  # another user's lock this user cannot open: unheld
        assert lease._fd is None
    _save(run, 4, ckpt, keep=1)  # and the pruner keeps what such a reader may hold
    assert [p for p in _steps(run) if p.startswith("step-")] == ["step-000003", "step-000004"]


def test_a_save_of_the_same_step_waits_for_its_readers(sft_run, tmp_path):
    import threading

    run = tmp_path / "run"
    shutil.copytree(sft_run[0], run)
    ckpt = checkpoint_module.load_checkpoint(run)
    info = run / "checkpoints" / "step-000001" / checkpoint_module.INFO_FILE
    lease = checkpoint_module.hold_checkpoint(run)
    before = info.stat().st_ino
    saver = threading.Thread(target=_save, args=(run, 1, ckpt, 1))
    saver.start()
    saver.join(0.5)
    assert saver.is_alive() and info.stat().st_ino == before  # still the reader's, whole
    lease.release()
    saver.join(60)
    assert not saver.is_alive() and info.stat().st_ino != before  # replaced once it was let go
    assert _steps(run) == ["step-000001"]


def test_a_checkpoints_folder_that_is_a_link_to_another_disk_is_guarded_too(sft_run, tmp_path):
    run, store = tmp_path / "run", tmp_path / "elsewhere"
    shutil.copytree(sft_run[0], run)
    (run / "checkpoints").rename(store)
    (run / "checkpoints").symlink_to(store)
    ckpt = checkpoint_module.load_checkpoint(run)
    for given in (run, store / "step-000001"):
        with checkpoint_module.hold_checkpoint(given) as lease:
            _save(run, 2, ckpt, keep=1)
            assert (lease.path / checkpoint_module.INFO_FILE).is_file()
        _save(run, 3, ckpt, keep=1)
        assert sorted(p.name for p in store.iterdir()) == ["step-000003"]
        shutil.copytree(sft_run[0] / "checkpoints" / "step-000001", store / "step-000001")
        (run / "latest").write_text("step-000001\n")
        shutil.rmtree(store / "step-000003")


def test_what_a_reader_held_at_the_last_save_or_at_no_resume_goes_once_it_is_let_go(sft_run, tmp_path, caplog):
    import threading

    run = tmp_path / "run"
    shutil.copytree(sft_run[0], run)
    ckpt = checkpoint_module.load_checkpoint(run)
    lease = checkpoint_module.hold_checkpoint(run)
    _save(run, 2, ckpt, keep=1)  # the run's last save: step 1 is held, kept
    assert _steps(run) == [".read-step-000001.lock", "step-000001", "step-000002"]
    end = threading.Thread(target=checkpoint_module.prune_checkpoints, args=(run, 1), kwargs={"wait": True})
    end.start()  # the trainer's end: waits for the reader, says so
    end.join(0.5)
    assert end.is_alive() and (run / "checkpoints" / "step-000001").is_dir()
    assert any("step-000001 is being read" in r.getMessage() for r in caplog.records)
    lease.release()
    end.join(60)
    assert not end.is_alive() and _steps(run) == ["step-000002"]

    lease = checkpoint_module.hold_checkpoint(run)  # --no-resume while an eval loads step 2
    folder = checkpoint_module.open_run_dir(run, "sft", resume=False)
    clear = threading.Thread(target=folder.clear)
    clear.start()
    clear.join(0.5)
    assert clear.is_alive() and (run / "checkpoints" / "step-000002" / checkpoint_module.INFO_FILE).is_file()
    lease.release()
    clear.join(60)
    folder.close()
    assert not clear.is_alive() and not (run / "checkpoints").exists() and not (run / "latest").exists()


def test_a_runs_end_waits_for_a_stuck_reader_a_bounded_time_and_names_it(sft_run, tmp_path, caplog):
    # a reader in another process that never lets go (stopped, hung): the run's end names its pid, waits
    # at most the time given, then leaves the checkpoint where it is instead of hanging
    import subprocess
    import sys
    import time

    run = tmp_path / "run"
    shutil.copytree(sft_run[0], run)
    ckpt = checkpoint_module.load_checkpoint(run)
    code = (
        "import sys, time; from tau_env.reference_trainers.checkpoint import hold_checkpoint; "
        "lease = hold_checkpoint(sys.argv[1]); print('held', flush=True); time.sleep(120)"
    )
    reader = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "held"
        _save(run, 2, ckpt, keep=1)
        started = time.monotonic()
        checkpoint_module.prune_checkpoints(run, 1, wait=0.5)
        assert time.monotonic() - started < 30
        assert _steps(run) == [".read-step-000001.lock", "step-000001", "step-000002"]
        said = " ".join(r.getMessage() for r in caplog.records)
        if os.path.exists("/proc/locks"):
            assert f"held by pid {reader.pid}" in said
        assert "waiting for up to 0.5 s" in said and "still being read" in said and "kept" in said
    finally:
        reader.kill()
        reader.wait()
    caplog.clear()
    checkpoint_module.prune_checkpoints(run, 1, wait=0.5)  # the reader gone: no wait, no word
    assert _steps(run) == ["step-000002"] and not caplog.records


def test_a_step_its_run_pruned_already_is_said_with_the_ones_it_keeps(sft_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(sft_run[0], run)
    ckpt = checkpoint_module.load_checkpoint(run)
    _save(run, 2, ckpt, keep=1)
    capsys.readouterr()
    code, err = _eval(capsys, "--agent-checkpoint", str(run / "checkpoints" / "step-000001"), *ARGS)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "step-000001 is no longer there: its run keeps step-000002" in err and "--keep-checkpoints" in err


def test_a_run_folder_that_cannot_be_written_is_one_line(tmp_path, monkeypatch):
    import errno

    from tau_env.error import InvalidOptionError
    from tau_env.harness import results

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(results, "FolderLock", read_only)
    with pytest.raises(InvalidOptionError, match="--out .* cannot be written \\(OSError: .*Read-only file system\\)"):
        checkpoint_module.open_run_dir(tmp_path / "run", "sft")


def test_no_resume_empties_a_linked_checkpoints_folder_and_keeps_the_link(sft_run, tmp_path):
    run, store = tmp_path / "run", tmp_path / "elsewhere"
    shutil.copytree(sft_run[0], run)
    (run / "checkpoints").rename(store)
    (run / "checkpoints").symlink_to(store)
    (store / "notes.txt").write_text("x")
    folder = checkpoint_module.open_run_dir(run, "sft", resume=False)
    folder.clear()
    folder.close()
    # the run's checkpoints go; what is not the run's (notes.txt) stays where the user put it
    assert (run / "checkpoints").is_symlink() and store.is_dir() and list(store.iterdir()) == [store / "notes.txt"]


def test_a_run_listed_as_it_is_deleted_has_no_checkpoint_not_an_os_error(sft_run, tmp_path, monkeypatch):
    from pathlib import Path

    from tau_env.error import ResultsFolderError

    run = tmp_path / "run"
    shutil.copytree(sft_run[0], run)
    (run / "latest").unlink()

    def gone(self, *args):
        raise FileNotFoundError(2, "No such file or directory", str(self))

    monkeypatch.setattr(Path, "iterdir", gone)
    assert checkpoint_module.find_checkpoint(run) is None
    with pytest.raises(ResultsFolderError, match="no complete checkpoint yet"):
        checkpoint_module.hold_checkpoint(run)


def test_a_finished_run_whose_metrics_log_is_gone_resumes_without_a_traceback(sft_run, tmp_path):
    from tau_env.reference_trainers import sft
    from tau_env.reference_trainers.cpu_common import MetricsLog, svg_plot

    assert MetricsLog.read(tmp_path / "none.jsonl") == []
    assert svg_plot([], ["loss"], tmp_path / "empty.svg", "SFT").is_file()
    run = tmp_path / "run"
    shutil.copytree(sft_run[0], run)
    (run / "metrics.jsonl").unlink()
    model = json.loads((run / "checkpoints" / "step-000001" / checkpoint_module.INFO_FILE).read_text())["config"]
    import dataclasses

    names = {f.name for f in dataclasses.fields(sft.SFTConfig)}
    cfg = sft.SFTConfig(**{**{k: v for k, v in model.items() if k in names}, "out": str(run), "progress": False})
    assert sft.train(cfg).name == "step-000001"


@pytest.mark.parametrize("given", ["run", "link"])
@pytest.mark.parametrize("where", ["step", "inside", "checkpoints", "next_step", "model"])
def test_results_are_never_written_into_the_checkpoint_or_a_model_folder(sft_run, tmp_path, capsys, where, given):
    # the results' config.json over the model's made the checkpoint unloadable; results in the run's
    # checkpoints/ (step-N a later save writes, reached through a link to the checkpoint) were lost
    run = tmp_path / "run"
    shutil.copytree(sft_run[0], run)
    step = run / "checkpoints" / "step-000001"
    before = {p.name: p.read_bytes() for p in step.iterdir()}
    other = tmp_path / "other_model"  # a model folder that is not the one evaluated
    shutil.copytree(step, other)
    (tmp_path / "link").symlink_to(step)
    out = {
        "step": step,
        "inside": step / "results",
        "checkpoints": run / "checkpoints",
        "next_step": run / "checkpoints" / "step-000009",
        "model": other,
    }[where]
    ckpt = str(run) if given == "run" else str(tmp_path / "link")
    code, err = _eval(capsys, "--agent-checkpoint", ckpt, *ARGS, "--out", str(out))
    assert code == 2 and "Traceback" not in err and "another --out" in err
    named = {
        "step": "is the checkpoint being read",
        "inside": "is inside the checkpoint being read",
        "checkpoints": "is in the checkpoints folder of the run being read",
        "next_step": "is in the checkpoints folder of the run being read",
        "model": "holds a config.json that is a model's (model_type), not tau_env's",
    }[where]
    assert named in err
    assert {p.name: p.read_bytes() for p in step.iterdir()} == before
    assert json.loads((other / "config.json").read_text())["model_type"]
    assert not (other / "trajectories.jsonl").exists()
    assert checkpoint_module.load_checkpoint(run).info["step"] == 1


def test_an_out_beside_a_checkpoint_copied_out_of_its_run_is_fine(sft_run, tmp_path, capsys):
    # any step-N's parent was taken for a run's checkpoints folder: an exported copy refused its neighbours
    exported = tmp_path / "exported"
    exported.mkdir()
    shutil.copytree(sft_run[0] / "checkpoints" / "step-000001", exported / "step-000001")
    out = exported / "eval1"
    code, err = _eval(capsys, "--agent-checkpoint", str(exported / "step-000001"), *ARGS, "--out", str(out))
    assert code == 0, err
    assert (out / "trajectories.jsonl").is_file()
    # the copy itself stays refused
    code, err = _eval(
        capsys, "--agent-checkpoint", str(exported / "step-000001"), *ARGS, "--out", str(exported / "step-000001")
    )
    assert code == 2 and "is the checkpoint being read" in err
