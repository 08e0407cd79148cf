"""Kueue in the bed: its controller manager (built from sigs.k8s.io/kueue by tools/build.sh) as a
host process beside the control plane, its CRDs and webhooks from the same module, the RLJob
kind under integrations.externalFrameworks (docs/kueue.md).

Kueue runs outside the cluster, so its webhooks are registered by `url:` on 127.0.0.1 with a
serving certificate from the bed's CA, its internal certificate management off. Three things
of Kueue v0.17.0 shape this (kubernetes-sigs/kueue at 4d5f7ff):
- with internal certificates off, the manager reads a metrics certificate from the fixed path
  /etc/kueue/metrics/certs and exits without one (cmd/kueue/main.go:205-222): the bed writes one;
- leader election defaults to on (apis/config/v1beta2/defaults.go:84): the bed turns it off;
- VisibilityOnDemand (on by default) serves an aggregated API the bed does not wire: off.
Its webhooks and its job management are limited to namespaces labelled KUEUE_NAMESPACE_LABEL,
so the bed's other tests, sharing the control plane, never meet Kueue."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rljob.dev import host_manager, pki
from rljob.dev.kubeapi import KubeApi
from rljob.dev.processes import free_ports
from rljob.dev.rundir import RunDir
from rljob.vocabulary import kueue

KUEUE_NAMESPACE_LABEL = "rljob.io/kueue-bed"
METRICS_CERTS = Path("/etc/kueue/metrics/certs")  # cmd/kueue/main.go:205, fixed upstream


def kueue_config(
    *,
    webhook_port: int,
    health_port: int,
    metrics_port: int,
    cert_dir: Path,
    external: bool,
    pods_ready_timeout: str = "5m",
) -> dict[str, Any]:
    """The manager's Configuration (config.kueue.x-k8s.io/v1beta2; the file is decoded
    strictly, pkg/config/config.go:57). `external`: RLJob listed as an external framework;
    `pods_ready_timeout`: how long an admitted Workload may go without PodsReady before Kueue
    evicts it."""
    selector = {"matchLabels": {KUEUE_NAMESPACE_LABEL: "true"}}
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "leaderElection": {"leaderElect": False},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "internalCertManagement": {"enable": False},
        "featureGates": {"VisibilityOnDemand": False},
        "manageJobsWithoutQueueName": True,
        "managedJobsNamespaceSelector": selector,
        "waitForPodsReady": {
            "timeout": pods_ready_timeout,
            "recoveryTimeout": "3m",
            "blockAdmission": False,
            "requeuingStrategy": {
                "timestamp": "Eviction",
                "backoffBaseSeconds": 5,
                "backoffMaxSeconds": 30,
            },
        },
        "integrations": {
            "frameworks": ["batch/job", "deployment"],
            "externalFrameworks": [kueue.EXTERNAL_FRAMEWORK] if external else [],
        },
    }


def webhook_configurations(
    manifests: str, port: int, ca_bundle: bytes
) -> list[tuple[str, dict[str, Any]]]:
    """Kueue's webhook configurations (config/components/webhook/manifests.yaml) aimed at the
    host process by URL, limited to the bed's Kueue namespaces: (API path, body) each."""
    docs = [doc for doc in yaml.safe_load_all(manifests) if doc]
    return host_manager.webhooks_by_url(
        docs, prefix="kueue", port=port, ca_bundle=ca_bundle, namespace_label=KUEUE_NAMESPACE_LABEL
    )


class KueueManager(host_manager.HostManager):
    """Kueue's controller manager for one run folder of the bed."""

    def __init__(
        self, run: RunDir, bin_dir: Path, *, external: bool = True, pods_ready_timeout: str = "5m"
    ) -> None:
        super().__init__()
        self.run = run
        self.pods_ready_timeout = pods_ready_timeout
        self.bin_dir = bin_dir
        self.config_dir = bin_dir / "kueue-config"
        self.dir = run.root / "kueue"
        self.external = external

    def start(self, api: KubeApi, timeout: float = 120.0) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        host_manager.install_crds(api, self.config_dir / "crds", "Kueue")
        webhook, self.health_port, metrics = free_ports(3)
        certs = self.dir / "webhook"
        pki.serving_pair(self.run.pki, "kueue-webhook", certs / "tls.crt", certs / "tls.key")
        _write_metrics_certs(self.run)
        config = kueue_config(
            webhook_port=webhook,
            health_port=self.health_port,
            metrics_port=metrics,
            cert_dir=certs,
            external=self.external,
            pods_ready_timeout=self.pods_ready_timeout,
        )
        binary, config_file = self.bin_dir / "kueue", self.dir / "config.yaml"
        self.proc = host_manager.spawn_manager(self.run, "kueue", binary, config, config_file)
        host_manager.await_ready(self.proc, self.health_port, timeout, "Kueue")
        manifests = (self.config_dir / "webhooks.yaml").read_text()
        ca = self.run.pki.ca_crt.read_bytes()
        self.register_webhooks(api, webhook_configurations(manifests, webhook, ca))


def _write_metrics_certs(run: RunDir) -> None:
    """The pair Kueue's manager insists on reading at its fixed path (main.go:205-222)."""
    try:
        pki.serving_pair(
            run.pki, "kueue-metrics", METRICS_CERTS / "tls.crt", METRICS_CERTS / "tls.key"
        )
    except PermissionError as exc:
        raise RuntimeError(
            f"Kueue v0.17.0 reads its metrics certificate from {METRICS_CERTS} whenever its "
            f"internal certificate management is off, and this user cannot write there: {exc}"
        ) from exc


__all__ = ["KUEUE_NAMESPACE_LABEL", "KueueManager", "kueue_config", "webhook_configurations"]
