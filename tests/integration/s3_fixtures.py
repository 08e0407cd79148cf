"""S3 fixtures: ONE versitygw server per test session (from the built binary, found through
RLJOB_BIN_DIR or rljob.dev.binaries.bin_dir()), a fresh bucket per test, and a private server
for tests that stop it. Import the fixtures into a test module to use them."""

from __future__ import annotations

import os
import re
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rljob.checkpoint_protocol.layout import CheckpointLocation
from rljob.checkpoint_protocol.s3 import ClientCache, StoreEndpoint
from rljob.checkpoints.s3 import OperatorStore
from rljob.dev.processes import free_ports
from rljob.dev.s3server import BINARY, S3Server


def s3_bin_dir() -> Path:
    configured = os.environ.get("RLJOB_BIN_DIR")
    if configured:
        path = Path(configured)
    else:
        from rljob.dev.binaries import bin_dir

        path = bin_dir()
    if not (path / BINARY).exists():
        pytest.fail(f"{path} has no {BINARY}: run tools/build.sh (and point RLJOB_BIN_DIR at it)")
    return path


@dataclass
class S3Bucket:
    """A fresh bucket on a running server."""

    server: S3Server
    name: str

    @property
    def endpoint(self) -> StoreEndpoint:
        return self.server.store_endpoint()

    def location(
        self, namespace: str = "rl", job: str = "grpo", root: str = "ckpt"
    ) -> CheckpointLocation:
        return CheckpointLocation(self.name, root, namespace, job)

    def store(
        self, location: CheckpointLocation | None = None, *, private_client: bool = False, **kw: Any
    ) -> OperatorStore:
        """A store for location; private_client gives it its own client (for request hooks)."""
        clients = ClientCache() if private_client else None
        return OperatorStore(location or self.location(), self.endpoint, clients=clients, **kw)

    @property
    def client(self) -> Any:
        return self.server.client()

    def all_keys(self, prefix: str = "") -> list[str]:
        paginator = self.client.get_paginator("list_objects_v2")
        return [
            o["Key"]
            for page in paginator.paginate(Bucket=self.name, Prefix=prefix)
            for o in page.get("Contents", [])
        ]

    def env(self, location: CheckpointLocation, attempt: int) -> dict[str, str]:
        """What the operator injects into a trainer pod of attempt."""
        root = f"/{location.root}" if location.root else ""
        return {
            **self.server.env(),
            "RLJOB_CHECKPOINT_URI": f"s3://{self.name}{root}",
            "RLJOB_NAMESPACE": location.namespace,
            "RLJOB_NAME": location.job,
            "RLJOB_ATTEMPT": str(attempt),
            "RLJOB_JOB_UID": "uid-test",
        }


def _start(run_dir: Path, **kwargs: Any) -> S3Server:
    server = S3Server(run_dir, s3_bin_dir(), free_ports(1)[0], **kwargs)
    server.start()
    return server


def _scratch_root() -> str | None:
    """tmpfs when there is one: a disk-backed folder of 10,000 versions takes ~30 s to delete."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


@pytest.fixture(scope="session", name="s3_server")
def s3_server_fixture() -> Iterator[S3Server]:
    """One S3 server for the whole session."""
    with tempfile.TemporaryDirectory(prefix="rljob-s3-", dir=_scratch_root()) as tmp:
        server = _start(Path(tmp))
        try:
            yield server
        finally:
            server.stop()


def bucket_name(test_name: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:48].strip("-")
    return f"{base or 't'}-{secrets.token_hex(3)}"


@pytest.fixture(name="s3_bucket")
def s3_bucket_fixture(s3_server: S3Server, request: pytest.FixtureRequest) -> S3Bucket:
    """A fresh bucket per test on the session's server."""
    name = bucket_name(request.node.name)
    s3_server.create_bucket(name)
    return S3Bucket(s3_server, name)


@pytest.fixture(name="private_s3")
def private_s3_fixture(tmp_path: Path) -> Iterator[S3Bucket]:
    """A server of the test's own (it may stop and restart it), with one bucket."""
    server = _start(tmp_path)
    try:
        server.create_bucket("ckpt")
        yield S3Bucket(server, "ckpt")
    finally:
        server.stop()
