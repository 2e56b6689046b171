"""A small HTTP/1.1 client on asyncio streams: POST a JSON body, read the reply, keep the connection.

Made for one job, many chat-completion requests in flight against one server: a bounded pool of
keep-alive connections per event loop, ``Content-Length`` and ``chunked`` replies, one deadline per
request. It costs a fraction of a general client's CPU per request (see
``benchmarks/harness_scale.py``) and needs nothing beyond the standard library. No proxies, no
compression, no redirects: use ``ChatClient(backend="openai")`` where those matter.

Failures are classified for the caller's retry policy: :class:`ServerConnectionError` (refused,
reset, closed mid-reply, malformed framing) and :class:`ServerTimeout` are transient;
:class:`ReplyTooLarge` is not. An HTTP error status is a :class:`Reply` like any other.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from tau_env.error import InvalidOptionError, shown

#: Replies larger than this (bytes) are refused without being read whole.
MAX_REPLY_BYTES = 256 * 1024 * 1024
_MAX_LINE = 64 * 1024  # a status line, a header line or a chunk-size line
_MAX_HEADERS = 128


class ServerConnectionError(Exception):
    """The connection failed, or the reply was cut short or not HTTP: worth retrying."""


class ServerTimeout(Exception):
    """The server took longer than the request's deadline: worth retrying."""


class ReplyTooLarge(Exception):
    """The reply is larger than :data:`MAX_REPLY_BYTES`: retrying will not help."""


@dataclass
class Reply:
    """An HTTP reply: its status, lower-cased headers and whole body."""

    status: int
    headers: dict[str, str]
    body: bytes


def check_url(url: str) -> SplitResult:
    """``url``'s parts, if it is an ``http://`` or ``https://`` URL (e.g. ``http://127.0.0.1:8000/v1``)
    with a host and a valid port.

    Raises:
        InvalidOptionError: It is not (or holds whitespace or control characters).
    """
    problem = None
    if not isinstance(url, str):
        problem = f"got a {type(url).__name__}"
    elif any(c.isspace() or not c.isprintable() for c in url):
        problem = "it holds whitespace or control characters"
    else:
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 -- raises ValueError for a port that is not a number in 0-65535
        except ValueError as e:
            problem = str(e)
        else:
            if parts.scheme not in ("http", "https"):
                problem = ""  # the message says it all
            elif not parts.hostname:
                problem = "it has no host"
            elif parts.port == 0:
                problem = "port 0 is not a port to connect to"
    if problem is not None:
        raise InvalidOptionError(
            f"Expected an http:// or https:// base URL, got {shown(url, 200)}{problem and ': '}{problem}."
        )
    return parts


