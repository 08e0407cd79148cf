"""Profiles a Python process when BENCH_PROFILE_OUT names a file: CPU with cProfile (stats in
that file), or with BENCH_PROFILE_KIND=memory the live allocations by source line (tracemalloc,
a text summary in that file; BENCH_PROFILE_FRAMES deep tracebacks add a table by the nearest
frame in the operator or kopf, which names who holds a library's allocation). The file is
written on SIGUSR1 (and at exit, when none was);
SIGUSR2 starts the CPU profile over, so that it can cover one quiet window only.

`python -m bench --profile-operator` puts this folder first on the operator's PYTHONPATH, so the
unmodified `rljob run` is profiled from its first import.
"""

from __future__ import annotations

import atexit
import cProfile
import os
import signal
import tracemalloc
from types import FrameType

_OUT = os.environ.get("BENCH_PROFILE_OUT", "")
_FRAMES = int(os.environ.get("BENCH_PROFILE_FRAMES", "1"))
_OWNERS = ("/rljob/", "/kopf/")  # whose frames an allocation is charged to
_TOP = 40
_profiles: list[cProfile.Profile] = []  # the current CPU profile
_written: list[bool] = []


def _write_allocations() -> None:
    snapshot = tracemalloc.take_snapshot()
    lines = [f"live allocations, top {_TOP} by source file and by line"]
    for kind in ("filename", "lineno"):
        stats = snapshot.statistics(kind)
        total = sum(stat.size for stat in stats)
        lines.append(f"\n=== by {kind} (total {total / 2**20:.1f} MiB traced) ===")
        lines += [f"{stat.size / 2**20:8.2f} MiB {stat.count:9d} blocks  {stat.traceback}"
                  for stat in stats[:_TOP]]  # fmt: skip
    if _FRAMES > 1:
        lines += _by_owner(snapshot)
    with open(_OUT, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")


def _by_owner(snapshot: tracemalloc.Snapshot) -> list[str]:
    """Live bytes by the innermost frame that is the operator's or kopf's own code."""
    owners: dict[str, list[int]] = {}
    for stat in snapshot.statistics("traceback"):
        frame = next(
            (f for f in reversed(stat.traceback) if any(o in f.filename for o in _OWNERS)),
            stat.traceback[-1],
        )
        entry = owners.setdefault(f"{frame.filename}:{frame.lineno}", [0, 0])
        entry[0] += stat.size
        entry[1] += stat.count
    ranked = sorted(owners.items(), key=lambda item: -item[1][0])[:_TOP]
    lines = [f"\n=== by nearest operator or kopf frame ({_FRAMES} frames traced) ==="]
    lines += [f"{size / 2**20:8.2f} MiB {n:9d} blocks  {where}" for where, (size, n) in ranked]
    return lines


def _write(*_: int | FrameType | None) -> None:
    if _written:
        return
    _written.append(True)
    if _profiles:
        _profiles[-1].dump_stats(_OUT)
    else:
        _write_allocations()


def _start_over(*_: int | FrameType | None) -> None:
    if _profiles:
        _profiles[-1].disable()
        _profiles[:] = [cProfile.Profile()]
        _profiles[-1].enable()


if _OUT:
    if os.environ.get("BENCH_PROFILE_KIND") == "memory":
        tracemalloc.start(_FRAMES)
    else:
        _profiles.append(cProfile.Profile())
        _profiles[-1].enable()
    signal.signal(signal.SIGUSR1, _write)
    signal.signal(signal.SIGUSR2, _start_over)
    atexit.register(_write)
