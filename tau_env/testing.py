"""A scripted OpenAI-compatible server on loopback, for tests and benchmarks (yours and ours).

``FakeOpenAI(script)`` serves ``POST /v1/chat/completions`` on 127.0.0.1 (a free port) from an
event loop in a thread, with HTTP/1.1 keep-alive; ``script(request) -> Reply`` decides each
answer: a message, an HTTP error status, or a delay (slept on the loop, so thousands of requests
can wait at once while the server stays cheap enough not to be what a benchmark measures). Both
``ChatClient`` backends talk to it over real HTTP. If the script raises, the connection drops.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Reply:
    message: dict[str, Any] = field(default_factory=lambda: {"role": "assistant", "content": "ok"})
    status: int = 200
    delay: float = 0.0
    usage: tuple[int, int] = (10, 5)


def text(content: str, **kw: Any) -> Reply:
    return Reply({"role": "assistant", "content": content}, **kw)


def tool(name: str, arguments: dict[str, Any] | str, call_id: str = "c1", **kw: Any) -> Reply:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Reply(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}],
        },
        **kw,
    )


_BACKLOG = 4096


class FakeOpenAI:
    """The server; a context manager. ``requests`` holds every request body (unless
    ``keep_requests=False``: a benchmark's server answering thousands of requests would otherwise
    spend most of its time in garbage collections of them); ``connections`` counts the
    connections accepted (keep-alive clients reuse theirs).
    """

    def __init__(self, script: Callable[[dict[str, Any]], Reply], *, keep_requests: bool = True):
        self.script = script
        self.keep_requests = keep_requests
        self.requests: list[dict[str, Any]] = []
        self.connections = 0
        # the listen backlog: thousands of episodes may connect at once (start_server listens again
        # with its own backlog, 100 by default: _start passes this one)
        self._sock = socket.create_server(("127.0.0.1", 0), backlog=_BACKLOG)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        self._loop = asyncio.new_event_loop()
        self._handlers: set[asyncio.Task] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result()
        return self

    def __exit__(self, *exc: Any) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, sock=self._sock, limit=1 << 20, backlog=_BACKLOG)

    async def _stop(self) -> None:
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went away (or the server is stopping)
        except Exception:  # a script failed: the client sees the connection drop
            pass
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request on the connection; False when the client has closed it."""
        if not await reader.readline():
            return False
        headers = {}
        while (line := await reader.readline()).strip():
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        body = json.loads(await reader.readexactly(int(headers.get("content-length", 0))) or b"{}")
        if self.keep_requests:
            self.requests.append(body)
        reply = self.script(body)
        # The reply's bytes, made before the delay: a thousand decoded requests held while their
        # replies wait would cost the server more in garbage collection than all else it does.
        response, delay = _response(body, reply), reply.delay
        del body, reply
        if delay:
            await asyncio.sleep(delay)
        writer.write(response)
        await writer.drain()
        return headers.get("connection", "").lower() != "close"


def _response(body: dict[str, Any], reply: Reply) -> bytes:
    if reply.status != 200:
        payload = json.dumps({"error": {"message": "scripted failure", "type": "server_error"}}).encode()
    else:
        message = reply.message
        payload = json.dumps(
            {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": reply.usage[0],
                    "completion_tokens": reply.usage[1],
                    "total_tokens": sum(reply.usage),
                },
            }
        ).encode()
    head = (
        f"HTTP/1.1 {reply.status} {'OK' if reply.status == 200 else 'Error'}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


def seat_of(request: dict[str, Any]) -> str:
    """Which seat sent ``request``: "user" when its system prompt holds the scenario, else "agent"."""
    system = request["messages"][0].get("content") or ""
    return "user" if "<scenario>" in system else "agent"


def own_turns(request: dict[str, Any]) -> int:
    """How many assistant messages the requesting seat has already sent."""
    return sum(1 for m in request["messages"] if m.get("role") == "assistant")
