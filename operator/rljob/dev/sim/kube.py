"""Credentials from a kubeconfig file for the simulator's pod watcher (client certificate or
token, file paths or inline base64 data)."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import yaml

from rljob.dev.kubeapi import Credentials


class KubeconfigError(ValueError):
    """The kubeconfig lacks what the watcher needs."""


def _named(items: list[dict[str, Any]] | None, name: str, kind: str) -> dict[str, Any]:
    for item in items or []:
        if item.get("name") == name:
            body: dict[str, Any] = item.get(kind) or {}
            return body
    raise KubeconfigError(f"no {kind} named {name!r}")


def _file(section: dict[str, Any], key: str, base: Path, spill: Path, name: str) -> Path | None:
    """The path of `key`, or of `key`-data written to spill/name (mode 0600)."""
    if section.get(key):
        path = Path(section[key])
        return path if path.is_absolute() else base / path
    data = section.get(f"{key}-data")
    if not data:
        return None
    spill.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = spill / name
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(base64.b64decode(data))
    return target


def credentials_from_kubeconfig(path: Path, spill_dir: Path) -> Credentials:
    """The current context's server and credentials; inline data is written under spill_dir."""
    config = yaml.safe_load(path.read_text()) or {}
    context = _named(config.get("contexts"), config.get("current-context", ""), "context")
    cluster = _named(config.get("clusters"), context.get("cluster", ""), "cluster")
    user = _named(config.get("users"), context.get("user", ""), "user")
    base = path.parent
    ca = _file(cluster, "certificate-authority", base, spill_dir, "ca.crt")
    if ca is None:
        raise KubeconfigError("the cluster has no certificate-authority")
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = Path(user["tokenFile"]).read_text().strip()
    return Credentials(
        server=str(cluster["server"]),
        ca_file=ca,
        cert_file=_file(user, "client-certificate", base, spill_dir, "client.crt"),
        key_file=_file(user, "client-key", base, spill_dir, "client.key"),
        token=token or None,
    )
