r"""On-policy teacher labels (DAgger): SFT examples in the states a trained checkpoint reaches itself.

    python -m tau_env.reference_trainers.dagger --checkpoint RUN --tasks tasks.jsonl \\
        --out runs/dagger [--task ID ...] [--p-learner 0.5]

SFT on teacher episodes trains every agent turn in the teacher's own conversation; sampled, a
model makes a slip (an extra lookup, another question), and from then on the conversation is one
no example showed it. Here the checkpoint plays the agent seat with the
:class:`~tau_env.TeacherAgent` beside it. At each agent turn both are asked for the turn:

- they agree (the same tool calls with the same arguments, or the same text): the turn is played;
- they differ: with probability ``p_learner`` the checkpoint's turn is played and the teacher's
  turn becomes one example (the conversation so far, trained on that turn only), and the teacher
  forgets it was asked; otherwise the teacher's turn is played. A call the checkpoint played that
  is one of the teacher's remaining reference actions (the same name and arguments) and that the
  env carried out (its result is not an error) counts as done for the teacher: it does not repeat it.

After the episode, its conversation becomes one more example, trained on every turn the teacher
chose (or agreed with) after the first turn the checkpoint played against it: the turns that
follow a slip. Turns before it are the teacher's own episode, which the SFT data already holds.
Nothing here needs a reward: the labels are the teacher's, and :class:`~tau_env.TeacherAgent`
never uses a fact the conversation has not shown.

The checkpoint is rolled out as ``tau-env eval --agent-checkpoint`` rolls it out (its chat template,
the tool schemas of the episode's start rendered once), re-rendered from the conversation's text at
every turn (a turn the teacher played is not one it sampled). Examples are SFT JSONL
(``messages``, ``tools``, ``train``), the format of ``tau-env export-sft``: train on them with
``python -m tau_env.reference_trainers.sft --data``.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import hashlib
import json
import math
import os
import random
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tau_env.agents import TeacherAgent
from tau_env.error import InvalidOptionError, ResultsFolderError
from tau_env.harness.results import LOCK_NAME, FolderLock
from tau_env.policy import Observation
from tau_env.tasks import Task


def call_signatures(message: dict[str, Any]) -> list[tuple[Any, Any]]:
    """The tool calls of an assistant message as ``(name, parsed arguments)``, in order; arguments
    that are not JSON stay the text they were.
    """
    out = []
    for c in message.get("tool_calls") or []:
        fn = (c.get("function") or {}) if isinstance(c, dict) else {}
        raw = fn.get("arguments")
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            args = raw
        out.append((fn.get("name"), args))
    return out


def same_turn(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two agent turns do the same: the same tool calls (names and parsed arguments, in
    order; call ids aside), or, with no calls, the same text up to surrounding whitespace.
    """
    ca, cb = call_signatures(a), call_signatures(b)
    if ca or cb:
        return ca == cb
    return (a.get("content") or "").strip() == (b.get("content") or "").strip()


@dataclass
class EpisodeLog:
    """What one episode gave: the examples labelled at a slip, and the played turns."""

    task_id: str
    seed: int
    tools: list[dict[str, Any]] | None = None
    examples: list[dict[str, Any]] = field(default_factory=list)
    #: (position of the played turn in the agent's chat, the played message, trained?)
    played: list[tuple[int, dict[str, Any], bool]] = field(default_factory=list)
    last_messages: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0
    agreed: int = 0
    learner_played: int = 0


