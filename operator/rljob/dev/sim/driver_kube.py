"""What a simulated driver needs of the API server: an rljob.sdk.EngineRoster under an identity
of its own, and the bed's way of failing a trainer container with torch's NCCL watchdog abort;
for a slot driver, the job's slot Services, their EndpointSlices and a failure with slime's
exception.

The roster reads the job as a trainer's ServiceAccount would (docs/weight-sync.md): the
simulator, with the bed's admin credentials, creates a ServiceAccount `rljob-sim-driver` in the
job's namespace, a Role with what the chart's workload-reader ClusterRole grants (get, list,
watch RLJobs) and a RoleBinding, and hands the roster that account's tokens. The NCCL failure is
the annotations a kwok stage turns into a terminated container (rljob.dev's kwok-stages.yaml),
with the watchdog message the bed's other NCCL tests use (tests/integration/rljobs.py), its
operation a broadcast."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

from rljob.dev.kubeapi import ApiError, KubeApi
from rljob.dev.sim.pods import JOB_LABEL, ROLE_LABEL
from rljob.dev.sim.slot_driver import (
    SERVICE_NAME_LABEL,
    SlotAddress,
    ready_pods,
    ready_pods_by_selector,
)
from rljob.sdk.roster import Engine, EngineRoster

log = logging.getLogger("rljob.dev.sim")

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
        _fail(api, namespace, pod, NCCL_FAILURE)

    return fail


def _fail(api: KubeApi, namespace: str, pod: str, annotations: dict[str, str]) -> None:
    try:
        api.merge_patch(
            f"/api/v1/namespaces/{namespace}/pods/{pod}", {"metadata": {"annotations": annotations}}
        )
    except ApiError as exc:
        if exc.status != 404:  # gone already: nothing to fail
            raise


SLOT_SERVICE = re.compile(r"-rollout-(\d+)$")  # <job>-rollout-<k> (reconcile.names.rollout_slot)


class KubeSlots:
    """A slot driver's reads with the simulator's credentials: the slot Services a trainer is
    given (RLJOB_ROLLOUT_SLOT_ADDRESSES) and the ready endpoints kube-proxy routes them on. Those
    come from the Services' EndpointSlices; a cluster holding none for them (the bed runs no
    EndpointSlice controller: rljob.dev.components) gets them worked out from the pods and the
    Services' selectors as that controller would (slot_driver.ready_pods_by_selector)."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self.sources: dict[str, str] = {}  # namespace -> "EndpointSlices" or "pods"

    def slot_addresses(self, namespace: str, job: str) -> list[SlotAddress]:
        """The job's slot Services by slot, each as <svc>.<ns>.svc:<port>."""
        found: list[tuple[int, SlotAddress]] = []
        for service in self._services(namespace, job):
            name = str(service["metadata"]["name"])
            spec = service.get("spec") or {}
            slot = SLOT_SERVICE.search(name)
            if slot is None or spec.get("clusterIP") == "None":
                continue
            port = next((p.get("port") for p in spec.get("ports") or []), 0)
            found.append((int(slot.group(1)), SlotAddress(name, f"{name}.{namespace}.svc:{port}")))
        return [address for _, address in sorted(found, key=lambda pair: pair[0])]

    def ready_endpoints(
        self, namespace: str, services: Sequence[str]
    ) -> dict[str, tuple[str, ...]]:
        """The ready pods behind each Service now."""
        if self.sources.get(namespace) != "pods":
            slices = self._endpoint_slices(namespace, services)
            if slices or namespace in self.sources:
                self.sources[namespace] = "EndpointSlices"
                return ready_pods(slices, services)
            self.sources[namespace] = "pods"
            log.info("%s: no EndpointSlices: slot endpoints worked out from pods", namespace)
        return self._from_pods(namespace, services)

    def _services(self, namespace: str, job: str) -> list[dict[str, Any]]:
        selector = quote(f"{JOB_LABEL}={job},{ROLE_LABEL}=rollout")
        path = f"/api/v1/namespaces/{namespace}/services?labelSelector={selector}"
        items: list[dict[str, Any]] = self.api.get(path).get("items", [])
        return items

    def _endpoint_slices(self, namespace: str, services: Sequence[str]) -> list[dict[str, Any]]:
        selector = quote(f"{SERVICE_NAME_LABEL} in ({','.join(services)})")
        path = (
            f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
            f"?labelSelector={selector}&resourceVersion=0"
        )
        items: list[dict[str, Any]] = self.api.get(path).get("items", [])
        return items

    def _from_pods(self, namespace: str, services: Sequence[str]) -> dict[str, tuple[str, ...]]:
        wanted = set(services)
        listed = self.api.get(f"/api/v1/namespaces/{namespace}/services?resourceVersion=0")
        chosen = [s for s in listed.get("items", []) if s["metadata"]["name"] in wanted]
        pods = self.api.get(f"/api/v1/namespaces/{namespace}/pods?resourceVersion=0")
        ready = ready_pods_by_selector(chosen, pods.get("items", []))
        return {service: ready.get(service, ()) for service in services}

    def fail_process(self, namespace: str, pod: str, message: str) -> None:
        """Fails the trainer pod's container with `message` (slime's exception), exit 1."""
        annotations = {**NCCL_FAILURE, "sim.rljob.io/fail-message": message[:1000]}
        _fail(self.api, namespace, pod, annotations)
