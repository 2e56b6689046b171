"""Run many episodes: sequential or asyncio-concurrent, with metrics and trajectory logs.

Metrics follow the tau-bench definitions: pass@1 is the mean reward over tasks and trials (its
standard error is over per-task means); pass^k is the mean over tasks of C(c, k) / C(n, k) for a
task solved in c of n trials.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import inspect
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tau_env.env import TauEnv


@dataclass
class EpisodeResult:
    """The outcome of one episode, as written to ``trajectories.jsonl``."""

    task_id: str
    trial: int
    seed: int
    reward: float
    termination_reason: str | None
    steps: int
    tool_calls: int
    tool_errors: int
    grade: dict[str, Any]
    events: list[dict[str, Any]] = field(repr=False)
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def episode_seed(base_seed: int, task_id: str, trial: int) -> int:
    """A stable per-(task, trial) seed, independent of run order and of Python's hash salt."""
    digest = hashlib.sha256(f"{base_seed}:{task_id}:{trial}".encode()).hexdigest()
    return int(digest[:8], 16)


def _reset_policy(policy: Any, task: Any, seed: int) -> None:
    reset = getattr(policy, "reset", None)
    if callable(reset):
        reset(task=task, seed=seed)


def _result(env: TauEnv, trial: int, seed: int, started: float) -> EpisodeResult:
    calls = errors = 0
    for ev in env.trajectory:
        for r in ev.get("tool_results", ()):
            calls += 1
            errors += bool(r["error"])
    grade = env.grade_result.to_dict() if env.grade_result is not None else {}
    return EpisodeResult(
        env.task.id,
        trial,
        seed,
        env.episode_reward,
        env.termination_reason,
        env.num_steps,
        calls,
        errors,
        grade,
        env.trajectory,
        time.perf_counter() - started,
    )


def run_episode(
    env: TauEnv,
    agent: Callable[[dict], Any],
    user: Callable[[dict], Any],
    task_id: str | None = None,
    seed: int = 0,
    trial: int = 0,
) -> EpisodeResult:
    """Play one episode with two synchronous policies (``obs -> action`` callables)."""
    started = time.perf_counter()
    env.reset(seed=seed, options={"task_id": task_id} if task_id is not None else None)
    policies = {"agent": agent, "user": user}
    for p in policies.values():
        _reset_policy(p, env.task, seed)
    for seat in env.agent_iter():
        obs, _, terminated, truncated, _ = env.last()
        env.step(None if terminated or truncated else policies[seat](obs))
    return _result(env, trial, seed, started)


async def _act(policy: Any, obs: dict[str, Any]) -> Any:
    act = getattr(policy, "aact", None)
    out = act(obs) if act is not None else policy(obs)
    return await out if inspect.isawaitable(out) else out


async def arun_episode(
    env: TauEnv, agent: Any, user: Any, task_id: str | None = None, seed: int = 0, trial: int = 0
) -> EpisodeResult:
    """Play one episode; policies may be async (``async def aact(obs)`` or an async ``__call__``)."""
    started = time.perf_counter()
    env.reset(seed=seed, options={"task_id": task_id} if task_id is not None else None)
    policies = {"agent": agent, "user": user}
    for p in policies.values():
        _reset_policy(p, env.task, seed)
    for seat in env.agent_iter():
        obs, _, terminated, truncated, _ = env.last()
        env.step(None if terminated or truncated else await _act(policies[seat], obs))
    return _result(env, trial, seed, started)


# --- metrics ------------------------------------------------------------------------------------
def pass_hat_k(successes: Sequence[int], trials: Sequence[int], k: int) -> float:
    """Mean over tasks of C(c, k) / C(n, k); tasks with fewer than k trials are left out."""
    vals = [math.comb(c, k) / math.comb(n, k) for c, n in zip(successes, trials) if n >= k]
    return sum(vals) / len(vals) if vals else float("nan")