class DaggerAgent:
    """The agent seat: a checkpoint's policy with :class:`~tau_env.TeacherAgent` labelling its
    turns (see the module's docstring). An :class:`~tau_env.AsyncPolicy`.

    Args:
        learner: A token policy (:func:`~tau_env.reference_trainers.checkpoint.agent_policy`).
        p_learner: Probability that the learner's turn is played where the two differ (0: never,
            every episode is the teacher's; 1: always, pure DAgger).
        seed: Seeds the choice, with each episode's own seed.
        lookup: The teacher's ``lookup`` mode.
    """

    def __init__(self, learner: Any, *, p_learner: float = 0.5, seed: int = 0, lookup: str = "early") -> None:
        if isinstance(p_learner, bool) or not isinstance(p_learner, int | float) or not 0.0 <= p_learner <= 1.0:
            raise InvalidOptionError(f"p_learner must be a probability in [0, 1], not {p_learner!r}.")
        self.learner = learner
        self.p_learner = float(p_learner)
        self.base_seed = int(seed)
        self.lookup = lookup
        self.teacher = TeacherAgent(lookup=lookup)
        self.logs: dict[tuple[str, int], EpisodeLog] = {}  # shared by the per-episode copies
        self._log: EpisodeLog | None = None
        self._task: Task | None = None
        self._learner_turn: tuple[int, dict[str, Any]] | None = None  # (position, turn) played last
        self._rng = random.Random(0)
        self.log_dir: Path | None = None  # where each episode's log is saved after every turn

    def __deepcopy__(self, memo: dict[int, Any]) -> DaggerAgent:
        new = copy.copy(self)  # the learner (its model) and the logs are shared
        new.teacher = TeacherAgent(lookup=self.lookup)
        new._log, new._task, new._learner_turn = None, None, None
        return new

    def describe(self) -> dict[str, Any]:
        return {
            "policy": type(self).__name__,
            "p_learner": self.p_learner,
            "teacher": self.teacher.describe(),
            "learner": self.learner.describe() if hasattr(self.learner, "describe") else type(self.learner).__name__,
        }

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        self.teacher.reset(task, seed)
        self._task = task
        s = int(seed or 0)
        self._rng = random.Random(self.base_seed * 1_000_003 + s)
        self._log = EpisodeLog(task.id if task is not None else "", s)
        self.logs[(self._log.task_id, s)] = self._log  # an episode played again replaces its first try
        self._learner_turn = None
        self._save()  # an episode may end before the agent's first turn; a replayed one drops its old log

    def _save(self) -> None:
        """Write the episode's log as it stands to ``log_dir`` (when set), replacing its last
        version: after the episode's last turn it is the whole log, which a resumed round reads
        back for an episode it does not play again.
        """
        if self.log_dir is not None and self._log is not None:
            save_log(self._log, self.log_dir)

    def _credit_learner(self, messages: list[dict[str, Any]]) -> None:
        """Mark the teacher's remaining reference actions that the learner's last played turn
        performed (the same call, carried out: the tool result after it is no error) as done.
        """
        if self._learner_turn is None:
            return
        pos, turn = self._learner_turn
        self._learner_turn = None
        for k, (name, args) in enumerate(call_signatures(turn)):
            at = pos + 1 + k
            result = messages[at] if at < len(messages) else None
            if not result or result.get("role") != "tool" or result.get("name") != name:
                continue
            if not str(result.get("content") or "").startswith("Error:"):
                self.teacher.performed(name, args)

    async def aact(self, obs: Observation) -> dict[str, Any]:
        turn = await self._aact(obs)
        self._save()
        return turn

    async def _aact(self, obs: Observation) -> dict[str, Any]:
        log = self._log
        if log is None:
            self.reset(None, 0)
            log = self._log
        assert log is not None
        messages = list(obs.get("messages") or [])
        if log.tools is None:
            log.tools = list(obs.get("tools") or [])  # rendered once, as the rollout renders them
        log.turns += 1
        self._credit_learner(messages)
        saved = copy.deepcopy(self.teacher.__dict__)
        want = self.teacher(obs)
        # a fresh trajectory per turn: the chat may hold turns the teacher played, not sampled ones
        self.learner.reset(self._task, log.seed * 1009 + log.turns)
        got = await self.learner.aact({**obs, "tools": log.tools})
        episodes = getattr(self.learner, "_episodes", None)
        if isinstance(episodes, list):
            episodes.clear()  # its token records are not needed here
        log.last_messages = messages
        if same_turn(got, want):
            log.agreed += 1
            log.played.append((len(messages), want, True))
            return want
        if self._rng.random() < self.p_learner:
            self.teacher.__dict__.update(saved)  # the teacher's turn was not played
            log.learner_played += 1
            log.examples.append(
                {
                    "task_id": log.task_id,
                    "seed": log.seed,
                    "messages": [*messages, want],
                    "tools": log.tools,
                    "train": [False] * len(messages) + [True],
                }
            )
            log.played.append((len(messages), got, False))
            self._learner_turn = (len(messages), got)
            return got
        log.played.append((len(messages), want, True))
        return want

    def __call__(self, obs: Observation) -> Any:
        raise InvalidOptionError("DaggerAgent is asynchronous: run it with tau_env.aevaluate.")


