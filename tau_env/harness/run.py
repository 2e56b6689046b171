"""Running many episodes: plans, fresh policies, concurrency, retries, resume, results folders.

A seat's policy is given as a policy (:mod:`tau_env.policy`: copied for each episode), a class, or
a zero-argument factory of policies (called for each episode).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import functools
import gc
import inspect
import os
import re
import time
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tau_env.env import TauEnv
from tau_env.error import Error, InfrastructureError, InvalidOptionError
from tau_env.harness.episode import DEFAULT_LOOP_LIMIT, EpisodeResult, arun_episode, episode_seed, run_episode
from tau_env.harness.metrics import INFRA, compute_metrics, format_metrics
from tau_env.harness.results import ResultsFolder
from tau_env.policy import PolicyLike, is_async_policy
from tau_env.tasks import task_set_digest

#: A seat's policy as ``evaluate`` takes it: a policy (copied per episode), a policy class, or a
#: zero-argument factory of policies.
PolicySource = PolicyLike | type | Callable[[], PolicyLike]


def _factory(policy: PolicySource) -> Callable[[], PolicyLike]:
    """A factory of fresh policies: a class or zero-argument function is called; an instance (or a
    function of the observation) is copied.
    """
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
    """Results of ``evaluate``: every episode (resumed ones included) and the metrics."""

    results: list[EpisodeResult]
    metrics: dict[str, Any]
    out_dir: Path | None = None
    resumed: int = 0  # episodes read back from ``out_dir`` (played by an earlier run), not played now


class _Writer:
    """The results folder of a run (see :mod:`tau_env.harness.results`), or nothing without an ``out_dir``."""

    def __init__(
        self, out_dir: str | Path | None, config: dict[str, Any], plan: list[tuple[str, int, int]], resume: bool
    ):
        self.folder = ResultsFolder(out_dir, config, plan, resume) if out_dir is not None else None
        self.dir = self.folder.dir if self.folder is not None else None
        self.previous = self.folder.previous if self.folder is not None else []

    def episode(self, r: EpisodeResult) -> None:
        if self.folder is not None:
            self.folder.episode(r)

    def finish(self, metrics: dict[str, Any], title: str, results: list[EpisodeResult]) -> None:
        if self.folder is not None:
            self.folder.finish(metrics, format_metrics(metrics, title), [r.to_dict() for r in results], title)

    def close(self) -> None:
        if self.folder is not None:
            self.folder.close()


def _safe_repr(value: Any) -> str:
    """``repr(value)``, or ``<type>`` for a value whose repr raises (or is too deep or long to print)."""
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__}>"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _short_repr(value: Any, width: int = 60) -> str:
    """A caller's value in an error message: its repr, clipped; never raises."""
    return _clip(_safe_repr(value), width)


def check_settings(
    *,
    trials: Any,
    seed: Any,
    loop_limit: Any,
    task_ids: Any = None,
    concurrency: Any = 1,
    episode_retries: Any = 0,
) -> list[str] | None:
    """The task ids as a list (None for the whole pool), after checking every run setting.

    Raises:
        InvalidOptionError: A setting out of range or of the wrong type.
    """
    for name, value, low in (
        ("trials", trials, 1),
        ("concurrency", concurrency, 1),
        ("episode_retries", episode_retries, 0),
        ("loop_limit", loop_limit, 1),
        ("seed", seed, None),
    ):
        if name == "loop_limit" and value is None:
            continue
        if type(value) is not int or (low is not None and value < low):
            need = "an int" + (f" >= {low}" if low is not None else "") + (" or None" if name == "loop_limit" else "")
            raise InvalidOptionError(f"{name} must be {need}; got {_short_repr(value)}.")
    if task_ids is None:
        return None
    ids = list(task_ids) if isinstance(task_ids, Iterable) and not isinstance(task_ids, (str, bytes)) else None
    if not ids or not all(isinstance(t, str) for t in ids):
        raise InvalidOptionError(
            f"task_ids must be a non-empty list of task ids (None for every task); got {_short_repr(task_ids)}."
        )
    return ids


