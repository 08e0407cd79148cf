"""The resident memory of a process and all its descendants, read from /proc at scrape time: the
gauge `rljob_engine_process_tree_resident_bytes` that an engine page (rljob.sdk.engine_page)
serves beside vLLM's own metrics, for the operator's memory-growth detector.

vLLM's page carries `process_resident_memory_bytes` for the process that serves it only
(prometheus_client's process collector); the engine core and the tensor-parallel workers are
that process's children (vllm 0.33.0: AsyncLLM starts EngineCoreProc, which starts the
MultiprocExecutor's workers), so the engine's memory is the tree's. Standard library only: the
process's children are found by one pass over /proc/<pid>/stat (the parent is its fourth
field), each process's resident set from /proc/<pid>/statm (its second field, in pages). Pages
several processes share (shared libraries, shared memory) count once per process: the sum is
for watching a trend, not for accounting. At most MAX_PROCESSES entries of /proc are read a
scrape, and a failure gives no sample, never an exception into the engine.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rljob.sdk.collector import Collector

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

METRIC = "rljob_engine_process_tree_resident_bytes"
HELP = "Resident memory of this engine process and all its descendants (summed RSS), in bytes."
PROC = Path("/proc")
# A pod's PID namespace holds tens to a few hundred processes (Ray's workers among them).
MAX_PROCESSES = 4096

log = logging.getLogger("rljob.sdk.process_memory")


def _page_size() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 4096


PAGE_SIZE = _page_size()


def _parent(stat: str) -> int | None:
    """The parent pid from a /proc/<pid>/stat line: the field after the state, which follows
    the command name in parentheses (a name may hold spaces and parentheses itself)."""
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def parents(proc: Path = PROC, limit: int = MAX_PROCESSES) -> dict[int, int]:
    """pid -> parent pid of the processes in `proc` (at most `limit` entries read)."""
    found: dict[int, int] = {}
    with os.scandir(proc) as entries:
        for count, entry in enumerate(entries):
            if count >= limit:
                break
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text(encoding="ascii", errors="replace")
            except OSError:  # gone since the listing, or not ours to read
                continue
            parent = _parent(stat)
            if parent is not None:
                found[int(entry.name)] = parent
    return found


def tree(root: int, parent_of: dict[int, int]) -> list[int]:
    """`root` and its descendants, root first."""
    children: dict[int, list[int]] = {}
    for pid, parent in parent_of.items():
        children.setdefault(parent, []).append(pid)
    found, queue = [root], [root]
    seen = {root}
    while queue:
        for child in children.get(queue.pop(), ()):
            if child not in seen:
                seen.add(child)
                found.append(child)
                queue.append(child)
    return found


def resident_bytes(pid: int, proc: Path = PROC) -> int | None:
    """The process's resident set in bytes; None when it is gone or unreadable."""
    try:
        statm = Path(proc, str(pid), "statm").read_text(encoding="ascii").split()
        return int(statm[1]) * PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return None


def tree_resident_bytes(root: int | None = None, proc: Path = PROC) -> int | None:
    """The summed resident memory of `root` (default: this process) and its descendants;
    None when not even the root's can be read."""
    root = os.getpid() if root is None else root
    own = resident_bytes(root, proc)
    if own is None:
        return None
    others = (resident_bytes(pid, proc) for pid in tree(root, parents(proc))[1:])
    return own + sum(size for size in others if size is not None)


class ProcessTreeMemory(Collector):
    """A collector of METRIC for `root` (default: the process that collects), computed at
    each scrape."""

    def __init__(self, root: int | None = None, proc: Path = PROC) -> None:
        self._root, self._proc = root, proc

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterator[Metric]:
        try:
            value = tree_resident_bytes(self._root, self._proc)
        except Exception:  # a scrape must never fail the engine's page, nor the engine
            log.debug("rljob: cannot read the process tree's memory", exc_info=True)
            return
        if value is None:
            return
        from prometheus_client.core import GaugeMetricFamily

        yield GaugeMetricFamily(METRIC, HELP, value=float(value))


__all__ = [
    "METRIC",
    "ProcessTreeMemory",
    "parents",
    "resident_bytes",
    "tree",
    "tree_resident_bytes",
]