def _log_path(folder: Path, task_id: str, seed: int) -> Path:
    digest = hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return folder / f"{digest}-{seed}.json"


def save_log(log: EpisodeLog, folder: Path) -> None:
    """Write one episode's log to ``folder`` (atomically: a write cut short leaves the last one)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = _log_path(folder, log.task_id, log.seed)
    data = dataclasses.asdict(log)
    data["played"] = [[pos, message, trained] for pos, message, trained in log.played]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")  # ASCII escapes: a lone surrogate a model wrote round-trips
    os.replace(tmp, path)


def load_log(folder: Path, task_id: str, seed: int) -> EpisodeLog | None:
    """The log :func:`save_log` wrote for the episode ``(task_id, seed)``, or None (none, or not
    readable as one).
    """
    path = _log_path(folder, task_id, seed)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        data["played"] = [(int(pos), dict(message), bool(trained)) for pos, message, trained in data["played"]]
        log = EpisodeLog(**data)
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        return None
    return log if (log.task_id, log.seed) == (task_id, seed) else None


def episode_examples(log: EpisodeLog, final_messages: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The SFT examples of one episode: those labelled at a slip, then (when the learner played a
    turn) the conversation trained on the teacher's turns after the first slip.

    ``final_messages`` is the agent's whole chat at the episode's end (its record's
    ``agent_view``); without it, the last observation and the last played turn. A played turn the
    chat does not hold where it was played (the env refused or rewrote it) is not trained.
    """
    out = list(log.examples)
    if not log.played:
        return out
    chat = list(final_messages) if final_messages is not None else [*log.last_messages, log.played[-1][1]]
    first_slip = next((pos for pos, _, trained in log.played if not trained), None)
    if first_slip is None:
        return out
    train = [False] * len(chat)
    for pos, message, trained in log.played:
        if trained and pos > first_slip and pos < len(chat) and chat[pos].get("role") == "assistant":
            if same_turn(chat[pos], message):
                train[pos] = True
    if any(train):
        end = max(i for i, t in enumerate(train) if t) + 1
        out.append(
            {"task_id": log.task_id, "seed": log.seed, "messages": chat[:end], "tools": log.tools, "train": train[:end]}
        )
    return out


