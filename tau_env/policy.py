"""What a seat's player implements: the policy protocols the harness drives.

A *policy* plays one seat ("agent" or "user") of a :class:`~tau_env.TauEnv`. The harness
(:func:`~tau_env.run_episode`, :func:`~tau_env.evaluate` and their async twins) calls, for
every episode:

1. ``policy.reset(task=env.task, seed=episode_seed)``, if the policy has a ``reset``;
2. for each of the seat's turns, ``policy(obs)`` (a :class:`Policy`) or ``await policy.aact(obs)``
   (an :class:`AsyncPolicy`), with the seat's observation (a ``dict``: ``messages``, ``tools``
   and, for the user, ``scenario``; see :class:`~tau_env.TauEnv`), and steps the env with the
   returned action (an assistant message, see :func:`tau_env.say` and :func:`tau_env.call`);
3. after the episode, reads the optional ``policy.usage`` (:class:`SupportsUsage`) into the
   episode's record; a run reads the optional ``policy.describe()`` (:class:`SupportsDescribe`)
   into ``config.json``.

The built-in policies (:class:`~tau_env.OracleAgent`, :class:`~tau_env.NoopAgent`,
:class:`~tau_env.RandomAgent`, :class:`~tau_env.ScriptedUser`) are :class:`Policy`; the LLM
policies (:class:`~tau_env.llm.LLMAgent`, :class:`~tau_env.llm.LLMUser`) are
:class:`AsyncPolicy`. A plain function ``obs -> action`` (or ``async def f(obs)``) is accepted
too: a policy without ``reset`` (see :data:`PolicyLike`). The protocols are structural
(``typing.Protocol``): a class satisfies them by having the methods, without inheriting; they are
``runtime_checkable``, so ``isinstance(p, Policy)`` checks that the methods are there (not their
signatures).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tau_env.messages import Message

if TYPE_CHECKING:
    from tau_env.llm.client import Usage
    from tau_env.tasks import Task

#: A seat's observation: ``{"messages": [...], "tools": [...]}``, plus ``"scenario"`` for the user.
Observation = dict[str, Any]


@runtime_checkable
class Policy(Protocol):
    """A synchronous player of one seat: ``policy(obs) -> action``.

    ``reset`` is called before every episode with the episode's task and seed; a policy keeps no
    state from one episode to the next (the harness also gives each episode a fresh copy).
    """

    def __call__(self, obs: Observation) -> Message:
        """The seat's next action (an assistant message) for the observation ``obs``."""
        ...

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        """Start a new episode of ``task`` (None: unknown), seeding any randomness with ``seed``."""
        ...


@runtime_checkable
class AsyncPolicy(Protocol):
    """An asynchronous player of one seat (e.g. a model behind a server): ``await policy.aact(obs)``.

    The harness runs an object with ``aact`` asynchronously, whatever its ``__call__`` does (the
    LLM policies' ``__call__`` raises ``TypeError``); :func:`tau_env.evaluate` hands such
    policies to :func:`tau_env.aevaluate`. An :class:`~tau_env.error.InfrastructureError` raised
    by ``aact`` tells the harness that the model server failed: the episode is run again.
    """

    async def aact(self, obs: Observation) -> Message:
        """The seat's next action for the observation ``obs``."""
        ...

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        """Start a new episode of ``task`` (None: unknown), seeding any randomness with ``seed``."""
        ...


@runtime_checkable
class SupportsUsage(Protocol):
    """A policy that counts what it spent: ``usage`` (a dataclass such as
    :class:`tau_env.llm.Usage`, or a mapping of counts) is recorded per seat in the episode's
    ``usage``; ``prompt_tokens`` and ``completion_tokens`` enter the run's metrics.
    """

    usage: Usage | Mapping[str, int]


@runtime_checkable
class SupportsDescribe(Protocol):
    """A policy that describes its configuration for a run's ``config.json`` (which identifies the
    run, so resuming with another description is refused). Without ``describe`` the policy's
    module-qualified class or function name is recorded (and a factory's bound arguments):
    constructor settings are seen only through ``describe()``.
    """

    def describe(self) -> Any:
        """JSON-ready data: the policy's name and settings (model, sampling, ...), no secrets."""
        ...


#: What the harness accepts as a seat's player: a :class:`Policy`, an :class:`AsyncPolicy`, or a
#: plain (sync or async) function of the observation.
PolicyLike = Policy | AsyncPolicy | Callable[[Observation], Message | Awaitable[Message]]


def is_async_policy(policy: Any) -> bool:
    """Whether the harness runs ``policy`` asynchronously: it has ``aact`` (an :class:`AsyncPolicy`),
    or it is an ``async def`` function (or method), or its class's ``__call__`` is one.
    """
    return (
        hasattr(policy, "aact")
        or inspect.iscoroutinefunction(policy)  # an async function, method or partial of one
        or (callable(policy) and inspect.iscoroutinefunction(type(policy).__call__))
    )
