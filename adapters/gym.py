"""Gymnasium single-agent view: the agent seat of a :class:`~tau_env.TauEnv` as a ``gymnasium.Env``.

The user seat is played inside the env by any tau_env user policy (a :class:`~tau_env.ScriptedUser`
by default; an :class:`~tau_env.llm.LLMUser`, with or without a :class:`~tau_env.llm.ResponseCache`;
any ``obs -> action`` function, sync or async). Asynchronous user policies run on a private event
loop in a helper thread, so ``step`` works from plain synchronous code and from inside a running
event loop alike::

    import gymnasium
    import tau_env.adapters.gym  # registers tau_env/<id> for every tau_env id

    env = gymnasium.make("tau_env/harbor-bank-v0")
    obs, info = env.reset(seed=0, options={"task_id": "travel_notice_simple"})
    obs, reward, terminated, truncated, info = env.step(tau_env.say("Hello!"))

Spaces: the observation is tau_env's agent observation, a top-level ``gymnasium.spaces.Dict`` of
``messages`` (the agent's chat, ready for a chat template) and ``tools`` (its active tool
schemas); the action is an OpenAI-style assistant message (:class:`tau_env.spaces.MessageSpace`).
One ``step`` plays the agent's message, then the user's turns until the agent must act again (a
tool call keeps the turn with the agent: its results are in the next observation).

An episode can end inside ``reset`` (a user policy that stops at once): ``reset`` then returns
``info["episode_over"] = True`` (and ``info["termination_reason"]``), and the first ``step`` returns
that ending (``terminated`` or ``truncated`` True, the episode's reward) without playing its action,
so the standard ``while not (terminated or truncated)`` loop ends at once. A ``step`` after an
ending has been returned raises :class:`~tau_env.error.EpisodeOverError`.

Reward: 0 until the end, then the episode's exact-match reward (``TauEnv.episode_reward``), the
same as ``tau-env eval`` gives for the same trajectory: this view applies the harness's loop rule
(``loop_limit``: the agent repeating one action ends the episode, truncated, reward 0).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import threading
from collections.abc import Coroutine
from typing import Any

import gymnasium

import tau_env
from tau_env.error import EpisodeOverError, InvalidOptionError, ResetNeeded
from tau_env.harness import DEFAULT_LOOP_LIMIT

#: The namespace of the Gymnasium ids: ``tau_env/<tau_env id>``.
NAMESPACE = "tau_env"
_AGENT, _USER = "agent", "user"


def _fresh(x: Any) -> Any:
    """A structural copy of JSON-like data (dicts and lists copied; strings and numbers shared)."""
    if type(x) is dict:
        return {k: _fresh(v) for k, v in x.items()}
    if type(x) is list:
        return [_fresh(v) for v in x]
    return x if isinstance(x, (str, int, float, bool, type(None))) else copy.deepcopy(x)


def _fingerprint(message: dict[str, Any]) -> str:
    """The loop rule's notion of "the same action" (as the harness's): text and calls, not call ids."""
    calls = [(tc["function"]["name"], tc["function"]["arguments"]) for tc in message.get("tool_calls") or ()]
    return json.dumps([message.get("content"), calls], sort_keys=True, default=str)


class AsyncRunner:
    """Runs coroutines to completion from synchronous code, on one private event loop in a daemon thread.

    One loop for the runner's life: a client's connection pool, bound to the loop it first ran on,
    stays usable. Works whether or not the calling thread has a running loop of its own.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name="tau-env-gym-loop", daemon=True)
                self._thread.start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()


