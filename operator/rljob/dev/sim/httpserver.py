"""A minimal HTTP/1.1 server on asyncio streams, for the simulator's many small listeners.

One listening socket per simulated pod would make a full web framework the heaviest part of the
simulator; this serves GET and small JSON POST/DELETE bodies with keep-alive, bounded header and
body sizes, an idle timeout and a cap on open connections per listener. A listener can be closed
together with its open connections (a detached pod stops answering at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

MAX_HEADER_BYTES = 16 * 1024
MAX_BODY_BYTES = 256 * 1024
IDLE_TIMEOUT = 30.0
MAX_CONNECTIONS = 64
CLOSE_TIMEOUT = 2.0

_REASONS = {
    200: "OK",
    201: "Created",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Payload Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else {}

    def arg(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"

    @classmethod
    def json(cls, data: Any, status: int = 200) -> Response:
        return cls(status, json.dumps(data, sort_keys=True).encode(), "application/json")

    @classmethod
    def text(cls, text: str, status: int = 200, content_type: str | None = None) -> Response:
        return cls(status, text.encode(), content_type or "text/plain; charset=utf-8")


Handler = Callable[[Request], Awaitable[Response]]


class _BadRequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Listener:
    """One listening socket (on a loopback address) and its open connections."""

    server: asyncio.Server
    port: int
    host: str = "127.0.0.1"
    connections: dict[asyncio.Task[None], asyncio.StreamWriter] = field(default_factory=dict)

    async def close(self) -> None:
        """Stops listening and drops every connection, bounded: a connection task that swallows
        its cancellation (Python 3.11's wait_for can) must not hang the caller."""
        self.server.close()
        for task, writer in list(self.connections.items()):
            writer.transport.abort()
            task.cancel()
        if self.connections:
            await asyncio.wait(list(self.connections), timeout=CLOSE_TIMEOUT)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.server.wait_closed(), CLOSE_TIMEOUT)


async def _read_request(reader: asyncio.StreamReader) -> tuple[Request, bool] | None:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_TIMEOUT)
    except (asyncio.IncompleteReadError, TimeoutError):
        return None
    except asyncio.LimitOverrunError:
        raise _BadRequestError(400, "headers too large") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequestError(400, "bad request line")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise _BadRequestError(400, "bad header line")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise _BadRequestError(400, "chunked bodies are not supported")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise _BadRequestError(400, "bad content-length") from None
    if length < 0 or length > MAX_BODY_BYTES:
        raise _BadRequestError(413, f"body larger than {MAX_BODY_BYTES} bytes")
    body = b""
    if length:
        try:
            body = await asyncio.wait_for(reader.readexactly(length), IDLE_TIMEOUT)
        except (asyncio.IncompleteReadError, TimeoutError):
            return None
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" and (version == "HTTP/1.1" or connection == "keep-alive")
    url = urlsplit(target)
    return Request(method.upper(), url.path, parse_qs(url.query), body), keep_alive


def _encode(response: Response, keep_alive: bool, head_only: bool = False) -> bytes:
    reason = _REASONS.get(response.status, "Unknown")
    head = (
        f"HTTP/1.1 {response.status} {reason}\r\n"
        f"Content-Type: {response.content_type}\r\n"
        f"Content-Length: {len(response.body)}\r\n"
        f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
    ).encode()
    return head if head_only else head + response.body


async def _serve(
    handler: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        while True:
            try:
                parsed = await _read_request(reader)
            except _BadRequestError as exc:
                writer.write(_encode(Response.text(f"{exc}\n", exc.status), False))
                await writer.drain()
                return
            if parsed is None:
                return
            request, keep_alive = parsed
            try:
                response = await handler(request)
            except Exception as exc:  # a handler bug must not kill the listener
                response = Response.text(f"internal error: {type(exc).__name__}: {exc}\n", 500)
            writer.write(_encode(response, keep_alive, head_only=request.method == "HEAD"))
            await writer.drain()
            if not keep_alive:
                return
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 1.0)


async def listen(
    handler: Handler,
    port: int = 0,
    *,
    host: str = "127.0.0.1",
    max_connections: int = MAX_CONNECTIONS,
) -> Listener:
    """Serves handler on host:port (0: a free port the kernel picks) and returns the listener."""
    connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is None or len(connections) >= max_connections:
            writer.close()
            return
        connections[task] = writer
        try:
            await _serve(handler, reader, writer)
        finally:
            connections.pop(task, None)

    server = await asyncio.start_server(
        connected, host, port, limit=MAX_HEADER_BYTES, reuse_address=True, backlog=64
    )
    bound = server.sockets[0].getsockname()[1]
    return Listener(server, int(bound), host, connections)
