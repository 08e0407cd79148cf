"""The test bed's Prometheus: Debian's package unpacked by tools/prometheus.sh (no service
installed or started), run as a child process listening on 127.0.0.1:<port> only.

It scrapes the simulated workloads through file_sd (the simulator writes `targets_file`), with
short scrape and evaluation intervals for second-scale test windows, keeps its TSDB in the run
folder with a short retention, loads the given rule files, and accepts reloads
(`--web.enable-lifecycle`). Series carry `namespace` and `pod` as in a kube-prometheus setup,
plus `role` and `rljob_job` (the RLJob's name: `job` stays the scrape job's name).

Extra scrape targets (the simulator's own /metrics, the operator's) go into a second file_sd
file, `static_file`, changeable at any time with `set_static_targets` without a reload.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from rljob.dev.controlplane import wait_until
from rljob.dev.processes import Managed, ServerProcess, spawn, tail

BINARY = "prometheus"
PROMTOOL = "promtool"
WORKLOADS_JOB = "rljob-workloads"
STATIC_JOB = "rljob-static"


class PrometheusError(RuntimeError):
    """Prometheus could not start or answered a query with an error."""


def prometheus_bin_dir() -> Path:
    """The folder holding `prometheus` and `promtool`: RLJOB_PROMETHEUS_DIR, or what
    tools/prometheus.sh prints (it downloads and unpacks Debian's package on a cache miss)."""
    configured = os.environ.get("RLJOB_PROMETHEUS_DIR")
    if configured:
        path = Path(configured)
    else:
        script = Path(__file__).resolve().parents[3] / "tools" / "prometheus.sh"
        if not script.exists():
            raise PrometheusError("set RLJOB_PROMETHEUS_DIR: no tools/prometheus.sh to run")
        out = subprocess.run(["bash", str(script)], check=True, stdout=subprocess.PIPE, text=True)
        path = Path(out.stdout.strip().splitlines()[-1])
    missing = [name for name in (BINARY, PROMTOOL) if not (path / name).exists()]
    if missing:
        raise PrometheusError(f"{path} lacks {', '.join(missing)}")
    return path


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    for suffix in ("ms", "s", "m", "h"):
        if duration.endswith(suffix):
            return float(duration[: -len(suffix)]) * units[suffix]
    raise ValueError(f"unsupported duration {duration!r} (use ms, s, m or h)")


class PrometheusServer(ServerProcess):
    """One Prometheus process: `start()`, `stop()`, `url`, `targets_file`, queries."""

    def __init__(  # noqa: PLR0917 - the launcher's positional form: dirs, port, intervals
        self,
        run_dir: Path,
        bin_dir: Path,
        port: int,
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        rule_files: Sequence[Path] = (),
        *,
        targets_file: Path | None = None,
        retention: str = "2h",
        static_targets: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.bin_dir = bin_dir
        self.port = port
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.rule_files = [Path(p) for p in rule_files]
        self.retention = retention
        self.home = run_dir / "prometheus"
        self.data_dir = self.home / "data"
        self.config_file = self.home / "prometheus.yml"
        self.targets_file = targets_file or self.home / "targets" / "workloads.json"
        self.static_file = self.home / "targets" / "static.json"
        self.log_dir = run_dir / "logs"
        self.static_targets = {job: list(addrs) for job, addrs in (static_targets or {}).items()}
        self.process: Managed | None = None

    # ---------------------------------------------------------------- process

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.log_dir / f"{BINARY}.log"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def config(self) -> dict[str, Any]:
        interval = _seconds(self.scrape_interval)
        timeout = f"{min(interval, 10.0):g}s"
        return {
            "global": {
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": timeout,
                "evaluation_interval": self.evaluation_interval,
            },
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [
                {
                    "job_name": WORKLOADS_JOB,
                    "file_sd_configs": [
                        {"files": [str(self.targets_file)], "refresh_interval": "5s"}
                    ],
                    "relabel_configs": [
                        # The target's `job` is the RLJob's name; Prometheus' own `job` label
                        # names the scrape job, so the RLJob's name moves to rljob_job.
                        {"source_labels": ["job"], "target_label": "rljob_job"},
                        {"target_label": "job", "replacement": WORKLOADS_JOB},
                    ],
                },
                {
                    "job_name": STATIC_JOB,
                    # As the chart's ServiceMonitor: the operator's own `namespace` and `job`
                    # labels (an RLJob's) win over the target's; `up` keeps the target's job.
                    "honor_labels": True,
                    "file_sd_configs": [
                        {"files": [str(self.static_file)], "refresh_interval": "5s"}
                    ],
                },
            ],
        }

    def write_config(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.targets_file.parent.mkdir(parents=True, exist_ok=True)
        if not self.targets_file.exists():
            _write_atomic(self.targets_file, "[]\n")
        self._write_static()
        _write_atomic(self.config_file, yaml.safe_dump(self.config(), sort_keys=False))

    def _write_static(self) -> None:
        groups = [
            {"targets": list(addresses), "labels": {"job": job}}
            for job, addresses in sorted(self.static_targets.items())
            if addresses
        ]
        self.static_file.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.static_file, json.dumps(groups, indent=1) + "\n")

    def set_static_targets(self, job: str, addresses: Sequence[str]) -> None:
        """Scrapes `addresses` (host:port) as scrape job `job` from now on (no reload needed)."""
        self.static_targets[job] = list(addresses)
        self._write_static()

    def argv(self) -> list[str]:
        return [
            str(self.bin_dir / BINARY),
            f"--config.file={self.config_file}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--storage.tsdb.retention.time={self.retention}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",
            f"--web.console.templates={self.home / 'consoles'}",
            f"--web.console.libraries={self.home / 'console_libraries'}",
            "--log.level=info",
        ]

    def check_config(self) -> None:
        """promtool's verdict on the written config and its rule files."""
        result = subprocess.run(
            [str(self.bin_dir / PROMTOOL), "check", "config", str(self.config_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise PrometheusError(f"promtool check config failed:\n{result.stdout}")

    def start(self, timeout: float = 60.0) -> None:
        """Writes the config, checks it with promtool, starts Prometheus and waits until
        /-/ready answers 200."""
        if not (self.bin_dir / BINARY).exists():
            raise PrometheusError(f"{self.bin_dir / BINARY} is missing: run tools/prometheus.sh")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.write_config()
        self.check_config()
        self.process = spawn(BINARY, self.argv(), self.log_dir)
        try:
            self.wait_ready(timeout)
        except Exception as exc:
            self.stop()
            raise PrometheusError(f"{exc}\n--- {self.log} ---\n{tail(self.log)}") from exc

    def wait_ready(self, timeout: float = 60.0) -> None:
        wait_until(self._ready, timeout, f"{BINARY} on {self.url}", gives_up=(PrometheusError,))

    def _ready(self) -> bool:
        if self.process is not None and self.process.process.poll() is not None:
            raise PrometheusError(
                f"{BINARY} exited with {self.process.process.returncode}:\n{tail(self.log)}"
            )
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def reload(self, rule_files: Sequence[Path] | None = None) -> None:
        """Rewrites the config (with new rule files, if given), checks it and reloads."""
        if rule_files is not None:
            self.rule_files = [Path(p) for p in rule_files]
        self.write_config()
        self.check_config()
        request = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            if response.status != 200:
                raise PrometheusError(f"reload answered {response.status}")

    # ---------------------------------------------------------------- HTTP API

    def api(self, path: str, params: Mapping[str, str | float] | None = None) -> Any:
        """GET /api/v1/<path>; returns `data`, raises PrometheusError on an error status."""
        query = urllib.parse.urlencode({k: str(v) for k, v in (params or {}).items()})
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            try:
                body = json.loads(exc.read())
            except ValueError:
                raise PrometheusError(f"{path}: HTTP {exc.code}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{path}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's vector: [{"metric": {...}, "value": [t, "v"]}, ...]."""
        params: dict[str, str | float] = {"query": expr}
        if at is not None:
            params["time"] = at
        data = self.api("query", params)
        if data.get("resultType") != "vector":
            raise PrometheusError(f"{expr!r} is a {data.get('resultType')}, not a vector")
        result: list[dict[str, Any]] = data["result"]
        return result

    def values(self, expr: str, by: str = "pod") -> dict[str, float]:
        """An instant query as {<label `by`>: value}."""
        return {
            sample["metric"].get(by, ""): float(sample["value"][1]) for sample in self.query(expr)
        }

    def query_range(
        self, expr: str, start: float, end: float | None = None, step: float = 1.0
    ) -> list[dict[str, Any]]:
        data = self.api(
            "query_range",
            {"query": expr, "start": start, "end": end or time.time(), "step": step},
        )
        result: list[dict[str, Any]] = data["result"]
        return result

    def targets(self, state: str = "active") -> list[dict[str, Any]]:
        data = self.api("targets", {"state": state})
        key = "activeTargets" if state == "active" else "droppedTargets"
        result: list[dict[str, Any]] = data.get(key, [])
        return result

    def rules(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("rules")["groups"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return result


def check_rules(bin_dir: Path, rule_files: Sequence[Path]) -> str:
    """`promtool check rules`; returns its output, raises PrometheusError when it fails."""
    result = subprocess.run(
        [str(bin_dir / PROMTOOL), "check", "rules", *map(str, rule_files)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise PrometheusError(f"promtool check rules failed:\n{result.stdout}")
    return result.stdout


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
