"""SFT and RL datasets from synthesized tasks, through tau_env's harness.

- :func:`build_sft`: teacher rollouts on (verified, single-request) tasks; the successful episodes
  without loops become chat-format SFT examples, written as ``tau-env export-sft`` writes them.
- :func:`build_rl`: G rollouts of a policy per (composite) task; the tasks whose pass rate lies in
  a band (neither too easy nor too hard) are written as an ordinary task file, each with its
  rollout statistics in ``metadata["rollouts"]``.

Both resume: the rollouts go to a results folder (``out_dir/rollouts``) that ``aevaluate``
continues where a killed run stopped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tau_env
from tau_env import ScriptedUser, Task, load_tasks, save_tasks
from tau_env import sft as tau_sft
from tau_env.error import InvalidOptionError
from tau_env.llm import ChatClient, LLMAgent, LLMUser

#: The tasks' rollouts, a results folder of the harness, under ``out_dir``.
ROLLOUTS = "rollouts"


def _policy(source: Any, seat: str) -> Any:
    """A policy source for ``aevaluate``: a ChatClient (or its settings) becomes an LLM policy of ``seat``."""
    wrap = LLMAgent if seat == "agent" else LLMUser
    if source is None and seat == "user":
        return ScriptedUser
    if isinstance(source, ChatClient):
        return wrap(source)
    if isinstance(source, Mapping):
        settings = dict(source)
        if "model" not in settings:
            raise InvalidOptionError(
                f"The {seat} settings need a 'model' (ChatClient keywords: model, base_url, sampling, ...); "
                f"got keys {sorted(settings)}."
            )
        return wrap(ChatClient(**settings))
    if source is None:
        raise InvalidOptionError(f"No {seat} given: pass a ChatClient, its settings as a dict, or a policy.")
    return source


def _rollouts_dir(out: Path, tasks_path: str | os.PathLike[str]) -> Path:
    """``out/rollouts-<digest>``: the episodes of this task set. A run's task file changes (topped up,
    decontaminated): its episodes go to a folder of their own instead of a results folder that
    would refuse the new set; ``kept.jsonl`` and ``sft.jsonl`` are rebuilt from the current one.
    """
    from tau_env.tasks import load_tasks, task_set_digest

    return out / f"{ROLLOUTS}-{task_set_digest(load_tasks(tasks_path))[:12]}"


def _fresh_results(e: Exception, folder: Path, stage: str) -> Exception:
    """A results folder that refused this stage's settings (another teacher, user or trials), as an
    error that says what to do in a synthesis run (its stage has no --restart or --out).
    """
    from tau_env.error import ResultsFolderError

    first = str(e).split(". Pass --restart")[0]
    return ResultsFolderError(
        f"{first}. `tau-env synth {stage}` plays into {folder}: delete that folder to play the tasks again with "
        "these settings."
    )


async def _play(
    stage: str,
    out: Path,
    tasks_path: str | os.PathLike[str],
    domain_id: str,
    loader: Mapping[str, Any] | None,
    agent: Any,
    user: Any,
    trials: int,
    *,
    seed: int,
    concurrency: int,
    progress: bool,
) -> Path:
    """Play every task of ``tasks_path`` ``trials`` times into its task set's results folder
    (:func:`_rollouts_dir`), resuming what is there; returns the folder.
    """
    from tau_env.error import ResultsFolderError

    folder = _rollouts_dir(out, tasks_path)
    try:
        await tau_env.aevaluate(
            _env_factory(tasks_path, domain_id, loader),
            _policy(agent, "agent"),
            _policy(user, "user"),
            trials=trials,
            seed=seed,
            concurrency=concurrency,
            out_dir=folder,
            progress=progress,
        )
    except ResultsFolderError as e:
        raise _fresh_results(e, folder, stage) from e
    return folder


def _env_factory(tasks_path: str | os.PathLike[str], domain_id: str, loader: Mapping[str, Any] | None) -> Any:
    kwargs = dict(loader or {})
    path = os.fspath(tasks_path)

    def make() -> tau_env.TauEnv:
        return tau_env.make(domain_id, tasks=path, **kwargs)

    return make


def _calls(episode: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Every tool call of an episode (either seat) as (name, arguments, output)."""
    out = []
    for ev in episode.get("events") or []:
        msg = ev.get("message") or {}
        results = {r.get("tool_call_id"): r.get("content") for r in ev.get("tool_results") or [] if isinstance(r, dict)}
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") or {}
            args = fn.get("arguments")
            try:
                args = json.dumps(json.loads(args), sort_keys=True) if isinstance(args, str) else json.dumps(args)
            except ValueError:
                pass
            out.append((str(fn.get("name")), str(args), str(results.get(call.get("id")))))
    return out


