"""An OpenEnv server over a tau_env domain: ``tau-env serve DOMAIN``.

It speaks OpenEnv's reset / step / state protocol (``openenv-core`` 0.3), so OpenEnv's clients and
trainers drive it as any OpenEnv environment: a WebSocket at ``/ws`` (messages ``{"type": "reset"
| "step" | "state" | "close", "data": {...}}``, answers ``{"type": "observation" | "state" |
"error", "data": {...}}``), one session (one episode, one database) per connection; and HTTP
``POST /reset``, ``POST /step``, ``GET /state``, where ``/reset`` opens a session whose id comes back
in the observation (``session_id``) and the ``X-Session-Id`` header, and later calls name it (the
header, or ``session_id`` in the body). ``GET /health``, ``/schema``, ``/metadata`` as in OpenEnv.

The client is the agent seat; the user seat is played inside the server by a tau_env user policy
(a :class:`~tau_env.ScriptedUser` by default, or an :class:`~tau_env.llm.LLMUser`). An action is an
assistant message (``{"content": ..., "tool_calls": [...]}``); an observation holds the agent's
chat (``messages``) and active tools (``tools``); the reward is 0 until the episode ends, then the
exact-match reward the env gives (with the harness's loop rule, as ``tau-env eval``).

A network service, so: it binds to loopback unless told otherwise, and any other address needs a
token (:func:`load_token`: from ``TAU_ENV_SERVE_TOKEN`` or a file's first line, never the command
line), checked on every request with a constant-time comparison; without a token a foreign
``Origin`` or a non-loopback ``Host`` is refused (a web page cannot drive it), and a POST must be
``application/json``; the request body, WebSocket message, tool calls per step, sessions, a
session's bytes, idle time, open connections and the time to send a request's head and body are
limited (:class:`ServeLimits`; idle sessions are reaped); session ids are unguessable and each
session owns its database; a malformed request gets a 4xx with a JSON error, and no error ever
answers with a traceback.
"""

from __future__ import annotations

import asyncio
import copy
import hmac
import ipaddress
import json
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator
from tau_env.adapters.errors import AdapterError, require
from tau_env.adapters.gym import _fingerprint

import tau_env
from tau_env.error import InvalidOptionError
from tau_env.harness import DEFAULT_LOOP_LIMIT
from tau_env.registry import ENV_KWARGS

log = logging.getLogger(__name__)

#: The environment variable holding the server's token (the client reads it too).
TOKEN_ENV = "TAU_ENV_SERVE_TOKEN"
#: The header a session id travels in over HTTP.
SESSION_HEADER = "X-Session-Id"
_AGENT, _USER = "agent", "user"


