"""`rljob dev demo`: the local control plane (demo profile), the operator under its
ServiceAccount, and examples/rljob-demo.yaml, shown with kubectl. Ctrl-C stops all of it."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from rljob.dev.bed import OperatorProcess, install_crd, start_operator
from rljob.dev.binaries import bin_dir, repo_root
from rljob.dev.controlplane import ControlPlane, ControlPlaneError, wait_until
from rljob.dev.kubeapi import ApiError, KubeApi
from rljob.dev.launcher import env_lines, fresh_run_dir
from rljob.dev.processes import free_ports
from rljob.dev.s3server import S3Server

DEMO_NAMESPACE = "rl-demo"
DEMO_BUCKET = "rljob-demo"


def _example() -> dict[str, Any]:
    root = repo_root()
    if root is None:
        raise ControlPlaneError("the demo runs from a source checkout (examples/ is needed)")
    body: dict[str, Any] = yaml.safe_load((root / "examples" / "rljob-demo.yaml").read_text())
    return body


def _apply_demo_job(api: KubeApi, store: S3Server) -> str:
    try:
        api.create("/api/v1/namespaces", {"metadata": {"name": DEMO_NAMESPACE}})
    except ApiError as exc:
        if exc.status != 409:
            raise
    wait_until(
        lambda: bool(api.get(f"/api/v1/namespaces/{DEMO_NAMESPACE}/serviceaccounts/default")),
        30,
        "the demo namespace",
    )
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


def run_demo(run_dir: Path, *, once: bool = False, timeout: float = 180.0) -> int:
    fresh_run_dir(run_dir)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    plane = ControlPlane(run_dir, bin_dir(), "demo")
    operator: OperatorProcess | None = None
    store = S3Server(run_dir, bin_dir(), free_ports(1)[0])
    started = time.monotonic()
    try:
        plane.start()
        print(
            f"control plane ready in {time.monotonic() - started:.1f}s (4 nodes x 8 H100)",
            flush=True,
        )
        api = plane.api()
        install_crd(api)
        store.start()
        store.create_bucket(DEMO_BUCKET)
        print(f"S3 server (versitygw) at {store.endpoint}, bucket {DEMO_BUCKET}", flush=True)
        operator = start_operator(api, plane.dir, run_dir / "operator", env=store.env())
        print(f"operator running as its ServiceAccount; log: {operator.log}", flush=True)
        name = _apply_demo_job(api, store)
        print(
            f"applied examples/rljob-demo.yaml as {DEMO_NAMESPACE}/{name}; waiting for Ready",
            flush=True,
        )
        wait_until(
            lambda: _ready(api, name), timeout, f"RLJob {name} to become Ready", interval=1.0
        )
        print(f"RLJob Ready {time.monotonic() - started:.1f}s after start", flush=True)
        _kubectl(plane.dir.kubeconfig, "get", "rlj", "-n", DEMO_NAMESPACE, "-o", "wide")
        _kubectl(plane.dir.kubeconfig, "get", "pods", "-n", DEMO_NAMESPACE, "-o", "wide")
        _kubectl(plane.dir.kubeconfig, "describe", "rlj", name, "-n", DEMO_NAMESPACE)
        if not once:
            print(f"\nTry it yourself:\n  {env_lines(run_dir)}\n  kubectl get rlj -A")
            print("Ctrl-C stops everything.", flush=True)
            while not stop.wait(1.0):
                if operator.process.poll() is not None:
                    print("the operator exited; stopping", flush=True)
                    return 1
        return 0
    finally:
        if operator is not None:
            operator.stop()
        store.stop()
        plane.stop()
        print("demo stopped", flush=True)
