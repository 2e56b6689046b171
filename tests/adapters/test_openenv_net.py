"""tau-env serve at the connection level: slow, silent and flooding clients are dropped, a connection
cap answers 503, accept errors are one throttled line, and with no token a web page cannot drive the
server (foreign Origin, DNS rebinding, no-preflight POSTs). Each test fails without its guard.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import resource
import socket
import subprocess
import sys
import time

import pytest

import tau_env
from tests.conftest import make_domain

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from starlette.testclient import TestClient  # noqa: E402
from starlette.websockets import WebSocketDisconnect  # noqa: E402
from tau_env.adapters.openenv import (  # noqa: E402
    SESSION_HEADER,
    BackgroundServer,
    ServeLimits,
    create_app,
    host_header_ok,
    origin_ok,
)
from tau_env.adapters.openenv_app import Throttled, fit_open_files, loop_exception_handler  # noqa: E402

TOKEN = "s3cret-token-for-tests-0123456789"
FAST = ServeLimits(header_timeout_s=0.3, body_timeout_s=0.3, keep_alive_timeout_s=0.3)
PATIENCE = 200  # polls of 0.1 s before a test gives up on the server dropping a connection (generous)


@pytest.fixture
def tiny_id():
    with tau_env.registry.scoped():
        tau_env.register("tiny-net-v0", make_domain)
        yield "tiny-net-v0"


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=0.1)
    return s


def wait_for_health(url, failure):
    """Poll /health on a fresh connection until it answers 200 (PATIENCE tries), else fail with ``failure``."""
    for _ in range(PATIENCE):
        c = connect(url)
        c.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        if b"200 OK" in read_until_closed(c):
            return
        time.sleep(0.1)
    pytest.fail(failure)


def read_until_closed(s: socket.socket, trickle: bytes = b"") -> bytes:
    """Read until the server closes, sending one byte of ``trickle`` every 0.1 s; fail if it never does.

    The socket is closed on return.
    """
    with s:
        return _read_until_closed(s, trickle)


def _read_until_closed(s: socket.socket, trickle: bytes) -> bytes:
    got = bytearray()
    for i in range(PATIENCE):
        try:
            if i < len(trickle):
                s.sendall(trickle[i : i + 1])
            chunk = s.recv(65536)
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return bytes(got)
        if not chunk:
            return bytes(got)
        got += chunk
    pytest.fail(f"the server kept a slow connection open; it answered {bytes(got)[:200]!r}")


# --- slow and silent clients -------------------------------------------------------------------------
@pytest.mark.parametrize("token", [None, TOKEN])
def test_slow_and_silent_connections_are_dropped(tiny_id, token):
    with BackgroundServer(create_app(tiny_id, token=token, limits=FAST)) as url:
        silent = connect(url)  # sends nothing at all
        slow_head = connect(url)  # a request line, then a header now and then, never the blank line
        slow_head.sendall(b"GET /health HTTP/1.1\r\n")
        headers = b"".join(b"X-Slow-%d: 1\r\n" % i for i in range(PATIENCE))
        slow_body = connect(url)  # a whole head, then the promised body one byte at a time
        slow_body.sendall(
            b"POST /reset HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + (f"Authorization: Bearer {token}\r\n".encode() if token else b"")
            + b"Content-Length: 1000\r\n\r\n{"
        )
        assert read_until_closed(silent).startswith(b"HTTP/1.1 408")
        assert b" 408 " in read_until_closed(slow_head, trickle=headers)
        answer = read_until_closed(slow_body, trickle=b" " * PATIENCE)
        assert b" 408 " in answer and b"request_timeout" in answer
        for s in (silent, slow_head, slow_body):
            s.close()
        # the server still serves, on a fresh connection and on a kept-alive one
        c = connect(url)
        auth = f"Authorization: Bearer {token}\r\n".encode() if token else b""
        c.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + b"\r\n")
        assert b"200 OK" in read_until_closed(c)  # and the idle keep-alive connection is closed too


def test_a_silent_connection_gets_a_timeout(tiny_id):
    with BackgroundServer(create_app(tiny_id, limits=FAST)) as url:
        answer = read_until_closed(connect(url))
    assert answer.startswith(b"HTTP/1.1 408")


def test_a_websocket_outlives_the_head_timeout(tiny_id):
    """The head deadline ends with the head: an upgraded WebSocket is not cut off by it."""
    import asyncio

    from tau_env.adapters.openenv_client import TauEnvClient

    async def play(url):
        async with TauEnvClient(url) as client:
            await client.reset(task_id="restock", seed=0)
            await asyncio.sleep(0.8)  # past header_timeout_s and keep_alive_timeout_s
            return await client.state()

    pytest.importorskip("openenv.core")
    with BackgroundServer(create_app(tiny_id, limits=FAST)) as url:
        assert asyncio.run(play(url))["task_id"] == "restock"


# --- floods --------------------------------------------------------------------------------------------
def test_connections_over_the_cap_get_503_and_are_closed(tiny_id):
    limits = ServeLimits(max_connections=5, header_timeout_s=0.5)
    with BackgroundServer(create_app(tiny_id, limits=limits)) as url:
        flood = [connect(url) for _ in range(20)]
        for s in flood:
            s.sendall(b"GET /health HTTP/1.1\r\n")  # never finished
        answers = [read_until_closed(s) for s in flood]
        refused = [a for a in answers if b" 503 " in a and b"too_many_connections" in a]
        assert len(refused) >= 15
        for s in flood:
            s.close()
        wait_for_health(url, "the server did not recover after the flood")  # the flood gone, it answers again


SERVE_LOW_FILES = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (120, 120))
from tau_env.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_flood_past_the_open_file_limit_neither_floods_the_log_nor_kills_health(tmp_path):
    """A server with 120 files and --max-connections 1000: the cap is lowered to fit, the flood gets 503s.

    A burst of accepts may still run out of files for a moment (the event loop accepts a batch before
    any is refused): that is one throttled log line, never a traceback per connection.
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if k != "TAU_ENV_SERVE_TOKEN"}
    argv = ["serve", "harbor-bank-v0", "--port", str(port), "--max-connections", "1000", "--header-timeout", "1"]
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVE_LOW_FILES, *argv], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    flood = []
    try:
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, log.read_text()
                time.sleep(0.1)
        for _ in range(2):  # two waves of 300 connections that send only a request line
            for _ in range(300):
                try:
                    s = socket.create_connection(("127.0.0.1", port), timeout=1)
                    s.sendall(b"GET /health HTTP/1.1\r\n")
                    flood.append(s)
                except OSError:
                    pass
        for s in flood:
            s.close()
        wait_for_health(url, "/health did not answer after the flood")
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log.read_text()
    assert "Traceback" not in text and text.count("Too many open files") <= 3, text[-2000:]  # one line, throttled
    assert "at most 56 connections" in text  # 120 files - 64 kept for the server itself
    assert len(text) < 5000


