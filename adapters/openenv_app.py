"""The FastAPI app of ``tau-env serve`` (built by :func:`tau_env.adapters.openenv.create_app`).

Kept apart so that ``tau_env.adapters.openenv`` (limits, sessions, tokens) imports without FastAPI.
Besides the app: :class:`Guard` (token, DNS-rebinding and cross-site guards, the body's size and
time limits), and the uvicorn set-up of :func:`server_config` (a cap on open connections and a
deadline on each request head, in the HTTP protocol itself; accept errors logged once in a while).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.websockets import WebSocketDisconnect
from tau_env.adapters.openenv import (
    SESSION_HEADER,
    ClientError,
    ResetBody,
    ServeLimits,
    Sessions,
    StepBody,
    TauAction,
    TauObservation,
    WSMessage,
    host_header_ok,
    origin_ok,
    parse_json,
    refused,
    token_ok,
)

from tau_env.error import Error

log = logging.getLogger("tau_env.adapters.openenv")


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers=headers)


class Throttled:
    """A warning logged at most once per ``every_s`` per kind, with the count of those left out."""

    def __init__(self, every_s: float = 10.0) -> None:
        self.every_s = every_s
        self._last: dict[str, float] = {}
        self._skipped: dict[str, int] = {}

    def warn(self, kind: str, message: str) -> bool:
        """Log ``message`` unless one of this kind was logged less than ``every_s`` ago; True if logged."""
        now = time.monotonic()
        if now - self._last.get(kind, -self.every_s) < self.every_s:
            self._skipped[kind] = self._skipped.get(kind, 0) + 1
            return False
        self._last[kind] = now
        skipped = self._skipped.pop(kind, 0)
        log.warning("%s%s", message, f" ({skipped} more like it not logged)" if skipped else "")
        return True


THROTTLED = Throttled()
_OUT_OF_FILES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


def loop_exception_handler(previous: Any) -> Any:
    """An event-loop exception handler that logs running out of files (accept errors) as one throttled line."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _OUT_OF_FILES:
            THROTTLED.warn("accept", f"cannot accept connections: {exc.strerror} (lower --max-connections)")
            return
        if isinstance(exc, ValueError) and "Invalid file descriptor" in str(exc):
            # a connection closed while the loop was still setting it up: under the same file pressure
            THROTTLED.warn("accept", "a connection closed while being set up (out of files; lower --max-connections)")
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    return handle


def _refuse_headers(scope: dict[str, Any]) -> tuple[int, str, str] | None:
    """Without a token: a foreign Origin or a non-loopback Host (a web page, DNS rebinding) is refused."""
    headers = dict(scope.get("headers", ()))
    host, origin = headers.get(b"host"), headers.get(b"origin")
    if not host_header_ok(None if host is None else host.decode("latin-1")):
        return 403, "forbidden_host", "Without a token the server answers only Host: 127.0.0.1/localhost/[::1]."
    if not origin_ok(None if origin is None else origin.decode("latin-1")):
        return 403, "forbidden_origin", "Without a token the server refuses requests from web pages of other sites."
    return None


