"""Checkpoints of the CPU trainers: a plain Hugging Face model folder plus what resumes the run.

A checkpoint folder (``RUN/checkpoints/step-000010``) holds:

- the model with any LoRA factors merged in (``config.json``, ``model.safetensors``): any
  transformers or vLLM loader reads it as is;
- the tokenizer, whose chat template is the one the trainer rendered with (``chat_template.jinja``);
- ``tau_env_trainer.json``: the trainer (``sft``/``grpo``, or ``base`` for a starting model,
  :func:`base_checkpoint`), its config, the step, the tokenizer family and how the agent was
  played (environment id, retrieval configuration, step budget, sampling): what
  ``tau-env eval --agent-checkpoint DIR`` reads;
- ``trainer_state.pt``: the optimizer, the LoRA factors and the random state, to resume.

``RUN/latest`` names the newest complete checkpoint; a folder is written under a temporary name and
renamed, so a killed run never leaves a half-written checkpoint behind as the latest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import random
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tau_env.reference_trainers.cpu_common import (
    add_lora,
    load_model,
    lora_state,
    merged_state_dict,
    unmerge_fixups,
    unmerge_into,
    why,
)
from tau_env.reference_trainers.rollout import FAMILIES

from tau_env.error import Error, InvalidOptionError, ResultsFolderError

log = logging.getLogger(__name__)

#: The trainer's record in a checkpoint folder.
INFO_FILE = "tau_env_trainer.json"
STATE_FILE = "trainer_state.pt"
FORMAT = 1


@dataclass
class Checkpoint:
    """A loaded checkpoint: the model (LoRA re-attached when the run used it), tokenizer and records."""

    path: Path
    model: Any
    tokenizer: Any
    info: dict[str, Any]
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def step(self) -> int:
        return int(self.info.get("step", 0))

    @property
    def chat_template(self) -> str:
        return self.tokenizer.chat_template


def read_info(path: str | Path) -> dict[str, Any]:
    """A checkpoint's ``tau_env_trainer.json`` (no torch needed to read it)."""
    p = Path(path) / INFO_FILE
    if not p.is_file():
        raise ResultsFolderError(
            f"{path} is not a tau_env trainer checkpoint (no {INFO_FILE}); pass a folder under RUN/checkpoints/."
        )
    try:
        info = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ResultsFolderError(f"{p} is damaged ({why(e)}); pick another checkpoint or copy this one again.") from e
    problem = info_problem(info)
    if problem:
        raise ResultsFolderError(f"{p} is damaged: {problem}; pick another checkpoint or copy this one again.")
    return info


def _count(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def info_problem(info: Any) -> str | None:
    """What makes a ``tau_env_trainer.json`` unusable (the fields that are read from it), or None."""
    if not isinstance(info, dict):
        return f"not a JSON object but {type(info).__name__}"
    if info.get("family") not in FAMILIES:
        return f"no tokenizer family (one of {', '.join(FAMILIES)})"
    if "step" in info and not _count(info["step"], 0):
        return "step is not a whole number >= 0"
    agent = info.get("agent")
    if agent is not None:
        if not isinstance(agent, dict):
            return "agent is not a JSON object"
        for key in ("max_new_tokens", "max_steps"):
            if agent.get(key) is not None and not _count(agent[key], 1):
                return f"agent.{key} is not a whole number >= 1"
        for key in ("domain", "retrieval"):
            if agent.get(key) is not None and not isinstance(agent[key], str):
                return f"agent.{key} is not text"
    lora = info.get("lora")
    if lora:
        if not isinstance(lora, dict):
            return "lora is not a JSON object"
        alpha = lora.get("alpha")
        targets = lora.get("targets")
        if (
            not _count(lora.get("rank"), 1)
            or not _count(lora.get("layers", 0), 0)
            or isinstance(alpha, bool)
            or not isinstance(alpha, (int, float))
            or not isinstance(targets, list)
            or not targets
            or not all(isinstance(t, str) for t in targets)
        ):
            return "lora needs rank (>= 1), alpha (a number), targets (names) and layers (>= 0)"
    return None


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    *,
    model: Any,
    tokenizer: Any,
    chat_template: str,
    trainer: str,
    config: dict[str, Any],
    family: str,
    agent: dict[str, Any],
    optimizer: torch.optim.Optimizer | None = None,
    lora: dict[str, Any] | None = None,
    extra_state: dict[str, Any] | None = None,
    keep: int = 3,
) -> Path:
    """Write ``run_dir/checkpoints/step-NNNNNN`` and point ``run_dir/latest`` at it.

    Args:
        run_dir: The run's folder.
        step: Optimizer steps done.
        model, tokenizer: What is trained (LoRA layers are merged into the saved weights).
        chat_template: The template the trainer rendered with (saved as the tokenizer's).
        trainer: ``"sft"`` or ``"grpo"`` (``"base"``: an untrained starting model).
        config: The trainer's config (JSON-ready).
        family: The tokenizer family (how tool calls are printed and parsed).
        agent: How the agent seat was played: ``domain``, ``retrieval``, ``max_steps``,
            ``temperature``, ``max_new_tokens`` (what an evaluation should reuse).
        optimizer: Saved for resuming.
        lora: ``{"rank", "alpha", "targets"}`` when the model carries LoRA layers.
        extra_state: More state to resume (e.g. the task sampler's position).
        keep: How many checkpoints to keep (older ones are deleted).
    """
    run_dir = Path(run_dir)
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp), state_dict=merged_state_dict(model))
    saved_template = tokenizer.chat_template
    tokenizer.chat_template = chat_template
    try:
        tokenizer.save_pretrained(str(tmp))
    finally:
        tokenizer.chat_template = saved_template
    info = {
        "format": FORMAT,
        "trainer": trainer,
        "run_dir": str(run_dir.resolve()),  # whose checkpoints folder this is (a link may lead another run here)
        "step": step,
        "family": family,
        "agent": agent,
        "lora": lora,
        "config": config,
    }
    (tmp / INFO_FILE).write_text(json.dumps(info, indent=1), encoding="utf-8")
    state = {
        "step": step,
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "lora": {**lora_state(model), **unmerge_fixups(model)} if lora else {},
        "torch_rng": torch.get_rng_state(),
        # the GPU's generators too (rollouts sample there): a run resumed on a GPU draws what it would have
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
        "python_rng": random.getstate(),
        **(extra_state or {}),
    }
    torch.save(state, tmp / STATE_FILE)
    if final.exists() or final.is_symlink():  # the same step saved again: once its readers are done with it
        if final.is_symlink() or not (final / INFO_FILE).is_file():  # put there since the run opened: not ours
            shutil.rmtree(tmp, ignore_errors=True)
            raise ResultsFolderError(
                f"{final} is in the way of this run's checkpoint and is not one (no {INFO_FILE}); move it away "
                "and run the same command again (it resumes from the last save)."
            )
        _remove_checkpoint(final, wait=True)
    tmp.rename(final)
    (run_dir / "latest.tmp").write_text(final.name + "\n", encoding="utf-8")
    (run_dir / "latest.tmp").replace(run_dir / "latest")
    prune_checkpoints(run_dir, keep)
    return final


