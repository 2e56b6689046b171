"""ChatClient's transports over real sockets: retries, failures, keep-alive, framing, limits, concurrency.

Misbehaving servers are raw sockets on loopback, started by each test; well-behaved ones are
``tau_env.testing.FakeOpenAI``. Semantics shared by both backends are checked on both.
"""

import asyncio
import json
import pickle
import socket
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tau_env.error import InfrastructureError, InvalidOptionError
from tau_env.llm import ChatClient, ResponseCache, Usage, http
from tau_env.llm import client as client_module
from tau_env.testing import FakeOpenAI, text

try:
    import openai  # noqa: F401

    BACKENDS = ["http", "openai"]
except ImportError:  # the openai backend is optional
    BACKENDS = ["http"]

MESSAGES = [{"role": "user", "content": "hi"}]
OK_BODY = json.dumps({"choices": [{"message": {"role": "assistant", "content": "ok"}}]}).encode()


def complete(client, **kw):
    return asyncio.run(client.complete(MESSAGES, **kw))


def response(body: bytes, status: int = 200, extra: str = "") -> bytes:
    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


class RawServer:
    """Loopback TCP server: ``handler(conn, request_bytes, n)`` answers the n-th request however it likes.

    Returns True to keep the connection for another request.
    """

    def __init__(self, handler):
        self.handler, self.heads, self.connections = handler, [], 0
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self._n, self._lock = 0, threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = int(
                    next(ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length"))
                )
                while len(buf) < length:
                    buf += conn.recv(65536)
                body, buf = buf[:length], buf[length:]
                with self._lock:
                    n, self._n = self._n, self._n + 1
                    self.heads.append(head.decode())
                try:
                    if not self.handler(conn, body, n):
                        return
                except OSError:
                    return

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.sock.close()


def fixed(*replies: bytes, keep=False):
    """A handler sending the n-th of ``replies`` (the last one once they run out)."""

    def handler(conn, body, n):
        reply = replies[min(n, len(replies) - 1)]
        if not keep and b"\r\n\r\n" in reply and b"connection:" not in reply.lower().split(b"\r\n\r\n")[0]:
            # Say that the connection closes, so a pooling client does not race the close by reusing it.
            reply = reply.replace(b"\r\n", b"\r\nConnection: close\r\n", 1)
        conn.sendall(reply)
        return keep

    return handler


@pytest.fixture
def delays(monkeypatch):
    """The backoff delays the client sleeps, without sleeping."""
    seen = []

    async def fake_sleep(d):
        seen.append(d)

    monkeypatch.setattr(client_module.asyncio, "sleep", fake_sleep)
    return seen


# -- retries and failures: the same on both backends ------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("status", [500, 502, 503, 429])
def test_5xx_and_429_are_retried_with_backoff_then_infrastructure_error(backend, status, delays):
    with RawServer(fixed(response(b'{"error": {"message": "busy"}}', status))) as server:
        client = ChatClient("m", server.url, retries=3, backoff=0.25, backend=backend)
        with pytest.raises(InfrastructureError, match=rf"^m at .* failed after 4 attempts: .*{status}"):
            complete(client)
    assert len(server.heads) == 4 and delays == [0.25, 0.5, 1.0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_transient_failure_then_success(backend, delays):
    with RawServer(fixed(response(b"{}", 503), response(b"{}", 429), response(OK_BODY))) as server:
        client = ChatClient("m", server.url, retries=3, backoff=0.1, backend=backend)
        usage = Usage()
        assert complete(client, usage=usage) == {"role": "assistant", "content": "ok"}
    assert len(server.heads) == 3 and delays == [0.1, 0.2] and usage.requests == 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("status", [400, 401, 403, 404, 408, 422])
def test_other_4xx_fail_at_once(backend, status, delays):
    with RawServer(fixed(response(b'{"error": {"message": "bad request"}}', status))) as server:
        client = ChatClient("m", server.url, retries=3, backend=backend)
        with pytest.raises(InfrastructureError, match=rf"^m at .*: HTTP {status}: .*bad request"):
            complete(client)
    assert len(server.heads) == 1 and delays == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_connection_reset_is_retried(backend, delays):
    def reset(conn, body, n):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST on close
        return False

    with RawServer(reset) as server:
        client = ChatClient("m", server.url, retries=2, backoff=0.01, backend=backend)
        with pytest.raises(InfrastructureError, match=r"failed after 3 attempts"):
            complete(client)
    assert len(server.heads) == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_unreachable_server_is_retried(backend, delays):
    sock = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    sock.close()  # nothing listens there now
    client = ChatClient("m", url, retries=2, backoff=0.01, backend=backend)
    with pytest.raises(InfrastructureError, match=r"failed after 3 attempts"):
        complete(client)
    assert delays == [0.01, 0.02]


@pytest.mark.parametrize("backend", BACKENDS)
def test_timeouts_are_retried_then_fail(backend):
    with FakeOpenAI(lambda req: text("late", delay=1.0)) as server:
        client = ChatClient("m", server.url, retries=1, backoff=0.01, timeout=0.2, backend=backend)
        with pytest.raises(InfrastructureError, match=r"failed after 2 attempts: .*Timeout"):
            complete(client)
    assert len(server.requests) == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_reply_cut_short_is_retried(backend, delays):
    cut = response(OK_BODY)[:-10]  # Content-Length promises more than comes
    with RawServer(fixed(cut, response(OK_BODY))) as server:
        client = ChatClient("m", server.url, retries=1, backoff=0.01, backend=backend)
        assert complete(client)["content"] == "ok"
    assert len(server.heads) == 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"\xff\xfe",
        b"",
        b"[1, 2]",
        b'{"x": 1}',
        b'{"choices": 5}',
        b'{"choices": []}',
        b'{"choices": [5]}',
    ],
)
def test_a_reply_that_is_not_a_completion_fails_at_once(backend, body, delays):
    with RawServer(fixed(response(body))) as server:
        client = ChatClient("m", server.url, retries=3, backend=backend)
        with pytest.raises(InfrastructureError, match=r"^m at .* returned (no message|a reply that is not JSON)"):
            complete(client)
    assert len(server.heads) == 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "body",
    [
        b"[" * 200_000 + b"]" * 200_000,
        b'{"choices":[{"message":{"content":' + b"[" * 200_000 + b"]" * 200_000 + b"}}]}",
    ],
)
def test_a_reply_nested_too_deeply_is_not_json(backend, body, delays):
    with RawServer(fixed(response(body))) as server:
        client = ChatClient("m", server.url, retries=3, backend=backend)
        with pytest.raises(InfrastructureError, match=r"^m at .* returned a reply that is not JSON"):
            complete(client)
    assert len(server.heads) == 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ('{"content": 5}', r"'content' is int 5, expected a string, null or a list of text parts"),
        ('{"content": NaN}', r"'content' is float nan"),
        ('{"content": {"a": 1}}', r"'content' is dict"),
        ('{"content": [{"type": "text", "text": 5}]}', r"a content part is dict .*, expected an object with a string"),
        ('{"content": ["x"]}', r"a content part is str 'x'"),
        ('{"content": "x", "reasoning_content": 1}', r"'reasoning_content' is int 1"),
        ('{"tool_calls": 5}', r"'tool_calls' is int 5, expected a list or null"),
        ('{"tool_calls": [5]}', r"a tool call is int 5"),
        ('{"tool_calls": [{"function": null}]}', r"a tool call is dict .*'function': None"),
        ('{"tool_calls": [{"function": {"name": 5, "arguments": "{}"}}]}', r"a tool call is dict"),
    ],
)
def test_a_message_without_the_shape_of_a_chat_message_is_a_server_fault(backend, message, problem, delays):
    body = b'{"choices": [{"message": ' + message.encode() + b"}]}"
    with RawServer(fixed(response(body))) as server:
        client = ChatClient("m", server.url, retries=3, backend=backend)
        with pytest.raises(
            InfrastructureError, match=rf"^m at .* returned a message that is not a chat completion message: {problem}"
        ):
            complete(client)
    assert len(server.heads) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_malformed_arguments_and_odd_ids_are_the_models_and_pass(backend):
    calls = [
        {"id": 5, "function": {"name": "f", "arguments": 5}},
        {"function": {"name": "", "arguments": "not json"}},
        {"type": "x", "function": {"name": "g"}},
    ]
    body = json.dumps(
        {"choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"type": "image"}], "tool_calls": calls}}]}
    )
    with RawServer(fixed(response(body.encode()))) as server:
        reply = complete(ChatClient("m", server.url, backend=backend))
    assert reply["tool_calls"] == calls


def test_a_malformed_cached_reply_is_asked_for_again(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    with RawServer(fixed(response(OK_BODY))) as server:
        client = ChatClient("m", server.url, cache=cache)
        cache.put(client.request(MESSAGES, None, None), {"content": 5})
        assert complete(client) == {"role": "assistant", "content": "ok"}
        assert complete(client) == {"role": "assistant", "content": "ok"}
    assert len(server.heads) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_completion_without_a_json_content_type_is_accepted(backend):
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {len(OK_BODY)}\r\n\r\n"
    with RawServer(fixed(head.encode() + OK_BODY)) as server:
        assert complete(ChatClient("m", server.url, backend=backend))["content"] == "ok"


def _trickle(conn, body, n):
    """Answer so slowly that only a deadline on the whole attempt ends it: a byte a tenth of a second."""
    for byte in response(OK_BODY):
        time.sleep(0.1)
        conn.sendall(bytes([byte]))


def _endless_continue(conn, body, n):
    while True:
        time.sleep(0.02)
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("handler", [_trickle, _endless_continue])
def test_the_timeout_bounds_each_whole_attempt(backend, handler):
    with RawServer(handler) as server:
        client = ChatClient("m", server.url, retries=1, backoff=0.01, timeout=0.5, backend=backend)
        with pytest.raises(
            InfrastructureError, match=r"^m at .* failed after 2 attempts: ServerTimeout: no reply within 0.5 s"
        ):
            complete(client)
    assert len(server.heads) == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_garbage_usage_is_ignored(backend):
    body = json.dumps({"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": "many"}}).encode()
    with RawServer(fixed(response(body), keep=True)) as server:
        usage = Usage()
        assert complete(ChatClient("m", server.url, backend=backend), usage=usage) == {"content": "x"}
    assert (usage.requests, usage.prompt_tokens, usage.completion_tokens) == (1, 0, 0)
    usage.add(5)
    usage.add({"prompt_tokens": float("inf"), "completion_tokens": -3})
    assert (usage.prompt_tokens, usage.completion_tokens) == (0, 0)


# -- the lean transport ------------------------------------------------------------------------


def test_keep_alive_reuses_one_connection():
    with FakeOpenAI(lambda req: text("ok")) as server:
        client = ChatClient("m", server.url)

        async def many():
            return [await client.complete(MESSAGES) for _ in range(20)]

        assert all(r["content"] == "ok" for r in asyncio.run(many()))
    assert server.connections == 1 and len(server.requests) == 20


def test_a_connection_the_server_dropped_while_idle_is_replaced_without_a_retry(delays):
    # the server closes after each reply without saying so: the kept connection is stale next time
    with RawServer(fixed(response(OK_BODY))) as server:
        client = ChatClient("m", server.url, retries=0)

        async def three():
            out = []
            for _ in range(3):
                out.append(await client.complete(MESSAGES))
            return out

        assert [r["content"] for r in asyncio.run(three())] == ["ok"] * 3
    assert len(server.heads) == 3 and delays == []


def test_connection_close_and_http_1_0_replies_are_not_kept():
    with RawServer(fixed(response(OK_BODY, extra="Connection: close\r\n"), keep=True)) as server:
        client = ChatClient("m", server.url)

        async def two():
            return [await client.complete(MESSAGES) for _ in range(2)]

        asyncio.run(two())
    assert server.connections == 2


def test_chunked_replies_with_extensions_and_trailers():
    half = len(OK_BODY) // 2
    a, b = OK_BODY[:half], OK_BODY[half:]
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + f"{len(a):x};ext=1\r\n".encode()
        + a
        + b"\r\n"
        + f"{len(b):X}\r\n".encode()
        + b
        + b"\r\n0\r\nX-Trailer: yes\r\n\r\n"
    )
    with RawServer(fixed(chunked, keep=True)) as server:
        client = ChatClient("m", server.url)

        async def two():
            return [await client.complete(MESSAGES) for _ in range(2)]

        assert [r["content"] for r in asyncio.run(two())] == ["ok", "ok"]
    assert server.connections == 1  # the connection survives a chunked reply


