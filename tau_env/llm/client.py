"""An async client for OpenAI-compatible servers (vLLM, SGLang, OpenAI, ...).

Two transports with the same semantics: a lean HTTP/1.1 client on asyncio streams
(:mod:`tau_env.llm.http`, the default, standard library only) and the ``openai`` package
(``backend="openai"``, the ``llm`` extra). A failure of the server (unreachable, cut short,
5xx, 429, timeout), after retries with exponential backoff, raises :class:`InfrastructureError`,
and so does a reply that is not a chat completion: the harness retries or reports the episode as
such and never scores it as a model failure. Keys come from environment variables, never
arguments that end up in logs.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from tau_env.error import DependencyNotInstalled, InfrastructureError, InvalidOptionError, shown
from tau_env.llm import http
from tau_env.llm.cache import ResponseCache
from tau_env.llm.parsing import message_problem

__all__ = ["ChatClient", "InfrastructureError", "Sampling", "Usage"]


@dataclass
class Sampling:
    """Sampling settings sent with every request."""

    temperature: float = 0.0
    max_tokens: int | None = 1024  # per-turn token cap; None sends none (the server's own limit applies)
    top_p: float | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)  # server-specific fields (e.g. vLLM's)


@dataclass
class Usage:
    """Tokens and requests of one policy in one episode."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    cached: int = 0

    def add(self, other: Any) -> None:
        """Add a reply's ``usage`` object; anything in it that is not a count is ignored."""
        if isinstance(other, dict):
            self.prompt_tokens += _count(other.get("prompt_tokens"))
            self.completion_tokens += _count(other.get("completion_tokens"))


def _count(value: Any) -> int:
    try:
        return max(int(value or 0), 0)
    except (TypeError, ValueError, OverflowError):
        return 0