# --- readers of a live run's checkpoints ------------------------------------------------------------------
# An evaluation (or a trainer starting from --model RUN) reading a checkpoint holds a shared flock on
# RUN/checkpoints/.read-step-NNNNNN.lock while it reads; pruning takes it exclusively, without waiting,
# and keeps a checkpoint somebody is reading (a later save prunes it); a save that replaces a checkpoint
# of the same step waits for its readers. The lock lies beside the checkpoint, not in it: its files,
# and so its digest, stay what the trainer wrote. Both sides open it read-only (flock needs no more),
# so a lock another user made serves them too.


def _reader_lock(checkpoint: Path) -> Path | None:
    """The reader lock of a trainer's checkpoint folder (``step-NNNNNN``; None for another name), beside
    it in its real folder: the same lock whichever relative path or link leads to it (``checkpoints/``
    itself may be a link to another disk).
    """
    real = Path(os.path.realpath(checkpoint))
    if not real.name.startswith("step-"):
        return None
    return real.parent / f".read-{real.name}.lock"


def _open_lock(lock: Path) -> int:
    from tau_env.harness.results import open_own

    return open_own(lock, os.O_RDONLY | os.O_CREAT)


#: How long a run's end waits for the readers of a checkpoint it would prune (an evaluation loading a
#: large model takes minutes) before it leaves that checkpoint where it is, with a warning.
END_WAIT_S = 600.0


def _lock_holders(lock: Path) -> list[int]:
    """The pids holding a lock on ``lock``, from Linux's ``/proc/locks`` (best effort: none elsewhere)."""
    try:
        st = os.stat(lock)
        lines = Path("/proc/locks").read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        return []
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    for line in lines:
        fields = line.split()
        at = next((i for i, f in enumerate(fields) if f.count(":") == 2), None)  # MAJ:MIN:INODE
        if at is not None and fields[at] == ident and fields[at - 1].isdigit():
            pids.append(int(fields[at - 1]))
    return sorted(set(pids))


def _wait_for_readers(fd: int, path: Path, lock: Path, wait: bool | float) -> bool | None:
    """``flock(fd, LOCK_EX)`` for :func:`_remove_checkpoint`, taken at once, or after its readers let go:
    without end (``wait`` True) or for at most ``wait`` seconds. Says once in the log that it waits, and
    for whom. None when it is still held (not waited for, or not let go in time).
    """
    from tau_env.harness.results import fcntl

    held = _flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    if held is not None or wait is False:
        return held
    pids = _lock_holders(lock)
    who = f" (held by pid {', '.join(map(str, pids))})" if pids else ""
    limit = "" if wait is True else f" for up to {wait:g} s"
    log.warning("%s is being read (an eval or DAgger loading it)%s: waiting%s for it to be let go", path, who, limit)
    if wait is True:
        return _flock(fd, fcntl.LOCK_EX)
    deadline = time.monotonic() + float(wait)
    while time.monotonic() < deadline:
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        held = _flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if held is not None:
            return held
    log.warning("%s is still being read%s after %g s: kept; delete it once its reader is done", path, who, wait)
    return None