def test_out_of_files_errors_are_one_throttled_line(caplog):
    seen = []
    handler = loop_exception_handler(lambda loop, ctx: seen.append(ctx))
    error = OSError(errno.EMFILE, "Too many open files")
    with caplog.at_level(logging.WARNING, logger="tau_env.adapters.openenv"):
        for _ in range(1000):
            handler(None, {"message": "socket.accept() out of system resource", "exception": error})
    lines = [r for r in caplog.records if "cannot accept" in r.getMessage()]
    assert len(lines) == 1 and "Traceback" not in caplog.text and not seen
    handler(None, {"message": "something else", "exception": ValueError("x")})
    assert len(seen) == 1  # other errors go to the previous handler


def test_throttled_counts_what_it_left_out(caplog, monkeypatch):
    t = Throttled(every_s=10)
    clock = iter([0.0, 1.0, 2.0, 20.0])
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    with caplog.at_level(logging.WARNING, logger="tau_env.adapters.openenv"):
        assert [t.warn("k", "boom") for _ in range(4)] == [True, False, False, True]
    assert "2 more like it not logged" in caplog.records[-1].getMessage()


def test_the_connection_cap_fits_the_open_file_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard limit on open files here")
    fitted = fit_open_files(ServeLimits(max_connections=hard * 2))
    assert fitted.max_connections == hard - 64
    assert fit_open_files(ServeLimits(max_connections=10)).max_connections == 10


# --- web pages cannot drive a server without a token ------------------------------------------------------
def test_host_and_origin_rules():
    assert all(host_header_ok(h) for h in (None, "127.0.0.1", "127.0.0.1:8000", "localhost:1", "[::1]:80", "::1"))
    assert not any(host_header_ok(h) for h in ("evil.example", "evil.example:8000", "10.0.0.1", "127.0.0.1.nip.io"))
    ok = (None, "http://127.0.0.1:3000", "http://localhost", "https://[::1]:8443")
    assert all(origin_ok(o) for o in ok)
    assert not any(origin_ok(o) for o in ("http://evil.example", "null", "file://", "http://127.0.0.1.evil.example"))


def local(app, **kwargs):
    return TestClient(app, base_url="http://127.0.0.1", **kwargs)


def test_a_foreign_origin_cannot_open_a_websocket(tiny_id):
    with local(create_app(tiny_id)) as http:
        for origin in ("http://evil.example", "null"):
            with (
                pytest.raises(WebSocketDisconnect) as e,
                http.websocket_connect("ws://127.0.0.1/ws", headers={"origin": origin}),
            ):
                pass
            assert e.value.code == 1008
        with pytest.raises(WebSocketDisconnect), http.websocket_connect("ws://evil.example/ws"):  # DNS rebinding
            pass
        with http.websocket_connect("ws://127.0.0.1/ws", headers={"origin": "http://127.0.0.1:3000"}) as ws:
            ws.send_text(json.dumps({"type": "reset", "data": {"task_id": "restock"}}))
            assert ws.receive_json()["type"] == "observation"


def test_a_web_page_cannot_post_without_a_token(tiny_id):
    with local(create_app(tiny_id)) as http:
        text = http.post("/reset", content=b'{"task_id": "restock"}', headers={"content-type": "text/plain"})
        form = http.post("/reset", data={"task_id": "restock"})
        none = http.post("/reset", content=b"{}")
        for r in (text, form, none):
            assert r.status_code == 415 and r.json()["error"] == "unsupported_media_type"
        rebound = http.post("/reset", json={}, headers={"host": "evil.example:8000"})
        assert rebound.status_code == 403 and rebound.json()["error"] == "forbidden_host"
        foreign = http.post("/reset", json={}, headers={"origin": "http://evil.example"})
        assert foreign.status_code == 403 and foreign.json()["error"] == "forbidden_origin"
        assert http.get("/health", headers={"host": "evil.example"}).status_code == 403
        assert not http.app.sessions.live  # nothing was opened
        ok = http.post("/reset", json={}, headers={"content-type": "application/json; charset=utf-8"})
        assert ok.status_code == 200 and ok.headers[SESSION_HEADER]


def test_with_a_token_any_host_may_call(tiny_id):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(create_app(tiny_id, token=TOKEN), base_url="http://serve.example.org") as http:
        assert http.post("/reset", json={}, headers=auth).status_code == 200
        assert http.post("/reset", content=b"{}", headers={**auth, "content-type": "text/plain"}).status_code == 415