#: Settings of some runners only, and the runners that take them.
_RUNNER_SETTINGS = {
    "concurrency": ("aevaluate", "ray_evaluate"),
    "episode_retries": ("aevaluate", "ray_evaluate"),
    "address": ("ray_evaluate",),
    "chunk_size": ("ray_evaluate",),
}


def _takes_no_arguments(f: Callable[..., Any]) -> bool:
    try:
        inspect.signature(f).bind()
    except TypeError:
        return False
    except ValueError:  # no signature to read (some builtins): trust the caller
        return True
    return True


def check_inputs(
    runner: str,
    env: Any,
    agent: Any,
    user: Any,
    *,
    out_dir: Any,
    config: Any,
    resume: Any,
    progress: Any,
    make_kwargs: dict[str, Any],
) -> None:
    """Check what a runner (``evaluate``, ``aevaluate``, ``ray_evaluate``) was given besides the
    numeric settings (see :func:`check_settings`), before anything runs or is written.

    Raises:
        InvalidOptionError: An argument of the wrong kind, or a keyword of another runner.
    """
    for key in make_kwargs:
        if runner not in _RUNNER_SETTINGS.get(key, (runner,)):
            takers = _RUNNER_SETTINGS[key]
            raise InvalidOptionError(
                f"{key} is a setting of {' and '.join(takers)}, not of {runner}; call {takers[0]} to use it."
            )
    if isinstance(env, TauEnv):
        raise InvalidOptionError(
            "env must be a registered id or a zero-argument factory of envs; got a TauEnv instance (each "
            "episode needs an env of its own): pass its id, or a factory such as lambda: tau_env.make(...)."
        )
    if not isinstance(env, str) and not (callable(env) and _takes_no_arguments(env)):
        raise InvalidOptionError(
            f"env must be a registered id or a zero-argument factory of envs; got {_short_repr(env)}."
        )
    if make_kwargs and not isinstance(env, str):
        raise InvalidOptionError(
            f"Keywords for make ({', '.join(sorted(make_kwargs))}) apply only to a registered id; "
            "env is a factory: give them to it instead."
        )
    for seat, p in (("agent", agent), ("user", user)):
        if not (callable(p) or hasattr(p, "aact")):
            raise InvalidOptionError(
                f"{seat} must be a policy (a function of the observation, or an object with __call__ or aact), "
                f"a policy class or a zero-argument factory of policies; got {_short_repr(p)}."
            )
    if out_dir is not None:
        path = os.fspath(out_dir) if isinstance(out_dir, str | os.PathLike) else None
        try:
            ok = isinstance(path, str) and path.strip() != "" and "\0" not in path and bool(os.fsencode(path))
        except UnicodeEncodeError:
            ok = False
        if not ok:
            raise InvalidOptionError(
                "out_dir must be a folder path (a non-empty str or os.PathLike; the current folder is '.') "
                f"or None; got {_short_repr(out_dir)}."
            )
    if config is not None and not (isinstance(config, dict) and all(isinstance(k, str) for k in config)):
        raise InvalidOptionError(
            f"config must be a dict of extra config.json entries with str keys, or None; got {_short_repr(config)}."
        )
    for name, value in (("resume", resume), ("progress", progress)):
        if type(value) is not bool:
            raise InvalidOptionError(f"{name} must be True or False; got {_short_repr(value)}.")


def _plan(env: TauEnv, task_ids: Sequence[str] | None, trials: int, seed: int) -> list[tuple[str, int, int]]:
    ids = list(dict.fromkeys(task_ids)) if task_ids is not None else list(env.task_pool)  # each task once
    for t in ids:
        env.domain.task(t)  # fail early on a typo
    return [(t, k, episode_seed(seed, t, k)) for k in range(trials) for t in ids]


def _make_env(env: str | Callable[[], TauEnv], **kwargs: Any) -> Callable[[], TauEnv]:
    if isinstance(env, str):
        from tau_env.registry import make

        return lambda: make(env, **kwargs)
    return env


def _qualified(obj: Any) -> str:
    """``module.QualName`` of a class or function (of the object's class, for anything else)."""
    target = obj if isinstance(obj, type) or hasattr(obj, "__qualname__") else type(obj)
    module = getattr(target, "__module__", None)
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or type(target).__name__
    return f"{module}.{name}" if isinstance(module, str) and module else str(name)