def _remove_checkpoint(path: Path, *, wait: bool | float) -> bool:
    """Delete a checkpoint folder once no reader holds it: ``wait`` for them (True: a save replacing the
    same step; seconds: a run's end, which then keeps it), or else keep it (pruning: False). True when
    it was deleted.
    """
    from tau_env.harness.results import fcntl

    lock = _reader_lock(path)
    fd = None
    if fcntl is not None and lock is not None:
        try:
            fd = _open_lock(lock)
        except PermissionError:  # another user's reader made it, and this user may not even read it
            if not wait:
                return False
        except (OSError, Error):  # no lock file can be made, or something else has its name: unguarded
            pass
        while fd is not None:
            held = _wait_for_readers(fd, path, lock, wait)
            if held is None:  # read now: kept until a later save
                os.close(fd)
                return False
            if not held:  # a file system without flock: unguarded, as before
                os.close(fd)
                fd = None
                break
            if _is_at(fd, lock):
                break
            os.close(fd)  # a reader let go and removed it as this opened it: the lock there now
            try:
                fd = _open_lock(lock)
            except (OSError, Error):
                fd = None
    try:
        shutil.rmtree(path, ignore_errors=True)
        if fd is not None:
            try:
                os.unlink(lock)  # while still held: no reader can take it for a folder that is gone
            except OSError:
                pass
    finally:
        if fd is not None:
            os.close(fd)
    return True


#: A checkpoint's folder name: ``step-`` and its step number (6 digits, more past step 999,999).
STEP_NAME = re.compile(r"step-(\d+)")
#: What else a trainer writes in ``checkpoints/``: a checkpoint being written, a reader's lock.
_OWN_AUX = re.compile(r"\.tmp-step-\d+|\.read-step-\d+\.lock")


def check_out_apart(out: str | Path, checkpoint: str | Path, flag: str = "--out") -> None:
    """Refuse an output folder ``out`` at or inside ``checkpoint`` (its files are the model's: a
    results record replaces its config.json, any file changes its digest), or in the run's checkpoints
    folder around it (the run saves into it, prunes and clears it), however either is spelled.
    """
    ckpt, where = Path(checkpoint).resolve(), Path(out).resolve()
    if where == ckpt or ckpt in where.parents:
        raise InvalidOptionError(
            f"{flag} {out} is {'inside ' if where != ckpt else ''}the checkpoint being read ({ckpt}): what is "
            "written there would replace or change the model's files; pass another " + flag + "."
        )
    folder = ckpt.parent
    try:  # the run that saved it: its checkpoints folder is this one only while the checkpoint is still there
        run_dir = read_info(ckpt).get("run_dir")
        saved_here = isinstance(run_dir, str) and bool(run_dir) and (Path(run_dir) / "checkpoints").resolve() == folder
    except (Error, OSError):
        saved_here = False
    in_a_run = STEP_NAME.fullmatch(ckpt.name) and (folder.name == "checkpoints" or saved_here)
    if in_a_run and (where == folder or folder in where.parents):
        raise InvalidOptionError(
            f"{flag} {out} is in the checkpoints folder of the run being read ({folder}), which the run saves "
            "into, prunes and clears; pass another " + flag + "."
        )


def run_checkpoints(root: str | Path) -> list[Path]:
    """The complete checkpoints a trainer saved in ``root`` (``RUN/checkpoints``), oldest first by step
    number (``step-1000000`` after ``step-999999``): folders named ``step-N`` holding the trainer's
    record. Anything else there (a user's copy, a backup, notes) is not the run's: never listed, pruned
    or cleared.
    """
    try:
        entries = list(Path(root).iterdir())
    except OSError:  # no folder (yet), or deleted as it is listed (a --no-resume at work)
        return []
    steps = []
    for p in entries:
        m = STEP_NAME.fullmatch(p.name)
        if m and (p / INFO_FILE).is_file():
            steps.append((int(m.group(1)), p.name, p))
    return [p for *_, p in sorted(steps)]


def prune_checkpoints(run_dir: str | Path, keep: int, *, wait: bool | float = False) -> None:
    """Delete a run's checkpoints (:func:`run_checkpoints`) but its newest ``keep`` (0: keep all). A
    checkpoint a reader holds is kept for a later save, or (``wait``: a run's end, when no later save
    will come) deleted once it is let go: True waits as long as that takes, a number of seconds at most
    that long (then it is kept).
    """
    for old in run_checkpoints(Path(run_dir) / "checkpoints")[:-keep] if keep > 0 else []:
        _remove_checkpoint(old, wait=wait)


def _flock(fd: int, op: int) -> bool | None:
    """``flock(fd, op)``: True when taken, None when another holds it (``LOCK_NB``), False on a file
    system that has no flock.
    """
    from tau_env.harness.results import fcntl

    try:
        fcntl.flock(fd, op)
    except BlockingIOError:
        return None
    except OSError:
        return False
    return True


def _is_at(fd: int, lock: Path) -> bool:
    """Whether the lock file ``fd`` holds is still the one at ``lock`` (not removed or replaced)."""
    try:
        return os.path.samestat(os.fstat(fd), os.lstat(lock))
    except OSError:
        return False


