"""The FastAPI app of ``tau-env serve`` (built by :func:`tau_env.adapters.openenv.create_app`).

Kept apart so that ``tau_env.adapters.openenv`` (limits, sessions, tokens) imports without FastAPI.
"""

from __future__ import annotations

import asyncio
import contextlib
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
    Sessions,
    StepBody,
    TauAction,
    TauObservation,
    WSMessage,
    parse_json,
    refused,
    token_ok,
)

from tau_env.error import Error

log = logging.getLogger("tau_env.adapters.openenv")


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers=headers)


class Guard:
    """ASGI middleware: the token on every HTTP request and WebSocket handshake, and the body-size limit.

    The body is read here (at most ``max_request_bytes``, whatever ``Content-Length`` says) and
    replayed to the app, so an oversized or lying request never reaches a route.
    """

    def __init__(self, app: Any, token: str | None, sessions: Sessions) -> None:
        self.app, self.token, self.sessions = app, token, sessions
        self.max = sessions.limits.max_request_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        auth = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"authorization"), None)
        if not token_ok(self.token, auth):
            if scope["type"] == "websocket":
                return await send({"type": "websocket.close", "code": 1008})  # a 403 before the handshake
            resp = _json(401, {"error": "unauthorized", "message": "Send 'Authorization: Bearer <token>'."})
            return await resp(scope, receive, send)
        if scope["type"] == "websocket":
            return await self.app(scope, receive, send)
        body, more = bytearray(), True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
            if len(body) > self.max:
                resp = _json(413, {"error": "request_too_large", "message": f"The body exceeds {self.max} bytes."})
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
        try:
            yield
        finally:
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
            text = _error(refused(e))
        await websocket.send_text(text)