class _Connection:
    __slots__ = ("reader", "writer", "used")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer, self.used = reader, writer, False

    def alive(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class ConnectionPool:
    """Keep-alive connections to the server at ``url`` (``http://`` or ``https://``), at most ``size`` at once.

    A pool belongs to one event loop; :meth:`post` from another loop starts a new pool there (the old
    loop's connections are dropped), so one client survives successive ``asyncio.run`` calls.
    """

    def __init__(self, url: str, size: int = 1024):
        parts = check_url(url)
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 literal
        self._host_header = host if self.port == (443 if self._ssl else 80) else f"{host}:{self.port}"
        self.size = size
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: list[_Connection] = []
        self._slots: asyncio.Semaphore | None = None
        self.opened = 0  # connections opened so far (tests check reuse with it)

    def _bind(self) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self.close()
            self._loop, self._slots = loop, asyncio.Semaphore(self.size)

    async def _connect(self) -> _Connection:
        try:
            reader, writer = await asyncio.open_connection(
                self.host, self.port, ssl=self._ssl, limit=_MAX_LINE, server_hostname=self.host if self._ssl else None
            )
        except OSError as e:
            raise ServerConnectionError(f"cannot connect to {self.host}:{self.port}: {e}") from e
        self.opened += 1
        return _Connection(reader, writer)

    async def post(self, path: str, body: bytes, headers: dict[str, str], timeout: float) -> Reply:
        """POST ``body`` to ``prefix + path``; the deadline ``timeout`` starts once a connection slot is free."""
        self._bind()
        assert self._slots is not None
        head = [f"POST {self.prefix}{path} HTTP/1.1", f"Host: {self._host_header}", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        async with self._slots:
            try:
                async with asyncio.timeout(timeout):
                    return await self._exchange(request)
            except TimeoutError:
                raise ServerTimeout(f"no reply within {timeout:g} s") from None

    async def _exchange(self, request: bytes) -> Reply:
        while self._idle:  # a kept connection, unless the server has closed it meanwhile
            conn = self._idle.pop()
            if conn.alive():
                break
            conn.close()
        else:
            conn = await self._connect()
        try:
            return await self._send(conn, request)
        except _Stale:
            return await self._send(await self._connect(), request)

    async def _send(self, conn: _Connection, request: bytes) -> Reply:
        reused, conn.used = conn.used, True
        keep = False
        try:
            try:
                conn.writer.write(request)
                await conn.writer.drain()
                status_line = await conn.reader.readuntil(b"\n")
            except (asyncio.IncompleteReadError, ConnectionError) as e:
                if reused:  # the server dropped this idle connection as we sent: say it again on a new one
                    raise _Stale from e
                raise
            reply, keep = await _read_reply(conn.reader, status_line)
            return reply
        # The ValueErrors of the readers below are the server's protocol errors, not the caller's.
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError) as e:
            raise ServerConnectionError(f"{type(e).__name__}: {e or 'connection closed mid-reply'}") from e
        except OSError as e:
            raise ServerConnectionError(str(e)) from e
        finally:
            if keep:
                self._idle.append(conn)
            else:
                conn.close()

    def close(self) -> None:
        """Close the idle connections (requests in flight keep theirs until they finish)."""
        idle, self._idle = self._idle, []
        if self._loop is not None and not self._loop.is_closed():  # else their loop closed their sockets' fate
            for conn in idle:
                conn.close()


class _Stale(Exception):
    pass


async def _read_reply(reader: asyncio.StreamReader, status_line: bytes) -> tuple[Reply, bool]:
    """The reply whose status line was read, and whether the connection may be kept."""
    while True:
        version, status, headers = _parse_head(status_line, await _read_headers(reader))
        if not 100 <= status < 200:  # skip interim replies (100 Continue)
            break
        status_line = await reader.readuntil(b"\n")
    connection = headers.get("connection", "").lower()
    keep = "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    elif "content-length" in headers:
        length = int(headers["content-length"])
        if length < 0:
            raise ValueError(f"negative Content-Length {length}")
        _check_size(length)
        body = await reader.readexactly(length)
    elif status in (204, 304):
        body = b""
    else:  # the body runs to the end of the connection
        body, keep = await _read_to_eof(reader), False
    return Reply(status, headers, body), keep


def _parse_head(status_line: bytes, header_lines: list[bytes]) -> tuple[str, int, dict[str, str]]:
    parts = status_line.decode("latin-1").split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
    headers = {}
    for line in header_lines:
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise ValueError(f"malformed header line: {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    return parts[0], int(parts[1]), headers


async def _read_headers(reader: asyncio.StreamReader) -> list[bytes]:
    lines = []
    while True:
        line = (await reader.readuntil(b"\n")).rstrip(b"\r\n")
        if not line:
            return lines
        if len(lines) == _MAX_HEADERS:
            raise ValueError(f"more than {_MAX_HEADERS} header lines")
        lines.append(line)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks, total = [], 0
    while True:
        size_line = (await reader.readuntil(b"\n")).split(b";", 1)[0].strip()
        size = int(size_line, 16)  # ValueError on garbage: a protocol failure
        if size < 0:
            raise ValueError(f"negative chunk size {size}")
        if size == 0:
            await _read_headers(reader)  # trailers, ignored
            return b"".join(chunks)
        total += size
        _check_size(total)
        chunks.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise ValueError("chunk not followed by CRLF")


async def _read_to_eof(reader: asyncio.StreamReader) -> bytes:
    chunks, total = [], 0
    while chunk := await reader.read(1 << 16):
        total += len(chunk)
        _check_size(total)
        chunks.append(chunk)
    return b"".join(chunks)


def _check_size(n: int) -> None:
    if n > MAX_REPLY_BYTES:
        raise ReplyTooLarge(f"reply of more than {MAX_REPLY_BYTES} bytes")