class CheckpointLease:
    """A checkpoint held for reading (:func:`hold_checkpoint`): ``path`` is the checkpoint folder;
    :meth:`release` (or the end of a ``with`` block) lets the run prune it again, and removes the lock
    file when no one else holds it (a run's folder keeps no trace of its readers).
    """

    def __init__(self, path: Path, fd: int | None, lock: Path | None = None):
        self.path, self._fd, self._lock = path, fd, lock

    def release(self) -> None:
        if self._fd is None:
            return
        from tau_env.harness.results import fcntl

        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no other reader, no pruner
            if self._lock is not None and _is_at(self._fd, self._lock):
                os.unlink(self._lock)
        except OSError:  # another reader holds it too: it stays for them
            pass
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> CheckpointLease:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def hold_checkpoint(path: str | Path, tries: int = 10) -> CheckpointLease:
    """:func:`resolve_checkpoint` ``path`` and hold what it finds against the run's pruning: a live
    run saving with ``--keep-checkpoints 1`` deletes its previous checkpoint at each save, which an
    evaluation of ``RUN`` may be reading. When the checkpoint found is pruned before the hold is
    taken, the run's newer one is found and held (``tries`` times). Where no lock can be taken (no
    flock, a folder that takes no file) the checkpoint is read unheld, as before there were locks.
    """
    import time

    from tau_env.harness.results import fcntl

    pruned = ResultsFolderError(
        f"{path} was deleted by its run's pruning (--keep-checkpoints) as it was opened: pass the run folder to "
        "take its latest checkpoint, or a checkpoint the run keeps."
    )
    named = (Path(path) / INFO_FILE).is_file()  # a checkpoint folder itself, not a run
    for attempt in range(max(1, tries)):
        if attempt:
            time.sleep(min(0.5, 0.02 * 2**attempt))  # a pruner holds the lock for one rmtree
        try:
            found = resolve_checkpoint(path)
        except ResultsFolderError:
            if attempt and named:
                raise pruned from None
            raise
        lock = _reader_lock(found)
        if fcntl is None or lock is None:
            return CheckpointLease(found, None)
        try:
            fd = _open_lock(lock)
        except FileNotFoundError:  # its run's checkpoints/ went away (--no-resume): look again
            continue
        except (OSError, Error):  # read-only, another user's, or not a file: read it unheld
            return CheckpointLease(found, None)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # being pruned now: the run's newer checkpoint
            os.close(fd)
            continue
        except OSError:  # a file system without flock: read it unheld
            os.close(fd)
            return CheckpointLease(found, None)
        if _is_at(fd, lock) and (found / INFO_FILE).is_file():
            return CheckpointLease(found, fd, lock)
        if not found.exists():  # pruned between finding it and holding it: its lock goes, if no one else holds it
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if _is_at(fd, lock):
                    os.unlink(lock)
            except OSError:
                pass
        os.close(fd)
    if named:
        raise pruned
    raise ResultsFolderError(
        f"{path}: each checkpoint found was deleted before it could be read ({tries} tries); pass one the "
        "run keeps (RUN/checkpoints/step-N), or run it with a larger --keep-checkpoints."
    )


def base_checkpoint(
    model_dir: str | Path,
    run_dir: str | Path,
    *,
    family: str = "",
    domain: str = "harbor-bank-v0",
    retrieval: str | None = None,
    max_new_tokens: int = 256,
) -> Path:
    """A model folder as a step-0 checkpoint (trainer ``"base"``), the trainers' chat template in it.

    So the starting point of a run is evaluated exactly as its trained checkpoints are
    (``tau-env eval --agent-checkpoint RUN/checkpoints/step-000000``): the same template, tool
    rendering and sampling. Reuses an existing one.
    """
    found = latest_checkpoint(run_dir)
    if found is not None and read_info(found).get("trainer") == "base":
        return found
    from tau_env.reference_trainers.cpu_common import chat_template_for, tokenizer_family

    model, tokenizer = load_model(model_dir)
    family = family or tokenizer_family(tokenizer)
    agent = {"domain": domain, "retrieval": retrieval, "temperature": 0.0, "max_new_tokens": max_new_tokens}
    return save_checkpoint(
        run_dir,
        0,
        model=model,
        tokenizer=tokenizer,
        chat_template=chat_template_for(tokenizer, family),
        trainer="base",
        config={"model": str(model_dir)},
        family=family,
        agent=agent,
    )


def checkpoint_digest(path: str | Path) -> str:
    """What identifies a checkpoint as a policy, wherever it lies: a SHA-256 over the names and bytes
    of its files (weights, tokenizer, template, records), the resume state left out. A folder trained
    again in place gets another digest; a copy, or the same folder named another way, the same.
    """
    h = hashlib.sha256()
    for f in sorted(p for p in Path(path).iterdir() if p.is_file() and p.name != STATE_FILE):
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as stream:
            while chunk := stream.read(1 << 22):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()[:32]