def _clipped_repr(value: Any, width: int = 200) -> str:
    """A short repr without memory addresses (which differ between runs), for config.json."""
    return _clip(re.sub(r" at 0x[0-9a-fA-F]+", "", _safe_repr(value)), width)


def _describe(source: PolicySource, policy: PolicyLike) -> Any:
    """A seat's entry in config.json, which identifies the run on resume.

    ``policy`` is a policy ``source`` made (see :func:`_factory`). Its ``describe()``
    (:class:`~tau_env.policy.SupportsDescribe`) when it has one; otherwise its module-qualified class
    (or function) name, and, when ``source`` is a factory, the factory's qualified name with its
    bound arguments (those of a ``functools.partial``, or a closure's values), clipped. Settings a
    policy's constructor took are seen only through ``describe()`` (or a partial's arguments): two
    instances of one class without ``describe()`` describe alike.
    """
    d = getattr(policy, "describe", None)
    if callable(d):
        return d()
    name = _qualified(policy)
    if source is policy or source is type(policy) or isinstance(source, type):
        return name
    if not isinstance(source, functools.partial | types.FunctionType):
        return name  # an instance, copied per episode
    if isinstance(source, functools.partial):
        bound = [*map(_clipped_repr, source.args), *(f"{k}={_clipped_repr(v)}" for k, v in source.keywords.items())]
        maker = _qualified(source.func)
    else:
        cells = []
        for c in source.__closure__ or ():
            try:
                cells.append(_clipped_repr(c.cell_contents))
            except ValueError:  # an empty cell
                cells.append("<empty>")
        bound, maker = cells, _qualified(source)
    args = ", ".join(bound)
    return f"{name} from {maker}({args if len(args) <= 300 else args[:297] + '...'})"


@dataclass
class _Run:
    """What the backends share: the first env, the plan, fresh policies, the results folder (locked
    until ``close``; use the run as a context manager).
    """

    make_env: Callable[[], TauEnv]
    first: TauEnv
    plan: list[tuple[str, int, int]]  # what is left to run
    order: dict[tuple[str, int], int]  # (task, trial) -> place in the whole plan
    new_agent: Callable[[], PolicyLike]
    new_user: Callable[[], PolicyLike]
    writer: _Writer
    bar: Any
    started: float = field(default_factory=time.perf_counter)
    done: list[EpisodeResult] = field(default_factory=list)
    finished_at: list[float] = field(default_factory=list)

    @classmethod
    def prepare(
        cls,
        env: Any,
        agent: PolicySource,
        user: PolicySource,
        task_ids: Sequence[str] | None,
        trials: int,
        seed: int,
        out_dir: str | Path | None,
        progress: bool,
        config: dict[str, Any],
        make_kwargs: dict[str, Any],
        resume: bool,
        loop_limit: int | None,
    ) -> _Run:
        from tau_env import __version__

        make_env = _make_env(env, **make_kwargs)
        first = make_env()
        try:
            plan = _plan(first, task_ids, trials, seed)
            new_agent, new_user = _factory(agent), _factory(user)
            sample_agent, sample_user = new_agent(), new_user()
            cfg = {
                "tau_env_version": __version__,
                "env": env if isinstance(env, str) else repr(first),
                "domain": first.domain.name,
                "retrieval": first.retrieval,
                "max_steps": first.max_steps,
                "trials": trials,
                "seed": seed,
                "loop_limit": loop_limit,
                **first.domain.prompt_config(),  # prompt style, user prompt version, guideline hashes
                "agent": _describe(agent, sample_agent),
                "user": _describe(user, sample_user),
                "tasks": sorted({t for t, _, _ in plan}),
                **_recorded(make_kwargs, first),
                **config,
            }
            writer = _Writer(out_dir, cfg, plan, resume)
        except BaseException:
            first.close()
            raise
        done = {(r.task_id, r.trial) for r in writer.previous}
        todo = [p for p in plan if (p[0], p[1]) not in done]
        order = {(t, k): i for i, (t, k, _) in enumerate(plan)}
        try:
            bar = _bar(len(todo), progress)
        except BaseException:
            writer.close()
            first.close()
            raise
        return cls(make_env, first, todo, order, new_agent, new_user, writer, bar)

    def __enter__(self) -> _Run:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.writer.close()
        self.first.close()  # closed by finish already, unless the run failed
        if self.bar is not None:
            self.bar.close()

    def record(self, r: EpisodeResult) -> None:
        self.done.append(r)
        self.finished_at.append(time.perf_counter() - self.started)
        self.writer.episode(r)
        _tick(self.bar, self.done)

    def finish(self, results: list[EpisodeResult], envs: Iterable[TauEnv]) -> EvalRun:
        """Close the envs, compute metrics over the resumed and new episodes (in plan order), write the files."""
        for e in envs:
            e.close()
        everything = sorted(self.writer.previous + list(results), key=lambda r: self.order[(r.task_id, r.trial)])
        metrics = compute_metrics(everything, self.finished_at)
        self.writer.finish(metrics, f"{self.first.domain.name}: {len(everything)} episodes", everything)
        return EvalRun(everything, metrics, self.writer.dir, len(self.writer.previous))


