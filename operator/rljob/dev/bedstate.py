"""What `rljob dev up` records of the bed it starts, in <run dir>/bed.json, for `rljob dev status`
and `down` and for the `up` that waits on a detached bed: the component being started, each
service's pid, URLs and log, and which component did not come up.

Also the bed's component list (start order, logs, readiness deadlines), the deadlines a waiting
`up` keeps, and the rows of `rljob dev status`: pure, so the unit tests read them directly."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rljob.dev.components import COMPONENTS
from rljob.dev.rundir import RunState, write_json


@dataclass(frozen=True)
class Component:
    """One part of the bed as `up` starts it and `status` shows it."""

    name: str
    log: str  # relative to the run folder
    ready_within: float  # seconds its start may take before `up` gives up on it
    readiness: str  # what must answer for it to count as ready
    process_hint: str  # in its command line: tells it from a process that reused its pid


LAUNCHER = Component(
    "launcher", "launcher.log", 60, "has recorded its first step in bed.json", "rljob"
)
CONTROL_PLANE = Component(
    "control plane",
    "logs",
    300,
    "etcd /health, kube-apiserver /readyz, the others' /healthz, every simulated node Ready",
    "kube-apiserver",
)
S3 = Component(
    "s3",
    "logs/versitygw.log",
    45,
    "GET /health answers 200, then the bucket rljob-demo is created",
    "versitygw",
)
SIMULATOR = Component(
    "simulator",
    "logs/simulator.log",
    45,
    "GET /healthz on its fault API answers 200 and it has written targets.json",
    "rljob.dev.sim",
)
PROMETHEUS = Component(
    "prometheus", "logs/prometheus.log", 75, "GET /-/ready answers 200", "prometheus"
)
OPERATOR = Component(
    "operator",
    "operator/operator.log",
    105,  # the CRD Established (30 s) and the liveness probe (60 s)
    "the CRD is Established, then GET /healthz on its liveness port answers 200",
    "rljob.dev.crash_entry",
)
SERVICES = (S3, SIMULATOR, PROMETHEUS, OPERATOR)  # start order; stopped in reverse
# How long a waiting `up` allows past a component's own deadline, so that the launcher's own
# error, which says more, usually arrives first.
WAIT_GRACE_SECONDS = 15.0


def start_steps(whole_bed: bool) -> tuple[Component, ...]:
    """What a detached `up` waits for, in order."""
    return (LAUNCHER, CONTROL_PLANE, *(SERVICES if whole_bed else ()))


@dataclass
class ServiceRecord:
    """A started service: where it answers and where it logs."""

    pid: int
    url: str  # its main URL: S3 endpoint, fault API, Prometheus, the operator's /metrics
    health_url: str  # what its readiness check asks
    log: str
    exit_code: int | None = None  # set by the launcher when it saw the process exit


@dataclass
class BedState:
    """bed.json: written by the launcher only, read by the other commands."""

    launcher_pid: int
    whole_bed: bool
    namespaces: list[str] = field(default_factory=list)
    under_way: str = LAUNCHER.name  # the component being started, "" once done
    ready: bool = False
    failed: str = ""  # the component that did not come up
    failed_log: str = ""  # its log
    failure: str = ""  # why
    services: dict[str, ServiceRecord] = field(default_factory=dict)

    @staticmethod
    def path(run_dir: Path) -> Path:
        return run_dir / "bed.json"

    def save(self, run_dir: Path) -> None:
        write_json(self.path(run_dir), asdict(self))

    @classmethod
    def load(cls, run_dir: Path) -> BedState:
        raw = json.loads(cls.path(run_dir).read_text())
        services = {name: ServiceRecord(**record) for name, record in raw.pop("services").items()}
        return cls(**raw, services=services)

    @classmethod
    def load_if_any(cls, run_dir: Path) -> BedState | None:
        return cls.load(run_dir) if cls.path(run_dir).exists() else None


class StepDeadlines:
    """The deadlines a waiting `up` keeps: each component may be under way for its own
    `ready_within` plus a grace, counted from when this process first saw it under way (its own
    clock: no time is compared across processes)."""

    def __init__(self, steps: Sequence[Component], grace: float = WAIT_GRACE_SECONDS) -> None:
        self.steps = {step.name: step for step in steps}
        self.grace = grace
        self.first_seen: dict[str, float] = {}

    def overdue(self, under_way: str, now: float) -> Component | None:
        """The component under way if it has run out of time, else None."""
        step = self.steps.get(under_way)
        if step is None:
            return None
        since = self.first_seen.setdefault(under_way, now)
        return step if now - since > step.ready_within + self.grace else None


@dataclass(frozen=True)
class StatusRow:
    component: str
    state: str  # running, not running, exited <code>
    pid: int
    address: str
    log: Path


Runs = Callable[[int, str], bool]  # (pid, process hint) -> is that process alive


def _state(pid: int, hint: str, runs: Runs, exit_code: int | None = None) -> str:
    if pid and runs(pid, hint):
        return "running"
    return f"exited {exit_code}" if exit_code is not None else "not running"


# The port each control plane component serves its health on, and how it is addressed.
_PLANE_ADDRESS = {
    "etcd": ("etcd", "http"),
    "kube-apiserver": ("apiserver", "https"),
    "kube-controller-manager": ("controller-manager", "https"),
    "kube-scheduler": ("scheduler", "https"),
    "kwok": ("kwok", "http"),
}


def _plane_rows(run_dir: Path, plane: RunState | None, runs: Runs) -> list[StatusRow]:
    rows = []
    for name in COMPONENTS:
        pid = plane.pids.get(name, 0) if plane else 0
        port_name, scheme = _PLANE_ADDRESS[name]
        port = plane.ports.get(port_name) if plane else None
        address = f"{scheme}://127.0.0.1:{port}" if port else ""
        rows.append(
            StatusRow(name, _state(pid, name, runs), pid, address, run_dir / "logs" / f"{name}.log")
        )
    return rows


def _service_rows(run_dir: Path, bed: BedState, runs: Runs) -> list[StatusRow]:
    rows = []
    for service in SERVICES:
        record = bed.services.get(service.name)
        if record is None:
            rows.append(StatusRow(service.name, "not running", 0, "", run_dir / service.log))
            continue
        state = _state(record.pid, service.process_hint, runs, record.exit_code)
        rows.append(StatusRow(service.name, state, record.pid, record.url, Path(record.log)))
    return rows


def status_rows(
    run_dir: Path, plane: RunState | None, bed: BedState | None, runs: Runs
) -> list[StatusRow]:
    """One row per component: the launcher, the control plane's, and the services when the bed
    was started with them."""
    launcher_pid = bed.launcher_pid if bed else (plane.launcher_pid if plane else 0)
    launcher = StatusRow(
        LAUNCHER.name,
        _state(launcher_pid, LAUNCHER.process_hint, runs),
        launcher_pid,
        "",
        run_dir / LAUNCHER.log,
    )
    services = _service_rows(run_dir, bed, runs) if bed and bed.whole_bed else []
    return [launcher, *_plane_rows(run_dir, plane, runs), *services]


def status_headline(run_dir: Path, bed: BedState | None, rows: Sequence[StatusRow]) -> str:
    """One line on the bed as a whole, above the rows."""
    count = f"{sum(row.state == 'running' for row in rows)}/{len(rows)} running"
    launcher_runs = bool(rows) and rows[0].state == "running"
    if bed is not None and bed.failed:
        return f"bed in {run_dir}: {bed.failed} did not come up ({count})"
    if bed is not None and bed.under_way and launcher_runs:
        return f"bed in {run_dir}: starting {bed.under_way} ({count})"
    if all(row.state == "running" for row in rows):
        return f"bed in {run_dir}: ready ({count})"
    return f"bed in {run_dir}: {count}"


def status_table(rows: Sequence[StatusRow]) -> str:
    header = ("component", "state", "pid", "address", "log")
    cells = [header] + [
        (r.component, r.state, str(r.pid or "-"), r.address or "-", str(r.log)) for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True))
        + "  "
        + row[-1]
        for row in cells
    )