#: What each trainer's run writes in its folder: what ``--no-resume`` clears before a fresh run (in
#: ``checkpoints/`` and ``adapters/`` only the run's own entries).
RUN_FILES = {
    "sft": ("latest", "checkpoints", "metrics.jsonl", "metrics.svg"),
    "grpo": ("latest", "checkpoints", "metrics.jsonl", "metrics.svg", "rollouts.jsonl", "adapters"),
}


def _not_the_runs(out: Path, trainer: str, has_run: bool) -> list[str]:
    """What in ``out`` bears a name of a trainer's run files but is not this ``trainer``'s run's (a user's
    notes, another tool's log, the other trainer's files): a run there would overwrite or delete it.
    ``has_run``: a checkpoint of this trainer is there, so its run's files are its own.
    """
    from tau_env.reference_trainers.cpu_common import PLOT_MARK, MetricsLog

    def log_rows(path: Path) -> list[dict[str, Any]] | None:  # None: not a trainer's log
        try:
            return MetricsLog.read(path) if path.is_file() and not path.is_symlink() else None
        except (ResultsFolderError, OSError):
            return None

    found = []
    for name in dict.fromkeys(n for names in RUN_FILES.values() for n in names):
        p = out / name
        if not (p.exists() or p.is_symlink()):
            continue
        other = next((t for t, names in RUN_FILES.items() if name in names and name not in RUN_FILES[trainer]), None)
        if other is not None:
            found.append(f"{name} (a {other} run's)")
        elif name in ("checkpoints", "adapters"):
            if not p.is_dir() and not (name == "checkpoints" and p.is_symlink()):  # a dangling link: said later
                found.append(f"{name} (not a folder)")
            elif name == "adapters" and not has_run and any(not STEP_NAME.fullmatch(c.name) for c in p.iterdir()):
                found.append(f"{name} (holds other files than a run's step-N adapters)")
        elif name == "latest":
            try:
                ours = p.is_file() and not p.is_symlink() and STEP_NAME.fullmatch(p.read_text(encoding="utf-8").strip())
            except (OSError, UnicodeDecodeError):
                ours = False
            if not ours:
                found.append("latest (not a run's marker of its checkpoint)")
        elif name.endswith(".jsonl") and not has_run:
            rows = log_rows(p)
            marks = {r.get("trainer") for r in rows or ()} - {None, trainer}  # rows mark their trainer (older: none)
            if rows is None:
                found.append(f"{name} (not a trainer's log)")
            elif marks:
                found.append(f"{name} (a {sorted(map(str, marks))[0]} run's log)")
        elif name == "metrics.svg" and not has_run and log_rows(out / "metrics.jsonl") is None:
            try:
                ours = p.is_file() and not p.is_symlink() and PLOT_MARK in p.read_text(encoding="utf-8")[:2000]
            except (OSError, UnicodeDecodeError):
                ours = False
            if not ours:
                found.append("metrics.svg (not a trainer's plot)")
    try:  # folders at the names a save writes (step-NNNNNN) that are not checkpoints: a save would meet them
        entries = list((out / "checkpoints").iterdir()) if (out / "checkpoints").is_dir() else []
    except OSError:
        entries = []
    taken = sorted(
        p.name
        for p in entries
        if (m := STEP_NAME.fullmatch(p.name))
        and p.name == f"step-{int(m.group(1)):06d}"
        and (p.is_symlink() or not (p / INFO_FILE).is_file())
    )
    if taken:
        found.append(f"checkpoints/{', '.join(taken[:3])}{' ...' if len(taken) > 3 else ''} (not checkpoints)")
    return found