def _recorded(make_kwargs: dict[str, Any], env: TauEnv) -> dict[str, Any]:
    """``make_kwargs`` as config.json keeps them: ``tasks`` (a file or a list of tasks) becomes its
    source and a digest of the tasks' content, so resuming on other tasks is refused.
    """
    kw = dict(make_kwargs)
    if "tasks" in kw:
        source = kw.pop("tasks")
        kw["task_source"] = os.fspath(source) if isinstance(source, str | os.PathLike) else "(a list of tasks)"
        kw["task_set_sha256"] = task_set_digest(env.domain.tasks)
    return kw


def _is_async(policy_factory: Callable[[], PolicyLike]) -> bool:
    return is_async_policy(policy_factory())


def evaluate(
    env: str | Callable[[], TauEnv],
    agent: PolicySource,
    user: PolicySource,
    *,
    task_ids: Sequence[str] | None = None,
    trials: int = 1,
    seed: int = 0,
    out_dir: str | Path | None = None,
    progress: bool = False,
    config: dict[str, Any] | None = None,
    resume: bool = True,
    loop_limit: int | None = DEFAULT_LOOP_LIMIT,
    **make_kwargs: Any,
) -> EvalRun:
    """Run every (task, trial) episode, one at a time.

    Args:
        env: A registered id (``make_kwargs`` go to ``make``) or a zero-argument env factory.
        agent: Agent policy (:class:`~tau_env.policy.Policy`, :class:`~tau_env.policy.AsyncPolicy`
            or a function of the observation): a class, a zero-argument factory, or an instance
            (copied per episode). Asynchronous policies (LLM ones) are run by :func:`aevaluate`
            with concurrency 1.
        user: User policy, in the same forms.
        task_ids: Tasks to run (all of the env's task pool by default; a task named twice runs once).
        trials: Trials per task (an int >= 1).
        seed: Base seed; each episode's seed is derived from (seed, task, trial).
        out_dir: Folder for config.json, trajectories.jsonl, metrics.json, summary.txt and
            report.html, locked for the run (see :mod:`tau_env.harness.results`).
        progress: Show a progress bar with the live pass rate on stderr (when it is a terminal).
        config: Extra entries for config.json (e.g. model names); they identify the run.
        resume: With an ``out_dir`` that holds finished episodes of the same settings, skip them
            (default); False starts over. Other settings raise
            :class:`~tau_env.error.ResultsFolderError`; more or fewer trials are fine.
        loop_limit: End an episode with reason "loop" when the agent repeats one action this many
            times (an int >= 1, or None for no limit).

    Raises:
        InvalidOptionError: A setting out of range or of the wrong type, an env instance (pass its id
            or a factory), make keywords with an env factory, or a setting of another runner
            (``concurrency``: use :func:`aevaluate`).
        ResultsFolderError: ``out_dir`` cannot be written, another run holds it, or it holds a
            run with other settings.
    """
    task_ids = check_settings(trials=trials, seed=seed, loop_limit=loop_limit, task_ids=task_ids)
    inputs = {"out_dir": out_dir, "config": config, "resume": resume, "progress": progress}
    check_inputs("evaluate", env, agent, user, **inputs, make_kwargs=make_kwargs)
    if _is_async(_factory(agent)) or _is_async(_factory(user)):
        return asyncio.run(
            aevaluate(
                env,
                agent,
                user,
                task_ids=task_ids,
                trials=trials,
                seed=seed,
                concurrency=1,
                out_dir=out_dir,
                progress=progress,
                config=config,
                resume=resume,
                loop_limit=loop_limit,
                **make_kwargs,
            )
        )
    args = (task_ids, trials, seed, out_dir, progress, config or {}, make_kwargs, resume, loop_limit)
    with _Run.prepare(env, agent, user, *args) as run:
        for task_id, trial, ep_seed in run.plan:
            run.record(run_episode(run.first, run.new_agent(), run.new_user(), task_id, ep_seed, trial, loop_limit))
        return run.finish(run.done, [run.first])


