"""Loopback proxies that put faults between the operator and a server it depends on.

`TcpFaultProxy` forwards bytes (S3 requests stay signed for the real host:port) and can refuse
connections, delay every response, or cut the responses to the later pages of a listing in
the middle of their body. `PrometheusFaultProxy` answers the Prometheus HTTP API from the real
server and can delay answers or drop series from them. Both listen on 127.0.0.1 only and count
what they did, so a test can prove its fault was exercised."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

_CHUNK = 65536
_METHODS = (b"GET ", b"PUT ", b"POST ", b"HEAD ", b"DELETE ")
_HEADER_END = b"\r\n\r\n"


class Fault(Enum):
    NONE = "none"
    REFUSE = "refuse"  # every connection closed at once: the store is unavailable
    SLOW = "slow"  # every response held back `delay` seconds
    CUT_LATER_PAGES = "cut later pages"  # a listing's continuation pages end mid-body


class _Closing:
    """Closes the proxy at the end of a `with` block."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class _Exchange:
    """One client connection: the request line of the request whose response is awaited."""

    def __init__(self) -> None:
        self.request_line = b""
        self.awaiting_response = False


class TcpFaultProxy(_Closing):
    """127.0.0.1:<port> -> upstream host:port, one thread per direction of each connection."""

    def __init__(self, upstream: tuple[str, int], *, delay: float = 15.0) -> None:
        self.upstream = upstream
        self.delay = delay
        self.fault = Fault.NONE
        self.counts: Counter[str] = Counter()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._open: set[tuple[socket.socket, ...]] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)  # accept() wakes up to see close()
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set_fault(self, fault: Fault) -> None:
        """Applies to every response from now on; refusing also drops the open connections
        (clients keep idle connections to reuse), as a store going down would."""
        self.fault = fault
        if fault is Fault.REFUSE:
            with self._lock:
                connections = list(self._open)
            for sockets in connections:
                _close(sockets)

    def close(self) -> None:
        self._stop.set()
        self.set_fault(Fault.REFUSE)
        self._listener.close()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            if self.fault is Fault.REFUSE:
                self.counts["refused"] += 1
                client.close()
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        exchange = _Exchange()
        sockets = (client, upstream)
        with self._lock:
            self._open.add(sockets)
        threading.Thread(
            target=self._requests, args=(client, upstream, exchange, sockets), daemon=True
        ).start()
        try:
            self._responses(upstream, client, exchange, sockets)
        finally:
            with self._lock:
                self._open.discard(sockets)

    def _requests(
        self,
        client: socket.socket,
        upstream: socket.socket,
        exchange: _Exchange,
        sockets: tuple[socket.socket, ...],
    ) -> None:
        for data in _chunks(client):
            if data.startswith(_METHODS):  # a new request (clients do not pipeline)
                exchange.request_line = data.split(b"\r\n", 1)[0]
                exchange.awaiting_response = True
            if not _send(upstream, data):
                break
        _close(sockets)

    def _responses(
        self,
        upstream: socket.socket,
        client: socket.socket,
        exchange: _Exchange,
        sockets: tuple[socket.socket, ...],
    ) -> None:
        for data in _chunks(upstream):
            if exchange.awaiting_response:
                exchange.awaiting_response = False
                if not self._first_chunk(client, exchange.request_line, data):
                    break
            elif not _send(client, data):
                break
        _close(sockets)

    def _first_chunk(self, client: socket.socket, request_line: bytes, data: bytes) -> bool:
        """Sends a response's first chunk with the fault applied; False ends the connection."""
        if self.fault is Fault.SLOW:
            self.counts["delayed"] += 1
            if self._stop.wait(self.delay):
                return False
        if self.fault is Fault.CUT_LATER_PAGES and b"continuation-token=" in request_line:
            self.counts["cut"] += 1
            head, _, body = data.partition(_HEADER_END)
            _send(client, head + _HEADER_END + body[: len(body) // 2])
            return False
        return _send(client, data)


def _chunks(sock: socket.socket) -> Iterator[bytes]:
    while True:
        try:
            data = sock.recv(_CHUNK)
        except OSError:
            return
        if not data:
            return
        yield data


def _send(sock: socket.socket, data: bytes) -> bool:
    try:
        sock.sendall(data)
    except OSError:
        return False
    return True


def _close(sockets: tuple[socket.socket, ...]) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


SeriesFilter = Callable[[dict[str, str]], bool]  # a series' labels -> keep it?


class PrometheusFaultProxy(_Closing):
    """Answers /api/v1/* from the real Prometheus, each answer delayed by `delay` seconds
    (when set) and stripped of the series `keep` rejects."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.delay = 0.0
        self.keep: SeriesFilter = lambda labels: True
        self.counts: Counter[str] = Counter()
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def answer(
        self, method: str, path: str, body: bytes | None, content_type: str
    ) -> tuple[int, str, bytes]:
        """(status, content type, body) of the upstream's answer, with the faults applied."""
        request = urllib.request.Request(self.upstream + path, data=body, method=method)
        if content_type:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, kind, data = (
                    response.status,
                    response.headers["Content-Type"],
                    response.read(),
                )
        except urllib.error.HTTPError as error:
            status, kind, data = error.code, error.headers["Content-Type"], error.read()
        except OSError as error:
            status, kind, data = 502, "text/plain", str(error).encode()
        if self.delay:
            self.counts["delayed"] += 1
            self._stop.wait(self.delay)
        if status == 200 and path.startswith("/api/v1/query"):
            data = self._filter(data)
        return status, kind, data

    def _filter(self, data: bytes) -> bytes:
        answer = json.loads(data)
        result = answer.get("data", {}).get("result")
        if not isinstance(result, list):
            return data
        kept = [series for series in result if self.keep(series.get("metric", {}))]
        self.counts["dropped"] += len(result) - len(kept)
        self.counts["kept"] += len(kept)
        answer["data"]["result"] = kept
        return json.dumps(answer).encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._relay(None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self._relay(self.rfile.read(length))

            def _relay(self, body: bytes | None) -> None:
                kind = self.headers.get("Content-Type", "")
                status, answer_kind, data = proxy.answer(self.command, self.path, body, kind)
                self.send_response(status)
                self.send_header("Content-Type", answer_kind or "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                return None

        return Handler