def loop_problem(episode: dict[str, Any], n_reference: int, factor: float, extra: int) -> str | None:
    """Why a successful episode is not teacher data: a repeated identical call with identical
    output ("loop"), or more tool calls than ``factor * n_reference + extra`` ("too_many_calls").
    """
    calls = _calls(episode)
    if len(set(calls)) < len(calls):
        return "loop"
    if len(calls) > factor * n_reference + extra:
        return "too_many_calls"
    return None


def _task_lengths(tasks_path: str | os.PathLike[str]) -> dict[str, int]:
    return {t.id: len(t.actions) for t in load_tasks(tasks_path)}


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


async def build_sft(
    tasks_path: str | os.PathLike[str],
    domain_id: str,
    out_dir: str | os.PathLike[str],
    *,
    agent: Any,
    user: Any = None,
    trials: int = 1,
    loader: Mapping[str, Any] | None = None,
    max_calls_factor: float = 3,
    max_calls_extra: int = 6,
    concurrency: int = 32,
    seed: int = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """Teacher rollouts on ``tasks_path``; the successful, loop-free episodes as SFT examples.

    Args:
        tasks_path: A task file (e.g. a run's ``tasks.jsonl``).
        domain_id: The registered domain that plays them.
        out_dir: Gets ``rollouts-<digest>/`` (the harness's results folder of this task set), ``kept.jsonl`` (the kept
            episodes), ``sft.jsonl`` (the examples, as ``tau-env export-sft`` writes them) and ``stats.json``.
        agent: The teacher: a :class:`~tau_env.llm.ChatClient`, its keyword settings as a dict, or a policy.
        user: The user seat, in the same forms; None for :class:`~tau_env.ScriptedUser`.
        trials: Episodes per task.
        loader: Keywords for ``tau_env.make`` (e.g. ``{"data_dir": ...}``).
        max_calls_factor: With ``max_calls_extra``, the most tool calls a kept episode may make:
            ``factor * len(reference actions) + extra``.
        concurrency: Episodes in flight.
        seed: Base seed of the episodes.
        progress: Show the harness's progress bar.

    Returns:
        The statistics (also written to ``out_dir/stats.json``).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lengths = _task_lengths(tasks_path)
    rollouts = await _play(
        "sft",
        out,
        tasks_path,
        domain_id,
        loader,
        agent,
        user,
        trials,
        seed=seed,
        concurrency=concurrency,
        progress=progress,
    )
    episodes = list(tau_sft.read_episodes(rollouts))
    successful = list(tau_sft.select(episodes))
    kept, dropped = [], {"failed": len(episodes) - len(successful), "loop": 0, "too_many_calls": 0}
    for ep in successful:
        why = loop_problem(ep, lengths.get(ep["task_id"], 0), max_calls_factor, max_calls_extra)
        if why is None:
            kept.append(ep)
        else:
            dropped[why] += 1
    _write_jsonl(out / "kept.jsonl", kept)
    examples = tau_sft.export(out / "kept.jsonl", jsonl=out / "sft.jsonl")
    stats = {
        "tasks": len(lengths),
        "episodes": len(episodes),
        "successful": len(successful),
        "kept": len(kept),
        "examples": examples,
        "dropped": dropped,
        "tasks_with_examples": len({ep["task_id"] for ep in kept}),
        "pass_rate": len(successful) / len(episodes) if episodes else 0.0,
        "settings": {"trials": trials, "max_calls_factor": max_calls_factor, "max_calls_extra": max_calls_extra},
        "sft": str(out / "sft.jsonl"),
    }
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
    return stats


def _check_band(band: Any) -> tuple[float, float]:
    ok = (
        isinstance(band, tuple | list)
        and len(band) == 2
        and all(isinstance(x, int | float) and not isinstance(x, bool) for x in band)
        and 0.0 <= band[0] <= band[1] <= 1.0
    )
    if not ok:
        raise InvalidOptionError(f"band must be two numbers 0 <= lo <= hi <= 1, got {band!r}; e.g. band=(0.1, 0.9).")
    return float(band[0]), float(band[1])


async def build_rl(
    tasks_path: str | os.PathLike[str],
    domain_id: str,
    out_dir: str | os.PathLike[str],
    *,
    policy: Any,
    user: Any = None,
    rollouts: int = 8,
    band: tuple[float, float] = (0.1, 0.9),
    loader: Mapping[str, Any] | None = None,
    concurrency: int = 32,
    seed: int = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """``rollouts`` episodes of ``policy`` per task; the tasks with a pass rate in ``band`` are kept.

    Args:
        tasks_path: A task file (e.g. a run's ``composite.jsonl``).
        domain_id: The registered domain that plays them.
        out_dir: Gets ``rollouts-<digest>/`` (the harness's results folder of this task set), ``tasks.jsonl`` (the kept
            tasks, ``metadata["rollouts"] = {"n", "passed", "pass_rate"}``) and ``stats.jsonl``
            (one line per task, kept or not).
        policy: The policy under training: a ChatClient, its settings as a dict, or a policy.
        user: The user seat; None for :class:`~tau_env.ScriptedUser`.
        rollouts: Episodes per task (G).
        band: ``(lo, hi)``: a task is kept when ``lo <= pass rate <= hi``.
        loader: Keywords for ``tau_env.make``.
        concurrency: Episodes in flight.
        seed: Base seed of the episodes.
        progress: Show the harness's progress bar.

    Returns:
        Counts: tasks, kept, too easy, too hard, unplayed (every episode an infrastructure error).
    """
    lo, hi = _check_band(band)
    if isinstance(rollouts, bool) or not isinstance(rollouts, int) or rollouts < 1:
        raise InvalidOptionError(f"rollouts must be an integer >= 1, got {rollouts!r}.")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tasks: list[Task] = load_tasks(tasks_path)
    played = await _play(
        "rl",
        out,
        tasks_path,
        domain_id,
        loader,
        policy,
        user,
        rollouts,
        seed=seed,
        concurrency=concurrency,
        progress=progress,
    )
    counts: dict[str, list[int]] = {t.id: [0, 0] for t in tasks}
    for ep in tau_sft.read_episodes(played):
        if ep.get("termination_reason") == "infrastructure_error" or ep["task_id"] not in counts:
            continue  # left out of the scores, as the harness does
        c = counts[ep["task_id"]]
        c[0] += 1
        c[1] += ep["reward"] >= 1.0
    kept: list[Task] = []
    stats_rows = []
    summary = {"tasks": len(tasks), "kept": 0, "too_easy": 0, "too_hard": 0, "unplayed": 0}
    for t in tasks:
        n, passed = counts[t.id]
        rate = passed / n if n else None
        if rate is None:
            why = "unplayed"
        elif rate < lo:
            why = "too_hard"
        elif rate > hi:
            why = "too_easy"
        else:
            why = "kept"
        summary[why] += 1
        stats_rows.append({"id": t.id, "n": n, "passed": passed, "pass_rate": rate, "kept": why == "kept", "why": why})
        if why == "kept":
            meta = {**t.metadata, "rollouts": {"n": n, "passed": passed, "pass_rate": rate}}
            kept.append(t.model_copy(update={"metadata": meta}))
    save_tasks(kept, out / "tasks.jsonl")
    _write_jsonl(out / "stats.jsonl", stats_rows)
    summary.update({"rollouts": rollouts, "band": [lo, hi], "tasks_file": str(out / "tasks.jsonl")})
    return summary