class Guard:
    """ASGI middleware: what every request must pass before a route sees it.

    The token on every HTTP request and WebSocket handshake; without a token, a loopback ``Host``
    and no foreign ``Origin`` (a web page on another site, or DNS rebinding, cannot drive the
    server); ``Content-Type: application/json`` on a POST (415: a browser's form or text/plain
    POST needs no CORS preflight); and the body: read here (at most ``max_request_bytes``, whatever
    ``Content-Length`` says, within ``body_timeout_s``) and replayed to the app, so an oversized,
    lying or trickling request never reaches a route.
    """

    def __init__(self, app: Any, token: str | None, sessions: Sessions) -> None:
        self.app, self.token, self.sessions = app, token, sessions
        self.max = sessions.limits.max_request_bytes
        self.body_timeout = sessions.limits.body_timeout_s

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        ws = scope["type"] == "websocket"
        auth = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"authorization"), None)
        if not token_ok(self.token, auth):
            if ws:
                return await send({"type": "websocket.close", "code": 1008})  # a 403 before the handshake
            resp = _json(401, {"error": "unauthorized", "message": "Send 'Authorization: Bearer <token>'."})
            return await resp(scope, receive, send)
        bad = _refuse_headers(scope) if self.token is None else None
        if bad is not None:
            if ws:
                return await send({"type": "websocket.close", "code": 1008})
            return await _json(bad[0], {"error": bad[1], "message": bad[2]})(scope, receive, send)
        if ws:
            return await self.app(scope, receive, send)
        if scope.get("method") == "POST":
            ctype = next((v for k, v in scope.get("headers", ()) if k == b"content-type"), b"")
            if ctype.split(b";", 1)[0].strip().lower() != b"application/json":
                resp = _json(
                    415, {"error": "unsupported_media_type", "message": "POST needs 'Content-Type: application/json'."}
                )
                return await resp(scope, receive, send)
        body, more = bytearray(), True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout
        while more:
            try:
                msg = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0))
            except TimeoutError:
                message = f"The body did not arrive within {self.body_timeout:g} s."
                resp = _json(408, {"error": "request_timeout", "message": message}, {"Connection": "close"})
                return await resp(scope, receive, send)
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
            if len(body) > self.max:
                resp = _json(
                    413,
                    {"error": "request_too_large", "message": f"The body exceeds {self.max} bytes."},
                    {"Connection": "close"},
                )
                return await resp(scope, receive, send)
        done = False

        async def replay() -> dict[str, Any]:
            nonlocal done
            if done:
                return await receive()  # the app waits for a disconnect
            done = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        return await self.app(scope, replay, send)


def build_app(sessions: Sessions, token: str | None) -> Any:
    """The app over ``sessions``; every route needs ``token`` when one is set."""
    limits = sessions.limits

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        reaper = asyncio.create_task(sessions.reaper())
        loop = asyncio.get_running_loop()
        previous = loop.get_exception_handler()
        loop.set_exception_handler(loop_exception_handler(previous))
        try:
            yield
        finally:
            loop.set_exception_handler(previous)
            reaper.cancel()
            for sid in list(sessions.live):
                sessions.close(sid)

    app = FastAPI(
        title=f"tau-env serve {sessions.env_id}", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan
    )
    app.state.sessions = sessions

    @app.exception_handler(ClientError)
    async def _client_error(request: Request, e: ClientError) -> JSONResponse:
        return _json(e.status, e.body())

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        return _json(e.status_code, {"error": "http_error", "message": str(e.detail)[:200]})

    @app.exception_handler(Exception)
    async def _bug(request: Request, e: Exception) -> JSONResponse:  # a bug of ours: logged, never shown
        log.error("internal error on %s", request.url.path, exc_info=e)
        return _json(500, {"error": "internal_error", "message": "The server failed; see its log."})

    async def body_of(request: Request, model: Any) -> Any:
        raw = await request.body()
        try:
            return model.model_validate(parse_json(raw) if raw.strip() else {})
        except ValidationError as e:
            raise refused(e) from None

    async def run(session: Any, coro_fn: Any, *args: Any) -> Any:
        async with session.lock:
            try:
                return await coro_fn(*args)
            except ClientError as e:
                if e.close:
                    sessions.close(session.id)
                raise
            except (Error, ValidationError) as e:
                raise refused(e) from None

    @app.post("/reset")
    async def reset(request: Request) -> JSONResponse:
        body = await body_of(request, ResetBody)
        sid = request.headers.get(SESSION_HEADER) or body.session_id
        new = sid is None
        s = sessions.create() if new else sessions.get(sid)
        try:
            out = await run(s, s.reset, body)
        except BaseException:
            if new:
                sessions.close(s.id)
            raise
        return _json(200, out, {SESSION_HEADER: s.id})

    @app.post("/step")
    async def step(request: Request) -> JSONResponse:
        body = await body_of(request, StepBody)
        s = sessions.get(request.headers.get(SESSION_HEADER) or body.session_id)
        return _json(200, await run(s, s.step, body.action, limits), {SESSION_HEADER: s.id})

    @app.get("/state")
    async def state(request: Request) -> JSONResponse:
        s = sessions.get(request.headers.get(SESSION_HEADER))
        return _json(200, s.state())

    @app.post("/close")
    async def close(request: Request) -> JSONResponse:
        s = sessions.get(request.headers.get(SESSION_HEADER))
        async with s.lock:
            sessions.close(s.id)
        return _json(200, {"session_id": s.id, "closed": True})

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "healthy", "sessions": len(sessions.live), "max_sessions": limits.max_sessions}

    @app.get("/metadata")
    async def metadata() -> dict[str, Any]:
        import tau_env

        return {
            "name": sessions.env_id,
            "description": f"tau_env domain {sessions.domain.name!r}: the agent seat, a simulated user inside.",
            "version": tau_env.__version__,
            "documentation_url": "docs/adapters.md",
        }

    @app.get("/schema")
    async def schema() -> dict[str, Any]:
        return {
            "action": TauAction.model_json_schema(),
            "observation": TauObservation.model_json_schema(),
            "state": {"type": "object"},
        }

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            s = sessions.create()
        except ClientError as e:
            await websocket.send_text(json.dumps({"type": "error", "data": {"message": e.message, "code": e.code}}))
            await _close(websocket, 1013)  # try again later
            return
        try:
            await _ws_loop(websocket, sessions, s)
        except (WebSocketDisconnect, OSError):  # the client went away mid-answer
            pass
        finally:
            sessions.close(s.id)

    return Guard(app, token, sessions)


