"""The test bed's S3-compatible server: versitygw (Apache-2.0) with its posix backend, built by
tools/build.sh from tools/s3, listening on 127.0.0.1:<port> only.

versitygw opens no listener besides --port unless asked (--admin-port, --webui, --website and
--pprof stay unset), runs in single-account mode with the root access key and secret given here,
and stores each bucket as a directory under the data folder (object metadata in extended
attributes, or in a sidecar folder when the filesystem has no user xattrs).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rljob.dev.controlplane import wait_until
from rljob.dev.processes import Managed, ServerProcess, free_ports, spawn, tail

if TYPE_CHECKING:
    from rljob.checkpoint_protocol.s3.transport import StoreEndpoint

BINARY = "versitygw"
ACCESS_KEY = "rljob-dev"
HEALTH_PATH = "/health"
# versitygw exits with this when its port was taken after it was picked (a bind race).
PORT_TAKEN = "address already in use"
PORT_TRIES = 3
REGION = "us-east-1"


class S3ServerError(RuntimeError):
    """The S3 server could not start; the message carries its log tail."""


def _xattrs_supported(folder: Path) -> bool:
    probe = folder / ".xattr-probe"
    probe.touch()
    try:
        os.setxattr(probe, "user.rljob.probe", b"1")
        return True
    except OSError:
        return False
    finally:
        probe.unlink(missing_ok=True)


class S3Server(ServerProcess):
    """One versitygw process: `start()`, `stop()`, `endpoint`, credentials, `create_bucket()`."""

    stop_grace = 5.0

    def __init__(
        self,
        run_dir: Path,
        bin_dir: Path,
        port: int,
        *,
        data_dir: Path | None = None,
        access_key: str = ACCESS_KEY,
        secret_key: str | None = None,
        extra_args: Sequence[str] = (),
        name: str = BINARY,
    ) -> None:
        """`data_dir` defaults to <run_dir>/s3/data; `extra_args` go before the backend (e.g.
        --readonly); `name` names the log file, for a second server over the same run folder."""
        self.run_dir = run_dir
        self.binary = bin_dir / BINARY
        self.port = port
        self.access_key = access_key
        self.secret_key = secret_key or _stable_secret(run_dir)
        self.data_dir = data_dir or run_dir / "s3" / "data"
        self.meta_dir = run_dir / "s3" / "meta"
        self.log_dir = run_dir / "logs"
        self.extra_args = list(extra_args)
        self.name = name
        self.process: Managed | None = None
        self._client: Any = None
        self._started = False

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def region(self) -> str:
        return REGION

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def log(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    def env(self) -> dict[str, str]:
        """Variables that point boto3, the SDK and the CLI at this server."""
        return {
            "RLJOB_S3_ENDPOINT": self.endpoint,
            "RLJOB_S3_REGION": REGION,
            "RLJOB_S3_ADDRESSING_STYLE": "path",
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": REGION,
        }

    def argv(self) -> list[str]:
        backend = ["posix"]
        if not _xattrs_supported(self.data_dir):
            backend += ["--sidecar", str(self.meta_dir)]
        return [
            str(self.binary),
            "--port",
            f"127.0.0.1:{self.port}",
            "--region",
            REGION,
            "--health",
            HEALTH_PATH,
            "--quiet",
            *self.extra_args,
            *backend,
            str(self.data_dir),
        ]

    def start(self, timeout: float = 30.0) -> None:
        """Starts the server and waits until its health endpoint answers. A first start whose
        port another process took since it was picked (free ports are free only when picked)
        moves to another free port, at most PORT_TRIES times; a restart keeps its port."""
        if not self.binary.exists():
            raise S3ServerError(f"{self.binary} is missing: run tools/build.sh")
        for folder in (self.data_dir, self.meta_dir, self.log_dir):
            folder.mkdir(parents=True, exist_ok=True)
        first = not self._started
        for _ in range(PORT_TRIES if first else 1):
            try:
                self._start_once(timeout)
                break
            except S3ServerError as exc:
                if not (first and PORT_TAKEN in str(exc)):
                    raise
                self.port = free_ports(1)[0]
        else:
            raise S3ServerError(f"{BINARY}: every port tried was taken ({PORT_TRIES} tries)")
        self._started = True

    def _start_once(self, timeout: float) -> None:
        env = {"ROOT_ACCESS_KEY_ID": self.access_key, "ROOT_SECRET_ACCESS_KEY": self.secret_key}
        self.process = spawn(self.name, self.argv(), self.log_dir, env=env)
        try:
            wait_until(
                self._ready, timeout, f"{BINARY} on {self.endpoint}", gives_up=(S3ServerError,)
            )
        except Exception as exc:
            self.stop()
            raise S3ServerError(f"{exc}\n--- {BINARY} log ---\n{tail(self.log)}") from exc

    def _ready(self) -> bool:
        if self.process is not None and self.process.process.poll() is not None:
            raise S3ServerError(
                f"{BINARY} exited with {self.process.process.returncode}:\n{tail(self.log)}"
            )
        try:
            with urllib.request.urlopen(self.endpoint + HEALTH_PATH, timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def store_endpoint(self) -> StoreEndpoint:
        """How rljob.checkpoints.s3 reaches this server, with its root credentials."""
        from rljob.checkpoint_protocol.s3.transport import StoreCredentials, StoreEndpoint

        return StoreEndpoint(
            url=self.endpoint,
            region=REGION,
            addressing_style="path",
            credentials=StoreCredentials(self.access_key, self.secret_key),
        )

    def client(self) -> Any:
        """A boto3 S3 client for this server, with the shared checkpoint configuration."""
        if self._client is None:
            from rljob.checkpoint_protocol.s3.transport import ClientCache

            self._client = ClientCache().client(self.store_endpoint())
        return self._client

    def create_bucket(self, name: str) -> None:
        """Creates a bucket; an existing one of ours is fine."""
        client = self.client()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=name)


def _stable_secret(run_dir: Path) -> str:
    """A per-run-folder secret, kept in the run folder so `rljob dev env` can print it later."""
    path = run_dir / "s3" / "secret"
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_hex(20)
    path.write_text(secret)
    path.chmod(0o600)
    return secret
