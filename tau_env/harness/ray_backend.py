"""Episodes spread over a Ray cluster (``pip install 'tau-env[ray]'``).

``ray_evaluate`` cuts the plan into chunks, runs each chunk on a Ray worker (with its own envs
and asyncio concurrency), and writes each chunk's episodes to the same results folder as they
come back. The results folder (its lock, checks and resume) and the metrics are those of the
local backend: the same writer, on the driver.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tau_env.error import DependencyNotInstalled, InvalidOptionError
from tau_env.harness.episode import DEFAULT_LOOP_LIMIT, EpisodeResult
from tau_env.harness.run import EvalRun, PolicySource, _make_env, _Run, check_inputs, check_settings, run_plan
from tau_env.policy import PolicyLike


def _chunk(
    env: Any,
    make_kwargs: dict[str, Any],
    agent_factory: Callable[[], PolicyLike],
    user_factory: Callable[[], PolicyLike],
    plan: Sequence[tuple[str, int, int]],
    concurrency: int,
    loop_limit: int | None,
    episode_retries: int,
) -> list[dict[str, Any]]:
    results, pool = asyncio.run(
        run_plan(
            _make_env(env, **make_kwargs), agent_factory, user_factory, plan, concurrency, loop_limit, episode_retries
        )
    )
    for e in pool:
        e.close()
    return [r.to_dict() for r in results]


def ray_evaluate(
    env: str | Callable[[], Any],
    agent: PolicySource,
    user: PolicySource,
    *,
    task_ids: Sequence[str] | None = None,
    trials: int = 1,
    seed: int = 0,
    concurrency: int = 8,
    out_dir: str | Path | None = None,
    progress: bool = False,
    config: dict[str, Any] | None = None,
    resume: bool = True,
    loop_limit: int | None = DEFAULT_LOOP_LIMIT,
    episode_retries: int = 2,
    address: str | None = None,
    chunk_size: int | None = None,
    **make_kwargs: Any,
) -> EvalRun:
    """Like :func:`~tau_env.aevaluate`, on Ray workers.

    Args:
        concurrency: Episodes in flight per worker task.
        address: The cluster to join (``"auto"``, ``"ray://host:10001"``); a local cluster by default.
        chunk_size: Episodes per Ray task; by default the plan is cut into about four chunks per CPU.
        Other arguments: as :func:`~tau_env.aevaluate`.
    """
    task_ids = check_settings(
        trials=trials,
        seed=seed,
        loop_limit=loop_limit,
        task_ids=task_ids,
        concurrency=concurrency,
        episode_retries=episode_retries,
    )
    inputs = {"out_dir": out_dir, "config": config, "resume": resume, "progress": progress}
    check_inputs("ray_evaluate", env, agent, user, **inputs, make_kwargs=make_kwargs)
    if chunk_size is not None and (type(chunk_size) is not int or chunk_size < 1):
        raise InvalidOptionError(f"chunk_size must be an int >= 1 or None; got {chunk_size!r}.")
    try:
        import ray
    except ImportError as e:
        raise DependencyNotInstalled("The Ray backend needs the 'ray' extra: pip install 'tau-env[ray]'.") from e
    extra = {**(config or {}), "backend": "ray", "concurrency": concurrency}
    args = (task_ids, trials, seed, out_dir, progress, extra, make_kwargs, resume, loop_limit)
    with _Run.prepare(env, agent, user, *args) as run:
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        size = chunk_size or max(1, -(-len(run.plan) // (4 * cpus)))
        chunks = [run.plan[i : i + size] for i in range(0, len(run.plan), size)]
        remote = ray.remote(_chunk)
        pending = {
            remote.remote(env, make_kwargs, run.new_agent, run.new_user, c, concurrency, loop_limit, episode_retries): k
            for k, c in enumerate(chunks)
        }
        by_chunk: dict[int, list[EpisodeResult]] = {}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            k = pending.pop(done[0])
            by_chunk[k] = [EpisodeResult(**r) for r in ray.get(done[0])]
            for r in by_chunk[k]:
                run.record(r)  # written to trajectories.jsonl as each chunk returns
        results = [r for k in range(len(chunks)) for r in by_chunk[k]]
        return run.finish(results, [run.first])