async def _close(websocket: WebSocket, code: int) -> None:
    with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):  # already closed by the client
        await websocket.close(code=code)


def _error(e: ClientError) -> str:
    return json.dumps({"type": "error", "data": {"message": e.message, "code": e.code, "status": e.status}})


async def _ws_loop(websocket: WebSocket, sessions: Sessions, s: Any) -> None:
    limits = sessions.limits
    while True:
        try:
            msg = await asyncio.wait_for(websocket.receive(), timeout=limits.idle_timeout_s)
        except TimeoutError:
            await websocket.send_text(_error(ClientError(408, "idle_timeout", "The session was idle too long.")))
            await _close(websocket, 1001)
            return
        except WebSocketDisconnect:
            return
        if msg["type"] == "websocket.disconnect":
            return
        raw = msg.get("text")
        if raw is None:
            raw = msg.get("bytes") or b""
        size = len(raw) if isinstance(raw, bytes) else len(raw.encode("utf-8", "surrogatepass"))
        if size > limits.max_message_bytes:
            await websocket.send_text(
                _error(ClientError(413, "message_too_large", f"The message exceeds {limits.max_message_bytes} bytes."))
            )
            await _close(websocket, 1009)
            return
        if s.id not in sessions.live:  # reaped while idle
            await websocket.send_text(_error(ClientError(410, "session_expired", "The session was idle too long.")))
            await _close(websocket, 1001)
            return
        s.last_used = time.monotonic()
        try:
            m = WSMessage.model_validate(parse_json(raw))
            if m.type == "close":
                await _close(websocket, 1000)
                return
            async with s.lock:
                if m.type == "reset":
                    out = {"type": "observation", "data": await s.reset(ResetBody.model_validate(m.data))}
                elif m.type == "step":
                    out = {"type": "observation", "data": await s.step(TauAction.model_validate(m.data), limits)}
                else:
                    out = {"type": "state", "data": s.state()}
            text = json.dumps(out)
        except (ClientError, ValidationError, Error) as e:
            err = refused(e)
            if getattr(err, "close", False):  # the session broke a limit for good: closed with it
                await websocket.send_text(_error(err))
                await _close(websocket, 1009)
                return
            text = _error(err)
        await websocket.send_text(text)


