"""What a simulated driver needs of the API server: an rljob.sdk.EngineRoster under an identity
of its own, and the bed's way of failing a trainer container with torch's NCCL watchdog abort.

The roster reads the job as a trainer's ServiceAccount would (docs/weight-sync.md): the
simulator, with the bed's admin credentials, creates a ServiceAccount `rljob-sim-driver` in the
job's namespace, a Role with what the chart's workload-reader ClusterRole grants (get, list,
watch RLJobs) and a RoleBinding, and hands the roster that account's tokens. The NCCL failure is
the annotations a kwok stage turns into a terminated container (rljob.dev's kwok-stages.yaml),
with the watchdog message the bed's other NCCL tests use (tests/integration/rljobs.py), its
operation a broadcast."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rljob.dev.kubeapi import ApiError, KubeApi
from rljob.sdk.roster import Engine, EngineRoster

ACCOUNT = "rljob-sim-driver"
TOKEN_SECONDS = 3600
READER_RULES = [
    {"apiGroups": ["rljob.io"], "resources": ["rljobs"], "verbs": ["get", "list", "watch"]}
]
NCCL_WATCHDOG = (
    "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, "
    "OpType=BROADCAST) ran for 600000 milliseconds before timing out."
)
NCCL_FAILURE = {
    "sim.rljob.io/fail-exit-code": "1",
    "sim.rljob.io/fail-reason": "Error",
    "sim.rljob.io/fail-message": NCCL_WATCHDOG,
}
FIELD_MANAGER = "rljob-sim"
ROLE_API = "rbac.authorization.k8s.io"
Callbacks = dict[str, Callable[[str], None]]


def _reader_objects(namespace: str) -> list[tuple[str, dict[str, Any]]]:
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    meta = {"name": ACCOUNT, "namespace": namespace}
    return [
        (
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{ACCOUNT}",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        ),
        (
            f"{rbac}/roles/{ACCOUNT}",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": meta,
                "rules": READER_RULES,
            },
        ),
        (
            f"{rbac}/rolebindings/{ACCOUNT}",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": meta,
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": ACCOUNT,
                },
                "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}],
            },
        ),
    ]


def reader_token(api: KubeApi, namespace: str) -> str:
    """A token of the namespace's driver account, which may read the namespace's RLJobs."""
    for path, body in _reader_objects(namespace):
        api.apply(path, body, field_manager=FIELD_MANAGER)
    token: str = api.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{ACCOUNT}/token",
        {"spec": {"expirationSeconds": TOKEN_SECONDS}},
    )["status"]["token"]
    return token


def roster_factory(api: KubeApi) -> Callable[[str, str, Callbacks], EngineRoster]:
    """Builds EngineRosters for the simulator's drivers against `api`'s server."""

    def build(
        namespace: str, job: str, callbacks: dict[str, Callable[[str], None]]
    ) -> EngineRoster:
        def by_pod(event: str) -> Callable[[Engine], None]:
            return lambda engine: callbacks[event](engine.pod)

        return EngineRoster(
            job,
            namespace,
            on_join=by_pod("join"),
            on_serving=by_pod("serving"),
            on_drain=by_pod("drain"),
            on_leave=by_pod("leave"),
            api_server=api.creds.server,
            token=reader_token(api, namespace),
            ca_file=api.creds.ca_file,
            timeout=10.0,
        )

    return build


def trainer_failer(api: KubeApi) -> Callable[[str, str], None]:
    """Fails a trainer pod's container with the NCCL watchdog abort (a kwok stage does it)."""

    def fail(namespace: str, pod: str) -> None:
        try:
            api.merge_patch(
                f"/api/v1/namespaces/{namespace}/pods/{pod}",
                {"metadata": {"annotations": NCCL_FAILURE}},
            )
        except ApiError as exc:
            if exc.status != 404:  # gone already: nothing to fail
                raise

    return fail