def test_a_reply_without_length_runs_to_the_end_of_the_connection():
    with RawServer(fixed(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + OK_BODY)) as server:
        assert complete(ChatClient("m", server.url))["content"] == "ok"


def test_interim_100_replies_are_skipped():
    with RawServer(fixed(b"HTTP/1.1 100 Continue\r\n\r\n" + response(OK_BODY))) as server:
        assert complete(ChatClient("m", server.url))["content"] == "ok"


@pytest.mark.parametrize(
    "reply",
    [
        b"garbage\r\n\r\n",
        b"HTTP/1.1 2OO OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY",
        b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 200 + b"\r\n",
        b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 100_000 + b"\r\n\r\n",
    ],
)
def test_malformed_framing_is_a_connection_error(reply, delays):
    with RawServer(fixed(reply)) as server:
        client = ChatClient("m", server.url, retries=1)
        with pytest.raises(InfrastructureError, match=r"failed after 2 attempts: ServerConnectionError"):
            complete(client)
    assert len(server.heads) == 2


def test_huge_replies_are_read_whole_and_oversized_ones_refused(monkeypatch, delays):
    content = "x" * (20 * 1024 * 1024)
    big = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
    with RawServer(fixed(response(big), keep=True)) as server:
        client = ChatClient("m", server.url, retries=2)
        assert complete(client)["content"] == content
        monkeypatch.setattr(http, "MAX_REPLY_BYTES", 1024 * 1024)
        with pytest.raises(InfrastructureError, match=r"^m at .*: reply of more than 1048576 bytes$"):
            complete(client)
    assert len(server.heads) == 2  # refused at once, not retried


