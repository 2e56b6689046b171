"""verifiers: a tau_env domain as a ``verifiers`` multi-turn environment, loadable by name.

``verifiers.load_environment("tau_env.adapters.verifiers_env", domain="harbor-bank-v0")`` (the
id is this module's import name, as ``vf-eval`` and prime-rl take it) returns a
``vf.MultiTurnEnv`` whose dataset has one row per task of the domain and whose rollouts are
tau_env episodes::

    import verifiers as vf
    from openai import AsyncOpenAI

    env = vf.load_environment("tau_env.adapters.verifiers_env", domain="harbor-bank-v0")
    client = vf.OpenAIChatCompletionsClient(AsyncOpenAI(base_url="http://127.0.0.1:8000/v1", api_key="x"))
    results = env.evaluate_sync(client, model="my-model", num_examples=3)

What maps to what: each rollout plays one episode through :func:`tau_env.arun_episode` (the same
loop as ``tau-env eval``: its seed rule, its loop rule) with the agent seat played from outside:
the model's assistant message goes to the agent seat; the user seat is played inside by any
tau_env user policy (:class:`~tau_env.ScriptedUser` by default); the tool results and the user's
reply come back as the environment's response messages (``role: tool`` and ``role: user``);
the episode ends when tau_env ends it (the user stops, a transfer, the step budget, the loop
rule). The prompt is the agent's observation once the user has opened the chat, and the tools
sent with each request are the agent's active tool schemas (``state["tool_defs"]``: they grow
when the agent unlocks a tool). The rubric's reward is the episode's exact-match reward
(``env.episode_reward``), the one ``tau-env eval`` gives for the same trajectory.

Needs ``verifiers>=0.3.1,<0.4`` (the classic environment API; 0.4 keeps only ``verifiers.v1``):
``pip install 'tau-env[verifiers]'``.
"""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from tau_env.adapters.errors import AdapterError, require

import tau_env
from tau_env.error import Error, InfrastructureError, InvalidOptionError
from tau_env.harness import DEFAULT_LOOP_LIMIT, EpisodeResult, arun_episode, episode_seed

EXTRA = "verifiers"
_WHAT = "tau_env.adapters.verifiers_env"
#: The verifiers releases with the classic ``load_environment`` / ``MultiTurnEnv`` / ``Rubric`` API.
SUPPORTED = ((0, 3, 1), (0, 4, 0))


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        parts.append(int(digits) if digits else 0)
    return tuple(parts + [0] * (3 - len(parts)))


def _vf() -> Any:
    """``verifiers`` (its classic API), or :class:`AdapterError` naming the extra and the versions that work."""
    vf = require("verifiers", EXTRA, _WHAT)
    try:
        found = version("verifiers")
    except PackageNotFoundError:  # a source tree without metadata: trust the API check below
        found = "0.0.0+unknown"
    low, high = SUPPORTED
    if found != "0.0.0+unknown" and not low <= _version_tuple(found) < high:
        raise AdapterError(
            f"{_WHAT} needs verifiers>=0.3.1,<0.4 (the classic MultiTurnEnv API; 0.4 keeps only verifiers.v1), "
            f"found verifiers {found}; install it with: pip install 'tau-env[{EXTRA}]'"
        )
    return vf


# --- messages between verifiers and tau_env ------------------------------------------------------


def _text(content: Any) -> str | None:
    """A message's content as tau_env takes it: a string (content parts joined), or None."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            part = part if isinstance(part, dict) else getattr(part, "model_dump", lambda: {})()
            if part.get("type") == "text":
                parts.append(str(part.get("text", "")))
        return "".join(parts)
    return str(content)


def to_tau_message(message: Any) -> dict[str, Any]:
    """The model's verifiers assistant message as a tau_env action (an OpenAI-style assistant message)."""
    data = message if isinstance(message, dict) else message.model_dump()
    out: dict[str, Any] = {"role": "assistant", "content": _text(data.get("content"))}
    calls = []
    for tc in data.get("tool_calls") or ():
        tc = tc if isinstance(tc, dict) else tc.model_dump()
        if "function" in tc:  # already OpenAI-style
            calls.append(tc)
        else:
            fn = {"name": tc.get("name"), "arguments": tc.get("arguments")}
            calls.append({"id": tc.get("id"), "type": "function", "function": fn})
    if calls:
        out["tool_calls"] = calls
    return out


