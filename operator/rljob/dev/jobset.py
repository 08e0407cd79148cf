"""JobSet in the bed: its controller manager (built from sigs.k8s.io/jobset by tools/build.sh) as a
host process beside the control plane, its CRD and webhooks from the same module.

JobSet runs outside the cluster, so its webhooks are registered by `url:` on 127.0.0.1 with a
serving certificate from the bed's CA, its internal certificate management off. What of JobSet
v0.12.0 shapes this (kubernetes-sigs/jobset at 09e9a3b, the tag's commit, file:line there):
- the manager's file is config.jobset.x-k8s.io/v1alpha1 Configuration, decoded strictly
  (pkg/config/config.go:27-31); flags override it only when given (main.go:125-151);
- internal certificate management defaults to on (api/config/v1alpha1/defaults.go:70-72) and
  would write a Secret in-cluster (main.go:196-203): off, the webhook server reads certDir;
- leader election defaults to on (defaults.go:65, component-base's recommended defaults, read
  at main.go:135-139 when --leader-elect is not given): off;
- the metrics server always serves TLS behind authn/authz (main.go:179-187); without internal
  certificates it reads metrics.certDir, else /tmp/k8s-metrics-server/serving-certs
  (pkg/config/config.go:43-51), and controller-runtime signs its own when that is empty: the bed
  gives it a pair from its CA in the run folder;
- config/components/webhook/manifests.yaml has the pod webhooks (mpod, vpod: failurePolicy Fail,
  every pod CREATE) without the objectSelector that kustomize patches in
  (config/components/webhook/kustomization.yaml:8-20, patches/*-patch.yaml: only pods labelled
  jobset.sigs.k8s.io/jobset-name): the bed applies those patches too, so a pod that is no
  JobSet's never waits on JobSet;
- the manager is ready once its webhook server listens (main.go:273-283, /readyz);
- feature gates: none needed; InPlaceRestart, RestartJob and ElasticJobSet are alpha and off,
  TLSOptions beta and on (pkg/features/features.go:68-76); the bed leaves them as they are.
Its webhooks are limited to namespaces labelled JOBSET_NAMESPACE_LABEL, so the bed's other
tests, sharing the control plane, never meet them; its controllers act only on JobSets and the
Jobs and pods they own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rljob.dev import host_manager, pki
from rljob.dev.kubeapi import KubeApi
from rljob.dev.processes import free_ports
from rljob.dev.rundir import RunDir

JOBSET_NAMESPACE_LABEL = "rljob.io/jobset-bed"
JOBSET_API = "/apis/jobset.x-k8s.io/v1alpha2"


def jobset_config(
    *,
    webhook_port: int,
    health_port: int,
    metrics_port: int,
    cert_dir: Path,
    metrics_cert_dir: Path,
) -> dict[str, Any]:
    """The manager's Configuration (api/config/v1alpha1/configuration_types.go)."""
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {
            "bindAddress": f"127.0.0.1:{metrics_port}",
            "certDir": str(metrics_cert_dir),
        },
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "internalCertManagement": {"enable": False},
    }


def patched_manifests(webhook_dir: Path) -> list[dict[str, Any]]:
    """The module's webhook configurations (webhook/manifests.yaml) with the JSON 6902 patches
    its kustomization.yaml names applied to their targets, as `kustomize build` would."""
    docs = [d for d in yaml.safe_load_all((webhook_dir / "manifests.yaml").read_text()) if d]
    kustomization = yaml.safe_load((webhook_dir / "kustomization.yaml").read_text())
    for entry in kustomization.get("patches") or []:
        target = entry["target"]
        ops = yaml.safe_load((webhook_dir / entry["path"]).read_text())
        matched = [
            d
            for d in docs
            if d["kind"] == target["kind"] and d["metadata"]["name"] == target["name"]
        ]
        if len(matched) != 1:
            raise ValueError(f"{entry['path']}: {len(matched)} documents match {target}")
        for op in ops:
            _json_patch(matched[0], op)
    return docs


def _json_patch(doc: dict[str, Any], op: dict[str, Any]) -> None:
    """One `replace` or `add` of RFC 6902 (what the module's patches use)."""
    *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
    node: Any = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if op["op"] == "replace" and isinstance(node, list):
        node[int(last)] = op["value"]
    elif op["op"] == "replace" or (op["op"] == "add" and isinstance(node, dict)):
        if op["op"] == "replace" and last not in node:
            raise KeyError(f"replace of a missing {op['path']}")
        node[last] = op["value"]
    elif op["op"] == "add" and isinstance(node, list):
        node.insert(len(node) if last == "-" else int(last), op["value"])
    else:
        raise ValueError(f"unsupported patch operation {op['op']!r} at {op['path']}")


def webhook_configurations(
    docs: list[dict[str, Any]], port: int, ca_bundle: bytes
) -> list[tuple[str, dict[str, Any]]]:
    """JobSet's webhook configurations aimed at the host process by URL, limited to the bed's
    JobSet namespaces: (API path, body) each."""
    return host_manager.webhooks_by_url(
        docs,
        prefix="jobset",
        port=port,
        ca_bundle=ca_bundle,
        namespace_label=JOBSET_NAMESPACE_LABEL,
    )


class JobSetManager(host_manager.HostManager):
    """JobSet's controller manager for one run folder of the bed."""

    def __init__(self, run: RunDir, bin_dir: Path) -> None:
        super().__init__()
        self.run = run
        self.bin_dir = bin_dir
        self.config_dir = bin_dir / "jobset-config"
        self.dir = run.root / "jobset"

    @property
    def log(self) -> Path:
        return self.run.logs / "jobset.log"

    def start(self, api: KubeApi, timeout: float = 120.0) -> None:
        binary = self.bin_dir / "jobset"
        if not binary.exists() or not self.config_dir.is_dir():
            raise RuntimeError(
                f"{self.bin_dir} has no jobset or jobset-config/: point RLJOB_BIN_DIR at the "
                "folder `bash tools/build.sh` prints"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        host_manager.install_crds(api, self.config_dir / "crds", "JobSet")
        webhook, self.health_port, metrics = free_ports(3)
        certs, metrics_certs = self.dir / "webhook", self.dir / "metrics"
        pki.serving_pair(self.run.pki, "jobset-webhook", certs / "tls.crt", certs / "tls.key")
        pki.serving_pair(
            self.run.pki, "jobset-metrics", metrics_certs / "tls.crt", metrics_certs / "tls.key"
        )
        config = jobset_config(
            webhook_port=webhook,
            health_port=self.health_port,
            metrics_port=metrics,
            cert_dir=certs,
            metrics_cert_dir=metrics_certs,
        )
        self.proc = host_manager.spawn_manager(
            self.run, "jobset", binary, config, self.dir / "config.yaml"
        )
        host_manager.await_ready(self.proc, self.health_port, timeout, "JobSet")
        docs = patched_manifests(self.config_dir / "webhook")
        ca = self.run.pki.ca_crt.read_bytes()
        self.register_webhooks(api, webhook_configurations(docs, webhook, ca))


__all__ = [
    "JOBSET_API",
    "JOBSET_NAMESPACE_LABEL",
    "JobSetManager",
    "jobset_config",
    "patched_manifests",
    "webhook_configurations",
]
