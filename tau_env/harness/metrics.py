"""Metrics over episodes, as tau-bench defines them.

pass@1 is the mean reward over tasks and trials (its standard error is over per-task means);
pass^k is the mean over tasks of C(c, k) / C(n, k) for a task solved in c of its n trials.
Episodes that ended in an infrastructure error are counted but left out of every score.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from tau_env.env import TerminationReason
from tau_env.harness.episode import EpisodeResult

#: The reason of an episode left out of the scores (equal to the string ``"infrastructure_error"``).
INFRA = TerminationReason.INFRASTRUCTURE_ERROR


def _plain(reason: Any) -> Any:
    """A termination reason as the plain string (or None) that metrics.json holds."""
    return str(reason) if isinstance(reason, TerminationReason) else reason


def pass_hat_k(successes: Sequence[int], trials: Sequence[int], k: int) -> float:
    """Mean over tasks of C(c, k) / C(n, k); tasks with fewer than k trials are left out."""
    vals = [math.comb(c, k) / math.comb(n, k) for c, n in zip(successes, trials) if n >= k]
    return sum(vals) / len(vals) if vals else float("nan")


def _time_to(finished: list[float], fraction: float) -> float | None:
    if not finished:
        return None
    ordered = sorted(finished)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def compute_metrics(
    results: Iterable[EpisodeResult | dict[str, Any]], finished_at: Sequence[float] | None = None
) -> dict[str, Any]:
    """pass@1 (with standard error over tasks), pass^k for k = 1..min trials, per-task results,
    how episodes ended, tool calls, tokens and steps per episode, and (given ``finished_at``,
    seconds from the start of the run) when 50/90/100 % of episodes were done.
    """
    all_rows = [r.__dict__ if isinstance(r, EpisodeResult) else r for r in results]
    rows = [r for r in all_rows if r["termination_reason"] != INFRA]
    per_task: dict[str, list[float]] = {}
    for r in rows:
        per_task.setdefault(r["task_id"], []).append(float(r["reward"]))
    n_tasks = len(per_task)
    means = [sum(v) / len(v) for v in per_task.values()]
    pass1 = sum(r["reward"] for r in rows) / len(rows) if rows else float("nan")
    se = (
        math.sqrt(sum((m - sum(means) / n_tasks) ** 2 for m in means) / (n_tasks - 1)) / math.sqrt(n_tasks)
        if n_tasks > 1
        else 0.0
    )
    succ = [sum(1 for x in v if x >= 1 - 1e-6) for v in per_task.values()]
    trials = [len(v) for v in per_task.values()]
    max_k = min(trials) if trials else 0
    n = len(rows) or 1
    tokens = {"prompt": 0, "completion": 0}
    for r in rows:
        for u in (r.get("usage") or {}).values():
            if not isinstance(u, dict):
                continue
            tokens["prompt"] += u.get("prompt_tokens", 0)
            tokens["completion"] += u.get("completion_tokens", 0)
    out = {
        "episodes": len(rows),
        "infrastructure_errors": len(all_rows) - len(rows),
        "tasks": n_tasks,
        "trials": max_k,
        "pass@1": pass1,
        "pass@1_se": se,
        "pass^k": {str(k): pass_hat_k(succ, trials, k) for k in range(1, max_k + 1)},
        "terminations": dict(Counter(_plain(r["termination_reason"]) for r in all_rows)),
        "mean_steps": sum(r["steps"] for r in rows) / n,
        "mean_tool_calls": sum(r["tool_calls"] for r in rows) / n,
        "mean_tool_errors": sum(r["tool_errors"] for r in rows) / n,
        "mean_prompt_tokens": tokens["prompt"] / n,
        "mean_completion_tokens": tokens["completion"] / n,
        "per_task": {t: {"rewards": v, "successes": c} for (t, v), c in zip(per_task.items(), succ)},
    }
    if finished_at is not None:
        out["time_to_done_s"] = {f"{int(f * 100)}%": _time_to(list(finished_at), f) for f in (0.5, 0.9, 1.0)}
    return out


def format_metrics(m: dict[str, Any], title: str = "") -> str:
    """A short text table of the headline metrics."""
    lines = [title] if title else []
    lines += [
        f"{'tasks':<18}{m['tasks']}",
        f"{'episodes':<18}{m['episodes']}"
        + (
            f" (+{m['infrastructure_errors']} infrastructure errors, not scored)"
            if m.get("infrastructure_errors")
            else ""
        ),
        f"{'pass@1':<18}{m['pass@1']:.3f} ± {m['pass@1_se']:.3f} (s.e.)",
    ]
    lines += [f"{'pass^' + k:<18}{v:.3f}" for k, v in m["pass^k"].items()]
    lines += [
        f"{'mean steps':<18}{m['mean_steps']:.1f}",
        f"{'mean tool calls':<18}{m['mean_tool_calls']:.1f} ({m['mean_tool_errors']:.1f} errors)",
    ]
    if m.get("mean_prompt_tokens") or m.get("mean_completion_tokens"):
        lines.append(
            f"{'mean tokens':<18}{m['mean_prompt_tokens']:.0f} prompt, {m['mean_completion_tokens']:.0f} completion"
        )
    lines.append(f"{'ended by':<18}" + ", ".join(f"{k}: {v}" for k, v in sorted(m["terminations"].items(), key=str)))
    if m.get("time_to_done_s") and any(v is not None for v in m["time_to_done_s"].values()):
        t = m["time_to_done_s"]
        lines.append(f"{'done after':<18}" + ", ".join(f"{k}: {v:.1f} s" for k, v in t.items() if v is not None))
    width = max(len(x) for x in lines)
    return "\n".join([lines[0], "-" * width, *lines[1:]] if title else lines)
