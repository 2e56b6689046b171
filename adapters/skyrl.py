"""SkyRL: the agent seat of a tau_env environment as a ``skyrl_gym`` text environment.

SkyRL's generator drives a ``skyrl_gym.envs.base_text_env.BaseTextEnv`` with text: ``init(prompt)``
returns the chat the model starts from, ``step(text)`` takes the model's whole reply and returns the
messages to append (``observations``), a reward and ``done``. This module translates that onto
:class:`tau_env.adapters.gym.TauGymEnv` (tau_env's agent seat with the user policy inside):

- ``init`` starts the tau_env episode of ``extras["task_id"]`` (or ``task_index``; ``seed``) and
  returns tau_env's own opening (the system prompt, the tool schemas written into it in the hermes
  format, the simulated user's first message); the dataset's prompt is replaced.
- ``step(text)`` parses the text into an assistant message with :func:`tau_env.llm.to_action`
  (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks become tool calls, the rest
  is the message to the user), plays it, lets the user policy answer, and returns what the agent
  sees next: tool results (``role: tool``) and the user's replies (``role: user``).
- The reward is 0.0 until the episode ends, then tau_env's exact-match reward (``episode_reward``),
  the same as ``tau-env eval`` gives for the same trajectory (the harness's loop rule included).

Registered with skyrl_gym on import as ``tau_env-<tau_env id>`` (``tau_env-harbor-bank-v0``,
``tau_env-tau3-banking``)::

    import skyrl_gym
    import tau_env.adapters.skyrl  # registers the ids

    env = skyrl_gym.make("tau_env-harbor-bank-v0", env_config={}, extras={"task_id": "travel_notice_simple"})
    chat, info = env.init([])
    out = env.step('<tool_call>{"name": "get_current_time", "arguments": {}}</tool_call>')

SkyRL's trainer selects it with ``environment.env_class=tau_env-harbor-bank-v0`` and dataset rows
from :func:`dataset_rows`; ``environment.skyrl_gym.<env_class>`` holds the ``env_config`` (tau_env
settings such as ``max_steps`` or ``data_dir``, and ``user``: see :func:`user_policy`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from tau_env.adapters.errors import require
from tau_env.adapters.gym import TauGymEnv

import tau_env
from tau_env.error import EpisodeOverError, InvalidOptionError, ResetNeeded
from tau_env.harness import DEFAULT_LOOP_LIMIT
from tau_env.llm import to_action

_skyrl_gym = require("skyrl_gym", "skyrl", "tau_env.adapters.skyrl")
_base = require("skyrl_gym.envs.base_text_env", "skyrl", "tau_env.adapters.skyrl")

#: The prefix of the skyrl_gym ids: ``tau_env-<tau_env id>``.
ID_PREFIX = "tau_env-"

#: How the tool schemas are written into the system prompt (the hermes format that Qwen-style chat
#: templates use, and that :func:`tau_env.llm.to_action` parses back).
TOOLS_PROMPT = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)

#: The ``env_config`` keys this adapter reads itself; every other key goes to ``tau_env.make``.
_OWN_KEYS = ("user", "loop_limit", "tools_in_prompt", "drop_reasoning")


def user_policy(spec: Any) -> Any:
    """A tau_env user policy from a config value (what ``env_config["user"]`` may hold).

    Args:
        spec: None or ``"scripted"`` (a :class:`~tau_env.ScriptedUser`); a mapping for an
            :class:`~tau_env.llm.LLMUser` on an OpenAI-compatible server: ``model`` (required),
            ``base_url``, ``api_key_env``, ``temperature``, ``max_tokens``, ``cache`` (a
            :class:`~tau_env.llm.ResponseCache` file); or a policy object, used as it is.
    """
    if spec is None or spec == "scripted":
        return tau_env.ScriptedUser()
    if isinstance(spec, str):
        raise InvalidOptionError(f"user must be 'scripted', a mapping for an LLM user or a policy, got {spec!r}.")
    if not isinstance(spec, Mapping):
        return spec
    from tau_env.llm import ChatClient, LLMUser, ResponseCache, Sampling

    spec = dict(spec)
    unknown = set(spec) - {"model", "base_url", "api_key_env", "temperature", "max_tokens", "cache"}
    if unknown or not isinstance(spec.get("model"), str):
        raise InvalidOptionError(
            "An LLM user needs {'model': NAME} and optionally base_url, api_key_env, temperature, max_tokens, "
            f"cache; got keys {sorted(spec)}."
        )
    sampling = Sampling(
        **{k: spec[k] for k in ("temperature", "max_tokens") if spec.get(k) is not None},
    )
    client = ChatClient(
        spec["model"],
        spec.get("base_url"),
        api_key_env=spec.get("api_key_env") or "OPENAI_API_KEY",
        sampling=sampling,
        cache=ResponseCache(spec["cache"]) if spec.get("cache") else None,
    )
    return LLMUser(client)


def _plain(config: Any) -> dict[str, Any]:
    """A plain dict from an OmegaConf ``DictConfig`` (what SkyRL passes), a mapping or None."""
    if config is None:
        return {}
    omegaconf = require("omegaconf", "skyrl", "tau_env.adapters.skyrl")  # skyrl_gym's own dependency
    if isinstance(config, omegaconf.DictConfig):
        return dict(omegaconf.OmegaConf.to_container(config, resolve=True))
    if not isinstance(config, Mapping):
        raise InvalidOptionError(f"env_config must be a mapping, got {type(config).__name__}.")
    return dict(config)


def tools_text(tools: Sequence[Mapping[str, Any]]) -> str:
    """The tool schemas as the hermes system-prompt block (:data:`TOOLS_PROMPT`)."""
    return TOOLS_PROMPT.format(tools="\n".join(json.dumps(t, ensure_ascii=False) for t in tools))


def action_text(message: Mapping[str, Any]) -> str:
    """An assistant message written as the text a model would print (content, then hermes tool calls).

    The inverse of :func:`tau_env.llm.to_action` (up to tool-call ids), for replaying a tau_env
    policy's actions through :meth:`TauSkyRLEnv.step`, e.g. the oracle's in a test.
    """
    parts = [message["content"]] if message.get("content") else []
    for tc in message.get("tool_calls") or ():
        fn = tc["function"]
        args = fn.get("arguments")
        args = json.loads(args) if isinstance(args, str) and args else (args or {})
        call = json.dumps({"name": fn["name"], "arguments": args}, ensure_ascii=False)
        parts.append(f"<tool_call>\n{call}\n</tool_call>")
    return "\n".join(parts)


class TauSkyRLEnv(_base.BaseTextEnv):
    """A tau_env episode behind skyrl_gym's text ``init`` / ``step``, with the user policy inside.

    Args:
        env_config: SkyRL's per-env config (``environment.skyrl_gym.<env_class>``, a ``DictConfig``
            or a mapping): settings for ``tau_env.make`` (``max_steps``, ``data_dir``,
            ``retrieval``, ...) plus ``user`` (:func:`user_policy`), ``loop_limit``,
            ``tools_in_prompt`` (default True: write the tool schemas into the system prompt; False
            leaves the prompt as tau_env wrote it, the schemas are in ``metadata["tools"]``) and
            ``drop_reasoning`` (drop ``<think>`` blocks from the model's text; default False).
        extras: The dataset row's extra fields: ``task_id`` or ``task_index``, ``seed``, and SkyRL's
            ``max_turns`` (the model's turns; past it the episode ends, truncated, reward 0).
        env_id: The tau_env id (set by the registered ``tau_env-<id>``).
        env: A :class:`~tau_env.TauEnv` to drive instead of building one (closed by ``close``).
        user: A user policy object; overrides ``env_config["user"]``.

    Attributes:
        gym: The :class:`~tau_env.adapters.gym.TauGymEnv` played (``gym.env`` is the TauEnv).
        observation: tau_env's current agent observation (``messages`` and active ``tools``).
    """

    def __init__(
        self,
        env_config: Any = None,
        extras: Mapping[str, Any] | None = None,
        *,
        env_id: str = "harbor-bank-v0",
        env: tau_env.TauEnv | None = None,
        user: Any = None,
    ) -> None:
        super().__init__()
        settings = _plain(env_config)
        own = {k: settings.pop(k) for k in _OWN_KEYS if k in settings}
        self.extras = dict(extras or {})
        self.tools_in_prompt = bool(own.get("tools_in_prompt", True))
        self.drop_reasoning = bool(own.get("drop_reasoning", False))
        max_turns = self.extras.get("max_turns")
        bad_turns = isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1
        if max_turns is not None and bad_turns:
            raise InvalidOptionError(f"extras['max_turns'] must be a positive integer, got {max_turns!r}.")
        self.max_turns = max_turns
        policy = user if user is not None else user_policy(own.get("user"))
        loop_limit = own.get("loop_limit", DEFAULT_LOOP_LIMIT)
        if env is not None:
            self.gym = TauGymEnv(env=env, user=policy, loop_limit=loop_limit, **settings)
        else:
            self.gym = TauGymEnv(env_id, user=policy, loop_limit=loop_limit, **settings)
        self.observation: dict[str, Any] | None = None
        self._done = False
        self._reward = 0.0

    def init(self, prompt: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Start the episode and return tau_env's opening chat (the dataset's ``prompt`` is not used).

        Returns:
            The chat for the model (system prompt, with the tool schemas unless ``tools_in_prompt``
            is off; the greeting and the user's opening) and metadata (``task_id``, ``tools``).
        """
        ex = self.extras
        options = {k: ex[k] for k in ("task_id", "task_index") if ex.get(k) is not None} or None
        obs, info = self.gym.reset(seed=ex.get("seed"), options=options)
        self.turns, self._done, self._reward = 0, False, 0.0
        self.observation = obs
        chat = copy.deepcopy(obs["messages"])
        if self.tools_in_prompt and chat and chat[0].get("role") == "system":
            chat[0]["content"] = (chat[0].get("content") or "") + tools_text(obs["tools"])
        return chat, {**info, "tools": copy.deepcopy(obs["tools"])}

    def step(self, action: str) -> dict[str, Any]:
        """Play the model's text as the agent's message; return the tool results and user replies.

        Raises:
            tau_env.error.ResetNeeded: ``init`` was not called.
            tau_env.error.EpisodeOverError: The episode has ended.
            tau_env.error.InvalidActionError: ``action`` is not a string.
        """
        if self.observation is None:
            raise ResetNeeded("Call init() before step().")
        if self._done:
            raise EpisodeOverError("The episode is over; make a new environment for the next one.")
        if not isinstance(action, str):
            raise tau_env.error.InvalidActionError(f"A SkyRL action is the model's text, got {type(action).__name__}.")
        self.turns += 1
        message = to_action({"role": "assistant", "content": action}, drop_reasoning=self.drop_reasoning)
        seen = len(self.observation["messages"])
        obs, reward, terminated, truncated, info = self.gym.step(message)
        if not (terminated or truncated) and self.max_turns is not None and self.turns >= self.max_turns:
            inner = self.gym.env
            inner.end_episode("max_turns")  # truncated, reward 0, as tau_env's own step budget
            reward, truncated, info = float(inner.episode_reward), True, dict(inner.infos["agent"])
        self.observation = obs
        self._done = bool(terminated or truncated)
        self._reward = float(reward)
        new = copy.deepcopy(obs["messages"][seen + 1 :])  # past the agent's own message
        meta = {**info, "tools": copy.deepcopy(obs["tools"]), "parsed_action": message}
        return _base.BaseTextEnvStepOutput(observations=new, reward=float(reward), done=self._done, metadata=meta)

    def get_metrics(self) -> dict[str, Any]:
        """The episode's reward and the model's turns (SkyRL averages numeric metrics)."""
        return {"tau_env_reward": self._reward, "turns": self.turns}

    def close(self) -> None:
        """Close the tau_env episode (closing again does nothing)."""
        self.gym.close()


def register_envs() -> list[str]:
    """Register ``tau_env-<id>`` with skyrl_gym for every tau_env id not registered there yet.

    Importing this module calls it once; call it again after ``tau_env.register`` of your own ids.
    Returns the ids added.
    """
    added = []
    for tau_id in tau_env.registry.ids():
        sky_id = f"{ID_PREFIX}{tau_id}"
        if sky_id not in _skyrl_gym.registry:
            _skyrl_gym.register(id=sky_id, entry_point=f"{__name__}:TauSkyRLEnv", kwargs={"env_id": tau_id})
            added.append(sky_id)
    return added


def dataset_rows(
    env_id: str = "harbor-bank-v0", task_ids: Sequence[str] | None = None, **make_kwargs: Any
) -> list[dict[str, Any]]:
    """Rows of a SkyRL prompt dataset (write them to parquet) playing ``env_id``'s tasks.

    Each row: ``prompt`` (a placeholder naming the task: ``init`` replaces it with tau_env's own),
    ``env_class`` (``tau_env-<env_id>``), ``task_id`` (SkyRL hands the remaining columns to the env
    as ``extras``) and ``data_source``.

    Args:
        env_id: The tau_env id.
        task_ids: The tasks (default: all of the env's tasks).
        **make_kwargs: Loader settings for ``tau_env.make`` (``data_dir`` for tau3-banking).
    """
    if task_ids is None:
        env = tau_env.make(env_id, **make_kwargs)
        try:
            task_ids = list(env.task_pool)
        finally:
            env.close()
    return [
        {
            "data_source": f"tau_env/{env_id}",
            "prompt": [{"role": "user", "content": t}],
            "env_class": f"{ID_PREFIX}{env_id}",
            "task_id": t,
        }
        for t in task_ids
    ]


register_envs()

__all__ = [
    "ID_PREFIX",
    "TOOLS_PROMPT",
    "TauSkyRLEnv",
    "action_text",
    "dataset_rows",
    "register_envs",
    "tools_text",
    "user_policy",
]