def compute_metrics(results: Iterable[EpisodeResult | dict[str, Any]]) -> dict[str, Any]:
    """pass@1 (with standard error over tasks), pass^k for k = 1..min trials, per-task results,
    termination reasons, and tool calls / steps per episode.
    """
    rows = [r.to_dict() if isinstance(r, EpisodeResult) else r for r in results]
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
    episodes = len(rows) or 1
    return {
        "episodes": len(rows),
        "tasks": n_tasks,
        "trials": max_k,
        "pass@1": pass1,
        "pass@1_se": se,
        "pass^k": {str(k): pass_hat_k(succ, trials, k) for k in range(1, max_k + 1)},
        "terminations": dict(Counter(r["termination_reason"] for r in rows)),
        "mean_steps": sum(r["steps"] for r in rows) / episodes,
        "mean_tool_calls": sum(r["tool_calls"] for r in rows) / episodes,
        "mean_tool_errors": sum(r["tool_errors"] for r in rows) / episodes,
        "per_task": {t: {"rewards": v, "successes": c} for (t, v), c in zip(per_task.items(), succ)},
    }


def format_metrics(m: dict[str, Any], title: str = "") -> str:
    """A short text table of the headline metrics."""
    lines = [title] if title else []
    lines += [
        f"{'tasks':<18}{m['tasks']}",
        f"{'episodes':<18}{m['episodes']}",
        f"{'pass@1':<18}{m['pass@1']:.3f} ± {m['pass@1_se']:.3f} (s.e.)",
    ]
    lines += [f"{'pass^' + k:<18}{v:.3f}" for k, v in m["pass^k"].items()]
    lines += [
        f"{'mean steps':<18}{m['mean_steps']:.1f}",
        f"{'mean tool calls':<18}{m['mean_tool_calls']:.1f} ({m['mean_tool_errors']:.1f} errors)",
        f"{'ended by':<18}" + ", ".join(f"{k}: {v}" for k, v in sorted(m["terminations"].items(), key=str)),
    ]
    width = max(len(x) for x in lines)
    return "\n".join([lines[0], "-" * width, *lines[1:]] if title else lines)


# --- running many ---------------------------------------------------------------------------------
def _factory(policy: Any) -> Callable[[], Any]:
    """A factory of fresh policies: a class or zero-argument function is called; an instance is copied."""
    if isinstance(policy, type):
        return policy
    if callable(policy) and not hasattr(policy, "reset"):
        try:
            params = inspect.signature(policy).parameters.values()
            if all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
                return policy
        except (TypeError, ValueError):
            pass
    return lambda: copy.deepcopy(policy)


@dataclass
class EvalRun:
    """Results of ``evaluate``: every episode and the metrics."""

    results: list[EpisodeResult]
    metrics: dict[str, Any]
    out_dir: Path | None = None


