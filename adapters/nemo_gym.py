"""NeMo Gym: a tau_env domain as a NeMo Gym resources server, so NeMo Gym and NeMo RL collect rollouts on it.

NeMo Gym's agents (``simple_agent``) talk to the model only: they send the dataset row's
``responses_create_params`` to the policy model, post each function call to the resources server's
route of that name, and stop at a reply without function calls; then ``/verify`` scores the rollout.
This module translates a tau_env episode onto that loop:

- ``/seed_session`` starts the session's tau_env episode (the row's ``task_id``, ``seed``) and plays
  the user's opening as the row recorded it (``tau_env_opening``, what the model was shown).
- One route per agent tool (``/find_customer``, ``/unlock_tool``, ...; discoverable tools too,
  since the row's tool list is fixed: calling one before unlocking it gets tau_env's error), each
  one ``env.step`` of the agent seat, answering with the tool result as text.
- ``/send_message_to_user`` (``{"message": ...}``) is the agent's message to the customer: the user
  policy inside (scripted, LLM, cached) answers, and the route returns the reply.
- ``/verify`` delivers the model's final text (a reply without function calls) to the user if the
  conversation is still open, and returns tau_env's exact-match reward: the episode's reward once
  it ended, else the grade of the database now (as if the user had left).

:func:`write_environment` writes the folder NeMo Gym's ``gym env run`` / ``gym eval run`` start
from (``resources_servers/tau_env``: ``app.py``, the server and agent YAML, the dataset JSONL)::

    from tau_env.adapters.nemo_gym import write_environment
    write_environment("gym_root", "harbor-bank-v0")
    # cd gym_root && gym eval run "+config_paths=[resources_servers/tau_env/configs/tau_env.yaml,
    #     responses_api_models/vllm_model/configs/vllm_model.yaml]" +agent_name=tau_env_simple_agent ...
"""

from __future__ import annotations

import copy
import inspect
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tau_env.adapters.errors import require

import tau_env
from tau_env.error import InvalidOptionError

_fastapi = require("fastapi", "nemo-gym", "tau_env.adapters.nemo_gym")
_pydantic = require("pydantic", "nemo-gym", "tau_env.adapters.nemo_gym")
_base = require("nemo_gym.base_resources_server", "nemo-gym", "tau_env.adapters.nemo_gym", min_python=(3, 12))
_server_utils = require("nemo_gym.server_utils", "nemo-gym", "tau_env.adapters.nemo_gym", min_python=(3, 12))

Request = _fastapi.Request
PlainTextResponse = require("fastapi.responses", "nemo-gym", "tau_env.adapters.nemo_gym").PlainTextResponse

#: The route (and tool) through which the model talks to the simulated user.
SEND_MESSAGE = "send_message_to_user"
#: The server's name in the configs :func:`write_environment` writes.
SERVER_NAME = "tau_env"
#: Appended to the agent's system prompt: NeMo Gym ends a rollout at a reply without function calls.
TOOL_MODE_NOTE = (
    "\n\nIn this conversation you reach the customer only through the send_message_to_user tool, which "
    "returns their reply. A reply of yours without a tool call ends the conversation."
)
_SEND_SCHEMA = {
    "type": "function",
    "name": SEND_MESSAGE,
    "description": "Send a message to the customer and return their reply.",
    "parameters": {
        "type": "object",
        "properties": {"message": {"type": "string", "description": "What to say to the customer."}},
        "required": ["message"],
    },
    "strict": False,
}


