"""The process that owns a bed: `rljob dev up` in the foreground, or the launcher a detached `up`
starts in its own session. It starts the control plane and, for the whole bed, the services,
records each step in bed.json, watches them, and on SIGTERM or SIGINT stops everything in
reverse order. Every component dies with it (rljob.dev.processes.spawn), so a killed launcher
leaves nothing behind either."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rljob.dev.bedstate import CONTROL_PLANE, BedState, Component, ServiceRecord
from rljob.dev.binaries import bin_dir
from rljob.dev.controlplane import ComponentStartError, ControlPlane
from rljob.dev.services import BedServices

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
WATCH_SECONDS = 1.0


class StopRequested(BaseException):
    """SIGTERM or SIGINT: unwinds a start or the watch to the cleanup. A BaseException, so that
    the readiness probes, which take any Exception for "not ready yet", let it through."""


def _raise_stop(signum: int, _: object) -> None:
    _ignore_stop_signals()
    raise StopRequested(signal.Signals(signum).name)


def _ignore_stop_signals() -> None:
    # During the cleanup: a second signal must not cut it short and leave components behind.
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


class Recorder:
    """Keeps bed.json current; the launcher is its only writer. Its lines go to the terminal, or
    to launcher.log when detached."""

    def __init__(self, run_dir: Path, state: BedState) -> None:
        self.run_dir = run_dir
        self.state = state
        self.state.save(run_dir)

    def starting(self, component: Component) -> None:
        self.state.under_way = component.name
        self.state.save(self.run_dir)
        print(f"starting {component.name}", flush=True)

    def ready(self, component: Component, record: ServiceRecord) -> None:
        self.state.services[component.name] = record
        self.state.save(self.run_dir)
        print(f"{component.name} ready: pid {record.pid}, {record.url}", flush=True)

    def done(self) -> None:
        self.state.under_way, self.state.ready = "", True
        self.state.save(self.run_dir)

    def failed(self, failure: ComponentStartError) -> None:
        self.state.under_way = ""
        self.state.failed, self.state.failed_log = failure.component, str(failure.log)
        self.state.failure = failure.reason
        self.state.save(self.run_dir)

    def exited(self, name: str, code: int) -> None:
        self.state.services[name].exit_code = code
        self.state.save(self.run_dir)
        print(f"{name} exited with {code}; the rest keeps running", flush=True)

    def stopped(self) -> None:
        self.state.under_way, self.state.ready = "", False
        if self.run_dir.exists():
            self.state.save(self.run_dir)


def run_bed(
    run_dir: Path,
    profile: str,
    *,
    whole_bed: bool,
    namespaces: Sequence[str] = (),
    on_ready: Callable[[], None] = lambda: None,
) -> int:
    """Starts the bed, then watches it until a stop signal (0), or until a control plane
    component exits or a component does not come up (1)."""
    recorder = Recorder(run_dir, BedState(os.getpid(), whole_bed, list(namespaces)))
    plane = ControlPlane(run_dir, bin_dir(), profile)
    services = BedServices(run_dir, namespaces, recorder) if whole_bed else None
    started = time.monotonic()
    try:
        for sig in STOP_SIGNALS:
            signal.signal(sig, _raise_stop)
        _start(plane, services, recorder)
        recorder.done()
        print(f"bed ready in {time.monotonic() - started:.1f}s", flush=True)
        on_ready()
        return _watch(plane, services, recorder)
    except StopRequested as stop:
        print(f"{stop} received: stopping", flush=True)
        return 0
    except ComponentStartError as failure:
        recorder.failed(failure)
        print(failure, file=sys.stderr, flush=True)
        return 1
    finally:
        _ignore_stop_signals()
        if services is not None:
            services.stop()
        plane.stop()
        recorder.stopped()
        print("bed stopped", flush=True)


def _start(plane: ControlPlane, services: BedServices | None, recorder: Recorder) -> None:
    recorder.starting(CONTROL_PLANE)
    try:
        plane.start()
    except ComponentStartError:
        raise
    except Exception as exc:  # nodes not Ready, an API error: the plane as a whole failed
        raise ComponentStartError(CONTROL_PLANE.name, plane.dir.logs, str(exc)) from exc
    print(f"control plane ({plane.state.profile}) ready: {plane.server}", flush=True)
    if services is not None:
        services.start(plane.api(), plane.dir)


def _watch(plane: ControlPlane, services: BedServices | None, recorder: Recorder) -> int:
    """A control plane component's exit stops the bed; a service's is recorded, and the rest
    keeps running so its log and the cluster's state can be read."""
    reported: set[str] = set()
    while True:
        time.sleep(WATCH_SECONDS)  # a stop signal raises out of it
        dead = [proc.name for proc in plane.procs if proc.process.poll() is not None]
        if dead:
            print(f"component exited: {', '.join(dead)}; stopping", file=sys.stderr, flush=True)
            return 1
        for name, code in (services.exited() if services else {}).items():
            if name not in reported:
                reported.add(name)
                recorder.exited(name, code)