class RunDir:
    """A trainer's ``--out`` while its run lives (:func:`open_run_dir`): locked; ``close()`` releases
    the lock, and removes the folder when the run made it and wrote nothing there (a run refused early
    leaves nothing behind).
    """

    def __init__(self, path: Path, lock: Any, latest: Path | None, made: list[Path], trainer: str = "sft"):
        self.path, self.lock, self.latest, self._made, self.trainer = path, lock, latest, made, trainer
        # the lock of the checkpoints folder itself (see hold_checkpoints), and whether this run made it
        self.checkpoints_lock: Any = None
        self._made_checkpoints = False

    def hold_checkpoints(self) -> None:
        """Make ``checkpoints/`` and lock it as :func:`open_run_dir` locks ``--out``. ``checkpoints``
        may be a link to a folder on another disk: two runs whose links lead to one folder would
        save, prune and clear each other's steps, with both ``--out`` locks held. Refused here.
        """
        from tau_env.harness.results import LOCK_NAME, FolderLock

        root = self.path / "checkpoints"
        if root.is_symlink() and not root.is_dir():
            raise InvalidOptionError(
                f"{root} is a link to {os.readlink(root)}, which is no folder; make that folder, or remove the link."
            )
        self._made_checkpoints = not root.exists()
        try:
            root.mkdir(exist_ok=True)
        except OSError as e:
            raise InvalidOptionError(f"{root} cannot be made ({why(e)}); pass another --out.") from e
        where = f" ({root.resolve()})" if root.is_symlink() else ""
        try:
            self.checkpoints_lock = FolderLock(
                root / LOCK_NAME,
                lambda pid: ResultsFolderError(
                    f"{root}{where} is in use by another run{pid}: its checkpoints folder is that run's too (a link "
                    "leads both there). One checkpoints folder serves one run at a time: pass another --out, or "
                    "link checkpoints/ elsewhere."
                ),
            )
        except OSError as e:
            raise InvalidOptionError(f"{root}{where} cannot be written ({why(e)}); pass another --out.") from e

    def clear(self) -> None:
        """Delete the run in the folder (``--no-resume``, once the new run's inputs have loaded): its
        ``latest`` marker first, so a new run killed before its first checkpoint leaves no pointer to
        the old one.
        """
        for name in RUN_FILES[self.trainer]:
            p = self.path / name
            if name == "checkpoints" and p.is_dir():  # each once its readers let it go (a link: its target's)
                for step in run_checkpoints(p):
                    _remove_checkpoint(step, wait=True)
                # the run's own entries go; the folder (or the link to another disk), this run's lock of it
                # and what is not the run's (a user's copy, notes) stay. The folder (not a link) goes at
                # close() if this run saves nothing in it and nothing else is there.
                self._made_checkpoints = self._made_checkpoints or not p.is_symlink()
                for child in p.iterdir():
                    if not _OWN_AUX.fullmatch(child.name):  # a checkpoint being written, a reader's lock
                        continue
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child)
                    else:
                        child.unlink()
                continue
            if name == "adapters" and p.is_dir() and not p.is_symlink():
                for child in p.iterdir():
                    if STEP_NAME.fullmatch(child.name):
                        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
                try:
                    p.rmdir()
                except OSError:  # something else there: kept
                    pass
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif p.exists() or p.is_symlink():
                p.unlink()
        self.latest = None

    def close(self) -> None:
        if self.checkpoints_lock is not None:
            self.checkpoints_lock.release()
            self.checkpoints_lock = None
            if self._made_checkpoints:
                try:
                    (self.path / "checkpoints").rmdir()  # only when empty: a run that saved nothing
                except OSError:
                    pass
        self.lock.release()
        for p in self._made:  # deepest first
            try:
                p.rmdir()  # only when empty
            except OSError:
                break


def open_run_dir(out: str | Path, trainer: str, resume: bool = True) -> RunDir:
    """``--out`` made ready for a ``trainer`` (``sft``, ``grpo``) run, with its run's latest complete
    checkpoint (``latest``, None when there is none); ``close()`` it when the run ends.

    The folder is created (a file at its place, or above it, is refused), then locked: a second run
    in the same folder, of either trainer, is refused while this one lives. A folder holding another
    trainer's run is refused (its checkpoints, logs and plot are not this trainer's: start from it
    with ``--model``). To start over (``--no-resume``, ``resume=False``), :meth:`RunDir.clear` it
    once the new run's inputs have loaded: nothing is deleted for a command that fails anyway; a run
    whose latest record is damaged may be started over (it is what --no-resume is for).
    """
    from tau_env.harness.results import LOCK_NAME, FolderLock

    out = Path(out)
    try:  # the tokenizer's files and the records are written with UTF-8 paths: said before any training
        os.fsdecode(os.fsencode(out)).encode("utf-8")
    except UnicodeError:
        raise InvalidOptionError(
            f"--out {os.fsencode(out)!r} is not a UTF-8 path (a checkpoint's files cannot be named under it); pass "
            "another --out."
        ) from None
    for p in (out.resolve(), *out.resolve().parents):  # a checkpoint's files are its model's: no run inside
        if (p / INFO_FILE).is_file():
            raise InvalidOptionError(
                f"--out {out} is {'inside ' if p != out.resolve() else ''}the checkpoint {p}: a run there would "
                "resume from that checkpoint and change its files; pass another --out (and --model "
                f"{p} to start from it)."
            )
    made = []
    for p in (out, *out.parents):
        if p.exists() or p.is_symlink():
            if not p.is_dir():
                raise InvalidOptionError(f"--out {out}: {p} is a file, not a folder; pass another --out.")
            break
        made.append(p)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InvalidOptionError(f"--out {out} cannot be made ({why(e)}); pass another --out.") from e
    try:
        lock = FolderLock(
            out / LOCK_NAME,
            lambda pid: ResultsFolderError(
                f"{out} is in use by another run{pid}: one run folder trains one run at a time. Wait for it to "
                "finish, or pass another --out."
            ),
        )
    except OSError as e:  # a read-only file system, an immutable folder
        raise InvalidOptionError(f"--out {out} cannot be written ({why(e)}); pass another --out.") from e
    run = RunDir(out, lock, None, made, trainer)
    try:
        found = find_checkpoint(out) if (out / "checkpoints").is_dir() else None
        if found is not None:
            try:
                made_by = read_info(found).get("trainer")
            except ResultsFolderError:
                if resume:
                    raise
                made_by, found = trainer, None  # damaged: starting over is what is asked
            if made_by != trainer:
                raise ResultsFolderError(
                    f"{out} holds a {made_by} run ({found.name}); {trainer} continues only its own runs: pass "
                    f"another --out (and --model {out} to start from it)."
                )
        others = _not_the_runs(out, trainer, found is not None or bool(run_checkpoints(out / "checkpoints")))
        _check_checkpoints_owner(out)
        if others:
            raise ResultsFolderError(
                f"{out} holds {', '.join(others)}: not this {trainer} run's, and a run there would "
                f"{'overwrite' if resume else 'delete'} {'it' if len(others) == 1 else 'them'}. Move "
                f"{'it' if len(others) == 1 else 'them'} away, or pass another --out."
            )
        run.hold_checkpoints()
    except BaseException:
        run.close()
        raise
    run.latest = found
    return run


