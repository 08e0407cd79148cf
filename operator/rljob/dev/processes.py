"""Child processes of the launcher: own process group, die with the launcher, stop in order."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: SIGKILL it if the launcher dies.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Managed:
    """One started component: its name, process and log file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid


class ServerProcess:
    """The stop/running/context-manager half of a dev server (S3, Prometheus, simulator):
    subclasses start `self.process` in `start()`."""

    process: Managed | None = None
    stop_grace: float = 10.0

    def start(self) -> None:
        raise NotImplementedError

    def running(self) -> bool:
        return self.process is not None and self.process.process.poll() is None

    def stop(self) -> None:
        if self.process is not None:
            terminate(self.process.pid, grace=self.stop_grace)
            with contextlib.suppress(Exception):
                self.process.process.wait(timeout=1)
            self.process = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def spawn(
    name: str, argv: Sequence[str], log_dir: Path, env: dict[str, str] | None = None
) -> Managed:
    """Starts argv in its own process group, output appended to log_dir/<name>.log."""
    log = log_dir / f"{name}.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - prctl only, before exec
            env={**os.environ, **(env or {})},
        )
    return Managed(name, process, log)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pid_runs(pid: int, executable_hint: str) -> bool:
    """True when pid is alive and its command line mentions executable_hint (pids get reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return executable_hint.encode() in cmdline


def terminate(pid: int, grace: float = 10.0) -> None:
    """SIGTERM the process group of pid, SIGKILL after grace seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done == pid:
                    return
            if not pid_alive(pid):
                return
            time.sleep(0.05)


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def free_ports(count: int) -> list[int]:
    """count distinct free TCP ports on 127.0.0.1 (held open together so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass(frozen=True)
class ProcessInfo:
    """A running process and its command line."""

    pid: int
    argv: tuple[str, ...]

    def describe(self, width: int = 120) -> str:
        line = " ".join(self.argv)
        return f"pid {self.pid}: {line if len(line) <= width else line[: width - 3] + '...'}"


def process_info(pid: int) -> ProcessInfo | None:
    """pid's command line, or None when it is gone or a zombie (whose command line is empty)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    argv = tuple(arg.decode(errors="replace") for arg in raw.split(b"\0") if arg)
    return ProcessInfo(pid, argv) if argv else None


def mentions(argv: Iterable[str], paths: Iterable[Path]) -> bool:
    """True when an argument names one of paths or something below it (not a sibling such as
    <path>2, nor the same name below another folder)."""
    patterns = [re.compile(rf"(?<![\w./-]){re.escape(str(p))}(?![\w.-])") for p in paths]
    return any(pattern.search(arg) for arg in argv for pattern in patterns)


def own_lineage() -> set[int]:
    """This process and its ancestors: the shell or test that ran this command names the same
    folder without using it."""
    lineage, pid = set(), os.getpid()
    while pid > 0 and pid not in lineage:
        lineage.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state: the parent
    return lineage


def processes_mentioning(folder: Path, exclude: Iterable[int] = ()) -> list[ProcessInfo]:
    """Every running process whose command line names folder or a path below it."""
    forms = {folder.absolute(), folder.resolve()}  # as given, and with links resolved
    skipped = set(exclude)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skipped:
            continue
        info = process_info(int(entry.name))
        if info is not None and mentions(info.argv, forms):
            found.append(info)
    return sorted(found, key=lambda each: each.pid)
