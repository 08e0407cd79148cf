"""The pod IP range of one local plane: a /16 inside 127.0.0.0/8, so the simulator can listen on
every simulated pod's own IP and direct scraping reaches pods as on a cluster.

Planes running at once (pytest-xdist workers, the demo, a bench) each hold a different range:
a lock file per range records the holder's pid; a range whose holder is gone is taken over."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

# 127.0.x.x holds 127.0.0.1 (every server of the bed) and 127.0.1.1 (/etc/hosts on Debian).
FIRST_OCTET, LAST_OCTET = 64, 254


def lock_dir() -> Path:
    return Path(os.environ.get("RLJOB_PODNET_LOCKS", Path(tempfile.gettempdir()) / "rljob-podnet"))


def _alive(pid: int) -> bool:
    return pid > 0 and Path(f"/proc/{pid}").exists()


def _holder(lock: Path) -> int:
    try:
        return int(lock.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def reserve(owner: int) -> str:
    """A free range, e.g. "127.64.0.0/16", now held by the process `owner`."""
    folder = lock_dir()
    folder.mkdir(parents=True, exist_ok=True)
    start = owner % (LAST_OCTET - FIRST_OCTET + 1)
    for offset in range(LAST_OCTET - FIRST_OCTET + 1):
        octet = FIRST_OCTET + (start + offset) % (LAST_OCTET - FIRST_OCTET + 1)
        lock = folder / f"127.{octet}.lock"
        if lock.exists() and not _alive(_holder(lock)):
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w") as out:
            out.write(str(owner))
        return f"127.{octet}.0.0/16"
    raise RuntimeError(f"every pod range 127.{FIRST_OCTET}-{LAST_OCTET}.0.0/16 is held")


def release(cidr: str, owner: int) -> None:
    """Gives the range back if `owner` still holds it."""
    octet = cidr.split(".")[1] if cidr.startswith("127.") else ""
    lock = lock_dir() / f"127.{octet}.lock"
    if octet and _holder(lock) == owner:
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