def user_policy(spec: Any) -> Any:
    """A tau_env user policy from a config value: None or ``"scripted"``, or an LLM user's mapping.

    The mapping: ``model`` (required), ``base_url``, ``api_key_env``, ``temperature``,
    ``max_tokens``, ``cache`` (a :class:`~tau_env.llm.ResponseCache` file). A policy object is used
    as it is.
    """
    if spec is None or spec == "scripted":
        return tau_env.ScriptedUser()
    if isinstance(spec, str):
        raise InvalidOptionError(f"user must be 'scripted', a mapping for an LLM user or a policy, got {spec!r}.")
    if not isinstance(spec, Mapping):
        return spec
    from tau_env.llm import ChatClient, LLMUser, ResponseCache, Sampling

    spec = dict(spec)
    if set(spec) - {"model", "base_url", "api_key_env", "temperature", "max_tokens", "cache"} or not isinstance(
        spec.get("model"), str
    ):
        raise InvalidOptionError(
            "An LLM user needs {'model': NAME} and optionally base_url, api_key_env, temperature, max_tokens, "
            f"cache; got keys {sorted(spec)}."
        )
    sampling = Sampling(**{k: spec[k] for k in ("temperature", "max_tokens") if spec.get(k) is not None})
    client = ChatClient(
        spec["model"],
        spec.get("base_url"),
        api_key_env=spec.get("api_key_env") or "OPENAI_API_KEY",
        sampling=sampling,
        cache=ResponseCache(spec["cache"]) if spec.get("cache") else None,
    )
    return LLMUser(client)


# --- one episode --------------------------------------------------------------------------------
class Episode:
    """One session's tau_env episode: its own env (its own in-memory database) and user policy."""

    def __init__(self, env: tau_env.TauEnv, user: Any) -> None:
        self.env, self.user = env, user

    @property
    def over(self) -> bool:
        return self.env.termination_reason is not None

    async def start(self, task_id: str | None, seed: int | None, opening: Sequence[str] | None) -> None:
        """Reset; the user's opening turns are the row's ``opening`` texts, then the user policy's."""
        options = {"task_id": task_id} if task_id is not None else None
        self.env.reset(seed=seed, options=options)
        if callable(getattr(self.user, "reset", None)):
            self.user.reset(task=self.env.task, seed=seed)
        await self.play_user(list(opening or ()))

    async def play_user(self, scripted: list[str] | None = None) -> None:
        env = self.env
        while not self.over and env.agent_selection == "user":
            if scripted:
                env.step(tau_env.say(scripted.pop(0)))
                continue
            obs = env.observe("user")
            act = getattr(self.user, "aact", None)
            out = act(obs) if act is not None else self.user(obs)
            env.step(await out if inspect.isawaitable(out) else out)

    def _ended(self) -> str:
        return f"\n(The conversation has ended: {self.env.termination_reason}.)" if self.over else ""

    async def call(self, name: str, arguments: Any) -> str:
        """One agent tool call (a step of the agent seat); its result as text."""
        if self.over:
            return f"The conversation has ended ({self.env.termination_reason}); no more tool calls run."
        call = tau_env.tool_call(name, arguments, id=f"ng_{self.env.num_steps + 1}")
        self.env.step(tau_env.assistant_message(None, [call]))
        messages = self.env.observe("agent")["messages"]
        result = next((m for m in reversed(messages) if m.get("tool_call_id") == call["id"]), None)
        await self.play_user()  # an agent tool keeps the turn; kept for domains whose tools end it
        return ((result or {}).get("content") or "") + self._ended()

    async def say(self, message: str) -> str:
        """The agent's message to the user; the user's reply (their messages until the agent's turn)."""
        if self.over:
            return f"The conversation has ended ({self.env.termination_reason})."
        before = len(self.env.observe("agent")["messages"]) + 1
        self.env.step(tau_env.say(message))
        await self.play_user()
        new = self.env.observe("agent")["messages"][before:]
        return ("\n".join(m.get("content") or "" for m in new if m.get("role") == "user") + self._ended()).strip()

    def reward(self) -> float:
        if self.over:
            return float(self.env.episode_reward)
        return float(self.env.grade(explain=False).reward)