def test_an_oversized_chunked_reply_is_refused(monkeypatch):
    monkeypatch.setattr(http, "MAX_REPLY_BYTES", 1000)
    chunk = b"a" * 600
    reply = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + (b"258\r\n" + chunk + b"\r\n") * 3
    with RawServer(fixed(reply)) as server, pytest.raises(InfrastructureError, match=r"reply of more than 1000"):
        complete(ChatClient("m", server.url))


def test_many_requests_over_a_bounded_pool():
    def script(req):
        return text(req["messages"][0]["content"], delay=0.01)

    with FakeOpenAI(script) as server:
        client = ChatClient("m", server.url, max_connections=8)

        async def many():
            return await asyncio.gather(*[client.complete([{"role": "user", "content": f"n{i}"}]) for i in range(300)])

        replies = asyncio.run(many())
    assert [r["content"] for r in replies] == [f"n{i}" for i in range(300)]  # each its own answer
    assert server.connections <= 8 and len(server.requests) == 300


def test_one_client_across_event_loops():
    with FakeOpenAI(lambda req: text("ok")) as server:
        client = ChatClient("m", server.url)
        for _ in range(3):
            assert complete(client)["content"] == "ok"
            asyncio.run(client.aclose())
        assert complete(client)["content"] == "ok"  # also without aclose between loops
        assert complete(client)["content"] == "ok"


