"""An upstream controller manager (Kueue's, JobSet's) run as a host process beside the bed's
control plane instead of in a pod: its configuration written to its run folder, its CRDs applied
from the built module's yaml, its readiness read from its /readyz, its webhooks registered by
`url:` on 127.0.0.1 (no Service has a pod behind it in the bed), and its stop, which removes
those webhooks before the process. What differs per component (its Configuration, its
manifests, its certificates) stays in rljob.dev.kueue and rljob.dev.jobset."""

from __future__ import annotations

import base64
import copy
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from rljob.dev.controlplane import wait_until
from rljob.dev.kubeapi import KubeApi
from rljob.dev.processes import Managed, spawn, tail, terminate
from rljob.dev.rundir import RunDir

FIELD_MANAGER = "rljob-bed"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


class ManagerExitedError(RuntimeError):
    """A manager's process ended before it was ready; the message carries its log's tail."""


def install_crds(api: KubeApi, crd_dir: Path, component: str, timeout: float = 60.0) -> None:
    """Applies every CRD in crd_dir/*.yaml and waits until all are Established."""
    names = []
    for crd_file in sorted(crd_dir.glob("*.yaml")):
        body = yaml.safe_load(crd_file.read_text())
        name = body["metadata"]["name"]
        api.apply(f"{CRDS}/{name}", body, field_manager=FIELD_MANAGER)
        names.append(name)

    # The manager watches its kinds from the start, and the API server serves a kind only once
    # its CRD is Established: started earlier, the manager's caches would fail to sync.
    def all_established() -> bool:
        return all(crd_established(api.get(f"{CRDS}/{name}")) for name in names)

    wait_until(all_established, timeout, f"{component}'s CRDs to be Established")


def crd_established(crd: dict[str, Any]) -> bool:
    """Whether a CRD's status holds the condition Established=True."""
    conditions = crd.get("status", {}).get("conditions", [])
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def spawn_manager(
    run: RunDir, name: str, binary: Path, config: dict[str, Any], config_file: Path
) -> Managed:
    """Writes the manager's Configuration to config_file and starts binary on it against the
    bed's API server, its output in the run's logs/<name>.log."""
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))
    # controller-runtime's flags, which both managers take; the file holds everything else.
    argv = [
        str(binary),
        f"--config={config_file}",
        f"--kubeconfig={run.kubeconfig}",
        "--zap-log-level=2",
    ]
    return spawn(name, argv, run.logs)


def await_ready(proc: Managed, health_port: int, timeout: float, component: str) -> None:
    """Polls the manager's /readyz on 127.0.0.1:health_port until it answers 200; raises
    ManagerExitedError with its log's tail as soon as the process has exited."""
    url = f"http://127.0.0.1:{health_port}/readyz"

    def ready() -> bool:
        if proc.process.poll() is not None:
            raise ManagerExitedError(
                f"{proc.name} exited with {proc.process.returncode}:\n{tail(proc.log)}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:  # not listening yet, or a 503 (HTTPError is an OSError): not ready
            return False

    # An exited process does not come back: waiting out the timeout would only hide its log.
    wait_until(ready, timeout, f"{component}'s manager to be ready", gives_up=(ManagerExitedError,))


def webhooks_by_url(
    docs: Iterable[dict[str, Any]],
    *,
    prefix: str,
    port: int,
    ca_bundle: bytes,
    namespace_label: str,
) -> list[tuple[str, dict[str, Any]]]:
    """Webhook configurations whose hooks call a Service (as a module's config/ ships them)
    made to call the host process: each renamed `<prefix>-<name>`, each hook's clientConfig a
    URL on 127.0.0.1:port trusting ca_bundle, its namespaceSelector only the namespaces
    labelled `<namespace_label>: "true"`. (API path, body) each."""
    found = []
    for doc in docs:
        body = copy.deepcopy(doc)
        # Every kubebuilder module names its configurations alike: the prefix keeps two
        # managers' apart on one control plane.
        body["metadata"] = {"name": f"{prefix}-{doc['metadata']['name']}"}
        for hook in body.get("webhooks") or []:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca_bundle).decode(),
            }
            # The bed's other tests share the control plane: outside these namespaces the
            # manager never sees a request.
            hook["namespaceSelector"] = {"matchLabels": {namespace_label: "true"}}
        plural = "mutatingwebhookconfigurations"
        if body["kind"] == "ValidatingWebhookConfiguration":
            plural = "validatingwebhookconfigurations"
        found.append((f"{ADMISSION}/{plural}/{body['metadata']['name']}", body))
    return found


class HostManager:
    """A controller manager run as a host process: its process, its health port and the webhook
    configurations registered for it, which stop removes before it ends the process."""

    def __init__(self) -> None:
        self.proc: Managed | None = None
        self.health_port = 0
        self.webhooks: list[str] = []  # the API paths of its webhook configurations

    def register_webhooks(
        self, api: KubeApi, configurations: Iterable[tuple[str, dict[str, Any]]]
    ) -> None:
        """Applies each (API path, body), remembering each path as soon as it is applied, so
        that stop removes it even when a later one fails."""
        for api_path, body in configurations:
            api.apply(api_path, body, field_manager=FIELD_MANAGER)
            self.webhooks.append(api_path)

    def stop(self, api: KubeApi) -> None:
        """Deletes its webhook configurations, then ends its process."""
        # The webhooks go first: left behind with nothing serving them, they would refuse all
        # they cover (failurePolicy Fail).
        for api_path in self.webhooks:
            api.delete(api_path)
        self.webhooks.clear()
        if self.proc is not None:
            terminate(self.proc.pid)
            self.proc = None


__all__ = [
    "FIELD_MANAGER",
    "HostManager",
    "ManagerExitedError",
    "await_ready",
    "crd_established",
    "install_crds",
    "spawn_manager",
    "webhooks_by_url",
]
