"""Playing one episode with two policies, synchronously or on an event loop.

The policies' contract is :mod:`tau_env.policy`: a :class:`~tau_env.policy.Policy`
(``policy(obs) -> action``), an :class:`~tau_env.policy.AsyncPolicy` (``await policy.aact(obs)``)
or a plain function of the observation; ``reset(task=..., seed=...)`` is called before the
episode when the policy has it, and ``usage`` read after it.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from tau_env.env import TauEnv, TerminationReason
from tau_env.messages import Message
from tau_env.policy import Observation, Policy, PolicyLike

#: An agent that repeats the same action this many times in a row ends the episode ("loop").
DEFAULT_LOOP_LIMIT = 5


@dataclass
class EpisodeResult:
    """The outcome of one episode, as written to ``trajectories.jsonl``.

    ``termination_reason`` is a :class:`~tau_env.TerminationReason` (or the reason string a caller
    gave ``env.end_episode``); written to JSON it is the plain string, and a record read back from
    a results folder gets its member again.
    """

    task_id: str
    trial: int
    seed: int
    reward: float
    termination_reason: TerminationReason | str | None
    steps: int
    tool_calls: int
    tool_errors: int
    grade: dict[str, Any]
    events: list[dict[str, Any]] = field(repr=False)
    duration_s: float = 0.0
    usage: dict[str, Any] = field(default_factory=dict)  # tokens and requests per seat, for LLM policies
    error: str | None = None  # the infrastructure error, when termination_reason is "infrastructure_error"
    agent_view: dict[str, Any] = field(default_factory=dict, repr=False)  # the agent's final chat and tools

    def __post_init__(self) -> None:
        reason = self.termination_reason
        if isinstance(reason, str) and not isinstance(reason, TerminationReason):
            try:
                self.termination_reason = TerminationReason(reason)
            except ValueError:
                pass  # a caller's own reason (env.end_episode), kept as given

    def to_dict(self) -> dict[str, Any]:
        # shallow: the events are plain JSON-ready data already (dataclasses.asdict would copy them all)
        return {f.name: getattr(self, f.name) for f in fields(self)}


def episode_seed(base_seed: int, task_id: str, trial: int) -> int:
    """A stable per-(task, trial) seed, independent of run order and of Python's hash salt."""
    digest = hashlib.sha256(f"{base_seed}:{task_id}:{trial}".encode()).hexdigest()
    return int(digest[:8], 16)


def _fingerprint(message: Any) -> str:
    """What makes two agent messages "the same" for the loop rule: text and calls, not call ids.

    ``message`` is the env's canonical record of the action (``env.trajectory[-1]["message"]``:
    ``env.step`` has already given each tool call a name and an arguments string), not the raw
    action, which may be anything a policy returned. This never raises: a message that still
    cannot be encoded gets a fingerprint of its own (it counts as no repeat).
    """
    try:
        calls = [(tc["function"]["name"], tc["function"]["arguments"]) for tc in message.get("tool_calls") or ()]
        return json.dumps([message.get("content"), calls], sort_keys=True, default=str)
    except Exception:  # the loop rule must never stop an episode
        return f"<unencodable message {next(_UNIQUE)}>"


_UNIQUE = itertools.count()