# --- the resources server -----------------------------------------------------------------------
class TauResourcesServerConfig(_base.BaseResourcesServerConfig):
    """The server's config (the YAML's ``resources_servers.tau_env`` block).

    Attributes:
        env_id: The tau_env id.
        make_kwargs: Settings for ``tau_env.make`` (``max_steps``, ``data_dir``, ``retrieval``...).
        user: The user policy: ``"scripted"`` or an LLM user's mapping (:func:`user_policy`).
    """

    env_id: str = "harbor-bank-v0"
    make_kwargs: dict[str, Any] = {}
    user: Any = "scripted"


class TauSeedSessionRequest(_base.BaseSeedSessionRequest):
    """The dataset row (NeMo Gym posts the whole row): its ``task_id``, ``seed`` and ``tau_env_opening``."""

    model_config = _pydantic.ConfigDict(extra="allow")
    task_id: str | None = None
    seed: int | None = None
    tau_env_opening: list[str] | None = None


class TauVerifyRequest(_base.BaseVerifyRequest):
    model_config = _pydantic.ConfigDict(extra="allow")


class TauVerifyResponse(_base.BaseVerifyResponse):
    """The verify answer: ``reward`` plus tau_env's account of the episode."""

    model_config = _pydantic.ConfigDict(extra="allow")
    termination_reason: str | None = None
    db_digest: str | None = None
    steps: int = 0


class SendMessageRequest(_pydantic.BaseModel):
    message: str


class TauResourcesServer(_base.SimpleResourcesServer):
    """A tau_env domain as a NeMo Gym resources server: one episode per NeMo Gym session."""

    config: TauResourcesServerConfig
    sessions: dict[str, Any] = _pydantic.Field(default_factory=dict)

    def _new_episode(self) -> Episode:
        env = tau_env.make(self.config.env_id, **dict(self.config.make_kwargs))
        return Episode(env, user_policy(copy.deepcopy(self.config.user)))

    def agent_tools(self) -> list[dict[str, Any]]:
        """The Responses-API tool schemas the model gets: every agent tool, and send_message_to_user."""
        env = tau_env.make(self.config.env_id, **dict(self.config.make_kwargs))
        try:
            return agent_tool_schemas(env)
        finally:
            env.close()

    def setup_webserver(self) -> Any:
        app = super().setup_webserver()
        for schema in self.agent_tools():
            if schema["name"] != SEND_MESSAGE:
                app.post(f"/{schema['name']}", response_class=PlainTextResponse)(self._tool_route(schema["name"]))
        app.post(f"/{SEND_MESSAGE}", response_class=PlainTextResponse)(self.send_message_to_user)
        return app

    def _episode(self, request: Any) -> Episode | None:
        return self.sessions.get(request.session[_server_utils.SESSION_ID_KEY])

    def _tool_route(self, name: str) -> Any:
        async def route(request: Request) -> str:  # type: ignore[valid-type]
            episode = self._episode(request)
            if episode is None:
                return "No episode in this session: /seed_session starts one."
            try:
                arguments = await request.json()
            except ValueError as e:
                arguments = f"(not JSON: {e})"  # the env answers with a tool error
            return await episode.call(name, arguments if isinstance(arguments, dict) else str(arguments))

        route.__name__ = f"tool_{name}"
        return route

    async def seed_session(self, request: Request, body: TauSeedSessionRequest) -> Any:  # type: ignore[valid-type]
        sid = request.session[_server_utils.SESSION_ID_KEY]
        old = self.sessions.pop(sid, None)
        if old is not None:
            old.env.close()
        episode = self.sessions[sid] = self._new_episode()
        await episode.start(body.task_id, body.seed, body.tau_env_opening)
        return _base.BaseSeedSessionResponse()

    async def send_message_to_user(self, request: Request, body: SendMessageRequest) -> str:  # type: ignore[valid-type]
        episode = self._episode(request)
        if episode is None:
            return "No episode in this session: /seed_session starts one."
        return await episode.say(body.message)

    async def verify(self, request: Request, body: TauVerifyRequest) -> TauVerifyResponse:  # type: ignore[valid-type]
        sid = request.session[_server_utils.SESSION_ID_KEY]
        episode = self.sessions.pop(sid, None)
        if episode is None:
            return TauVerifyResponse(**body.model_dump(), reward=0.0, termination_reason="no_episode")
        try:
            final = final_text(body.response.model_dump())
            if final and not episode.over:
                await episode.say(final)
            return TauVerifyResponse(
                **body.model_dump(),
                reward=episode.reward(),
                termination_reason=episode.env.termination_reason,
                db_digest=episode.env.db_digest(),
                steps=episode.env.num_steps,
            )
        finally:
            episode.env.close()