class ChatClient:
    """Chat completions with tools against one model on one server.

    The default transport, ``backend="http"``, is a lean HTTP/1.1 client on asyncio streams with a
    bounded pool of keep-alive connections: it encodes each request body once (JSON straight to
    bytes) and reads each reply with one ``json.loads``, no SDK types, and so costs a small part of
    the CPU per request of the ``openai`` package (``benchmarks/harness_scale.py`` measures both);
    with a fast local server and a thousand episodes in flight the client, not the model, would
    otherwise set the pace. ``backend="openai"`` sends the same body through the ``openai``
    package (the ``llm`` extra), for what the lean client does not do: proxies from the
    environment, compression, redirects. Both retry and fail alike:

    * connection failures (refused, reset, closed mid-reply, not HTTP), timeouts, HTTP 5xx and
      429 are retried ``retries`` times, after ``backoff`` seconds doubling each time, then raise
      :class:`InfrastructureError`;
    * any other non-2xx status (400, 401, 404, ...) raises :class:`InfrastructureError` at once:
      retrying a bad request will not help;
    * a 2xx reply that is not JSON, holds no ``choices[0].message`` object, or one without the
      shape of a chat completion message (:func:`~tau_env.llm.parsing.message_problem`), raises
      :class:`InfrastructureError` at once.

    Args:
        model: The model name the server knows.
        base_url: The server's OpenAI-compatible base URL, e.g. ``http://127.0.0.1:8000/v1``
            (default: ``$OPENAI_BASE_URL``, else OpenAI's).
        api_key_env: Environment variable holding the key (``EMPTY`` is sent when it is unset,
            as local servers expect).
        sampling: Temperature, per-turn token cap, and so on.
        timeout: Seconds per request (per attempt; with the default backend, from the moment a
            connection slot is free to the end of the reply).
        retries: Retries after a failed request (connection errors, 5xx, 429, timeouts).
        backoff: First retry delay in seconds; doubles each time.
        tool_choice: Sent when tools are given (``"auto"`` by default; ``"required"`` forces a call).
        cache: Replies keyed by the exact request; a hit skips the server.
        backend: ``"http"`` (default) or ``"openai"``; see above.
        max_connections: Requests in flight at once (the pool's size; further requests wait).
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        sampling: Sampling | None = None,
        timeout: float = 120.0,
        retries: int = 3,
        backoff: float = 0.5,
        tool_choice: str | dict[str, Any] | None = None,
        cache: ResponseCache | None = None,
        backend: str = "http",
        max_connections: int = 1024,
    ):
        if backend not in ("http", "openai"):
            raise InvalidOptionError(f"backend must be 'http' or 'openai', got {shown(backend)}.")
        if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
            raise InvalidOptionError(f"max_connections must be a positive integer, got {shown(max_connections)}.")
        if base_url is not None:
            http.check_url(base_url)
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.sampling = sampling or Sampling()
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.tool_choice = tool_choice
        self.cache = cache
        self.backend = backend
        self.max_connections = max_connections
        self._openai: Any = _import_openai() if backend == "openai" else None
        self._client: Any = None  # the openai client, or our connection pool
        self._tools_json: dict[tuple[int, ...], tuple[tuple[Any, ...], bytes]] = {}

    def __getstate__(self) -> dict[str, Any]:  # for Ray workers: no module, no open connections
        return {k: v for k, v in self.__dict__.items() if k not in ("_openai", "_client", "_headers", "_tools_json")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = {"backend": "openai", "max_connections": 1024} | state  # pickles from before the lean client
        self.__dict__.update(state, _client=None, _tools_json={})
        self._openai = _import_openai() if self.backend == "openai" else None

    def __deepcopy__(self, memo: dict[int, Any]) -> ChatClient:
        return self  # policies are copied per episode; their client (a connection pool) is shared

    def describe(self) -> dict[str, Any]:
        """Configuration for the run record (no key; not the transport, which changes no reply)."""
        return {
            "model": self.model,
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
            "sampling": asdict(self.sampling),
            "timeout": self.timeout,
            "retries": self.retries,
            "tool_choice": self.tool_choice,
        }

    def request(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, seed: int | None
    ) -> dict[str, Any]:
        """The request as the cache keys it (``extra_body`` nested; the server gets it merged)."""
        req: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.sampling.temperature,
        }
        if self.sampling.max_tokens is not None:
            req["max_tokens"] = self.sampling.max_tokens
        if self.sampling.top_p is not None:
            req["top_p"] = self.sampling.top_p
        if tools:
            req["tools"] = tools
            req["tool_choice"] = self.tool_choice or "auto"
        if seed is not None:
            req["seed"] = seed
        if self.sampling.extra_body:
            req["extra_body"] = self.sampling.extra_body
        return req

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        seed: int | None = None,
        usage: Usage | None = None,
    ) -> dict[str, Any]:
        """The assistant message the server returns (a dict), after retries; see the class doc."""
        req = self.request(messages, tools, seed)
        key = None
        if self.cache is not None:
            key = self.cache.key(req)
            hit = self.cache.lookup(key)
            if hit is not None and message_problem(hit) is None:  # a malformed entry: ask the server again
                if usage is not None:
                    usage.cached += 1
                return hit
        body = {k: v for k, v in req.items() if k != "extra_body"} | req.get("extra_body", {})
        send, retryable = self._post_http, _HTTP_RETRYABLE
        if self.backend == "openai":
            o = self._openai
            send = self._post_openai
            retryable = (o.APIConnectionError, o.InternalServerError, o.RateLimitError, http.ServerTimeout)
        data = self._encode(body) if self.backend == "http" else body
        delay = self.backoff
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                resp, raw = await send(data)
                break
            except retryable as e:  # APITimeoutError is an APIConnectionError
                last = e
            if attempt < self.retries:
                await asyncio.sleep(delay)
                delay *= 2
        else:
            raise InfrastructureError(
                f"{self.model} at {self.base_url} failed after {self.retries + 1} attempts: "
                f"{type(last).__name__}: {last}"
            ) from last
        choices = resp.get("choices") if isinstance(resp, dict) else None
        first = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(first, dict) or not isinstance(first.get("message"), dict):
            raise InfrastructureError(f"{self.model} at {self.base_url} returned no message: {raw()[:200]}")
        message = {k: v for k, v in first["message"].items() if v is not None}
        problem = message_problem(message)
        if problem is not None:
            raise InfrastructureError(
                f"{self.model} at {self.base_url} returned a message that is not a chat completion message: "
                f"{problem}. Reply: {raw()[:200]}"
            )
        if usage is not None:
            usage.requests += 1
            usage.add(resp.get("usage"))
        if key is not None:
            self.cache.store(key, message)
        return message

    def _encode(self, body: dict[str, Any]) -> bytes:
        """The request body as JSON bytes. The tool schemas (most of a request's bytes, and the same
        objects turn after turn: an env hands out its toolbox's shared schema dicts) are encoded once
        per list of schema objects; change a schema by passing a new dict, never in place.
        """
        tools = body.get("tools")
        if not tools:
            return json.dumps(body, separators=(",", ":")).encode()
        key = tuple(map(id, tools))
        hit = self._tools_json.get(key)
        if hit is None:
            if len(self._tools_json) >= 256:
                self._tools_json.clear()
            # The entry keeps the schema objects alive, so their ids cannot be reused by others.
            hit = self._tools_json[key] = (tuple(tools), json.dumps(tools, separators=(",", ":")).encode())
        rest = json.dumps({k: v for k, v in body.items() if k != "tools"}, separators=(",", ":")).encode()
        return b'{"tools":' + hit[1] + b"," + rest[1:]

    async def _post_http(self, data: bytes) -> tuple[Any, Any]:
        if self._client is None:
            url = self.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
            self._client = http.ConnectionPool(url, self.max_connections)
            self._headers = {
                "Content-Type": "application/json",
                "Accept": "application/json",
                "User-Agent": "tau-env",
                "Authorization": f"Bearer {os.environ.get(self.api_key_env) or 'EMPTY'}",
            }
        try:
            reply = await self._client.post("/chat/completions", data, self._headers, self.timeout)
        except http.ReplyTooLarge as e:
            raise InfrastructureError(f"{self.model} at {self.base_url}: {e}") from e
        if reply.status == 429 or reply.status >= 500:
            raise ServerError(f"HTTP {reply.status}: {error_detail(reply.body)}")
        if not 200 <= reply.status < 300:
            detail = error_detail(reply.body)
            raise InfrastructureError(f"{self.model} at {self.base_url}: HTTP {reply.status}: {detail}")
        try:
            resp = json.loads(reply.body)
        except (ValueError, RecursionError) as e:  # not JSON, not UTF-8, or nested too deeply to decode
            raise InfrastructureError(
                f"{self.model} at {self.base_url} returned a reply that is not JSON ({e}): {reply.body[:200]!r}"
            ) from None
        return resp, lambda: repr(reply.body[:200])

    async def _post_openai(self, body: dict[str, Any]) -> tuple[Any, Any]:
        o = self._openai
        if self._client is None:
            self._client = o.AsyncOpenAI(
                base_url=self.base_url,
                api_key=os.environ.get(self.api_key_env) or "EMPTY",
                timeout=self.timeout,
                max_retries=0,  # retries are ours, so that failures can be classified
            )
        try:
            # The SDK's generic ``post`` sends our body as is: ``chat.completions.create`` would first
            # walk every message and tool schema through its type transforms.
            # The SDK's own timeout restarts with each byte that arrives (and with each interim reply),
            # so the deadline of the attempt as a whole is ours, as with the lean client.
            async with asyncio.timeout(self.timeout):
                resp = await self._client.post("/chat/completions", body=body, cast_to=dict)
            if isinstance(resp, str):  # the SDK decodes only replies labelled application/json
                resp = json.loads(resp)
        except TimeoutError:
            raise http.ServerTimeout(f"no reply within {self.timeout:g} s") from None
        except (o.InternalServerError, o.RateLimitError, o.APIConnectionError):
            raise
        except o.APIStatusError as e:  # other 4xx: a bad request; retrying will not help
            raise InfrastructureError(f"{self.model} at {self.base_url}: HTTP {e.status_code}: {e}") from e
        except (ValueError, RecursionError) as e:  # a 2xx reply that is not JSON, or nested too deeply
            raise InfrastructureError(
                f"{self.model} at {self.base_url} returned a reply that is not JSON: {type(e).__name__}: {e}"
            ) from None
        return resp, lambda: str(resp)

    async def aclose(self) -> None:
        """Close the connections (the client reconnects if used again)."""
        if self._client is not None:
            if self.backend == "openai":
                await self._client.close()
            else:
                self._client.close()
            self._client = None


class ServerError(Exception):
    """An HTTP 5xx or 429 reply: worth retrying."""


_HTTP_RETRYABLE = (http.ServerConnectionError, http.ServerTimeout, ServerError)


def error_detail(body: bytes) -> str:
    """What an error reply says: its ``error.message`` when it is OpenAI-style JSON, else its start."""
    try:
        message = json.loads(body)["error"]["message"]
        if isinstance(message, str):
            return message[:500]
    except (ValueError, TypeError, KeyError, IndexError):
        pass
    return repr(body[:200])


def _import_openai() -> Any:
    try:
        import openai
    except ImportError as e:
        raise DependencyNotInstalled("backend='openai' needs the 'llm' extra: pip install 'tau-env[llm]'.") from e
    return openai