class TauGymEnv(gymnasium.Env[dict[str, Any], dict[str, Any]]):
    """The agent seat of a tau_env environment as a single-agent ``gymnasium.Env``.

    Args:
        env_id: The tau_env id to build (``tau_env.make(env_id, **make_kwargs)``); ignored when
            ``env`` is given.
        env: An existing :class:`~tau_env.TauEnv` to drive instead (closed by ``close()``).
        user: The user seat's policy (a :class:`~tau_env.policy.Policy`, an
            :class:`~tau_env.policy.AsyncPolicy` or a sync/async function of the observation);
            a :class:`~tau_env.ScriptedUser` if None. The env keeps its own copy
            (``copy.deepcopy``, as the harness does: an LLM user's copy shares its client and cache).
        loop_limit: End the episode (truncated, reward 0) when the agent repeats one action this
            many times in a row, as ``tau-env eval`` does; None for no limit.
        render_mode: ``"ansi"`` (``render()`` returns the transcript), ``"human"`` (prints it) or None.
        **make_kwargs: Env settings and loader settings for ``tau_env.make`` (``max_steps``,
            ``task_ids``, ``retrieval``, ``data_dir``, ...).

    Attributes:
        env: The wrapped :class:`~tau_env.TauEnv` (its ``task``, ``trajectory``, ``db_digest()``...).
        user: The user policy playing inside.
    """

    #: A chat has no frame rate; ``render_fps`` is declared so that the checker does not warn.
    metadata = {"render_modes": ["ansi", "human"], "render_fps": 1}

    def __init__(
        self,
        env_id: str = "harbor-bank-v0",
        *,
        env: tau_env.TauEnv | None = None,
        user: Any = None,
        loop_limit: int | None = DEFAULT_LOOP_LIMIT,
        render_mode: str | None = None,
        **make_kwargs: Any,
    ) -> None:
        bad_limit = isinstance(loop_limit, bool) or not isinstance(loop_limit, int) or loop_limit < 1
        if loop_limit is not None and bad_limit:
            raise InvalidOptionError(f"loop_limit must be a positive integer or None, got {loop_limit!r}.")
        if env is None:
            env = tau_env.make(env_id, render_mode=render_mode, **make_kwargs)
        elif not isinstance(env, tau_env.TauEnv):
            raise InvalidOptionError(f"env must be a tau_env.TauEnv, got {type(env).__name__}.")
        elif make_kwargs:
            raise InvalidOptionError(
                f"Give either env or settings for tau_env.make, not both (got {sorted(make_kwargs)})."
            )
        self.env = env
        self.render_mode = env.render_mode
        self.user = tau_env.ScriptedUser() if user is None else copy.deepcopy(user)
        self.loop_limit = loop_limit
        self.observation_space = env.observation_space(_AGENT)
        self.action_space = env.action_space(_AGENT)
        self._runner: AsyncRunner | None = None
        self._started = False
        self._unreported_end = False  # the episode ended in reset(); the next step() returns that ending
        self._last_fp: str | None = None
        self._repeats = 0

    # --- the user seat ------------------------------------------------------------------
    def _user_act(self, obs: dict[str, Any]) -> Any:
        act = getattr(self.user, "aact", None)
        out = act(obs) if act is not None else self.user(obs)
        if inspect.isawaitable(out):
            if self._runner is None:
                self._runner = AsyncRunner()
            return self._runner.run(_awaited(out))
        return out

    def _play_user(self) -> None:
        env = self.env
        while env.termination_reason is None and env.agent_selection == _USER:
            env.step(self._user_act(env.observe(_USER)))

    # --- Gymnasium API --------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode and play the user's opening turns.

        Args:
            seed: Seeds the episode (task choice, the user policy) as ``tau_env.TauEnv.reset`` does;
                without it, the episode's seed is drawn from the env's seeded generator.
            options: ``{"task_id": ...}`` or ``{"task_index": ...}``, as for ``TauEnv.reset``.

        Returns:
            The agent's observation and info (``task_id``; at the end also ``termination_reason``,
            ``reward``, ``grade`` and ``steps``). ``info["episode_over"]`` is True when the episode
            already ended here (the user stopped at once): the next ``step`` returns that ending.
        """
        super().reset(seed=seed)
        episode_seed = seed if seed is not None else int(self.np_random.integers(2**31))
        self.env.reset(seed=episode_seed, options=options)
        reset = getattr(self.user, "reset", None)
        if callable(reset):
            reset(task=self.env.task, seed=episode_seed)
        self._started = True
        self._last_fp, self._repeats = None, 0
        self._play_user()
        obs, _, _, _, info = self._result()
        self._unreported_end = self.env.termination_reason is not None
        info["episode_over"] = self._unreported_end
        return obs, info

    def step(self, action: dict[str, Any]) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Play the agent's message, then the user's turns until the agent acts again or the episode ends.

        If the episode ended inside ``reset()`` (``info["episode_over"]``), this first step returns
        that ending (``terminated``/``truncated``, the episode's reward) and does not play ``action``.

        Raises:
            tau_env.error.InvalidActionError: ``action`` is not an assistant message at all.
            tau_env.error.EpisodeOverError: The episode's ending was already returned; call ``reset()``.
        """
        env = self.env
        if not self._started:
            raise ResetNeeded("Call reset() before step().")
        if self._unreported_end:
            self._unreported_end = False
            return self._result()
        if env.termination_reason is not None:
            raise EpisodeOverError(
                f"The episode is over ({env.termination_reason}) and step() already returned terminated or "
                "truncated; call reset() for a new one."
            )
        env.step(action)
        if self.loop_limit:
            fp = _fingerprint(env.trajectory[-1]["message"])
            self._repeats = self._repeats + 1 if fp == self._last_fp else 1
            self._last_fp = fp
            if self._repeats >= self.loop_limit:
                env.end_episode(tau_env.TerminationReason.LOOP)
        self._play_user()
        return self._result()

    def _result(self) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        env = self.env
        over = env.termination_reason is not None
        obs = _fresh(env.observe(_AGENT))
        info = _fresh(env.infos[_AGENT])
        reward = float(env.episode_reward) if over else 0.0
        return obs, reward, bool(env.terminations[_AGENT]), bool(env.truncations[_AGENT]), info

    def render(self) -> str | None:
        if not self._started:
            raise ResetNeeded("Call reset() before render().")
        return self.env.render()

    def close(self) -> None:
        """Close the wrapped env and stop the async user's loop (closing again does nothing)."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        self.env.close()
        self._started = False


async def _awaited(out: Any) -> Any:
    return await out


def register_envs() -> list[str]:
    """Register ``tau_env/<id>`` with Gymnasium for every tau_env id not registered there yet.

    Importing this module calls it once; call it again after ``tau_env.register`` of your own ids.
    ``gymnasium.make("tau_env/<id>", user=..., **settings)`` passes its keywords to
    :class:`TauGymEnv` (``data_dir=...`` for tau3-banking). Returns the ids added.
    """
    added = []
    for tau_id in tau_env.registry.ids():
        gym_id = f"{NAMESPACE}/{tau_id}"
        if gym_id not in gymnasium.registry:
            gymnasium.register(gym_id, entry_point=f"{__name__}:TauGymEnv", kwargs={"env_id": tau_id})
            added.append(gym_id)
    return added


register_envs()

__all__ = ["NAMESPACE", "AsyncRunner", "TauGymEnv", "register_envs"]
