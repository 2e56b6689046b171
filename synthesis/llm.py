"""The synthesis pipeline's model access: one JSON object per call, cached, counted per role.

Every stage that may use a model takes ``llm``: None (the template backend, no model) or a
:class:`SynthLLM`. A role module builds its messages and calls ``await llm.ajson(role, messages)``;
the reply is parsed into one JSON object (fences and prose around it tolerated, a model's
``<think>`` block dropped); an unparseable reply is answered with a correction message quoting the
parse error, up to ``attempts`` replies. Replies are cached by the exact request (model,
temperature, seed, messages) in an SQLite file, so a resumed or repeated run with the same seed
gets the same replies without asking the server again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import json
import re
import threading
import weakref
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from tau_env.synthesis.errors import SynthesisError

from tau_env.error import InvalidOptionError, shown
from tau_env.llm import ChatClient, ResponseCache, Sampling, Usage, strip_reasoning

T = TypeVar("T")
#: The counters of each role in :attr:`SynthLLM.usage`.
#: Longest reply read as JSON; a longer one is a failure (asked again), never cached.
MAX_REPLY_CHARS = 200_000
USAGE_KEYS = ("calls", "cached", "failures", "prompt_tokens", "completion_tokens")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\n?(.*?)```", re.S)
_DECODER = json.JSONDecoder()
#: Start positions tried when scanning a reply for an object (bounds the work on a hostile reply).
_MAX_STARTS = 200


class JSONReplyError(ValueError):
    """A reply that holds no JSON object."""


def extract_json(text: str | None) -> dict[str, Any]:
    """The JSON object a model's reply holds.

    Tried in order: the whole reply (after dropping a ``<think>`` block); each fenced block
    (```` ```json ... ``` ````, ```` ``` ... ``` ````), json-labelled first; then the first ``{`` from
    which a JSON object decodes, prose before and after it ignored.

    Raises:
        JSONReplyError: No JSON object in it (the message says why, for the correction prompt).
    """
    if text is None or not text.strip():
        raise JSONReplyError("the reply is empty")
    body = (strip_reasoning(text) or "").strip() if "<think>" in text else text.strip()
    if not body:
        raise JSONReplyError("the reply holds only reasoning, no answer")
    first_error = ""
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as e:
        first_error = str(e)
    else:
        if isinstance(obj, dict):
            return obj
        first_error = f"the reply is a JSON {type(obj).__name__}, not an object"
    fences = sorted(_FENCE.finditer(body), key=lambda m: m.group(1).lower() != "json")
    for m in fences:
        try:
            obj = json.loads(m.group(2))
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            return obj
    start, tries = body.find("{"), 0
    while start >= 0 and tries < _MAX_STARTS:
        tries += 1
        try:
            obj, _ = _DECODER.raw_decode(body, start)
        except (ValueError, RecursionError):
            pass
        else:
            if isinstance(obj, dict):
                return obj
        start = body.find("{", start + 1)
    if "{" not in body:
        raise JSONReplyError("the reply holds no JSON object (no '{')")
    raise JSONReplyError(f"the reply holds no valid JSON object ({first_error})")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end from synchronous code: with ``asyncio.run`` here, or, when this
    thread already runs an event loop (a notebook, an async caller), in a worker thread's loop.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    ctx = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tau-env-synth") as pool:
        return pool.submit(ctx.run, asyncio.run, coro).result()


def _zero() -> dict[str, int]:
    return dict.fromkeys(USAGE_KEYS, 0)


class SynthLLM:
    """A model that answers each synthesis role with one JSON object.

    Args:
        model: The model name the server knows.
        base_url: The OpenAI-compatible server's base URL (default: ``$OPENAI_BASE_URL``, else OpenAI's).
        cache_path: SQLite reply cache (a run folder's ``llm_cache.sqlite``); None caches nothing.
        api_key_env: Environment variable holding the key.
        temperature: Sampling temperature (0 by default: with the seed, the same replies).
        timeout: Seconds per request.
        retries: Retries of a failed request (connection errors, 5xx, 429, timeouts) before
            :class:`~tau_env.error.InfrastructureError`.
        max_concurrency: Requests in flight at once (per event loop).
        max_tokens: Per-reply token cap sent with each request (None: the server's limit).
        backoff: First retry delay in seconds; doubles each time.

    Attributes:
        usage: Per role: ``calls`` (requests answered by the server), ``cached`` (answered from
            the cache), ``failures`` (replies that held no JSON object), ``prompt_tokens``,
            ``completion_tokens``.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        *,
        cache_path: Path | str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 0.0,
        timeout: float = 120.0,
        retries: int = 3,
        max_concurrency: int = 16,
        max_tokens: int | None = 4096,
        backoff: float = 0.5,
    ):
        if not isinstance(model, str) or not model.strip():
            raise InvalidOptionError(f"SynthLLM needs a model name, got {shown(model)}.")
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise InvalidOptionError(f"max_concurrency must be a positive integer, got {shown(max_concurrency)}.")
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.temperature = temperature
        self.timeout = timeout
        self.retries = retries
        self.max_concurrency = max_concurrency
        self.max_tokens = max_tokens
        self.backoff = backoff
        self.cache = ResponseCache(cache_path) if cache_path is not None else None
        self.usage: dict[str, dict[str, int]] = {}
        self._saved: dict[str, dict[str, int]] = {}
        self._guard = threading.Lock()
        # A client (connection pool) and a semaphore belong to one event loop.
        self._per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[ChatClient, asyncio.Semaphore]]
        self._per_loop = weakref.WeakKeyDictionary()
        ChatClient(model, base_url)  # checks the URL now, not at the first call

    def __getstate__(self) -> dict[str, Any]:  # for worker processes: no lock, no per-loop clients
        return {k: v for k, v in self.__dict__.items() if k not in ("_guard", "_per_loop")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _guard=threading.Lock(), _per_loop=weakref.WeakKeyDictionary())

    def describe(self) -> dict[str, Any]:
        """The backend as a run folder records it (``run.json``'s ``backend``)."""
        return {"model": self.model, "base_url": self.base_url, "temperature": self.temperature}

    def _client(self) -> tuple[ChatClient, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        with self._guard:
            hit = self._per_loop.get(loop)
            if hit is None:
                client = ChatClient(
                    self.model,
                    self.base_url,
                    api_key_env=self.api_key_env,
                    sampling=Sampling(temperature=self.temperature, max_tokens=self.max_tokens),
                    timeout=self.timeout,
                    retries=self.retries,
                    backoff=self.backoff,
                    cache=None,  # ajson caches a reply only once it has parsed (a bad one is asked again)
                    max_connections=self.max_concurrency,
                )
                hit = self._per_loop[loop] = (client, asyncio.Semaphore(self.max_concurrency))
            return hit

    def _count(self, role: str, **add: int) -> None:
        with self._guard:
            u = self.usage.setdefault(role, _zero())
            for k, v in add.items():
                u[k] += v

    async def ajson(self, role: str, messages: list[dict[str, Any]], *, seed: int = 0, attempts: int = 3) -> dict:
        """One JSON object from the model for ``role`` (see the module docstring).

        Raises:
            SynthesisError: No reply held a JSON object after ``attempts`` replies.
            tau_env.error.InfrastructureError: The server failed (after its retries).
        """
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise InvalidOptionError(f"attempts must be a positive integer, got {shown(attempts)}.")
        client, slots = self._client()
        convo = list(messages)
        error = reply = ""
        for _ in range(attempts):
            request = {
                "model": self.model,
                "messages": convo,
                "temperature": self.temperature,
                "max_tokens": self.max_tokens,
                "seed": seed,
            }
            message = self.cache.get(request) if self.cache is not None else None
            if message is not None:
                self._count(role, cached=1)
            else:
                usage = Usage()
                async with slots:
                    message = await client.complete(convo, seed=seed, usage=usage)
                self._count(
                    role,
                    calls=usage.requests,
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                )
            content = message.get("content")
            if isinstance(content, list):  # content parts
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            reply = content if isinstance(content, str) else ""
            try:
                if len(reply) > MAX_REPLY_CHARS:
                    raise JSONReplyError(
                        f"the reply is {len(reply):,} characters long, more than the {MAX_REPLY_CHARS:,} a JSON "
                        "answer needs"
                    )
                value = extract_json(reply)
            except JSONReplyError as e:
                error = str(e)
                self._count(role, failures=1)
                reply = reply[:2000]  # a huge reply is not sent back whole
            else:
                if self.cache is not None:
                    self.cache.put(request, message)
                return value
            convo = [
                *convo,
                {"role": "assistant", "content": reply},
                {
                    "role": "user",
                    "content": f"Your reply could not be read as one JSON object: {error}. "
                    "Reply again with only the JSON object, nothing before or after it.",
                },
            ]
        raise SynthesisError(
            f"{self.model} gave no JSON object for the {role!r} role in {attempts} replies: {error}. "
            f"Last reply: {shown(reply, 200)}. Use a model that follows JSON instructions, or the template backend."
        )

    def json(self, role: str, messages: list[dict[str, Any]], *, seed: int = 0, attempts: int = 3) -> dict:
        """:meth:`ajson` from synchronous code (see :func:`run_sync`)."""
        return run_sync(self.ajson(role, messages, seed=seed, attempts=attempts))

    def usage_totals(self) -> dict[str, int]:
        """The counters summed over roles."""
        with self._guard:
            total = _zero()
            for u in self.usage.values():
                for k in USAGE_KEYS:
                    total[k] += u.get(k, 0)
            return total

    def save_usage(self, run_folder: Any) -> dict[str, Any]:
        """Add this client's counts since its last save to the run folder's ``llm_usage.json``
        (``{"model", "base_url", "roles": {role: counters}, "totals": counters}``); returns what it wrote.
        """
        with self._guard:
            delta = {}
            for role, u in self.usage.items():
                before = self._saved.get(role, _zero())
                delta[role] = {k: u[k] - before.get(k, 0) for k in USAGE_KEYS}
            self._saved = {role: dict(u) for role, u in self.usage.items()}
        old = run_folder.read_json("llm_usage.json", {}) or {}
        roles = {r: dict(u) for r, u in (old.get("roles") or {}).items() if isinstance(u, dict)}
        for role, d in delta.items():
            u = roles.setdefault(role, _zero())
            for k in USAGE_KEYS:
                u[k] = int(u.get(k, 0) or 0) + d[k]
        totals = _zero()
        for u in roles.values():
            for k in USAGE_KEYS:
                totals[k] += int(u.get(k, 0) or 0)
        record = {"model": self.model, "base_url": self.base_url, "roles": roles, "totals": totals}
        run_folder.write_json("llm_usage.json", record)
        return record

    async def aclose(self) -> None:
        """Close the connections of the current event loop's client."""
        hit = self._per_loop.get(asyncio.get_running_loop())
        if hit is not None:
            await hit[0].aclose()

    def close(self) -> None:
        """Close the reply cache."""
        if self.cache is not None:
            self.cache.close()
