"""A scripted OpenAI-compatible server on loopback, for tests and benchmarks (yours and ours).

``FakeOpenAI(script)`` serves ``POST /v1/chat/completions`` on 127.0.0.1 (a free port) from a
thread; ``script(request) -> Reply`` decides each answer: a message, an HTTP error status, or a
delay. The real ``openai`` client talks to it over real HTTP.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 2048  # the listen backlog: thousands of episodes may connect at once


class FakeOpenAI:
    def __init__(self, script: Callable[[dict[str, Any]], Reply]):
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with owner._lock:
                    owner.requests.append(body)
                reply = owner.script(body)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.status != 200:
                    payload = json.dumps({"error": {"message": "scripted failure", "type": "server_error"}}).encode()
                else:
                    payload = json.dumps(
                        {
                            "id": "chatcmpl-test",
                            "object": "chat.completion",
                            "created": 0,
                            "model": body.get("model"),
                            "choices": [
                                {
                                    "index": 0,
                                    "message": reply.message,
                                    "finish_reason": "tool_calls" if reply.message.get("tool_calls") else "stop",
                                }
                            ],
                            "usage": {
                                "prompt_tokens": reply.usage[0],
                                "completion_tokens": reply.usage[1],
                                "total_tokens": sum(reply.usage),
                            },
                        }
                    ).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def seat_of(request: dict[str, Any]) -> str:
    """Which seat sent ``request``: "user" when its system prompt holds the scenario, else "agent"."""
    system = request["messages"][0].get("content") or ""
    return "user" if "<scenario>" in system else "agent"


def own_turns(request: dict[str, Any]) -> int:
    """How many assistant messages the requesting seat has already sent."""
    return sum(1 for m in request["messages"] if m.get("role") == "assistant")