def resumed_config(out: str | Path, trainer: str) -> dict[str, Any]:
    """The config of the ``trainer`` run a resume in ``out`` would continue (its latest checkpoint's),
    or ``{}`` (no run there, another trainer's, or one whose record does not read: :func:`open_run_dir`
    says so). Read before the run folder is opened, for the settings a resumed run takes from its
    own record rather than from a starting model that may have moved since.
    """
    try:
        found = find_checkpoint(out) if (Path(out) / "checkpoints").is_dir() else None
        info = read_info(found) if found is not None else {}
    except (Error, OSError):
        return {}
    config = info.get("config") if info.get("trainer") == trainer else None
    return config if isinstance(config, dict) else {}


def _check_checkpoints_owner(out: Path) -> None:
    """Refuse ``out`` when its ``checkpoints/`` (a link to another disk) holds the checkpoints of another
    run folder that still leads there: a new run would take that run's checkpoints for its own, and
    its ``--no-resume`` would delete them. A run folder moved or deleted since leaves them to this one.
    """
    me = out.resolve()
    for ckpt in run_checkpoints(out / "checkpoints"):
        try:
            owner = read_info(ckpt).get("run_dir")
        except (Error, OSError):
            continue
        if not isinstance(owner, str) or not owner or Path(owner) == me or not Path(owner).is_dir():
            continue
        try:
            shared = (Path(owner) / "checkpoints").resolve() == (out / "checkpoints").resolve()
        except OSError:
            shared = False
        if shared:
            raise ResultsFolderError(
                f"{out}/checkpoints ({(out / 'checkpoints').resolve()}) holds the checkpoints of the run in {owner}, "
                "whose checkpoints/ leads there too: a run here would take them for its own. Pass another --out, "
                "or link checkpoints/ elsewhere."
            )


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    marker = Path(run_dir) / "latest"
    if not marker.is_file():
        return None
    try:
        name = marker.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):  # unreadable or not ours: as if there were no marker
        return None
    if not STEP_NAME.fullmatch(name):  # not a marker a trainer wrote
        return None
    path = Path(run_dir) / "checkpoints" / name
    return path if (path / INFO_FILE).is_file() else None


def find_checkpoint(path: str | Path) -> Path | None:
    """``path`` itself when it is a checkpoint folder; for a run folder, the checkpoint ``RUN/latest``
    names, or (a run whose marker is gone) its newest complete ``checkpoints/step-*``; else None.
    """
    path = Path(path)
    if (path / INFO_FILE).is_file():
        return path
    found = latest_checkpoint(path)
    if found is None and (path / "checkpoints").is_dir():
        complete = run_checkpoints(path / "checkpoints")
        found = complete[-1] if complete else None
    return found


def resolve_checkpoint(path: str | Path) -> Path:
    """:func:`find_checkpoint`, or a :class:`~tau_env.error.ResultsFolderError` saying what ``path`` is."""
    found = find_checkpoint(path)
    if found is not None:
        return found
    given = Path(path)
    if not given.is_dir():
        kept = [c.name for c in run_checkpoints(given.parent)]
        if given.name.startswith("step-") and kept:  # a step its run has pruned (--keep-checkpoints)
            raise ResultsFolderError(
                f"{path} is no longer there: its run keeps {', '.join(kept[-3:])} (older ones are deleted as it saves, "
                "--keep-checkpoints); pass one of those, or the run folder for its latest."
            )
        raise ResultsFolderError(f"{path} is no folder; pass a trainer run (RUN) or one of its RUN/checkpoints/step-N.")
    from tau_env.harness.results import LOCK_NAME

    run = Path(path)
    if (run / "checkpoints").is_dir() or (run / "metrics.jsonl").is_file() or (run / LOCK_NAME).exists():
        raise ResultsFolderError(
            f"{path} is a trainer run with no complete checkpoint yet (still training, or stopped before its first "
            "save); pass it again once it has saved one (every --save-every steps and at the end)."
        )
    raise ResultsFolderError(
        f"{path} is not a tau_env trainer checkpoint (no {INFO_FILE}) nor a trainer run (no complete checkpoint "
        "under checkpoints/); pass a trainer run (RUN) or one of its RUN/checkpoints/step-N."
    )


def load_checkpoint(path: str | Path, *, for_training: bool = False, device: str = "cpu") -> Checkpoint:
    """Load a checkpoint folder.

    Args:
        path: The folder (``RUN/checkpoints/step-NNNNNN``), or a run folder (``RUN``): its latest
            complete checkpoint (:func:`resolve_checkpoint`).
        for_training: Re-attach the run's LoRA layers with their factors (the base weights less the
            merged delta) and load the resume state; False: the merged model for inference.
        device: Where the model goes (``auto``, ``cpu``, ``cuda[:N]``); a checkpoint saved on one
            device loads on any other (its resume state is read onto the CPU, the optimizer moves it).
    """
    with hold_checkpoint(path) as lease:  # a live run does not prune it while it is read
        return _load_checkpoint(lease.path, for_training, device)


