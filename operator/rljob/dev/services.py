"""The bed's services around the control plane, as `rljob dev up --all` and `rljob dev demo` both
start them: the S3 server with the demo bucket, the simulator writing checkpoints to that server,
Prometheus scraping the simulated workloads, the simulator and the operator, and the operator
under its ServiceAccount with that server as its own store. Each runs in its own process group
and dies with the process that started it (rljob.dev.processes.spawn)."""

from __future__ import annotations

import subprocess
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from rljob.dev.bed import OperatorProcess, install_crd, start_operator
from rljob.dev.bedstate import OPERATOR, PROMETHEUS, S3, SIMULATOR, Component, ServiceRecord
from rljob.dev.binaries import bin_dir
from rljob.dev.controlplane import ComponentStartError
from rljob.dev.kubeapi import KubeApi
from rljob.dev.processes import free_ports
from rljob.dev.prometheus import PrometheusServer
from rljob.dev.rundir import RunDir
from rljob.dev.s3server import HEALTH_PATH, S3Server
from rljob.dev.sim.launcher import Simulator, prometheus_for

DEMO_BUCKET = "rljob-demo"  # examples/rljob-demo.yaml's spec.checkpoint.uri
OPERATOR_SCRAPE_JOB = "rljob-operator"  # the scrape job the shipped alert rules expect


class StartListener(Protocol):
    """Told as each service starts and once it is ready."""

    def starting(self, component: Component) -> None: ...

    def ready(self, component: Component, record: ServiceRecord) -> None: ...


class Silent:
    def starting(self, component: Component) -> None:
        pass

    def ready(self, component: Component, record: ServiceRecord) -> None:
        pass


def operator_flags(prometheus_url: str, s3_endpoint: str) -> list[str]:
    """The operator's default metrics source (the example names none), and what the bed's jobs
    may name: exactly its own Prometheus and S3 server (docs/install.md)."""
    return [
        f"--prometheus-url={prometheus_url}",
        f"--allow-prometheus-url={prometheus_url}",
        f"--allow-s3-endpoint={s3_endpoint}",
    ]


class BedServices:
    """The four services, started in order by `start` and stopped in reverse by `stop`;
    `namespaces` scopes the operator and the simulator (default: every namespace)."""

    def __init__(
        self,
        run_dir: Path,
        namespaces: Sequence[str] = (),
        listener: StartListener | None = None,
        *,
        binaries: Path | None = None,
    ) -> None:
        """`binaries`: the folder holding versitygw (default: rljob.dev.binaries.bin_dir())."""
        self.run_dir = run_dir
        self.namespaces = tuple(namespaces)
        self.listener: StartListener = listener or Silent()
        self.store = S3Server(run_dir, binaries or bin_dir(), free_ports(1)[0])
        self.sim: Simulator | None = None
        self.prometheus: PrometheusServer | None = None
        self.operator: OperatorProcess | None = None
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, api: KubeApi, plane: RunDir) -> None:
        self._step(S3, self._start_store)
        self._step(SIMULATOR, lambda: self._start_simulator(plane.kubeconfig))
        self._step(PROMETHEUS, self._start_prometheus)
        self._step(OPERATOR, lambda: self._start_operator(api, plane))

    def stop(self) -> None:
        for part in (self.operator, self.prometheus, self.sim, self.store):
            if part is not None:
                part.stop()

    def exited(self) -> dict[str, int]:
        """The services whose process has ended, with its exit code."""
        codes = {name: process.poll() for name, process in self.processes.items()}
        return {name: code for name, code in codes.items() if code is not None}

    def _step(self, component: Component, start: Callable[[], ServiceRecord]) -> None:
        self.listener.starting(component)
        try:
            record = start()
        except Exception as exc:
            log = self.run_dir / component.log
            raise ComponentStartError(component.name, log, str(exc)) from exc
        self.listener.ready(component, record)

    def _start_store(self) -> ServiceRecord:
        self.store.start(timeout=S3.ready_within)
        self.store.create_bucket(DEMO_BUCKET)
        assert self.store.process is not None
        return self._record(S3, self.store.process.process, self.store.endpoint + HEALTH_PATH)

    def simulator(self, kubeconfig: Path) -> Simulator:
        """The simulator, not started: with --checkpoints, its trainers write versions through
        the SDK to the store in its own environment, which is the bed's S3 server."""
        return Simulator(
            self.run_dir,
            kubeconfig,
            namespaces=self.namespaces,
            checkpoints=True,
            env=self.store.env(),
        )

    def _start_simulator(self, kubeconfig: Path) -> ServiceRecord:
        self.sim = self.simulator(kubeconfig)
        self.sim.start(timeout=SIMULATOR.ready_within)
        assert self.sim.process is not None
        return self._record(SIMULATOR, self.sim.process.process, f"{self.sim.url}/healthz")

    def _start_prometheus(self) -> ServiceRecord:
        assert self.sim is not None
        self.prometheus = prometheus_for(self.sim, self.run_dir)
        self.prometheus.start(timeout=PROMETHEUS.ready_within)
        assert self.prometheus.process is not None
        process = self.prometheus.process.process
        return self._record(PROMETHEUS, process, f"{self.prometheus.url}/-/ready")

    def _start_operator(self, api: KubeApi, plane: RunDir) -> ServiceRecord:
        assert self.prometheus is not None
        install_crd(api)
        self.operator = start_operator(
            api,
            plane,
            self.run_dir / "operator",
            *operator_flags(self.prometheus.url, self.store.endpoint),
            env=self.store.env(),  # the bed's S3 server is the operator's own store
            watch=self.namespaces,
        )
        # As the chart's ServiceMonitor would: the bed's Prometheus scrapes the operator too.
        metrics = urllib.parse.urlsplit(self.operator.metrics_url).netloc
        self.prometheus.set_static_targets(OPERATOR_SCRAPE_JOB, [metrics])
        return self._record(
            OPERATOR, self.operator.process, self.operator.liveness_url, self.operator.metrics_url
        )

    def _record(
        self,
        component: Component,
        process: subprocess.Popen[bytes],
        health_url: str,
        url: str = "",
    ) -> ServiceRecord:
        """What bed.json keeps of a started service; `url` defaults to health_url's origin."""
        self.processes[component.name] = process
        parts = urllib.parse.urlsplit(health_url)
        origin = url or f"{parts.scheme}://{parts.netloc}"
        return ServiceRecord(process.pid, origin, health_url, str(self.run_dir / component.log))