def collect(
    checkpoint: str | Path,
    out: str | Path,
    *,
    tasks: str | Path | None = None,
    task_ids: list[str] | None = None,
    env: str = "harbor-bank-v0",
    trials: int = 1,
    seed: int = 0,
    p_learner: float = 0.5,
    temperature: float = 0.3,
    max_new_tokens: int | None = None,
    max_steps: int = 40,
    retrieval: str | None = None,
    lookup: str = "early",
    device: str = "auto",
    restart: bool = False,
) -> dict[str, Any]:
    """Play ``checkpoint`` with the teacher labelling it (:class:`DaggerAgent`) on ``task_ids`` of
    ``env`` (or of the task file ``tasks``) with the scripted user, and write the examples to
    ``OUT/examples.jsonl`` (episodes in ``OUT/episodes``). Returns the counts, also written to
    ``OUT/summary.json``, with the settings that made them. A folder that holds a summary of the same
    settings (the checkpoint's content, the tasks, trials, seed, probabilities, caps) is read back,
    not played again; of other settings, it is refused. A round cut short (``OUT/round.json``, no
    summary yet) goes on where it stopped: its finished episodes, with the logs saved after every
    turn in ``OUT/logs``, are kept and only the others are played. ``restart``: start over in ``OUT``
    (what a round wrote there goes, once the checkpoint and the tasks have loaded). ``device``: where
    the checkpoint generates (``auto``: a GPU when torch sees one, else the CPU); not a setting.
    """
    from tau_env.reference_trainers.checkpoint import check_out_apart, checkpoint_digest, hold_checkpoint
    from tau_env.reference_trainers.cpu_common import content_digest

    out = Path(out)
    for p in (out, *out.parents):
        if p.exists() or p.is_symlink():
            if not p.is_dir():
                raise InvalidOptionError(f"--out {out}: {p} is a file, not a folder; pass another --out.")
            break
    # a run folder: its latest checkpoint, recorded as such, held for the round (a live run keeps it)
    lease = hold_checkpoint(checkpoint)
    try:
        checkpoint = lease.path
        check_out_apart(out, checkpoint)  # the round's files in the model's folder would change its digest
        tasks_file = Path(tasks) if tasks is not None else None
        if tasks_file is not None and not tasks_file.is_file():
            raise InvalidOptionError(
                f"--tasks {tasks_file} is no file; pass a task file (a synthesis run's tasks.jsonl)."
            )
        settings = {
            "checkpoint": checkpoint_digest(checkpoint),
            "env": env,
            "tasks": content_digest(tasks_file.read_bytes()) if tasks_file is not None else None,
            "task_ids": sorted(set(task_ids)) if task_ids else None,
            "trials": trials,
            "seed": seed,
            "p_learner": p_learner,
            "temperature": temperature,
            "max_new_tokens": max_new_tokens,
            "max_steps": max_steps,
            "retrieval": retrieval,
            "lookup": lookup,
        }
        out.mkdir(parents=True, exist_ok=True)
        lock = FolderLock(
            out / LOCK_NAME,
            lambda pid: ResultsFolderError(
                f"{out} is in use by another DAgger command{pid}; wait for it, or pass another --out."
            ),
        )
        try:
            return _collect_locked(checkpoint, out, settings, tasks, task_ids, restart, device, lease)
        finally:
            lock.release()
    finally:
        lease.release()


#: What a round writes in its folder (``restart`` removes these, and nothing else).
ROUND_FILES = ("summary.json", "round.json", "round.tmp", "examples.jsonl")
ROUND_DIRS = ("logs", "episodes")


def _round_settings(path: Path) -> dict[str, Any] | None:
    """The settings a DAgger round recorded in ``path`` (its round.json or summary.json), or None when
    the file is absent or not one of a round's.
    """
    try:
        found = json.loads(path.read_text(encoding="utf-8")).get("settings")
    except (OSError, ValueError, RecursionError, AttributeError):
        return None
    return found if isinstance(found, dict) and {"checkpoint", "p_learner", "task_ids"} <= set(found) else None


def _refusal(out: Path, file: str, before: Any, settings: dict[str, Any]) -> ResultsFolderError:
    if not isinstance(before, dict):  # not a round's file: --restart would remove what is not its own
        return ResultsFolderError(f"{out} holds a {file} that is not a DAgger round's; pass another --out.")
    differ = [f"{k}: {before.get(k)} there, {settings[k]} now" for k in settings if before.get(k) != settings[k]]
    what = "an unfinished DAgger round" if file == "round.json" else "a DAgger round"
    return ResultsFolderError(
        f"{out} holds {what} of other settings ({'; '.join(differ)}); pass another --out for these, or "
        "--restart to start over there."
    )