class _Writer:
    def __init__(self, out_dir: str | Path | None, config: dict[str, Any]):
        self.dir = Path(out_dir) if out_dir is not None else None
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            (self.dir / "config.json").write_text(json.dumps(config, indent=2, default=str) + "\n")
            self._traj = open(self.dir / "trajectories.jsonl", "w", encoding="utf-8")

    def episode(self, r: EpisodeResult) -> None:
        if self.dir is not None:
            self._traj.write(json.dumps(r.to_dict(), ensure_ascii=False, default=str) + "\n")
            self._traj.flush()

    def finish(self, metrics: dict[str, Any], title: str) -> None:
        if self.dir is not None:
            self._traj.close()
            (self.dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
            (self.dir / "summary.txt").write_text(format_metrics(metrics, title) + "\n")


def _plan(env: TauEnv, task_ids: Sequence[str] | None, trials: int, seed: int) -> list[tuple[str, int, int]]:
    ids = list(task_ids) if task_ids else list(env.task_pool)
    for t in ids:
        env.domain.task(t)  # fail early on a typo
    return [(t, k, episode_seed(seed, t, k)) for k in range(trials) for t in ids]


def _make_env(env: str | Callable[[], TauEnv], **kwargs: Any) -> Callable[[], TauEnv]:
    if isinstance(env, str):
        from tau_env.registry import make

        return lambda: make(env, **kwargs)
    return env


@dataclass
class _Run:
    """What evaluate and aevaluate share: the first env, the plan, fresh policies, the writer."""

    make_env: Callable[[], TauEnv]
    first: TauEnv
    plan: list[tuple[str, int, int]]
    new_agent: Callable[[], Any]
    new_user: Callable[[], Any]
    writer: _Writer
    bar: Any
    done: list[EpisodeResult] = field(default_factory=list)

    @classmethod
    def prepare(
        cls,
        env: Any,
        agent: Any,
        user: Any,
        task_ids: Sequence[str] | None,
        trials: int,
        seed: int,
        out_dir: str | Path | None,
        progress: bool,
        config: dict[str, Any],
        make_kwargs: dict[str, Any],
    ) -> _Run:
        make_env = _make_env(env, **make_kwargs)
        first = make_env()
        plan = _plan(first, task_ids, trials, seed)
        cfg = {
            **config,
            "env": env if isinstance(env, str) else repr(first),
            "trials": trials,
            "seed": seed,
            "tasks": sorted({t for t, _, _ in plan}),
            **make_kwargs,
        }
        return cls(
            make_env, first, plan, _factory(agent), _factory(user), _Writer(out_dir, cfg), _bar(len(plan), progress)
        )

    def record(self, r: EpisodeResult) -> None:
        self.done.append(r)
        self.writer.episode(r)
        _tick(self.bar, self.done)

    def finish(self, results: list[EpisodeResult], envs: Iterable[TauEnv]) -> EvalRun:
        for e in envs:
            e.close()
        if self.bar is not None:
            self.bar.close()
        metrics = compute_metrics(results)
        self.writer.finish(metrics, f"{self.first.domain.name}: {len(self.plan)} episodes")
        return EvalRun(results, metrics, self.writer.dir)


def evaluate(
    env: str | Callable[[], TauEnv],
    agent: Any,
    user: Any,
    *,
    task_ids: Sequence[str] | None = None,
    trials: int = 1,
    seed: int = 0,
    out_dir: str | Path | None = None,
    progress: bool = False,
    config: dict[str, Any] | None = None,
    **make_kwargs: Any,
) -> EvalRun:
    """Run every (task, trial) episode sequentially.

    Args:
        env: A registered id (``make_kwargs`` go to ``make``) or a zero-argument env factory.
        agent: Agent policy: a class, a zero-argument factory, or an instance (copied per episode).
        user: User policy, in the same forms.
        task_ids: Tasks to run (all of the env's task pool by default).
        trials: Trials per task.
        seed: Base seed; each episode's seed is derived from (seed, task, trial).
        out_dir: Folder for config.json, trajectories.jsonl, metrics.json and summary.txt.
        progress: Show a progress bar with the live pass rate on stderr (when it is a terminal).
        config: Extra entries for config.json (e.g. model names).
    """
    run = _Run.prepare(env, agent, user, task_ids, trials, seed, out_dir, progress, config or {}, make_kwargs)
    for task_id, trial, ep_seed in run.plan:
        run.record(run_episode(run.first, run.new_agent(), run.new_user(), task_id, ep_seed, trial))
    return run.finish(run.done, [run.first])


async def aevaluate(
    env: str | Callable[[], TauEnv],
    agent: Any,
    user: Any,
    *,
    task_ids: Sequence[str] | None = None,
    trials: int = 1,
    seed: int = 0,
    concurrency: int = 32,
    out_dir: str | Path | None = None,
    progress: bool = False,
    config: dict[str, Any] | None = None,
    **make_kwargs: Any,
) -> EvalRun:
    """Like :func:`evaluate`, with up to ``concurrency`` episodes in flight on one event loop.

    Results come back in plan order (task-major within each trial), whatever order episodes end in.
    """
    run = _Run.prepare(
        env,
        agent,
        user,
        task_ids,
        trials,
        seed,
        out_dir,
        progress,
        {**(config or {}), "concurrency": concurrency},
        make_kwargs,
    )
    pool = [run.first] + [run.make_env() for _ in range(max(0, min(concurrency, len(run.plan)) - 1))]
    free: asyncio.Queue[TauEnv] = asyncio.Queue()
    for e in pool:
        free.put_nowait(e)
    results: list[EpisodeResult | None] = [None] * len(run.plan)

    async def one(i: int, task_id: str, trial: int, ep_seed: int) -> None:
        e = await free.get()
        try:
            results[i] = await arun_episode(e, run.new_agent(), run.new_user(), task_id, ep_seed, trial)
        finally:
            free.put_nowait(e)
        run.record(results[i])

    await asyncio.gather(*(one(i, *p) for i, p in enumerate(run.plan)))
    return run.finish([r for r in results if r is not None], pool)


def _bar(total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="episodes", unit="ep", dynamic_ncols=True, disable=None)  # off when not a TTY


def _tick(bar: Any, done: list[EpisodeResult]) -> None:
    if bar is not None:
        bar.update(1)
        bar.set_postfix(pass_rate=f"{sum(r.reward for r in done) / len(done):.3f}")