class _Driver:
    """The loop both runners share: reset, hand each seat its observation, apply actions, the loop rule."""

    def __init__(
        self,
        env: TauEnv,
        agent: PolicyLike,
        user: PolicyLike,
        task_id: str | None,
        seed: int,
        trial: int,
        loop_limit: int | None,
    ):
        self.env, self.trial, self.seed, self.loop_limit = env, trial, seed, loop_limit
        self.started = time.perf_counter()
        env.reset(seed=seed, options={"task_id": task_id} if task_id is not None else None)
        self.policies: dict[str, PolicyLike] = {"agent": agent, "user": user}
        for p in self.policies.values():
            reset = getattr(p, "reset", None)  # a plain function has none
            if callable(reset):
                reset(task=env.task, seed=seed)
        self._last: str | None = None
        self._repeats = 0

    def turns(self) -> Iterator[tuple[str, Observation]]:
        """Yield (seat, observation) while a live seat must act; dead seats are stepped with None."""
        for seat in self.env.agent_iter():
            obs, _, terminated, truncated, _ = self.env.last()
            if terminated or truncated:
                self.env.step(None)
            else:
                yield seat, obs

    def apply(self, seat: str, action: Any) -> None:
        self.env.step(action)
        if seat == "agent" and self.loop_limit:
            fp = _fingerprint(self.env.trajectory[-1]["message"])  # as the env recorded it: JSON-safe
            self._repeats = self._repeats + 1 if fp == self._last else 1
            self._last = fp
            if self._repeats >= self.loop_limit:
                self.env.end_episode(TerminationReason.LOOP)

    def result(self) -> EpisodeResult:
        env = self.env
        calls = errors = 0
        for ev in env.trajectory:
            for r in ev.get("tool_results", ()):
                calls += 1
                errors += bool(r["error"])
        usage = {}
        for seat, p in self.policies.items():
            u = getattr(p, "usage", None)
            if u is not None:
                usage[seat] = asdict(u) if hasattr(u, "__dataclass_fields__") else dict(u)
        grade = env.grade_result.to_dict() if env.grade_result is not None else {}
        view = env.observe("agent")
        return EpisodeResult(
            env.task.id,
            self.trial,
            self.seed,
            env.episode_reward,
            env.termination_reason,
            env.num_steps,
            calls,
            errors,
            grade,
            env.trajectory,
            time.perf_counter() - self.started,
            usage,
            None,
            {"messages": view["messages"], "tools": view["tools"]},
        )


def run_episode(
    env: TauEnv,
    agent: Policy | Callable[[Observation], Message],
    user: Policy | Callable[[Observation], Message],
    task_id: str | None = None,
    seed: int = 0,
    trial: int = 0,
    loop_limit: int | None = DEFAULT_LOOP_LIMIT,
) -> EpisodeResult:
    """Play one episode with two synchronous policies (:class:`~tau_env.policy.Policy`, or plain
    ``obs -> action`` functions); asynchronous ones need :func:`arun_episode`.

    Args:
        env: The env; reset here to ``task_id`` (or a task drawn with ``seed``).
        agent: The agent seat's policy; its ``reset(task=env.task, seed=seed)`` is called first.
        user: The user seat's policy, likewise.
        task_id: The task to play; None draws one from the env's task pool with ``seed``.
        seed: The episode's seed (the env's and the policies').
        trial: The trial number recorded in the result.
        loop_limit: End the episode with reason ``"loop"`` when the agent repeats one action this
            many times in a row (None: no limit).
    """
    d = _Driver(env, agent, user, task_id, seed, trial, loop_limit)
    for seat, obs in d.turns():
        d.apply(seat, d.policies[seat](obs))
    return d.result()


async def _act(policy: PolicyLike, obs: Observation) -> Any:
    act = getattr(policy, "aact", None)
    out = act(obs) if act is not None else policy(obs)
    return await out if inspect.isawaitable(out) else out


async def arun_episode(
    env: TauEnv,
    agent: PolicyLike,
    user: PolicyLike,
    task_id: str | None = None,
    seed: int = 0,
    trial: int = 0,
    loop_limit: int | None = DEFAULT_LOOP_LIMIT,
) -> EpisodeResult:
    """Play one episode; policies may be async (:class:`~tau_env.policy.AsyncPolicy`, with
    ``async def aact(obs)``, or an async ``__call__`` or function) or synchronous. Arguments as
    :func:`run_episode`.

    An :class:`~tau_env.error.InfrastructureError` from a policy propagates: the caller decides
    whether to retry the episode.
    """
    d = _Driver(env, agent, user, task_id, seed, trial, loop_limit)
    for seat, obs in d.turns():
        d.apply(seat, await _act(d.policies[seat], obs))
    return d.result()
