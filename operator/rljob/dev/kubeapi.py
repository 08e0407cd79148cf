"""A small synchronous REST client for the dev launcher and test helpers.

The operator itself uses kubernetes.aio; the launcher only needs a handful of calls before any
event loop exists, so it talks JSON over urllib with the admin client certificate.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JSON = dict[str, Any]


class ApiError(Exception):
    """A non-2xx answer from the API server, with its decoded Status body."""

    def __init__(self, status: int, body: JSON) -> None:
        super().__init__(f"{status}: {body.get('message', body)}")
        self.status = status
        self.body = body


@dataclass(frozen=True)
class Credentials:
    """How to reach and authenticate to an API server."""

    server: str
    ca_file: Path
    cert_file: Path | None = None
    key_file: Path | None = None
    token: str | None = None


class KubeApi:
    """JSON calls against one API server."""

    def __init__(self, creds: Credentials, timeout: float = 10.0) -> None:
        self.creds = creds
        self.timeout = timeout
        self.last_warnings: list[str] = []
        self._ssl = ssl.create_default_context(cafile=str(creds.ca_file))
        if creds.cert_file and creds.key_file:
            self._ssl.load_cert_chain(str(creds.cert_file), str(creds.key_file))

    def request(
        self,
        method: str,
        path: str,
        body: JSON | list[Any] | None = None,
        content_type: str = "application/json",
    ) -> JSON:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.creds.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        if self.creds.token:
            req.add_header("Authorization", f"Bearer {self.creds.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._ssl) as resp:
                raw = resp.read()
                self.last_warnings = resp.headers.get_all("Warning") or []
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                decoded = json.loads(raw)
            except ValueError:
                decoded = {"message": raw.decode(errors="replace")}
            raise ApiError(exc.code, decoded) from None
        return json.loads(raw) if raw else {}

    def get(self, path: str) -> JSON:
        return self.request("GET", path)

    def create(self, path: str, body: JSON) -> JSON:
        return self.request("POST", path, body)

    def merge_patch(self, path: str, body: JSON) -> JSON:
        return self.request("PATCH", path, body, "application/merge-patch+json")

    def apply(self, path: str, body: JSON, field_manager: str) -> JSON:
        return self.request(
            "PATCH",
            f"{path}{'&' if '?' in path else '?'}fieldManager={field_manager}&force=true",
            body,
            "application/apply-patch+yaml",
        )

    def delete(self, path: str, body: JSON | None = None) -> JSON:
        return self.request("DELETE", path, body)

    def raw_get(self, path: str) -> str:
        req = urllib.request.Request(self.creds.server + path)
        if self.creds.token:
            req.add_header("Authorization", f"Bearer {self.creds.token}")
        with urllib.request.urlopen(req, timeout=self.timeout, context=self._ssl) as resp:
            return str(resp.read().decode())