def _load_checkpoint(path: Path, for_training: bool, device: str) -> Checkpoint:
    from tau_env.reference_trainers.rollout import check_chat_template

    info = read_info(path)
    model, tokenizer = load_model(path, device=device)
    # the template every rollout and evaluation renders with: damaged, it is said here, before any is written
    check_chat_template(tokenizer, tokenizer.chat_template, f"{path} (chat_template.jinja)")
    state: dict[str, Any] = {}
    if for_training:
        try:
            state = torch.load(path / STATE_FILE, weights_only=False, map_location="cpu")
        except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as e:
            raise ResultsFolderError(
                f"{path / STATE_FILE}: the run's resume state does not load ({why(e)}); resume from an earlier "
                "checkpoint (move this one aside) or start the run in another --out."
            ) from e
        if not isinstance(state, dict) or (info.get("lora") and "lora" not in state):
            raise ResultsFolderError(
                f"{path / STATE_FILE} is damaged (no LoRA factors); resume from an earlier checkpoint."
            )
        lora = info.get("lora")
        if lora:
            add_lora(model, int(lora["rank"]), float(lora["alpha"]), tuple(lora["targets"]), int(lora.get("layers", 0)))
            unmerge_into(model, state["lora"])
    return Checkpoint(path, model, tokenizer, info, state)


def starting_model(model: str | Path, family: str = "", device: str = "cpu") -> tuple[Any, Any, str, str]:
    """A trainer's starting point, ``(model, tokenizer, family, chat template)``: a checkpoint of these
    trainers (or a run folder: its latest) with the family and template it was trained with, else a
    Hugging Face model folder with its tokenizer family's template. ``family`` overrides the family.
    """
    from tau_env.reference_trainers.cpu_common import chat_template_for, tokenizer_family

    if find_checkpoint(model) is not None:
        base = load_checkpoint(model, device=device)  # the path given, held (a live run's latest may move on)
        return base.model, base.tokenizer, family or base.info["family"], base.chat_template
    from tau_env.harness.results import LOCK_NAME

    run = Path(model)
    if not (run / "config.json").is_file() and any((run / n).exists() for n in ("checkpoints", "latest", LOCK_NAME)):
        resolve_checkpoint(model)  # a trainer run with no checkpoint yet: said as such, not "no config.json"
    net, tokenizer = load_model(model, device=device)
    family = family or tokenizer_family(tokenizer)
    return net, tokenizer, family, chat_template_for(tokenizer, family)


def restore_rng(state: dict[str, Any]) -> None:
    """Put back the random state a checkpoint saved."""
    if "torch_rng" in state:
        torch.set_rng_state(state["torch_rng"])
    cuda = state.get("cuda_rng")
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
    if "python_rng" in state:
        random.setstate(state["python_rng"])


def agent_policy(
    model: Any,
    tokenizer: Any,
    *,
    family: str,
    chat_template: str,
    temperature: float = 0.0,
    max_new_tokens: int = 256,
    max_context: int | None = None,
    name: str | None = None,
) -> Any:
    """The agent seat played by ``model`` in process, exactly as the trainers roll it out.

    A :class:`~tau_env.reference_trainers.rollout_policy.LocalTokenPolicy` (tool schemas rendered
    once, at the episode's start, with ``chat_template``; the generated tokens kept as sampled)
    over a :class:`~tau_env.llm.local.ReusedPrefixModel` (the shared prompt is not recomputed).
    """
    from tau_env.reference_trainers.rollout_policy import LocalTokenPolicy

    from tau_env.llm.local import ReusedPrefixModel

    return LocalTokenPolicy(
        ReusedPrefixModel(model.eval()),
        tokenizer,
        family=family,
        chat_template=chat_template,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        max_context=max_context,
        name=name,
    )


def checkpoint_policy(
    path: str | Path,
    *,
    temperature: float = 0.0,
    max_new_tokens: int | None = None,
    device: str = "auto",
    name: str | None = None,
) -> tuple[Any, dict[str, Any]]:
    """A checkpoint as the agent seat (see :func:`agent_policy`) and its ``tau_env_trainer.json``.

    ``max_new_tokens`` None: the per-turn cap the checkpoint records. ``device``: where it generates
    (``auto``: the GPU when torch sees one, else the CPU). ``name``: how a run's record names it
    (default: its folder).
    """
    ckpt = load_checkpoint(path, device=device)
    agent = ckpt.info.get("agent") or {}
    policy = agent_policy(
        ckpt.model,
        ckpt.tokenizer,
        family=ckpt.info["family"],
        chat_template=ckpt.chat_template,
        temperature=temperature,
        max_new_tokens=int(max_new_tokens or agent.get("max_new_tokens") or 256),
        name=name,
    )
    return policy, ckpt.info