# --- the server: uvicorn with connection limits -------------------------------------------------
_RESERVED_FILES = 64  # files kept for the listening socket, logs, the event loop, model-server clients


def fit_open_files(limits: ServeLimits) -> ServeLimits:
    """``limits`` with ``max_connections`` that fits the process's open-file limit.

    The soft limit is raised towards the hard one when it is too low; if it is still too low,
    ``max_connections`` is lowered to fit it (and a warning says so), so that a flood of
    connections meets the cap (a 503) before "Too many open files".
    """
    try:
        import resource
    except ImportError:  # not on this platform
        return limits
    want = limits.max_connections + _RESERVED_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    if soft != resource.RLIM_INFINITY and soft < want:
        cap = max(soft - _RESERVED_FILES, 1)
        log.warning("open-file limit %d: at most %d connections (not %d)", soft, cap, limits.max_connections)
        return dataclasses.replace(limits, max_connections=cap)
    return limits


def _raw_response(status: str, code: str, message: str) -> bytes:
    body = json.dumps({"error": code, "message": message}).encode()
    head = f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {len(body)}"
    return head.encode() + b"\r\n\r\n" + body


_TIMEOUT_408 = _raw_response("408 Request Timeout", "request_timeout", "The request head came too slowly.")
_FULL_503 = _raw_response("503 Service Unavailable", "too_many_connections", "The server has too many connections.")


def guarded_protocol(limits: ServeLimits) -> type:
    """The HTTP protocol of uvicorn, with a cap on open connections and a deadline on every request head.

    A connection over ``max_connections`` gets a 503 and is closed at once; one that has not sent a
    whole request head ``header_timeout_s`` after it opened (or after its first byte following the
    previous reply) gets a 408 and is closed. Idle keep-alive connections are uvicorn's
    ``timeout_keep_alive``; the body's deadline is :class:`Guard`'s.
    """
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class GuardedHTTPProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        _head_timer: asyncio.TimerHandle | None = None
        _head_after: Any = None  # the request cycle the awaited head follows (None: the first)

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.server_state.connections) > limits.max_connections:
                THROTTLED.warn("connections", f"refused connections over --max-connections {limits.max_connections}")
                transport.write(_FULL_503)
                transport.close()
                return
            self._arm()

        def _awaiting_head(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_after = self.cycle
            self._head_timer = self.loop.call_later(limits.header_timeout_s, self._head_late)

        def _head_late(self) -> None:
            self._head_timer = None
            transport = self.transport
            if transport.is_closing() or transport.get_protocol() is not self:  # closed, or now a WebSocket
                return
            if self.cycle is self._head_after:  # no new request head since the clock started
                transport.write(_TIMEOUT_408)
                transport.close()

        def data_received(self, data: bytes) -> None:
            if self._awaiting_head() and (self._head_timer is None or self._head_after is not self.cycle):
                self._arm()  # a new request starts: its head has header_timeout_s from now
            super().data_received(data)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().connection_lost(exc)

    return GuardedHTTPProtocol


def server_config(app: Any, *, host: str, port: int, log_level: str = "warning", ws_max_size: int | None = None) -> Any:
    """The ``uvicorn.Config`` serving ``app`` (from ``create_app``) with its :class:`ServeLimits`."""
    import uvicorn

    limits: ServeLimits = app.sessions.limits
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        lifespan="on",
        server_header=False,
        http=guarded_protocol(limits),
        ws_max_size=ws_max_size or limits.max_message_bytes,
        timeout_keep_alive=limits.keep_alive_timeout_s,
        h11_max_incomplete_event_size=16 * 1024,
    )
