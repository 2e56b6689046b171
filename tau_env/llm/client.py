"""An async client for OpenAI-compatible servers (vLLM, SGLang, OpenAI, ...), on the ``openai`` package.

A failure of the server (unreachable, 5xx, 429, timeout), after retries with exponential
backoff, raises :class:`InfrastructureError`: the harness retries or reports the episode as such
and never scores it as a model failure. Keys come from environment variables, never arguments
that end up in logs.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from tau_env.error import DependencyNotInstalled, InfrastructureError
from tau_env.llm.cache import ResponseCache

__all__ = ["ChatClient", "InfrastructureError", "Sampling", "Usage"]


@dataclass
class Sampling:
    """Sampling settings sent with every request."""

    temperature: float = 0.0
    max_tokens: int = 1024  # per-turn token cap
    top_p: float | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)  # server-specific fields (e.g. vLLM's)


@dataclass
class Usage:
    """Tokens and requests of one policy in one episode."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    cached: int = 0

    def add(self, other: dict[str, Any] | None) -> None:
        if other:
            self.prompt_tokens += int(other.get("prompt_tokens") or 0)
            self.completion_tokens += int(other.get("completion_tokens") or 0)


class ChatClient:
    """Chat completions with tools against one model on one server.

    Args:
        model: The model name the server knows.
        base_url: The server's OpenAI-compatible base URL, e.g. ``http://127.0.0.1:8000/v1``.
        api_key_env: Environment variable holding the key (``EMPTY`` is sent when it is unset,
            as local servers expect).
        sampling: Temperature, per-turn token cap, and so on.
        timeout: Seconds per request.
        retries: Retries after a failed request (connection errors, 5xx, 429, timeouts).
        backoff: First retry delay in seconds; doubles each time.
        tool_choice: Sent when tools are given (``"auto"`` by default; ``"required"`` forces a call).
        cache: Replies keyed by the exact request; a hit skips the server.
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
    ):
        try:
            import openai
        except ImportError as e:
            raise DependencyNotInstalled("Model servers need the 'llm' extra: pip install 'tau-env[llm]'.") from e
        self._openai = openai
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.sampling = sampling or Sampling()
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.tool_choice = tool_choice
        self.cache = cache
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:  # for Ray workers: no module, no open connections
        return {k: v for k, v in self.__dict__.items() if k not in ("_openai", "_client")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        import openai
        self.__dict__.update(state, _openai=openai, _client=None)

    def __deepcopy__(self, memo: dict[int, Any]) -> ChatClient:
        return self  # policies are copied per episode; their client (a connection pool) is shared

    def describe(self) -> dict[str, Any]:
        """Configuration for the run record (no key)."""
        return {
            "model": self.model,
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
            "sampling": asdict(self.sampling),
            "timeout": self.timeout,
            "retries": self.retries,
            "tool_choice": self.tool_choice,
        }

    def _get_client(self) -> Any:
        if self._client is None:
            self._client = self._openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=os.environ.get(self.api_key_env) or "EMPTY",
                timeout=self.timeout,
                max_retries=0,  # retries are ours, so that failures can be classified
            )
        return self._client

    def request(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, seed: int | None
    ) -> dict[str, Any]:
        req: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.sampling.temperature,
            "max_tokens": self.sampling.max_tokens,
        }
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
        if self.cache is not None:
            hit = self.cache.get(req)
            if hit is not None:
                if usage is not None:
                    usage.cached += 1
                return hit
        o = self._openai
        retryable = (o.APIConnectionError, o.APITimeoutError, o.InternalServerError, o.RateLimitError)
        delay = self.backoff
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                # The SDK's generic ``post`` sends our body as is: ``chat.completions.create`` would first
                # walk every message and tool schema through its type transforms (most of the client's
                # CPU time at a thousand episodes in flight).
                body = {k: v for k, v in req.items() if k != "extra_body"} | req.get("extra_body", {})
                resp = await self._get_client().post("/chat/completions", body=body, cast_to=dict)
                break
            except retryable as e:
                last = e
            except o.APIStatusError as e:  # other 4xx: a bad request; retrying will not help
                raise InfrastructureError(f"{self.model} at {self.base_url}: HTTP {e.status_code}: {e}") from e
            if attempt < self.retries:
                await asyncio.sleep(delay)
                delay *= 2
        else:
            raise InfrastructureError(
                f"{self.model} at {self.base_url} failed after {self.retries + 1} attempts: "
                f"{type(last).__name__}: {last}"
            ) from last
        choices = resp.get("choices") if isinstance(resp, dict) else None
        if not choices or not isinstance(choices[0].get("message"), dict):
            raise InfrastructureError(f"{self.model} at {self.base_url} returned no message: {str(resp)[:200]}")
        message = {k: v for k, v in choices[0]["message"].items() if v is not None}
        if usage is not None:
            usage.requests += 1
            usage.add(resp.get("usage"))
        if self.cache is not None:
            self.cache.put(req, message)
        return message

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
