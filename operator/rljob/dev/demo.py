"""`rljob dev demo`: the whole bed in the foreground (the control plane, demo profile, and the
services `rljob dev up --all` starts: rljob.dev.services), examples/rljob-demo.yaml applied and a
drift repaired, shown with kubectl. Ctrl-C stops all of it."""

from __future__ import annotations

import signal
import subprocess
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from rljob.dev.bed import ensure_namespace
from rljob.dev.bedstate import Component, ServiceRecord
from rljob.dev.binaries import bin_dir, repo_root
from rljob.dev.controlplane import ControlPlane, ControlPlaneError, wait_until
from rljob.dev.kubeapi import KubeApi
from rljob.dev.launcher import env_lines, fresh_run_dir
from rljob.dev.s3server import S3Server
from rljob.dev.scrape import metric_values
from rljob.dev.services import BedServices

DEMO_NAMESPACE = "rl-demo"
KV_DRIFT = 'detector="kv_drift"'


def _example() -> dict[str, Any]:
    root = repo_root()
    if root is None:
        raise ControlPlaneError("the demo runs from a source checkout (examples/ is needed)")
    body: dict[str, Any] = yaml.safe_load((root / "examples" / "rljob-demo.yaml").read_text())
    return body


def _apply_demo_job(api: KubeApi, store: S3Server) -> str:
    ensure_namespace(api, DEMO_NAMESPACE, 30)
    body = _example()
    body["metadata"]["namespace"] = DEMO_NAMESPACE
    body["spec"]["checkpoint"]["endpoint"] = store.endpoint  # the bed's own S3 server
    name = str(body["metadata"]["name"])
    path = (
        f"/apis/rljob.io/v1alpha1/namespaces/{DEMO_NAMESPACE}/rljobs/{name}?fieldValidation=Strict"
    )
    api.apply(path, body, field_manager="rljob-demo")
    return name


def _ready(api: KubeApi, name: str) -> bool:
    job = api.get(f"/apis/rljob.io/v1alpha1/namespaces/{DEMO_NAMESPACE}/rljobs/{name}")
    conditions = job.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _kubectl(kubeconfig: Path, *args: str) -> None:
    print(f"\n$ kubectl {' '.join(args)}", flush=True)
    subprocess.run([str(bin_dir() / "kubectl"), f"--kubeconfig={kubeconfig}", *args], check=False)


class _Announce:
    """Says each service once it is ready (the demo's own narration)."""

    def starting(self, component: Component) -> None:
        pass

    def ready(self, component: Component, record: ServiceRecord) -> None:
        print(f"{component.name} ready at {record.url} (log: {record.log})", flush=True)


class DemoBed:
    """Everything the demo runs: the control plane (demo profile) and the bed's services
    (rljob.dev.services), as `rljob dev up --all` starts them, in this process."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.plane = ControlPlane(run_dir, bin_dir(), "demo")
        self.services = BedServices(run_dir, listener=_Announce())

    def start(self, started: float) -> KubeApi:
        self.plane.start()
        print(
            f"control plane ready in {time.monotonic() - started:.1f}s (4 nodes x 8 H100)",
            flush=True,
        )
        api = self.plane.api()
        self.services.start(api, self.plane.dir)
        return api

    def stop(self) -> None:
        self.services.stop()
        self.plane.stop()


def _drift_value(metrics_url: str) -> float | None:
    found = metric_values(
        metrics_url, "rljob_detector_value", KV_DRIFT, f'namespace="{DEMO_NAMESPACE}"'
    )
    return found[0] if found else None


def _rollout_pods(api: KubeApi) -> list[str]:
    path = f"/api/v1/namespaces/{DEMO_NAMESPACE}/pods?labelSelector=rljob.io/role=rollout"
    return sorted(p["metadata"]["name"] for p in api.get(path)["items"])


def _show_drift_repair(bed: DemoBed, api: KubeApi, name: str) -> None:
    """Injects a KV-cache-fragmentation drift into one engine and waits for the operator to
    restart exactly that engine."""
    operator, sim = bed.services.operator, bed.services.sim
    assert operator is not None and sim is not None
    metrics_url = operator.metrics_url
    print("\nwaiting for the engines' throughput baselines (warm-up) ...", flush=True)
    wait_until(lambda: _drift_value(metrics_url) is not None, 120, "drift baselines", interval=1.0)
    victim = _rollout_pods(api)[0]
    sim.client().inject("drift", namespace=DEMO_NAMESPACE, pod=victim, drop=0.3)
    print(f"injected a 30% throughput drift into {victim}; the operator detects it ...", flush=True)
    wait_until(
        lambda: victim not in _rollout_pods(api), 180, f"{victim} to be restarted", interval=1.0
    )
    print(f"the operator restarted {victim} (and nothing else):", flush=True)
    _kubectl(bed.plane.dir.kubeconfig, "describe", "rlj", name, "-n", DEMO_NAMESPACE)


def run_demo(run_dir: Path, *, once: bool = False, timeout: float = 180.0) -> int:
    fresh_run_dir(run_dir)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    bed = DemoBed(run_dir)
    started = time.monotonic()
    try:
        api = bed.start(started)
        operator = bed.services.operator
        assert operator is not None
        name = _apply_demo_job(api, bed.services.store)
        print(
            f"applied examples/rljob-demo.yaml as {DEMO_NAMESPACE}/{name}; waiting for Ready",
            flush=True,
        )
        wait_until(
            lambda: _ready(api, name), timeout, f"RLJob {name} to become Ready", interval=1.0
        )
        print(f"RLJob Ready {time.monotonic() - started:.1f}s after start", flush=True)
        kubeconfig = bed.plane.dir.kubeconfig
        _kubectl(kubeconfig, "get", "rlj", "-n", DEMO_NAMESPACE, "-o", "wide")
        _kubectl(kubeconfig, "get", "pods", "-n", DEMO_NAMESPACE, "-o", "wide")
        _kubectl(kubeconfig, "describe", "rlj", name, "-n", DEMO_NAMESPACE)
        _show_drift_repair(bed, api, name)
        if not once:
            status = f"kubectl rljob status -n {DEMO_NAMESPACE} {name}"
            steps = f"{env_lines(run_dir)}\nkubectl get rlj -A\n{status}"
            print("\nTry it yourself:\n" + textwrap.indent(steps, "  "))
            print("Ctrl-C stops everything.", flush=True)
            while not stop.wait(1.0):
                if operator.process.poll() is not None:
                    print("the operator exited; stopping", flush=True)
                    return 1
        return 0
    finally:
        bed.stop()
        print("demo stopped", flush=True)