def to_tool_defs(schemas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """tau_env's OpenAI tool schemas as verifiers ``vf.Tool`` definitions (name, description, parameters)."""
    out = []
    for s in schemas:
        fn = s.get("function", s)
        out.append({"name": fn["name"], "description": fn.get("description") or "", "parameters": fn["parameters"]})
    return out


def _after_agent(view: list[dict[str, Any]], start: int, sent: dict[str, Any]) -> list[dict[str, Any]]:
    """The agent view's messages after the agent's message at ``view[start]``, as verifiers gets them.

    The env may give a tool call another id (one missing or used before); the tool results are then
    renamed, by position, to the ids the model sent, so that the conversation verifiers keeps is
    consistent with the model's own message.
    """
    new = [dict(m) for m in view[start + 1 :]]
    sent_ids = [tc.get("id") for tc in sent.get("tool_calls") or ()]
    for i, m in enumerate(new[: len(sent_ids)]):
        if m.get("role") == "tool" and sent_ids[i]:
            m["tool_call_id"] = sent_ids[i]
    return new


# --- the agent seat, played from outside ----------------------------------------------------------


class _AgentSeat:
    """The agent seat of an episode that :func:`tau_env.arun_episode` plays: each turn hands the
    observation out and waits for the model's message.
    """

    def __init__(self) -> None:
        self.observations: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.actions: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def aact(self, obs: dict[str, Any]) -> dict[str, Any]:
        await self.observations.put(obs)
        return await self.actions.get()


@dataclass
class _Episode:
    env: tau_env.TauEnv
    seat: _AgentSeat
    task: asyncio.Task[EpisodeResult]
    seen: int = 0  # messages of the agent's view that verifiers already holds
    tools: list[dict[str, Any]] = field(default_factory=list)


def _user_factory(user: Any) -> Any:
    """One fresh user policy per rollout, from the ``user`` argument (see :func:`load_environment`)."""
    if user is None or user == "scripted":
        return tau_env.ScriptedUser
    if isinstance(user, dict):
        from tau_env.llm import ChatClient, LLMUser, Sampling

        settings = dict(user)
        if "model" not in settings:
            raise InvalidOptionError(
                f"user as a dict configures an LLMUser and needs 'model' (and usually 'base_url'), got {sorted(user)}."
            )
        if isinstance(settings.get("sampling"), dict):
            settings["sampling"] = Sampling(**settings["sampling"])
        policy = LLMUser(ChatClient(**settings))
        return lambda: copy.deepcopy(policy)
    if isinstance(user, str):
        raise InvalidOptionError(
            f"user must be None or 'scripted' (a ScriptedUser), a dict of ChatClient settings (an LLMUser), "
            f"a policy or a policy class; got the string {user!r}."
        )
    if isinstance(user, type):
        return user
    return lambda: copy.deepcopy(user)  # an LLM policy's copy shares its client and cache


# --- the environment ------------------------------------------------------------------------------

_CLASS: type | None = None


def _env_class() -> type:
    """The ``vf.MultiTurnEnv`` subclass, built on first use (verifiers is imported only then)."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    vf = _vf()
    from verifiers.utils.message_utils import normalize_messages

    class TauVerifiersEnv(vf.MultiTurnEnv):
        """A tau_env domain as a verifiers multi-turn environment (see the module's docstring)."""

        def __init__(
            self,
            domain: str,
            *,
            dataset: Any,
            user: Any,
            seed: int,
            loop_limit: int | None,
            make_kwargs: dict[str, Any],
            **kwargs: Any,
        ) -> None:
            self.tau_domain = domain
            self.tau_make_kwargs = make_kwargs
            self.tau_seed = seed
            self.tau_loop_limit = loop_limit
            self.tau_new_user = _user_factory(user)
            rubric = vf.Rubric(funcs=[tau_reward], weights=[1.0])
            for metric in (tau_steps, tau_tool_calls, tau_tool_errors):
                rubric.add_metric(metric)
            super().__init__(dataset=dataset, eval_dataset=dataset, rubric=rubric, **kwargs)

        # -- the episode's start and its turns --
        async def setup_state(self, state: Any) -> Any:
            info = state["info"]
            env = tau_env.make(self.tau_domain, **self.tau_make_kwargs)
            seat = _AgentSeat()
            play = arun_episode(
                env, seat, self.tau_new_user(), info["task_id"], seed=int(info["seed"]), loop_limit=self.tau_loop_limit
            )

            async def run() -> EpisodeResult:
                try:
                    return await play
                finally:
                    seat.observations.put_nowait(None)  # the episode is over (or failed): wake the reader

            ep = _Episode(env, seat, asyncio.ensure_future(run()))
            state["tau_episode"] = ep
            obs = await seat.observations.get()
            if obs is None:  # ended before the agent's first turn
                await self._finish(state, None)
                return state
            state["prompt"] = normalize_messages(obs["messages"], field_name="prompt")
            ep.seen = len(obs["messages"])
            self._set_tools(state, ep, obs["tools"])
            return state

        def _set_tools(self, state: Any, ep: _Episode, tools: list[dict[str, Any]]) -> None:
            if tools != ep.tools:
                ep.tools = tools
                state["tool_defs"] = self._normalize_tool_defs(to_tool_defs(tools)) or []

        async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
            ep: _Episode = state["tau_episode"]
            sent = to_tau_message(messages[-1])
            await ep.seat.actions.put(sent)
            obs = await ep.seat.observations.get()
            start = ep.seen
            if obs is None:
                return await self._finish(state, sent, start)
            ep.seen = len(obs["messages"])
            self._set_tools(state, ep, obs["tools"])
            return normalize_messages(_after_agent(obs["messages"], start, sent), field_name="env_response")

        async def _finish(self, state: Any, sent: Any, start: int | None = None) -> Any:
            """Record the ended episode's result; its last messages become the final env response."""
            ep: _Episode = state["tau_episode"]
            try:
                result = await ep.task
            except InfrastructureError as e:
                raise vf.InfraError(f"tau_env episode failed: {e}") from e
            except Error as e:
                raise vf.Error(f"tau_env episode failed: {type(e).__name__}: {e}") from e
            state["tau_result"] = result
            new = [] if start is None else _after_agent(result.agent_view["messages"], start, sent)
            final = normalize_messages(new, field_name="final_env_response")
            state["final_env_response"] = final
            return final

        @vf.cleanup
        async def close_episode(self, state: Any) -> None:
            """Stop an episode that verifiers ended first (max_turns, a timeout, an error) and close its env."""
            ep: _Episode | None = state.pop("tau_episode", None)
            if ep is None:
                return
            if not ep.task.done():
                ep.task.cancel()
            await asyncio.gather(ep.task, return_exceptions=True)
            ep.env.close()
            result = state.get("tau_result")
            state["tau_reward"] = float(result.reward) if result is not None else 0.0
            state["tau_termination_reason"] = (
                str(result.termination_reason)
                if result is not None
                else f"unfinished ({state.get('stop_condition') or 'stopped'})"
            )

    TauVerifiersEnv.__module__ = __name__
    _CLASS = TauVerifiersEnv
    return _CLASS


async def tau_reward(state: dict[str, Any]) -> float:
    """The rubric's reward: the episode's exact-match reward (0 for an episode verifiers cut short)."""
    return float(state.get("tau_reward") or 0.0)


def _result_count(name: str) -> Any:
    async def metric(state: dict[str, Any]) -> float:
        result = state.get("tau_result")
        return float(getattr(result, name)) if result is not None else 0.0

    metric.__name__ = f"tau_{name}"
    metric.__doc__ = f"The episode's {name.replace('_', ' ')} (a metric, weight 0)."
    return metric


tau_steps = _result_count("steps")
tau_tool_calls = _result_count("tool_calls")
tau_tool_errors = _result_count("tool_errors")


def load_environment(
    domain: str = "harbor-bank-v0",
    task_ids: list[str] | None = None,
    user: Any = None,
    max_turns: int = -1,
    seed: int = 0,
    loop_limit: int | None = DEFAULT_LOOP_LIMIT,
    timeout_seconds: float | None = None,
    **make_kwargs: Any,
) -> Any:
    """A tau_env domain as a ``verifiers`` ``MultiTurnEnv`` (what ``vf.load_environment`` calls).

    Args:
        domain: The tau_env id (``tau_env.make(domain, **make_kwargs)`` builds each rollout's env).
        task_ids: The tasks, one dataset row each (the domain's tasks, in order, if None).
        user: The user seat's policy, fresh for each rollout: None or ``"scripted"`` (a
            :class:`~tau_env.ScriptedUser`), a dict of :class:`~tau_env.llm.ChatClient` settings
            (``{"model": ..., "base_url": ..., "sampling": {...}}``, an :class:`~tau_env.llm.LLMUser`;
            JSON, so it passes through ``vf-eval -a``), a policy class (instantiated per rollout) or a
            policy object (copied per rollout, as the harness does).
        max_turns: verifiers' cap on the model's turns (-1: none; tau_env's ``max_steps`` bounds the
            episode). An episode that verifiers stops first scores 0.
        seed: The base seed: task ``t``'s episode seed is ``tau_env.harness.episode_seed(seed, t, 0)``,
            as ``tau-env eval --seed SEED`` plays trial 0 (each row's ``info["seed"]``).
        loop_limit: The harness's loop rule (the agent repeating one action this many times ends the
            episode, reward 0); None for none.
        timeout_seconds: verifiers' wall-clock limit per rollout (None: none).
        **make_kwargs: Settings for ``tau_env.make`` (``max_steps``, ``retrieval``, ``data_dir``, ...).

    Raises:
        AdapterError: verifiers is missing or not a release with the classic API (>=0.3.1,<0.4).
        tau_env.error.InvalidOptionError: A bad setting (an unknown task id, a bad user).
    """
    _vf()
    datasets = require("datasets", EXTRA, _WHAT)
    probe = tau_env.make(domain, task_ids=task_ids, **make_kwargs)
    try:
        rows = []
        for task_id in probe.task_pool:
            probe.reset(seed=0, options={"task_id": task_id})
            rows.append(
                {
                    "prompt": probe.observe("agent")[
                        "messages"
                    ],  # before the user speaks; the rollout's own replaces it
                    "answer": "",
                    "info": json.dumps({"task_id": task_id, "seed": episode_seed(seed, task_id, 0)}),
                }
            )
    finally:
        probe.close()
    _user_factory(user)  # refuse a bad user now, not in the first rollout
    cls = _env_class()
    return cls(
        domain,
        dataset=datasets.Dataset.from_list(rows),
        user=user,
        seed=seed,
        loop_limit=loop_limit,
        make_kwargs=make_kwargs,
        max_turns=max_turns,
        timeout_seconds=timeout_seconds,
    )


__all__ = ["EXTRA", "load_environment", "tau_reward", "to_tau_message", "to_tool_defs"]
