"""JobSet in the bed: the manager's Configuration (leader election and internal certificates
off, every server on 127.0.0.1), the module's webhooks with its kustomize patches applied (the
pod webhooks only for JobSet's pods) and aimed at the host process by URL, only in the bed's
JobSet namespaces."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from rljob.dev.jobset import (
    JOBSET_NAMESPACE_LABEL,
    jobset_config,
    patched_manifests,
    webhook_configurations,
)

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
JOBSET_PODS = {
    "matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]
}


def _hook(name: str, path: str) -> dict[str, Any]:
    return {
        "name": name,
        "failurePolicy": "Fail",
        "clientConfig": {"service": {"name": "webhook-service", "path": path}},
    }


# The shape of JobSet v0.12.0's config/components/webhook: the pod hooks second in each
# configuration, with no objectSelector until the kustomize patches replace them.
MANIFESTS = [
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "mutating-webhook-configuration"},
        "webhooks": [
            _hook("mjobset.kb.io", "/mutate-jobset-x-k8s-io-v1alpha2-jobset"),
            _hook("mpod.kb.io", "/mutate--v1-pod"),
        ],
    },
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "validating-webhook-configuration"},
        "webhooks": [
            _hook("vjobset.kb.io", "/validate-jobset-x-k8s-io-v1alpha2-jobset"),
            _hook("vpod.kb.io", "/validate--v1-pod"),
        ],
    },
]


def _pod_patch(name: str, path: str) -> list[dict[str, Any]]:
    return [
        {
            "op": "replace",
            "path": "/webhooks/1",
            "value": _hook(name, path) | {"objectSelector": JOBSET_PODS},
        }
    ]


PATCHES = {
    "MutatingWebhookConfiguration": ("mutating-webhook-configuration", "patches/mutating.yaml"),
    "ValidatingWebhookConfiguration": (
        "validating-webhook-configuration",
        "patches/validating.yaml",
    ),
}
POD_PATCHES = {
    "patches/mutating.yaml": _pod_patch("mpod.kb.io", "/mutate--v1-pod"),
    "patches/validating.yaml": _pod_patch("vpod.kb.io", "/validate--v1-pod"),
}


def _webhook_dir(
    root: Path,
    patches: dict[str, list[dict[str, Any]]],
    targets: dict[str, tuple[str, str]] = PATCHES,
) -> Path:
    """A config/components/webhook folder: manifests.yaml, kustomization.yaml naming each
    patch file for its target (kind: (name, path)), and the patch files."""
    (root / "patches").mkdir(parents=True)
    (root / "manifests.yaml").write_text(yaml.safe_dump_all([None, *MANIFESTS]))
    entries = [
        {"path": path, "target": {"kind": kind, "name": name}}
        for kind, (name, path) in targets.items()
    ]
    kustomization = {"resources": ["manifests.yaml"], "patches": entries}
    (root / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    for path, ops in patches.items():
        (root / path).write_text(yaml.safe_dump(ops))
    return root


def _by_hook(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {hook["name"]: hook for doc in docs for hook in doc["webhooks"]}


CONFIG = jobset_config(
    webhook_port=9443,
    health_port=8081,
    metrics_port=8443,
    cert_dir=Path("/run/webhook"),
    metrics_cert_dir=Path("/run/metrics"),
)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        pytest.param("kind", "Configuration", id="a-configuration"),
        pytest.param("leaderElection", {"leaderElect": False}, id="leader-election-off"),
        pytest.param("internalCertManagement", {"enable": False}, id="internal-certs-off"),
        pytest.param(
            "webhook",
            {"host": "127.0.0.1", "port": 9443, "certDir": "/run/webhook"},
            id="webhook-server-on-loopback-with-the-beds-pair",
        ),
        pytest.param(
            "metrics",
            {"bindAddress": "127.0.0.1:8443", "certDir": "/run/metrics"},
            id="metrics-on-loopback-with-the-beds-pair",
        ),
        pytest.param(
            "health", {"healthProbeBindAddress": "127.0.0.1:8081"}, id="health-on-loopback"
        ),
    ],
)
def test_the_manager_configuration(key: str, expected: object) -> None:
    assert CONFIG[key] == expected


@pytest.mark.parametrize(
    ("hook", "object_selector"),
    [
        pytest.param("mpod.kb.io", JOBSET_PODS, id="mutating-pod-hook-only-jobset-pods"),
        pytest.param("vpod.kb.io", JOBSET_PODS, id="validating-pod-hook-only-jobset-pods"),
        pytest.param("mjobset.kb.io", None, id="mutating-jobset-hook-untouched"),
        pytest.param("vjobset.kb.io", None, id="validating-jobset-hook-untouched"),
    ],
)
def test_the_kustomize_patches_scope_the_pod_hooks(
    tmp_path: Path, hook: str, object_selector: dict[str, Any] | None
) -> None:
    hooks = _by_hook(patched_manifests(_webhook_dir(tmp_path, POD_PATCHES)))
    assert hooks[hook].get("objectSelector") == object_selector
    assert hooks[hook]["failurePolicy"] == "Fail"


@pytest.mark.parametrize(
    ("ops", "check"),
    [
        pytest.param(
            [{"op": "add", "path": "/webhooks/0/objectSelector", "value": JOBSET_PODS}],
            lambda doc: doc["webhooks"][0]["objectSelector"] == JOBSET_PODS,
            id="add-a-key",
        ),
        pytest.param(
            [{"op": "add", "path": "/webhooks/-", "value": _hook("extra", "/extra")}],
            lambda doc: [h["name"] for h in doc["webhooks"]][-1] == "extra",
            id="add-at-the-end-of-a-list",
        ),
        pytest.param(
            [{"op": "add", "path": "/webhooks/0", "value": _hook("first", "/first")}],
            lambda doc: [h["name"] for h in doc["webhooks"]][:2] == ["first", "mjobset.kb.io"],
            id="insert-into-a-list",
        ),
        pytest.param(
            [{"op": "replace", "path": "/metadata/name", "value": "renamed"}],
            lambda doc: doc["metadata"]["name"] == "renamed",
            id="replace-a-key",
        ),
        pytest.param(
            [{"op": "add", "path": "/metadata/a~1b~0c", "value": "x"}],
            lambda doc: doc["metadata"]["a/b~c"] == "x",
            id="escaped-path",
        ),
    ],
)
def test_a_patch_operation(
    tmp_path: Path, ops: list[dict[str, Any]], check: Callable[[dict[str, Any]], bool]
) -> None:
    targets = {"MutatingWebhookConfiguration": PATCHES["MutatingWebhookConfiguration"]}
    webhook_dir = _webhook_dir(tmp_path, {"patches/mutating.yaml": ops}, targets)
    mutating, validating = patched_manifests(webhook_dir)
    assert check(mutating)
    assert validating == MANIFESTS[1]


@pytest.mark.parametrize(
    ("ops", "targets", "error"),
    [
        pytest.param(
            [{"op": "replace", "path": "/metadata/missing", "value": 1}],
            PATCHES,
            KeyError,
            id="replace-of-a-missing-key",
        ),
        pytest.param(
            [{"op": "remove", "path": "/webhooks/1"}],
            PATCHES,
            ValueError,
            id="unsupported-operation",
        ),
        pytest.param(
            [],
            {"MutatingWebhookConfiguration": ("no-such-configuration", "patches/mutating.yaml")},
            ValueError,
            id="target-matching-no-document",
        ),
    ],
)
def test_a_patch_it_cannot_apply_is_refused(
    tmp_path: Path,
    ops: list[dict[str, Any]],
    targets: dict[str, tuple[str, str]],
    error: type[Exception],
) -> None:
    patches = {path: ops for _, path in targets.values()}
    with pytest.raises(error):
        patched_manifests(_webhook_dir(tmp_path, patches, targets))


@pytest.mark.parametrize(
    ("api_path", "hooks"),
    [
        pytest.param(
            f"{ADMISSION}/mutatingwebhookconfigurations/jobset-mutating-webhook-configuration",
            {
                "mjobset.kb.io": "/mutate-jobset-x-k8s-io-v1alpha2-jobset",
                "mpod.kb.io": "/mutate--v1-pod",
            },
            id="mutating",
        ),
        pytest.param(
            f"{ADMISSION}/validatingwebhookconfigurations/jobset-validating-webhook-configuration",
            {
                "vjobset.kb.io": "/validate-jobset-x-k8s-io-v1alpha2-jobset",
                "vpod.kb.io": "/validate--v1-pod",
            },
            id="validating",
        ),
    ],
)
def test_the_webhooks_call_the_host_process_by_url(
    tmp_path: Path, api_path: str, hooks: dict[str, str]
) -> None:
    docs = patched_manifests(_webhook_dir(tmp_path, POD_PATCHES))
    found = dict(webhook_configurations(docs, 9443, b"CA"))
    assert len(found) == 2
    body = found[api_path]
    assert body["metadata"] == {"name": api_path.rsplit("/", 1)[1]}
    assert {hook["name"] for hook in body["webhooks"]} == set(hooks)
    for hook in body["webhooks"]:
        assert hook["clientConfig"]["url"] == f"https://127.0.0.1:9443{hooks[hook['name']]}"
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == b"CA"
        assert hook["namespaceSelector"] == {"matchLabels": {JOBSET_NAMESPACE_LABEL: "true"}}
        # Both selectors apply: a pod hook sees only JobSet's pods in the bed's namespaces.
        if hook["name"].endswith("pod.kb.io"):
            assert hook["objectSelector"] == JOBSET_PODS
    # The module's manifests are left as they were.
    assert "service" in docs[0]["webhooks"][0]["clientConfig"]