def test_keys_come_from_the_environment_and_stay_out_of_records(monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-secret")
    with RawServer(fixed(response(OK_BODY), keep=True)) as server:
        client = ChatClient("m", server.url, api_key_env="MY_KEY")
        complete(client)
    assert "Authorization: Bearer sk-secret" in server.heads[0]
    assert "sk-secret" not in json.dumps(client.describe())
    assert b"sk-secret" not in pickle.dumps(client)
    copy = pickle.loads(pickle.dumps(client))
    assert copy.backend == "http" and copy.describe() == client.describe()


def test_the_body_is_what_openai_would_send(monkeypatch):
    bodies = []

    def handler(conn, body, n):
        bodies.append(json.loads(body))
        conn.sendall(response(OK_BODY))
        return True

    from tau_env.llm import Sampling

    sampling = Sampling(temperature=0.5, max_tokens=7, top_p=0.8, extra_body={"top_k": 3})
    with RawServer(handler) as server:
        client = ChatClient("m", server.url, sampling=sampling)
        tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
        asyncio.run(client.complete(MESSAGES, tools, seed=9))
    assert bodies[0] == {
        "model": "m",
        "messages": MESSAGES,
        "temperature": 0.5,
        "max_tokens": 7,
        "top_p": 0.8,
        "tools": tools,
        "tool_choice": "auto",
        "seed": 9,
        "top_k": 3,
    }


def test_lone_surrogates_reach_the_server_escaped_and_the_cache_holds_them(tmp_path):
    reply = b'{"choices": [{"message": {"role": "assistant", "content": "\\ud83d"}}]}'
    with RawServer(fixed(response(reply), keep=True)) as server:
        cache = ResponseCache(tmp_path / "c.sqlite")
        client = ChatClient("m", server.url, cache=cache)
        messages = [{"role": "user", "content": "a \ud800 b"}]
        first = asyncio.run(client.complete(messages))
        second = asyncio.run(client.complete(messages))
    assert first == second == {"role": "assistant", "content": "\ud83d"}
    assert len(server.heads) == 1 and cache.hits == 1


def test_bad_settings_are_refused():
    with pytest.raises(InvalidOptionError, match=r"^backend must be 'http' or 'openai', got 'grpc'\.$"):
        ChatClient("m", "http://127.0.0.1:1/v1", backend="grpc")
    with pytest.raises(InvalidOptionError, match=r"^max_connections must be a positive integer, got 0\.$"):
        ChatClient("m", "http://127.0.0.1:1/v1", max_connections=0)
    with pytest.raises(InvalidOptionError, match=r"^Expected an http:// or https:// base URL, got 'ftp://x'\.$"):
        http.ConnectionPool("ftp://x")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("notaurl", ""),
        ("ftp://x/v1", ""),
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://127.0.0.1:99999/v1", "Port out of range 0-65535"),
        ("http://127.0.0.1:x/v1", "Port could not be cast to integer value as 'x'"),
        ("http://127.0.0.1:0/v1", "port 0 is not a port to connect to"),
        ("http:///v1", "it has no host"),
        ("http://a b/v1", "it holds whitespace or control characters"),
    ],
)
def test_a_bad_base_url_is_refused_when_the_client_is_made(backend, url, problem):
    with pytest.raises(
        InvalidOptionError, match=rf"^Expected an http:// or https:// base URL, got '.*'{problem and ': '}{problem}\.$"
    ):
        ChatClient("m", url, backend=backend)