def final_text(response: Mapping[str, Any]) -> str | None:
    """The text of the model's last reply when it made no function call after it (a Responses API output)."""
    output = list(response.get("output") or ())
    if not output or output[-1].get("type") != "message":
        return None
    parts = output[-1].get("content") or []
    text = "".join(p.get("text", "") for p in parts if isinstance(p, dict)) if isinstance(parts, list) else str(parts)
    return text.strip() or None


# --- the environment folder -------------------------------------------------------------------
def agent_tool_schemas(env: tau_env.TauEnv) -> list[dict[str, Any]]:
    """Every agent-side tool of ``env``'s domain as a Responses-API function tool, and send_message_to_user."""
    out = []
    for t in env.toolbox.tools.values():
        if t.side != "agent" or t.hidden or t.name == SEND_MESSAGE:
            continue
        fn = t.schema["function"]
        out.append(
            {
                "type": "function",
                "name": fn["name"],
                "description": fn.get("description", ""),
                "parameters": fn.get("parameters") or {"type": "object", "properties": {}},
                "strict": False,
            }
        )
    return [*out, copy.deepcopy(_SEND_SCHEMA)]


def dataset_rows(
    env_id: str = "harbor-bank-v0",
    task_ids: Sequence[str] | None = None,
    *,
    seed: int = 0,
    user: Any = None,
    **make_kwargs: Any,
) -> list[dict[str, Any]]:
    """NeMo Gym dataset rows for ``env_id``'s tasks (JSONL lines of ``write_environment``).

    Each row: ``responses_create_params`` (``input``: the agent's opening chat as tau_env gives it,
    the system prompt with :data:`TOOL_MODE_NOTE`, the greeting and the user's opening; ``tools``:
    :func:`agent_tool_schemas`), ``task_id``, ``seed`` and ``tau_env_opening`` (the user's opening
    texts, replayed by ``/seed_session`` so that the episode is the one the model sees).

    Args:
        env_id: The tau_env id.
        task_ids: The tasks (default: the env's task pool).
        seed: Each row's episode seed.
        user: The user policy that makes the openings (default scripted; use the server's).
        **make_kwargs: Settings for ``tau_env.make``.
    """
    import asyncio

    env = tau_env.make(env_id, **make_kwargs)
    try:
        tools = agent_tool_schemas(env)
        rows = []
        for task_id in list(task_ids) if task_ids is not None else list(env.task_pool):
            episode = Episode(env, user_policy(copy.deepcopy(user)))
            asyncio.run(episode.start(task_id, seed, None))
            messages = copy.deepcopy(env.observe("agent")["messages"])
            if messages and messages[0].get("role") == "system":
                messages[0]["content"] = (messages[0].get("content") or "") + TOOL_MODE_NOTE
            opening = [e["message"].get("content") or "" for e in env.trajectory if e["seat"] == "user"]
            rows.append(
                {
                    "responses_create_params": {
                        "input": [{"role": m["role"], "content": m.get("content") or ""} for m in messages],
                        "tools": tools,
                    },
                    "task_id": task_id,
                    "seed": seed,
                    "tau_env_opening": opening,
                }
            )
        return rows
    finally:
        env.close()


