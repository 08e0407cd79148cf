"""What /proc says: the machine (CPU model, cores, memory) and, per process, resident memory and
CPU seconds, so the operator is measured apart from the control plane."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
# /proc/<pid>/stat fields after the command name: utime and stime are fields 14 and 15.
_UTIME = 11
_STIME = 12
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal guest guest_nice.
_IDLE, _IOWAIT, _GUEST = 3, 4, 8


@dataclass(frozen=True)
class ProcSample:
    """One reading of one process."""

    at: float  # time.monotonic()
    cpu_seconds: float
    rss_mib: float


def sample(pid: int) -> ProcSample | None:
    """CPU seconds used so far and resident memory, or None when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        statm = Path(f"/proc/{pid}/statm").read_text().split()
    except OSError:
        return None
    # The command name may contain spaces; every field after its closing parenthesis is fixed.
    fields = stat.rsplit(")", 1)[1].split()
    cpu = (int(fields[_UTIME]) + int(fields[_STIME])) / _TICKS
    rss_mib = int(statm[1]) * _PAGE_KIB / 1024
    return ProcSample(time.monotonic(), cpu, rss_mib)


def machine_sample() -> ProcSample:
    """The whole machine as one pseudo-process: busy CPU seconds of every core so far, and the
    memory in use (total minus available), so other load on a shared machine shows."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = ticks[_IDLE] + ticks[_IOWAIT]
    busy = sum(ticks[:_GUEST]) - idle  # guest time is already counted in user time
    return ProcSample(
        time.monotonic(),
        busy / _TICKS,
        _meminfo_kib("MemTotal") / 1024 - _meminfo_kib("MemAvailable") / 1024,
    )


@dataclass(frozen=True)
class Usage:
    """A process over a window: CPU seconds per minute, resident memory at the end and at most."""

    cpu_seconds_per_minute: float
    rss_mib: float
    peak_rss_mib: float

    @property
    def core_percent(self) -> float:
        return self.cpu_seconds_per_minute / 60 * 100


def usage(first: ProcSample, last: ProcSample, peak_rss_mib: float) -> Usage:
    elapsed = last.at - first.at
    per_minute = (last.cpu_seconds - first.cpu_seconds) * 60 / elapsed if elapsed > 0 else 0.0
    return Usage(per_minute, last.rss_mib, max(peak_rss_mib, last.rss_mib))


def machine() -> str:
    """E.g. "2 x Intel(R) Xeon(R) CPU @ 2.20GHz, 23.6 GiB RAM, Linux 6.1"."""
    models = [
        line.split(":", 1)[1].strip()
        for line in Path("/proc/cpuinfo").read_text().splitlines()
        if line.startswith("model name")
    ]
    model = models[0] if models else "unknown CPU"
    cores = len(models) or os.cpu_count() or 0
    memory_gib = _meminfo_kib("MemTotal") / 1024 / 1024
    return f"{cores} x {model}, {memory_gib:.1f} GiB RAM, Linux {os.uname().release}"


def _meminfo_kib(field: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def git_sha(repo: Path) -> str:
    """HEAD's SHA, with "+dirty" when the working tree has changes (read-only git calls)."""
    try:
        sha = _git(repo, "rev-parse", "HEAD")
        dirty = _git(repo, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{sha}+dirty" if dirty else sha


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, timeout=10
    )
    return out.stdout.strip()
