"""Starts and stops the simulator process (the dev launcher and pytest fixtures use this)."""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rljob.dev.controlplane import wait_until
from rljob.dev.processes import Managed, ServerProcess, free_ports, spawn, tail
from rljob.dev.sim.client import SimClient

if TYPE_CHECKING:
    from rljob.dev.prometheus import PrometheusServer

NAME = "simulator"


class SimulatorError(RuntimeError):
    """The simulator could not start; the message carries its log tail."""


class Simulator(ServerProcess):
    """One simulator process: `start()`, `stop()`, `url`, `client()`, `targets_file`."""

    def __init__(
        self,
        run_dir: Path,
        kubeconfig: Path,
        *,
        control_port: int | None = None,
        targets_file: Path | None = None,
        namespaces: Sequence[str] = (),
        poll_interval: float = 0.5,
        profiles: Mapping[str, Mapping[str, Any]] | None = None,
        checkpoints: bool = False,
        env: Mapping[str, str] | None = None,
        log_level: str = "INFO",
    ) -> None:
        self.run_dir = run_dir
        self.kubeconfig = kubeconfig
        self.port = control_port or free_ports(1)[0]
        self.state_dir = run_dir / "sim"
        self.targets_file = targets_file or self.state_dir / "targets.json"
        self.namespaces = tuple(namespaces)
        self.poll_interval = poll_interval
        self.profiles = dict(profiles or {})
        self.checkpoints = checkpoints
        self.env = dict(env or {})
        self.log_level = log_level
        self.log_dir = run_dir / "logs"
        self.process: Managed | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.log_dir / f"{NAME}.log"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def client(self, timeout: float = 5.0) -> SimClient:
        return SimClient(self.url, timeout)

    def argv(self) -> list[str]:
        argv = [
            sys.executable, "-m", "rljob.dev.sim",
            f"--kubeconfig={self.kubeconfig}",
            f"--state-dir={self.state_dir}",
            f"--control-port={self.port}",
            f"--targets-file={self.targets_file}",
            f"--poll-interval={self.poll_interval}",
            f"--log-level={self.log_level}",
        ]  # fmt: skip
        argv += [f"--namespace={ns}" for ns in self.namespaces]
        argv += [f"--profile={role}={json.dumps(p)}" for role, p in self.profiles.items()]
        if self.checkpoints:
            argv.append("--checkpoints")
        return argv

    def start(self, timeout: float = 30.0) -> None:
        """Starts the process and waits until its control API answers."""
        for folder in (self.state_dir, self.log_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self.process = spawn(NAME, self.argv(), self.log_dir, env=self.env)
        try:
            wait_until(
                self._ready, timeout, f"the simulator on {self.url}", gives_up=(SimulatorError,)
            )
        except Exception as exc:
            self.stop()
            raise SimulatorError(f"{exc}\n--- {self.log} ---\n{tail(self.log)}") from exc

    def _ready(self) -> bool:
        if self.process is not None and self.process.process.poll() is not None:
            raise SimulatorError(
                f"simulator exited with {self.process.process.returncode}:\n{tail(self.log)}"
            )
        with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as response:
            return bool(response.status == 200) and self.targets_file.exists()


def prometheus_for(
    sim: Simulator,
    run_dir: Path,
    *,
    prometheus_bin: Path | None = None,
    rule_files: Sequence[Path] = (),
    scrape_interval: str = "1s",
    evaluation_interval: str = "1s",
) -> PrometheusServer:
    """A Prometheus under run_dir, not started, that scrapes the simulator's workloads (file_sd)
    and its own /metrics (scrape job `rljob-sim`)."""
    from rljob.dev.prometheus import PrometheusServer, prometheus_bin_dir

    return PrometheusServer(
        run_dir,
        prometheus_bin or prometheus_bin_dir(),
        free_ports(1)[0],
        scrape_interval,
        evaluation_interval,
        rule_files,
        targets_file=sim.targets_file,
        static_targets={"rljob-sim": [f"127.0.0.1:{sim.port}"]},
    )


def start_with_prometheus(
    run_dir: Path,
    kubeconfig: Path,
    *,
    prometheus_bin: Path | None = None,
    rule_files: Sequence[Path] = (),
    scrape_interval: str = "1s",
    evaluation_interval: str = "1s",
    **simulator_options: Any,
) -> tuple[Simulator, PrometheusServer]:
    """The simulator and a Prometheus scraping it (`prometheus_for`), both under run_dir; stop
    them with `stop()`, Prometheus first."""
    sim = Simulator(run_dir, kubeconfig, **simulator_options)
    sim.start()
    try:
        prometheus = prometheus_for(
            sim,
            run_dir,
            prometheus_bin=prometheus_bin,
            rule_files=rule_files,
            scrape_interval=scrape_interval,
            evaluation_interval=evaluation_interval,
        )
        prometheus.start()
    except BaseException:
        sim.stop()
        raise
    return sim, prometheus