@dataclass(frozen=True)
class ServeLimits:
    """What one client may ask of the server.

    Attributes:
        max_request_bytes: Largest HTTP request body (413 beyond).
        max_message_bytes: Largest WebSocket message (the connection closes with 1009 beyond).
        max_tool_calls: Most tool calls in one step's action (422 beyond; nothing runs).
        max_sessions: Most live sessions, HTTP and WebSocket together (503 beyond).
        idle_timeout_s: A session unused this long is closed and its database dropped.
        reap_interval_s: How often idle sessions are looked for (None: a quarter of the timeout, at most 5 s).
        max_session_bytes: Most bytes (as JSON) of the messages one session's chat may hold; every reply
            carries the chat, so this bounds replies and a session's memory too (413 and the session
            closed beyond). 2 MiB is some 500k tokens, more than any model's context.
        max_connections: Most open connections (HTTP and WebSocket); one beyond gets a 503 and is closed at once.
        header_timeout_s: Time a connection has to send a whole request head (request line and headers),
            from when it opens or its first byte after the previous reply (408 and closed beyond).
        body_timeout_s: Time a request has to send its whole body once its head is in (408 and closed beyond).
        keep_alive_timeout_s: An idle keep-alive connection is closed after this long.
    """

    max_request_bytes: int = 1 << 20
    max_message_bytes: int = 1 << 20
    max_tool_calls: int = 32
    max_sessions: int = 256
    idle_timeout_s: float = 600.0
    reap_interval_s: float | None = None
    max_session_bytes: int = 2 << 20
    max_connections: int = 1024
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        ints = ("max_request_bytes", "max_message_bytes", "max_tool_calls", "max_sessions", "max_session_bytes")
        for name in (*ints, "max_connections"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidOptionError(f"ServeLimits.{name} must be a positive integer, got {v!r}.")
        for name in ("idle_timeout_s", "header_timeout_s", "body_timeout_s", "keep_alive_timeout_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
                raise InvalidOptionError(f"ServeLimits.{name} must be a positive number of seconds, got {v!r}.")

    @property
    def reap_every(self) -> float:
        return self.reap_interval_s or min(max(self.idle_timeout_s / 4, 0.01), 5.0)


# --- the wire models (OpenEnv's shapes, our fields) ---------------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCallFunction(_Strict):
    name: str = Field(max_length=256)
    arguments: str | dict[str, Any] = "{}"


class ToolCall(_Strict):
    id: str | None = Field(default=None, max_length=256)
    type: Literal["function"] = "function"
    function: ToolCallFunction


class TauAction(_Strict):
    """The agent's action: an OpenAI-style assistant message (``tau_env.say`` / ``tau_env.call`` build one)."""

    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class TauObservation(_Strict):
    """What the agent sees after a reset or step (the ``observation`` of OpenEnv's result)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    task_id: str
    session_id: str
    step_count: int
    truncated: bool = False
    termination_reason: str | None = None


class ResetBody(_Strict):
    """``/reset`` (and the WebSocket ``reset`` data): which task, which seed."""

    seed: StrictInt | None = Field(default=None, ge=0, le=2**63 - 1)  # strict: true is not 1
    episode_id: str | None = Field(default=None, max_length=255)
    task_id: str | None = Field(default=None, max_length=200)
    task_index: StrictInt | None = Field(default=None, ge=0, le=2**31)
    session_id: str | None = Field(default=None, max_length=128)


class StepBody(_Strict):
    """``/step``: OpenEnv's step request (``action``, ``timeout_s``, ``request_id``) plus the session.

    ``timeout_s`` is refused unless null: a step (tool calls, then the user's turns) cannot be cut off
    half-way without leaving the episode in between two seats.
    """

    action: TauAction
    timeout_s: None = None
    request_id: str | None = Field(default=None, max_length=255)
    session_id: str | None = Field(default=None, max_length=128)

    @field_validator("timeout_s", mode="before")
    @classmethod
    def _no_timeout(cls, v: Any) -> None:
        if v is not None:
            raise ValueError(
                "timeout_s is not supported by tau-env serve (a step cannot stop half-way); "
                "leave it out and set a timeout on your client instead"
            )
        return None


class WSMessage(_Strict):
    type: Literal["reset", "step", "state", "close"]
    data: dict[str, Any] = Field(default_factory=dict)


class ClientError(Exception):
    """A request the server refuses: an HTTP status, a short code and a message (sent as JSON)."""

    def __init__(self, status: int, code: str, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.close = close  # the session is closed too (it broke a limit for good)

    def body(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message}


def validation_error(e: ValidationError) -> ClientError:
    """A pydantic error as a 422, without echoing the input (which may be huge or hostile)."""
    errs = [f"{'.'.join(str(p) for p in err.get('loc', ()))}: {err.get('msg', '')}"[:200] for err in e.errors()[:5]]
    return ClientError(422, "invalid_request", "Invalid request: " + "; ".join(errs))


# --- sessions ----------------------------------------------------------------------------------
class Session:
    """One client's episode: its own env (its own in-memory database), user policy and clock."""

    def __init__(
        self, sid: str, env: tau_env.TauEnv, user: Any, loop_limit: int | None, max_bytes: int | None = None
    ) -> None:
        self.id, self.env, self.user, self.loop_limit = sid, env, user, loop_limit
        self.max_bytes = max_bytes
        self.bytes = 0  # the JSON size of the agent's chat so far (what every reply carries)
        self._counted = 0  # how many of the chat's messages self.bytes covers
        self.lock = asyncio.Lock()
        self.last_used = time.monotonic()
        self.started = False
        self.episode_id: str | None = None
        self._last_fp: str | None = None
        self._repeats = 0

    async def _user_turns(self) -> None:
        env = self.env
        while env.termination_reason is None and env.agent_selection == _USER:
            obs = env.observe(_USER)
            act = getattr(self.user, "aact", None)
            out = act(obs) if act is not None else self.user(obs)
            env.step(await out if asyncio.iscoroutine(out) or hasattr(out, "__await__") else out)

    async def reset(self, body: ResetBody) -> dict[str, Any]:
        options: dict[str, Any] | None = None
        if body.task_id is not None:
            options = {"task_id": body.task_id}
        if body.task_index is not None:
            options = {**(options or {}), "task_index": body.task_index}
        seed = body.seed if body.seed is not None else secrets.randbelow(2**31)
        self.env.reset(seed=seed, options=options)
        reset = getattr(self.user, "reset", None)
        if callable(reset):
            reset(task=self.env.task, seed=seed)
        self.started, self.episode_id = True, body.episode_id
        self._last_fp, self._repeats = None, 0
        self.bytes = self._counted = 0
        await self._user_turns()
        return self.result()

    async def step(self, action: TauAction, limits: ServeLimits) -> dict[str, Any]:
        env = self.env
        if not self.started:
            raise ClientError(409, "reset_needed", "This session has no episode yet: reset first.")
        if env.termination_reason is not None:
            raise ClientError(409, "episode_over", f"The episode is over ({env.termination_reason}); reset first.")
        n = len(action.tool_calls or ())
        if n > limits.max_tool_calls:
            raise ClientError(
                422, "too_many_tool_calls", f"{n} tool calls in one step; at most {limits.max_tool_calls}."
            )
        message = action.model_dump(exclude={"metadata"}, exclude_none=True)
        if self.max_bytes is not None and self.bytes + len(json.dumps(message, default=str)) > self.max_bytes:
            raise self._too_large()
        env.step(message)
        if self.loop_limit:
            fp = _fingerprint(env.trajectory[-1]["message"])
            self._repeats = self._repeats + 1 if fp == self._last_fp else 1
            self._last_fp = fp
            if self._repeats >= self.loop_limit:
                env.end_episode(tau_env.TerminationReason.LOOP)
        await self._user_turns()
        return self.result()

    def _too_large(self) -> ClientError:
        return ClientError(
            413,
            "session_too_large",
            f"This session's chat would exceed {self.max_bytes} bytes (the server's --max-session-bytes); "
            "the session is closed: reset for a new one.",
            close=True,
        )

    def result(self) -> dict[str, Any]:
        """OpenEnv's result: ``{"observation": ..., "reward": ..., "done": ...}``.

        Raises:
            ClientError: 413, the chat has grown past the session's byte budget (the session must close).
        """
        env = self.env
        over = env.termination_reason is not None
        view = env.observe(_AGENT)
        messages = view["messages"]
        if len(messages) < self._counted:  # never shrinks within an episode; recount if it ever does
            self.bytes = self._counted = 0
        self.bytes += sum(len(json.dumps(m, default=str)) for m in messages[self._counted :])
        self._counted = len(messages)
        if self.max_bytes is not None and self.bytes > self.max_bytes:
            raise self._too_large()
        obs = {
            "messages": view["messages"],
            "tools": view["tools"],
            "task_id": env.task.id,
            "session_id": self.id,
            "step_count": env.num_steps,
            "truncated": bool(env.truncations[_AGENT]),
            "termination_reason": str(env.termination_reason) if over else None,
        }
        return {"observation": obs, "reward": float(env.episode_reward) if over else 0.0, "done": over}

    def state(self) -> dict[str, Any]:
        """OpenEnv's state (``episode_id``, ``step_count``) plus the task, the outcome and the database digest."""
        if not self.started:
            return {"episode_id": None, "step_count": 0, "session_id": self.id}
        env = self.env
        over = env.termination_reason is not None
        return {
            "episode_id": self.episode_id,
            "step_count": env.num_steps,
            "session_id": self.id,
            "task_id": env.task.id,
            "done": over,
            "termination_reason": str(env.termination_reason) if over else None,
            "reward": float(env.episode_reward) if over else 0.0,
            "db_digest": env.db_digest(),
        }


class Sessions:
    """The live sessions: created up to ``max_sessions``, found by id, reaped when idle."""

    def __init__(self, env_id: str, user: Any, limits: ServeLimits, loop_limit: int | None, make_kwargs: dict) -> None:
        self.env_id, self.user, self.limits, self.loop_limit = env_id, user, limits, loop_limit
        self.domain = tau_env.registry.load_domain(env_id, **make_kwargs)  # loaded once: a bad setting fails now
        self.env_kwargs = {k: v for k, v in make_kwargs.items() if k in ENV_KWARGS}
        self._new_env().close()  # the env settings too
        self.live: dict[str, Session] = {}

    def _new_env(self) -> tau_env.TauEnv:
        return tau_env.TauEnv(self.domain, **self.env_kwargs)  # its own in-memory database

    def create(self) -> Session:
        if len(self.live) >= self.limits.max_sessions:
            raise ClientError(
                503, "capacity_reached", f"The server holds its maximum of {self.limits.max_sessions} sessions."
            )
        sid = secrets.token_urlsafe(24)
        s = self.live[sid] = Session(
            sid, self._new_env(), copy.deepcopy(self.user), self.loop_limit, self.limits.max_session_bytes
        )
        return s

    def get(self, sid: str | None) -> Session:
        s = self.live.get(sid) if isinstance(sid, str) else None
        if s is None:
            raise ClientError(
                404, "unknown_session", f"No live session with that id; POST /reset opens one (send {SESSION_HEADER})."
            )
        s.last_used = time.monotonic()
        return s

    def close(self, sid: str) -> bool:
        s = self.live.pop(sid, None)
        if s is not None:
            s.env.close()
        return s is not None

    def reap(self, now: float | None = None) -> list[str]:
        """Close the sessions idle longer than the limit (not those in the middle of a request)."""
        now = time.monotonic() if now is None else now
        stale = [
            sid
            for sid, s in self.live.items()
            if now - s.last_used > self.limits.idle_timeout_s and not s.lock.locked()
        ]
        for sid in stale:
            self.close(sid)
        return stale

    async def reaper(self) -> None:
        while True:
            await asyncio.sleep(self.limits.reap_every)
            try:
                self.reap()
            except Exception:  # never let the reaper die
                log.exception("idle-session reaper")


# --- security helpers -------------------------------------------------------------------------
def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


def load_token(token_file: str | Path | None = None, environ: dict[str, str] | None = None) -> str | None:
    """The server's token: the first line of ``token_file`` if given, else ``$TAU_ENV_SERVE_TOKEN``, else None.

    Only the file's first line counts (stripped of surrounding blanks); the rest of the file is ignored.

    Raises:
        AdapterError: The file cannot be read or its first line is empty, or the token is shorter than
            16 characters or holds a character other than printable ASCII without spaces (which a client
            could not send in its ``Authorization`` header).
    """
    environ = os.environ if environ is None else environ
    if token_file is not None:
        try:
            text = Path(token_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise AdapterError(f"Cannot read the token file {str(token_file)!r}: {e}") from e
        token = (text.splitlines() or [""])[0].strip()
        if not token:
            raise AdapterError(
                f"The token file {str(token_file)!r} has an empty first line; the token is the file's first line."
            )
        where = f"the first line of {str(token_file)!r}"
    else:
        token = environ.get(TOKEN_ENV, "").strip() or None
        if token is None:
            return None
        where = f"${TOKEN_ENV}"
    if len(token) < 16:
        raise AdapterError(
            f"The token ({where}) is {len(token)} characters long; use at least 16 random characters "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')."
        )
    if not all("!" <= c <= "~" for c in token):
        raise AdapterError(
            f"The token ({where}) holds a space, control or non-ASCII character, which a client cannot send in "
            "'Authorization: Bearer <token>'; use printable ASCII only "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')."
        )
    return token


def _host_of(value: str) -> str:
    """The host of a ``Host`` header value or of a URL's authority (``[::1]:80`` -> ``::1``)."""
    value = value.strip()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def host_header_ok(host: str | None) -> bool:
    """Whether a request's ``Host`` header names a loopback address (or is absent): the DNS-rebinding guard.

    A web page that makes ``evil.example`` resolve to 127.0.0.1 still sends ``Host: evil.example``.
    """
    return host is None or is_loopback(_host_of(host).lower())


def origin_ok(origin: str | None) -> bool:
    """Whether an ``Origin`` header is absent (not a browser) or a loopback page's (``http://127.0.0.1:3000``)."""
    if origin is None:
        return True
    scheme, sep, rest = origin.strip().partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        return False  # "null" (a sandboxed or file: page), or nonsense
    return is_loopback(_host_of(rest.split("/", 1)[0]).lower())


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve on a non-loopback address without a token.

    Raises:
        AdapterError: ``host`` is not loopback and ``token`` is None.
    """
    if not is_loopback(host) and not token:
        raise AdapterError(
            f"Serving on {host!r} (not loopback) needs a token: put one in ${TOKEN_ENV} or a file named by "
            "--token-file (never on the command line); clients send it as 'Authorization: Bearer <token>'."
        )


def token_ok(expected: str | None, header: str | None) -> bool:
    """Whether the ``Authorization`` header carries ``expected`` (always true without a token); constant-time."""
    if expected is None:
        return True
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), expected.encode())


def parse_json(raw: bytes | str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise ClientError(400, "invalid_json", f"The body is not JSON: {str(e)[:200]}") from None


def refused(e: Exception) -> ClientError:
    """A tau_env error from the env (a bad option, an unknown task, a non-message action) as a 4xx."""
    if isinstance(e, ClientError):
        return e
    if isinstance(e, ValidationError):
        return validation_error(e)
    status = 404 if isinstance(e, (tau_env.error.UnknownTaskError,)) else 400
    return ClientError(status, type(e).__name__, str(e)[:500])


def make_sessions(
    env_id: str,
    *,
    user: Any = None,
    limits: ServeLimits | None = None,
    loop_limit: int | None = DEFAULT_LOOP_LIMIT,
    **make_kwargs: Any,
) -> Sessions:
    """The session table of a server for ``env_id`` (its domain loaded now, so a bad setting fails at start)."""
    user = tau_env.ScriptedUser() if user is None else user
    return Sessions(env_id, user, limits or ServeLimits(), loop_limit, make_kwargs)


def create_app(
    env_id: str,
    *,
    user: Any = None,
    token: str | None = None,
    limits: ServeLimits | None = None,
    loop_limit: int | None = DEFAULT_LOOP_LIMIT,
    **make_kwargs: Any,
) -> Any:
    """The FastAPI app serving ``env_id`` (see the module's docstring); ``**make_kwargs`` go to ``tau_env.make``.

    Args:
        env_id: A registered tau_env id, e.g. ``"harbor-bank-v0"``.
        user: The user policy; each session plays a deep copy (a :class:`~tau_env.ScriptedUser` if None).
        token: Required on every request (``Authorization: Bearer <token>``) when given.
        limits: The :class:`ServeLimits` (defaults if None).
        loop_limit: The harness's loop rule (None: off).
    """
    require("fastapi", "openenv", "tau-env serve")
    from tau_env.adapters.openenv_app import build_app

    sessions = make_sessions(env_id, user=user, limits=limits, loop_limit=loop_limit, **make_kwargs)
    return build_app(sessions, token)


def serve(
    env_id: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    log_level: str = "warning",
    **app_kwargs: Any,
) -> None:
    """Run the server until interrupted (uvicorn). Binding to a non-loopback ``host`` needs ``token``.

    The connection limits of ``limits`` (:class:`ServeLimits`: open connections, header, body and
    keep-alive timeouts) are enforced by the server's HTTP protocol, the others by the app. The
    open-file limit is raised to fit ``max_connections`` where the system allows, else the cap is
    lowered to fit it (with a warning).
    """
    check_bind(host, token)
    require("fastapi", "openenv", "tau-env serve")
    require("uvicorn", "openenv", "tau-env serve")
    from tau_env.adapters.openenv_app import fit_open_files, server_config

    limits = fit_open_files(app_kwargs.pop("limits", None) or ServeLimits())
    app = create_app(env_id, token=token, limits=limits, **app_kwargs)
    import uvicorn

    uvicorn.Server(server_config(app, host=host, port=port, log_level=log_level)).run()


class BackgroundServer:
    """A server on a free loopback port, run by uvicorn in a daemon thread: for tests, benchmarks, notebooks.

    ``with BackgroundServer(app) as url: ...`` (``url`` is ``http://127.0.0.1:PORT``). The app's
    :class:`ServeLimits` apply, the connection limits included.
    """

    def __init__(self, app: Any, *, max_message_bytes: int | None = None) -> None:
        import socket
        import threading

        require("uvicorn", "openenv", "BackgroundServer")
        from tau_env.adapters.openenv_app import server_config

        self._sock = socket.create_server(("127.0.0.1", 0), backlog=2048)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        config = server_config(app, host="127.0.0.1", port=0, log_level="error", ws_max_size=max_message_bytes)
        import uvicorn

        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise AdapterError("The background server did not start.")
            time.sleep(0.01)
        return self.url

    def __exit__(self, *exc: Any) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()


__all__ = [
    "BackgroundServer",
    "SESSION_HEADER",
    "TOKEN_ENV",
    "ClientError",
    "ResetBody",
    "ServeLimits",
    "Session",
    "Sessions",
    "StepBody",
    "TauAction",
    "TauObservation",
    "check_bind",
    "create_app",
    "host_header_ok",
    "is_loopback",
    "load_token",
    "make_sessions",
    "origin_ok",
    "serve",
    "token_ok",
]
