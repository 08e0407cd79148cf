"""The Kubernetes adapter's delete always carries the uid precondition, and Jobs always go with
Foreground propagation (the API's default for Jobs orphans their pods)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rljob.adapters.kube import Kube, KubeError, connect

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: bed, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: bed, user: {token: t}}]
contexts: [{name: bed, context: {cluster: bed, user: bed}}]
current-context: bed
"""


class _Recorder(Kube):
    def __init__(self, fail_with: int | None = None) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.fail_with = fail_with

    async def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        self.calls.append((method, path, body))
        if self.fail_with:
            raise KubeError(self.fail_with, "boom")
        return {}


@pytest.mark.parametrize(
    ("api_version", "kind", "expected_body"),
    [
        pytest.param(
            "batch/v1",
            "Job",
            {"preconditions": {"uid": "u1"}, "propagationPolicy": "Foreground"},
            id="job-foreground",
        ),
        pytest.param(
            "apps/v1", "Deployment", {"preconditions": {"uid": "u1"}}, id="deployment-default"
        ),
        pytest.param("v1", "Pod", {"preconditions": {"uid": "u1"}}, id="pod"),
    ],
)
async def test_delete_sends_uid_precondition(
    api_version: str, kind: str, expected_body: dict[str, Any]
) -> None:
    kube = _Recorder()
    await kube.delete(api_version, kind, "ns", "x", "u1")
    [(method, _, body)] = kube.calls
    assert (method, body) == ("delete", expected_body)


async def test_delete_of_a_gone_object_is_success_but_other_errors_raise() -> None:
    await _Recorder(fail_with=404).delete("batch/v1", "Job", "ns", "x", "u1")
    with pytest.raises(KubeError):
        await _Recorder(fail_with=409).delete("batch/v1", "Job", "ns", "x", "u1")


@pytest.mark.parametrize(
    ("status", "message", "terminating"),
    [
        pytest.param(
            403,
            'events "j.1" is forbidden: unable to create new content in namespace rl because it '
            "is being terminated",
            True,
            id="namespace-terminating",
        ),
        pytest.param(403, "forbidden: RBAC says no", False, id="plain-forbidden"),
        pytest.param(409, "being terminated", False, id="not-a-403"),
    ],
)
def test_a_terminating_namespace_is_told_apart(
    status: int, message: str, terminating: bool
) -> None:
    assert KubeError(status, message).namespace_terminating is terminating


class _NoNetwork:
    """Stands in for the dynamic client: any request that reaches it is recorded."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def request(self, method: str, path: str, **_: Any) -> Any:
        self.sent.append(method)
        raise AssertionError("sent")


@pytest.mark.parametrize("method", ["patch", "post", "delete", "put"])
async def test_a_replica_that_may_not_write_sends_no_write(method: str) -> None:
    kube = Kube.__new__(Kube)
    kube._dynamic = _NoNetwork()  # type: ignore[assignment]
    kube.timeout, kube.may_write = 1.0, lambda: False
    with pytest.raises(KubeError, match="not the leader"):
        await kube.request(method, "/api/v1/namespaces/rl/pods/p")
    assert kube._dynamic.sent == []  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("fail_with", "sent"),
    [
        pytest.param(None, True, id="set"),
        pytest.param(404, False, id="pod-gone"),
        pytest.param(409, False, id="lost-a-race"),
    ],
)
async def test_a_pod_condition_is_a_strategic_merge_of_its_status(
    fail_with: int | None, sent: bool
) -> None:
    kube = _Recorder(fail_with=fail_with)
    condition = {"type": "rljob.io/policy-current", "status": "True"}

    assert await kube.set_pod_condition("rl", "e-0", condition) is sent

    [(method, path, body)] = kube.calls
    assert (method, path) == ("patch", "/api/v1/namespaces/rl/pods/e-0/status")
    assert body == {"status": {"conditions": [condition]}}


async def test_a_pod_condition_refused_otherwise_raises() -> None:
    with pytest.raises(KubeError):
        await _Recorder(fail_with=500).set_pod_condition("rl", "e-0", {"type": "x"})


async def test_the_api_client_does_not_read_proxies_or_netrc_per_request(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    api = await connect(str(kubeconfig))
    session = api.rest_client._create_pool_manager()  # what its first request would open
    try:
        assert session.trust_env is False
    finally:
        await session.close()
        await api.close()  # type: ignore[no-untyped-call]