_APP = """\
# Written by tau_env.adapters.nemo_gym.write_environment: NeMo Gym starts this file.
from tau_env.adapters.nemo_gym import TauResourcesServer

if __name__ == "__main__":
    TauResourcesServer.run_webserver()
"""


def write_environment(
    root: str | Path,
    env_id: str = "harbor-bank-v0",
    task_ids: Sequence[str] | None = None,
    *,
    user: Any = "scripted",
    seed: int = 0,
    max_steps: int | None = None,
    **make_kwargs: Any,
) -> Path:
    """Write ``root/resources_servers/tau_env`` (``app.py``, ``configs/tau_env.yaml``, ``data/*.jsonl``).

    The YAML defines the resources server ``tau_env_resources_server`` and the agent
    ``tau_env_simple_agent`` (NeMo Gym's ``simple_agent``, its model server ``policy_model``), with
    the datasets ``example`` and ``train`` (the same rows). Run NeMo Gym from ``root``.

    Args:
        root: The folder to run NeMo Gym from.
        env_id: The tau_env id.
        task_ids: The tasks of the dataset (default: the env's task pool).
        user: The server's user policy (``"scripted"`` or an LLM user's mapping; see :func:`user_policy`).
        seed: The episodes' seed.
        max_steps: The agent's model calls per rollout (``simple_agent``'s ``max_steps``; None: no limit).
        **make_kwargs: Settings for ``tau_env.make`` (JSON values), e.g. ``data_dir``.

    Returns:
        The config file's path.
    """
    if not (user is None or isinstance(user, (str, Mapping))):
        raise InvalidOptionError("write_environment needs a user that fits in YAML: 'scripted' or an LLM mapping.")
    folder = Path(root) / "resources_servers" / SERVER_NAME
    (folder / "configs").mkdir(parents=True, exist_ok=True)
    (folder / "data").mkdir(exist_ok=True)
    (folder / "app.py").write_text(_APP)
    (folder / "requirements.txt").write_text("tau-env[nemo-gym]\n")
    rows = dataset_rows(env_id, task_ids, seed=seed, user=user, **make_kwargs)
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    for split in ("example", "train"):
        (folder / "data" / f"{split}.jsonl").write_text(lines)
    datasets = [
        {
            "name": split,
            "type": split,
            "jsonl_fpath": f"resources_servers/{SERVER_NAME}/data/{split}.jsonl",
            "license": "Apache 2.0",
        }
        for split in ("example", "train")
    ]
    config = {
        f"{SERVER_NAME}_resources_server": {
            "resources_servers": {
                SERVER_NAME: {
                    "entrypoint": "app.py",
                    "domain": "agent",
                    "verified": False,
                    "description": f"tau_env {env_id}: tools, a simulated user, exact-match reward",
                    "env_id": env_id,
                    "make_kwargs": dict(make_kwargs),
                    "user": dict(user) if isinstance(user, Mapping) else (user or "scripted"),
                }
            }
        },
        f"{SERVER_NAME}_simple_agent": {
            "responses_api_agents": {
                "simple_agent": {
                    "entrypoint": "app.py",
                    "resources_server": {"type": "resources_servers", "name": f"{SERVER_NAME}_resources_server"},
                    "model_server": {"type": "responses_api_models", "name": "policy_model"},
                    **({"max_steps": max_steps} if max_steps is not None else {}),
                    "datasets": datasets,
                }
            }
        },
    }
    path = folder / "configs" / f"{SERVER_NAME}.yaml"
    path.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML: no YAML writer needed
    return path


__all__ = [
    "SEND_MESSAGE",
    "SERVER_NAME",
    "TOOL_MODE_NOTE",
    "Episode",
    "TauResourcesServer",
    "TauResourcesServerConfig",
    "agent_tool_schemas",
    "dataset_rows",
    "final_text",
    "user_policy",
    "write_environment",
]
