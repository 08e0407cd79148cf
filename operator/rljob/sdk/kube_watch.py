"""List and watch one object of the Kubernetes API with the standard library only, for
rljob.sdk.EngineRoster: a trainer image need not carry a Kubernetes client.

Credentials default to the pod's ServiceAccount (KUBERNETES_SERVICE_HOST/PORT and
/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt}); the token file is re-read on
every connect because bound ServiceAccount tokens rotate."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
JSON = dict[str, Any]
# A literal token, a callable that returns one, or a file re-read on each connect.
TokenSource = str | Path | Callable[[], str] | None


class WatchError(Exception):
    """The API server answered with an error status (code holds it: 410 means re-list)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def in_cluster_server() -> str | None:
    """https://<KUBERNETES_SERVICE_HOST>:<PORT>, or None outside a pod."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    if not host:
        return None
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def in_cluster_file(name: str) -> Path | None:
    path = SERVICE_ACCOUNT_DIR / name
    return path if path.is_file() else None


def resolve_token(source: TokenSource) -> str | None:
    if source is None:
        return None
    if isinstance(source, Path):
        return source.read_text().strip()
    if callable(source):
        return source()
    return source


@dataclass(frozen=True)
class Endpoint:
    """Where the API server is and how to authenticate to it."""

    server: str
    token: TokenSource = None
    ca_file: str | Path | None = None
    verify: bool = True
    timeout: float = 30.0

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
        if not self.verify:  # the caller asked not to verify the server
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


class ObjectWatch:
    """GET-list and watch the objects of one collection path (with a fieldSelector query);
    once `cancelled` is set, close() from another thread ends a blocked watch at once and no
    new watch starts."""

    def __init__(
        self,
        endpoint: Endpoint,
        collection: str,
        field_selector: str,
        cancelled: threading.Event | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.collection = collection
        self.field_selector = field_selector
        self.cancelled = cancelled or threading.Event()
        self._url = urllib.parse.urlsplit(endpoint.server)
        self._lock = threading.Lock()
        self._live: http.client.HTTPConnection | None = None

    def list(self) -> tuple[list[JSON], str]:
        """The matching objects and the list's resourceVersion."""
        response = self._get(self._path(), self.endpoint.timeout, cancellable=False)
        body = json.loads(response.read())
        return body.get("items") or [], body.get("metadata", {}).get("resourceVersion", "")

    def watch(self, resource_version: str, seconds: int = 300) -> Iterator[tuple[str, JSON]]:
        """(type, object) events after resource_version until the server ends the watch;
        raises WatchError (410 Gone: re-list) or OSError."""
        path = self._path(
            watch="1",
            resourceVersion=resource_version,
            allowWatchBookmarks="true",
            timeoutSeconds=str(seconds),
        )
        # The read timeout outlasts the server's own end of the watch.
        response = self._get(path, seconds + self.endpoint.timeout, cancellable=True)
        for line in response:
            if not line.strip():
                continue
            event = json.loads(line)
            kind, obj = event.get("type", ""), event.get("object") or {}
            if kind == "ERROR":
                raise WatchError(int(obj.get("code", 500)), str(obj.get("message", obj)))
            yield kind, obj

    def close(self) -> None:
        with self._lock:
            connection, self._live = self._live, None
        if connection is not None and connection.sock is not None:
            with contextlib.suppress(OSError):  # already closed by the server
                connection.sock.shutdown(socket.SHUT_RDWR)
            connection.close()

    def _path(self, **extra: str) -> str:
        query = urllib.parse.urlencode({"fieldSelector": self.field_selector, **extra})
        return f"{self._url.path.rstrip('/')}{self.collection}?{query}"

    def _get(self, path: str, timeout: float, cancellable: bool) -> http.client.HTTPResponse:
        self.close()
        connection = self._connect(timeout)
        with self._lock:  # close() either sees this connection or we see the cancel
            if cancellable and self.cancelled.is_set():
                raise OSError("watch cancelled")
            connection.connect()
            self._live = connection
        headers = {"Accept": "application/json"}
        token = resolve_token(self.endpoint.token)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        if response.status != 200:
            raise WatchError(response.status, _message(response.read()))
        return response

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        host, port = self._url.hostname or "", self._url.port
        if self._url.scheme == "http":
            return http.client.HTTPConnection(host, port, timeout=timeout)
        context = self.endpoint.ssl_context()
        return http.client.HTTPSConnection(host, port, timeout=timeout, context=context)


def _message(raw: bytes) -> str:
    try:
        return str(json.loads(raw).get("message", raw[:200]))
    except ValueError:
        return raw[:200].decode(errors="replace")
