"""The simulator's small HTTP server: keep-alive, limits, bad requests, closing."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from rljob.dev.sim.httpserver import MAX_BODY_BYTES, Request, Response, listen

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def echo(request: Request) -> Response:
    if request.path == "/boom":
        raise RuntimeError("bug")
    return Response.json(
        {
            "method": request.method,
            "path": request.path,
            "n": request.arg("n"),
            "body": request.body.decode(),
        }
    )


async def roundtrip(
    port: int,
    raw: bytes,
    reader_writer: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None,
) -> bytes:
    reader, writer = reader_writer or await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    length = int(
        next(
            line.split(b":")[1]
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
    )
    body = await reader.readexactly(length)
    if reader_writer is None:
        writer.close()
    return head + body


async def test_get_post_and_keep_alive() -> None:
    listener = await listen(echo)
    try:
        assert listener.server.sockets[0].getsockname()[0] == "127.0.0.1"
        conn = await asyncio.open_connection("127.0.0.1", listener.port)
        first = await roundtrip(listener.port, b"GET /a?n=1 HTTP/1.1\r\nHost: x\r\n\r\n", conn)
        assert first.startswith(b"HTTP/1.1 200 OK") and b'"n": "1"' in first
        second = await roundtrip(
            listener.port,
            b"POST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
            conn,
        )
        assert b'"body": "hello"' in second and b"Connection: keep-alive" in second
        conn[1].close()
        closing = await roundtrip(listener.port, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert b"Connection: close" in closing
    finally:
        await listener.close()


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"NONSENSE\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nbad header\r\n\r\n", b"400"),
        (f"POST / HTTP/1.1\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode(), b"413"),
        (b"GET /boom HTTP/1.1\r\n\r\n", b"500"),
        (b"GET / HTTP/1.1\r\nX: " + b"a" * 20_000 + b"\r\n\r\n", b"400"),
    ],
)
async def test_bad_requests_get_an_error_status(raw: bytes, status: bytes) -> None:
    listener = await listen(echo)
    try:
        answer = await roundtrip(listener.port, raw)
        assert answer.split(b" ")[1] == status
    finally:
        await listener.close()


async def test_closing_a_listener_closes_its_open_connections() -> None:
    listener = await listen(echo)
    conn = await asyncio.open_connection("127.0.0.1", listener.port)
    await roundtrip(listener.port, b"GET / HTTP/1.1\r\n\r\n", conn)
    await listener.close()
    assert await asyncio.wait_for(conn[0].read(), 5) == b""
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", listener.port)


async def test_closing_is_bounded_when_a_connection_swallows_its_cancellation() -> None:
    """Python 3.11's wait_for can swallow a cancel; close() must still return, and drop the
    keep-alive connection a scraper would otherwise keep reusing."""
    entered, release = asyncio.Event(), asyncio.Event()

    async def stubborn(_: Request) -> Response:
        entered.set()
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()
        return Response.text("late")

    listener = await listen(stubborn)
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(b"GET / HTTP/1.1\r\n\r\n")
    await writer.drain()
    await asyncio.wait_for(entered.wait(), 5)
    closing = asyncio.create_task(listener.close())
    done, _ = await asyncio.wait({closing}, timeout=10)
    release.set()  # let the stubborn handler end either way
    await closing
    assert closing in done, "close() waited on a connection that ignores cancellation"
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