async def aevaluate(
    env: str | Callable[[], TauEnv],
    agent: PolicySource,
    user: PolicySource,
    *,
    task_ids: Sequence[str] | None = None,
    trials: int = 1,
    seed: int = 0,
    concurrency: int = 32,
    out_dir: str | Path | None = None,
    progress: bool = False,
    config: dict[str, Any] | None = None,
    resume: bool = True,
    loop_limit: int | None = DEFAULT_LOOP_LIMIT,
    episode_retries: int = 2,
    **make_kwargs: Any,
) -> EvalRun:
    """Like :func:`evaluate`, with up to ``concurrency`` episodes in flight on one event loop.

    An episode whose model server fails (:class:`~tau_env.error.InfrastructureError`) is run again
    from the start, up to ``episode_retries`` times (an int >= 0); then it is recorded with
    termination reason ``"infrastructure_error"`` and left out of the scores. Results come back in
    plan order.

    Episodes start one event-loop iteration apart; in the loop's idle time, new envs read their
    database schemas and envs no episode needs any more are closed. Python's cycle collector is
    off while the episodes start, and the objects alive then are frozen (``gc.freeze``) until
    the run ends; the collector is left as it was found, and a caller's own freeze alone.
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
    check_inputs("aevaluate", env, agent, user, **inputs, make_kwargs=make_kwargs)
    extra = {**(config or {}), "concurrency": concurrency}
    args = (task_ids, trials, seed, out_dir, progress, extra, make_kwargs, resume, loop_limit)
    with _Run.prepare(env, agent, user, *args) as run:
        results, pool = await run_plan(
            run.make_env,
            run.new_agent,
            run.new_user,
            run.plan,
            concurrency,
            loop_limit,
            episode_retries,
            run.record,
            first=run.first,
        )
        return run.finish(results, pool)


async def run_plan(
    make_env: Callable[[], TauEnv],
    new_agent: Callable[[], PolicyLike],
    new_user: Callable[[], PolicyLike],
    plan: Sequence[tuple[str, int, int]],
    concurrency: int,
    loop_limit: int | None,
    episode_retries: int,
    on_result: Callable[[EpisodeResult], None] | None = None,
    first: TauEnv | None = None,
) -> tuple[list[EpisodeResult], list[TauEnv]]:
    """Run ``plan`` with up to ``concurrency`` episodes in flight; results in plan order, and the envs used
    (those that no episode needed at the end may be closed already; closing again is harmless).
    """
    n_envs = max(1, min(concurrency, len(plan)))
    pool = ([first] if first is not None else []) + [make_env() for _ in range(n_envs - (first is not None))]
    free: asyncio.Queue[TauEnv] = asyncio.Queue()
    for e in pool:
        free.put_nowait(e)
    results: list[EpisodeResult | None] = [None] * len(plan)
    idle = _IdleWork()
    unstarted = [len(plan)]  # episodes that have no env yet
    new = set(map(id, pool))  # envs that have not played yet: their first reset opens a connection

    async def one(i: int, task_id: str, trial: int, ep_seed: int) -> None:
        e = await free.get()
        unstarted[0] -= 1
        if id(e) in new:
            new.discard(id(e))
            idle.add(lambda: e.db.read_schema())  # runs after the reset, once the episode awaits a model
        try:
            for attempt in range(episode_retries + 1):
                try:
                    results[i] = await arun_episode(e, new_agent(), new_user(), task_id, ep_seed, trial, loop_limit)
                    break
                except InfrastructureError as err:
                    if attempt == episode_retries:
                        results[i] = EpisodeResult(
                            task_id, trial, ep_seed, 0.0, INFRA, e.num_steps, 0, 0, {}, e.trajectory, 0.0, {}, str(err)
                        )
        finally:
            free.put_nowait(e)
            if not unstarted[0]:  # no episode will need it again: close it while the loop has time
                idle.add(e.close)
        if on_result is not None:
            on_result(results[i])

    worker = asyncio.ensure_future(idle.run())
    tasks: list[asyncio.Task[None]] = []
    with _quiet_collector() as launched:
        try:
            # Start the episodes one loop iteration apart while envs are free, as the stub's timers
            # would: each episode's first request leaves (connection made, request written) as soon
            # as it is reset rather than after a thousand resets, and replies come back staggered.
            idle.hold = True
            for i, p in enumerate(plan):
                tasks.append(asyncio.ensure_future(one(i, *p)))
                if not free.empty():
                    await asyncio.sleep(0)
            idle.hold = False
            launched()
            await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            raise
        finally:
            worker.cancel()
    return [r for r in results if r is not None], pool


@contextlib.contextmanager
def _quiet_collector() -> Iterator[Callable[[], None]]:
    """Keep Python's cycle collector out of a run's way, and restore it as it was.

    While the episodes start, every new env, connection and episode allocates, which would set off
    full collections (tens of milliseconds each, examining every object) in the middle of the
    start: the collector is off until the block calls the function it is given. Then the objects
    alive at that point (the envs, the domain, the caller's) are frozen (``gc.freeze``), so that
    later collections examine only what the episodes allocate; they are unfrozen when the block
    ends. Nothing is frozen when something else has frozen objects already (its freeze is left
    alone), and a collector the caller had turned off stays off.
    """
    enabled, froze = gc.isenabled(), False

    def launched() -> None:
        nonlocal froze
        if gc.get_freeze_count() == 0:
            gc.freeze()
            froze = True
        if enabled:
            gc.enable()

    gc.disable()
    try:
        yield launched
    finally:
        if froze:
            gc.unfreeze()
        if enabled:
            gc.enable()


class _IdleWork:
    """Work the event loop does while it would otherwise wait, so that it is not in a burst's way:
    each new env's database reads its schema (:meth:`~tau_env.db.EpisodeDB.read_schema`, half a
    millisecond) while its episode waits for a model, rather than on the episode's first query,
    when a thousand episodes in flight would pay it together; envs no episode will use again are
    closed. A slice of at most ``SLICE`` seconds runs after a wait of ``TICK`` seconds in which
    the loop's thread was busy less than ``BUSY`` of the time (replies that trickle in keep it
    waiting) and while nothing holds it; what is left undone is done where it is needed (a first
    query reads the schema; the run closes its envs at the end).
    """

    TICK = 0.001
    BUSY = 0.2
    SLICE = 0.002

    def __init__(self) -> None:
        self.todo: collections.deque[Callable[[], Any]] = collections.deque()
        self.wake = asyncio.Event()
        self.hold = False

    def add(self, job: Callable[[], Any]) -> None:
        self.todo.append(job)
        self.wake.set()

    async def run(self) -> None:
        todo, clock, cpu = self.todo, time.perf_counter, time.thread_time
        while True:
            if not todo:
                self.wake.clear()
                await self.wake.wait()
            t0, c0 = clock(), cpu()
            await asyncio.sleep(self.TICK)
            t1 = clock()
            if self.hold or cpu() - c0 > self.BUSY * (t1 - t0):  # the loop had other work meanwhile
                continue
            end = t1 + self.SLICE
            while todo and clock() < end:
                try:
                    todo.popleft()()
                except Error:  # an env closed meanwhile: nothing left to do for it
                    pass


def _bar(total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="episodes", unit="ep", dynamic_ncols=True, disable=None)  # off when not a TTY


def _tick(bar: Any, done: list[EpisodeResult]) -> None:
    if bar is not None:
        bar.update(1)
        scored = [r for r in done if r.termination_reason != INFRA]
        if scored:
            bar.set_postfix(pass_rate=f"{sum(r.reward for r in scored) / len(scored):.3f}")
