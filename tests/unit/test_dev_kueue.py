"""Kueue in the bed: the manager's Configuration (leader election off, the RLJob kind an
external framework, its job management limited to the bed's Kueue namespaces) and its
webhooks aimed at the host process by URL."""

from __future__ import annotations

import base64
import subprocess
import time
from pathlib import Path

import pytest

from rljob.dev.host_manager import ManagerExitedError, await_ready
from rljob.dev.kueue import KUEUE_NAMESPACE_LABEL, kueue_config, webhook_configurations
from rljob.dev.processes import Managed, free_ports

MANIFESTS = """---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- name: mworkload.kb.io
  clientConfig:
    service:
      name: webhook-service
      path: /mutate-kueue-x-k8s-io-v1beta2-workload
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- name: vworkload.kb.io
  clientConfig:
    service:
      name: webhook-service
      path: /validate-kueue-x-k8s-io-v1beta2-workload
"""


@pytest.mark.parametrize(
    ("external", "frameworks"), [(True, ["RLJob.v1alpha1.rljob.io"]), (False, [])]
)
def test_the_manager_configuration(external: bool, frameworks: list[str]) -> None:
    config = kueue_config(
        webhook_port=1, health_port=2, metrics_port=3, cert_dir=Path("/c"), external=external
    )
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["featureGates"] == {"VisibilityOnDemand": False}
    assert config["integrations"]["externalFrameworks"] == frameworks
    assert config["managedJobsNamespaceSelector"]["matchLabels"] == {KUEUE_NAMESPACE_LABEL: "true"}
    assert "waitForPodsReady" in config  # present means on: v1beta2 has no `enable`
    for address in (config["health"]["healthProbeBindAddress"], config["metrics"]["bindAddress"]):
        assert address.startswith("127.0.0.1:")


def test_the_webhooks_call_the_host_process_by_url() -> None:
    found = dict(webhook_configurations(MANIFESTS, 9443, b"CA"))
    assert sorted(found) == [
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/kueue-mutating-webhook-configuration",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/kueue-validating-webhook-configuration",
    ]
    for body in found.values():
        (hook,) = body["webhooks"]
        assert hook["clientConfig"]["url"].startswith("https://127.0.0.1:9443/")
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == b"CA"
        assert hook["namespaceSelector"] == {"matchLabels": {KUEUE_NAMESPACE_LABEL: "true"}}


def test_a_manager_that_exits_ends_the_wait_at_once_with_its_log(tmp_path: Path) -> None:
    """The readiness wait gives up on an exited process instead of polling it until timeout."""
    log = tmp_path / "kueue.log"
    log.write_text("flag provided but not defined\n")
    process = subprocess.Popen(["sh", "-c", "exit 3"])
    process.wait()
    (port,) = free_ports(1)
    started = time.monotonic()
    with pytest.raises(ManagerExitedError, match=r"(?s)kueue exited with 3:.*not defined"):
        await_ready(Managed("kueue", process, log), port, 60.0, "Kueue")
    assert time.monotonic() - started < 10