# -- whatever bytes come back, only InfrastructureError ----------------------------------------

_ANSWER = {"bytes": b""}


@pytest.fixture(scope="module")
def scripted_bytes():
    with RawServer(lambda conn, body, n: conn.sendall(_ANSWER["bytes"])) as server:
        yield server


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.one_of(
        st.binary(max_size=300),
        st.builds(
            lambda status, head, body: f"HTTP/1.1 {status} X\r\n".encode() + head + b"\r\n\r\n" + body,
            st.integers(100, 599),
            st.binary(max_size=80),
            st.binary(max_size=200),
        ),
        st.builds(lambda n, body: response(body)[: max(n, 0)], st.integers(0, 200), st.binary(max_size=100)),
    )
)
def test_any_bytes_from_the_server_give_a_reply_or_an_infrastructure_error(scripted_bytes, data):
    _ANSWER["bytes"] = data
    client = ChatClient("m", scripted_bytes.url, retries=0, timeout=2)
    try:
        reply = complete(client)
    except InfrastructureError:
        return
    assert isinstance(reply, dict)


def test_request_bodies_encode_the_same_with_the_tool_schema_cache():
    """The cached encoding of tool schemas gives the same JSON as encoding the whole body, for the
    same list again, for another list of the same length, and for a list with a new (changed) dict."""
    client = ChatClient("m", "http://127.0.0.1:9/v1")
    a = {"type": "function", "function": {"name": "a", "description": 'é \\ud83d "q"', "parameters": {}}}
    b = {"type": "function", "function": {"name": "b", "description": "B", "parameters": {"type": "object"}}}
    for tools in ([a, b], [a, b], [b, a], [a], [{**a, "function": {**a["function"], "name": "a2"}}, b]):
        req = client.request(MESSAGES, tools, seed=3)
        assert json.loads(client._encode(req)) == json.loads(json.dumps(req))