def _collect_locked(
    checkpoint: Path,
    out: Path,
    settings: dict[str, Any],
    tasks: str | Path | None,
    task_ids: list[str] | None,
    restart: bool,
    device: str,
    lease: Any = None,
) -> dict[str, Any]:
    from tau_env.reference_trainers.checkpoint import checkpoint_policy

    import tau_env
    from tau_env import ScriptedUser
    from tau_env.harness import aevaluate

    summary_path, round_path = out / "summary.json", out / "round.json"
    ours = _round_settings(summary_path) is not None or _round_settings(round_path) is not None
    present = [n for n in (*ROUND_FILES, *ROUND_DIRS) if (out / n).exists() or (out / n).is_symlink()]
    if present and not ours:  # someone else's files, or episodes whose settings are lost: nothing is ours to remove
        raise ResultsFolderError(
            f"{out} holds {', '.join(present)} but no DAgger round's settings (round.json); pass another --out."
        )
    if summary_path.is_file() and not restart:
        before = _round_settings(summary_path)
        if before == settings:  # the examples file where this command finds it (the folder may have moved)
            done = json.loads(summary_path.read_text(encoding="utf-8"))
            return {
                **done,
                "examples_file": str((out / "examples.jsonl").resolve()),
                "checkpoint_path": str(Path(checkpoint).resolve()),
            }
        raise _refusal(out, "summary.json", before, settings)
    # a round cut short (Ctrl-C, a crash) left its settings, its finished episodes and their logs:
    # the same command goes on from there, other settings are refused
    if round_path.is_file() and not restart:
        before = _round_settings(round_path)
        if before != settings:
            raise _refusal(out, "round.json", before, settings)
    # named by its content in the episodes' record, not by the path it was read from: the same checkpoint
    # named another way (a relative path, a moved folder) resumes the round
    learner, info = checkpoint_policy(
        checkpoint,
        temperature=settings["temperature"],
        max_new_tokens=settings["max_new_tokens"],
        device=device,
        name=f"checkpoint {settings['checkpoint']}",
    )
    if lease is not None:  # loaded: the run may prune it while the round plays
        lease.release()
    agent = DaggerAgent(learner, p_learner=settings["p_learner"], seed=settings["seed"], lookup=settings["lookup"])
    agent.log_dir = out / "logs"
    trained = info.get("agent") or {}
    kwargs: dict[str, Any] = {
        "max_steps": settings["max_steps"],
        "retrieval": settings["retrieval"] or trained.get("retrieval") or "grep",
    }
    if tasks is not None:
        kwargs["tasks"] = str(tasks)
    # what the round plays is checked before anything of an earlier round goes or this one is recorded
    env = settings["env"]
    probe = tau_env.make(env, **kwargs)  # the task file loads and its tasks can start; the retrieval exists
    try:
        for task_id in task_ids or ():
            probe.domain.task(task_id)
    finally:
        probe.close()
    if restart:
        for name in ROUND_FILES:
            (out / name).unlink(missing_ok=True)
        for name in ROUND_DIRS:
            if (out / name).is_symlink():
                (out / name).unlink()  # the link, not what it points at: the new round writes here
            elif (out / name).is_dir():
                shutil.rmtree(out / name)
    if not round_path.is_file():
        tmp = round_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"settings": settings}, indent=1), encoding="utf-8")
        os.replace(tmp, round_path)
    run = asyncio.run(
        aevaluate(
            env,
            agent,
            ScriptedUser(),
            task_ids=task_ids or None,
            trials=settings["trials"],
            seed=settings["seed"],
            concurrency=1,
            out_dir=out / "episodes",
            resume=True,  # the episodes an interrupted run of this round finished are kept
            config={
                "dagger": {
                    "checkpoint": settings["checkpoint"],
                    "p_learner": settings["p_learner"],
                    "temperature": settings["temperature"],
                }
            },
            **kwargs,
        )
    )
    records = {
        (r["task_id"], int(r.get("seed") or 0)): r
        for r in (
            json.loads(x)
            for x in (Path(run.out_dir) / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()
            if x.strip()
        )
    }
    logs: dict[tuple[str, int], EpisodeLog] = {}
    for key in records:
        log = agent.logs.get(key) or load_log(agent.log_dir, *key)  # played now, or by the interrupted run
        if log is None:
            raise ResultsFolderError(
                f"{out}: episode {key[0]!r} (seed {key[1]}) is finished but its log is missing or damaged "
                f"in {agent.log_dir}; pass --restart to play the round again."
            )
        logs[key] = log
    examples: list[dict[str, Any]] = []
    turns = agreed = played = 0
    for key, log in sorted(logs.items()):
        record = records.get(key)
        view = (record or {}).get("agent_view") or {}
        examples += episode_examples(log, view.get("messages") if isinstance(view, dict) else None)
        turns, agreed, played = turns + log.turns, agreed + log.agreed, played + log.learner_played
    with (out / "examples.jsonl").open("w", encoding="utf-8") as f:
        for ex in examples:
            f.write(json.dumps(ex, ensure_ascii=False) + "\n")
    summary = {
        "episodes": len(logs),
        "resumed_episodes": run.resumed,
        "turns": turns,
        "agreed": agreed,
        "learner_played": played,
        "examples": len(examples),
        "trained_turns": sum(sum(ex["train"]) for ex in examples),
        "examples_file": str((out / "examples.jsonl").resolve()),
        "checkpoint_path": str(Path(checkpoint).resolve()),
        "pass@1_mixed": run.metrics.get("pass@1"),
        "settings": settings,
    }
    summary_path.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tau_env.reference_trainers.dagger", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--checkpoint",
        type=Path,
        required=True,
        help="a trainer's checkpoint folder, or its run folder (the latest checkpoint)",
    )
    p.add_argument("--out", type=Path, required=True, help="folder for examples.jsonl, summary.json and the episodes")
    p.add_argument(
        "--env", "--domain", dest="env", default="harbor-bank-v0", help="environment id (sft, grpo: --domain)"
    )
    p.add_argument("--tasks", type=Path, default=None, help="a task file (a synthesis run's tasks.jsonl)")
    p.add_argument("--task", action="append", default=[], help="a task id (repeat; default: every task)")
    p.add_argument("--trials", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--p-learner", type=float, default=0.5, help="probability the checkpoint's turn is played where they differ"
    )
    p.add_argument("--temperature", type=float, default=0.3)
    p.add_argument("--max-tokens", type=int, default=None, help="per agent turn (default: the checkpoint's)")
    p.add_argument("--max-steps", type=int, default=40)
    p.add_argument("--retrieval", default=None, help="default: the checkpoint's")
    p.add_argument(
        "--restart",
        action="store_true",
        help="start over in --out (default: a round there of the same settings goes on)",
    )
    p.add_argument(
        "--device", default="auto", help="where the checkpoint generates: auto (a GPU if torch sees one), cpu, cuda[:N]"
    )
    args = p.parse_args(argv)
    if not 0.0 <= args.p_learner <= 1.0:
        p.error(f"--p-learner must be in [0, 1], not {args.p_learner}")
    if args.trials < 1:
        p.error(f"--trials must be at least 1, not {args.trials}")
    if not (math.isfinite(args.temperature) and args.temperature >= 0):
        p.error(f"--temperature must be a number at least 0, not {args.temperature}")
    for flag, value in (("--max-steps", args.max_steps), ("--max-tokens", args.max_tokens)):
        if value is not None and value < 1:
            p.error(f"{flag} must be at least 1, not {value}")
    from tau_env.reference_trainers._extras import require

    require("train", "torch", "transformers")
    from tau_env.reference_trainers.cpu_common import check_device, run_main

    try:
        check_device(args.device)
    except InvalidOptionError as e:
        p.error(str(e))
    return run_main(p.prog, lambda: _collect_and_print(args), "the same command goes on from there")


def _collect_and_print(args: argparse.Namespace) -> int:
    summary = collect(
        args.checkpoint,
        args.out,
        tasks=args.tasks,
        task_ids=args.task or None,
        env=args.env,
        trials=args.trials,
        seed=args.seed,
        p_learner=args.p_learner,
        temperature=args.temperature,
        max_new_tokens=args.max_tokens,
        max_steps=args.max_steps,
        retrieval=args.retrieval,
        device=args.device,
        restart=args.restart,
    )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
