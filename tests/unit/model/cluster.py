"""An in-memory Kubernetes: an API server shaped like rljob.adapters.kube.Kube (so it stands in
for it), the controllers behind it (Deployment, Job, garbage collector, a kubelet per node) as
explicit steps, a watch-fed index that can lag, and the faults a real cluster produces.

What it keeps of the real thing:
- every write bumps one global resourceVersion; a merge patch carrying a stale resourceVersion
  and a delete with a wrong uid precondition answer 409, a missing object 404;
- server-side apply creates or replaces what our field manager applied (spec, labels,
  annotations), drops what it applied before and no longer applies, keeps what other managers
  wrote (a roll's template annotation) and the status; a Job's template is immutable (422);
- spec changes bump metadata.generation; a Deployment's status (observedGeneration,
  updatedReplicas) is the controller's and stays stale until its next step;
- Jobs delete with Foreground propagation wait for their pods; the API's default for Jobs
  orphans them; other kinds delete in the background and the collector follows;
- a deleted pod with a node is terminating until its kubelet confirms (never while the node is
  NotReady) or a delete with grace 0 removes it; a Job notices pods that ended or vanished;
- the scheduler places a pod on a Ready node its required node affinity admits, the most
  preferred then the least loaded (matchFields on metadata.name: how suspect nodes are avoided).
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import hashlib
import json
import random
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from rljob.adapters.kube import Kube, KubeError
from rljob.adapters.observe import (
    JobKey,
    job_key,
    observed_from,
    summarize_child,
    summarize_pod,
    workload_owner,
)
from rljob.api import API_VERSION, KIND, PLURAL
from rljob.reconcile.admission import Flavor
from rljob.reconcile.observed import Observed, ObservedChild, ObservedPod
from rljob.vocabulary.labels import (
    ATTEMPT_LABEL,
    COMPLETION_INDEX_ANNOTATION,
    JOB_LABEL,
    MANAGED_BY_LABEL,
    ROLE_LABEL,
)

JSON = dict[str, Any]
Ref = tuple[str, str, str]  # (kind, namespace, name)

NAMESPACE = "rl"
T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
FOREGROUND = "foregroundDeletion"
TEMPLATE_HASH_LABEL = "pod-template-hash"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
TRAINER_CONTAINER = "trainer"
WATCHED_KINDS = ("RLJob", "Deployment", "Job", "Service", "Pod", "Workload")
CHILD_KINDS = ("Deployment", "Job", "Service")
# The journaled actions (status.inFlight.kind) that restart something, the policy's or the user's.
RESTART_KINDS = frozenset(
    {"RestartPod", "RestartRole", "RestartRoleInTurn", "RestartTrainerGang", "RestartJob"}
)
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what Kubernetes' generateName draws from
_PLURALS = {
    "deployments": ("apps/v1", "Deployment"),
    "jobs": ("batch/v1", "Job"),
    "services": ("v1", "Service"),
    "pods": ("v1", "Pod"),
    "events": ("v1", "Event"),
    PLURAL: (API_VERSION, KIND),
    "workloads": ("kueue.x-k8s.io/v1beta2", "Workload"),  # with --kueue (model/queueing.py)
}
_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+/[^/]+))/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>status))?$"
)
_NODE_PATH = re.compile(r"^/api/v1/nodes/(?P<name>[^/?]+)$")
# The ResourceFlavors a Kueue in the model admits on (the fake scheduler ignores node labels).
FLAVORS = {"h100": Flavor({"gpu.type": "h100"}, ({"key": "gpu", "operator": "Exists"},))}
_GENERATION_KINDS = frozenset({"RLJob", "Deployment", "Job", "Workload"})
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
PODGC_QUARANTINE = dt.timedelta(seconds=40)  # pkg/controller/podgc/gc_controller.go @v1.36.3


T = TypeVar("T")
_SCALARS = (str, int, float, bool, type(None))


def clone(value: T) -> T:
    """A deep copy of JSON-shaped data (dicts, lists, scalars): the model copies objects on every
    read and write, and copy.deepcopy's bookkeeping was a quarter of its run time; anything else
    goes to copy.deepcopy."""
    if type(value) in _SCALARS:  # most leaves: one exact-type test, not three isinstance
        return value
    copied: Any = value
    if isinstance(value, dict):
        copied = {key: clone(item) for key, item in value.items()}
    elif isinstance(value, list):
        copied = [clone(item) for item in value]
    elif not isinstance(value, _SCALARS):
        copied = copy.deepcopy(value)
    return cast(T, copied)


class ProcessDied(BaseException):
    """The operator process died before this write reached the API server (BaseException:
    no `except Exception` in the operator may swallow it)."""


@dataclass
class Clock:
    """The one clock of the model: the cluster's timestamps and the operator's `now`."""

    now: dt.datetime = T0

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)

    def time(self) -> float:
        return self.now.timestamp()

    def monotonic(self) -> float:
        return (self.now - T0).total_seconds() + 1000.0  # arbitrary origin, like the real one


@dataclass(frozen=True)
class Write:
    """One request that changed (or tried to change) the cluster."""

    seq: int
    actor: str  # "operator#<n>", "user" or "controller"
    verb: str  # create, apply, patch, patch_status, delete, post
    kind: str
    name: str
    uid: str  # the object's (for a delete: the target's; "" when there was none)
    code: int  # the HTTP status answered
    in_flight: str | None  # the owning RLJob's status.inFlight.id when the request arrived
    detail: Mapping[str, Any] = field(default_factory=dict)


def _stamp(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_KUBELETS = ("PodScheduled", "ContainersReady", "Ready")  # the conditions the kubelet owns


def _gates_open(pod: Mapping[str, Any]) -> bool:
    """Every readiness gate of the pod has its condition True."""
    gates = [g["conditionType"] for g in pod["spec"].get("readinessGates") or []]
    conditions = {c["type"]: c.get("status") for c in pod["status"].get("conditions") or []}
    return all(conditions.get(gate) == "True" for gate in gates)


def _merge_conditions(status: JSON, patch: JSON) -> JSON:
    """A pod status's strategic merge patch: conditions merge by type, the rest as JSON."""
    merged: JSON = _merge_patch(status, {k: v for k, v in patch.items() if k != "conditions"})
    conditions = [clone(c) for c in status.get("conditions") or []]
    for condition in patch.get("conditions") or []:
        conditions = [c for c in conditions if c["type"] != condition["type"]]
        conditions.append(clone(condition))
    merged["conditions"] = conditions
    return merged


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


def _apply_merge(live: Any, before: Any, applied: Any) -> Any:
    """Server-side apply for one manager: what it applies wins, what it applied before and no
    longer applies goes, what others wrote stays (lists are atomic)."""
    if not isinstance(applied, dict) or not isinstance(live, dict):
        return clone(applied)
    previous = before if isinstance(before, dict) else {}
    result = {key: value for key, value in live.items() if key in applied or key not in previous}
    for key, value in applied.items():
        result[key] = _apply_merge(live.get(key), previous.get(key), value)
    return result


def _condition(body: Mapping[str, Any], kind: str) -> JSON | None:
    conditions = (body.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind and c["status"] == "True"), None)


def _node_affinity(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((pod["spec"].get("affinity") or {}).get("nodeAffinity")) or {}


def _matches(term: Mapping[str, Any], node: str) -> bool:
    """A node selector term's matchFields on metadata.name (all ANDed); other keys match."""
    for requirement in term.get("matchFields") or []:
        inside = node in requirement.get("values", [])
        if requirement.get("key") == "metadata.name" and inside != (
            requirement.get("operator") == "In"
        ):
            return False
    return True


def _admits(pod: Mapping[str, Any], node: str) -> bool:
    required = _node_affinity(pod).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(_matches(term, node) for term in terms)  # terms are ORed


def _preference(pod: Mapping[str, Any], node: str) -> int:
    preferred = _node_affinity(pod).get("preferredDuringSchedulingIgnoredDuringExecution") or []
    return sum(t["weight"] for t in preferred if _matches(t.get("preference") or {}, node))


def _terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _deleting(body: Mapping[str, Any]) -> bool:
    return bool(body["metadata"].get("deletionTimestamp"))


def _owner_uid(body: Mapping[str, Any]) -> str | None:
    owners = body["metadata"].get("ownerReferences") or []
    return next((str(o["uid"]) for o in owners if o.get("controller")), None)


def _ready(pod: Mapping[str, Any]) -> bool:
    return _condition(pod, "Ready") is not None


def _error(status: int, message: str) -> KubeError:
    return KubeError(status, message)


class Cluster(Kube):
    """The API server, its controllers and its nodes. The Kube-shaped methods are the
    operator's entry: its writes are logged under `actor` and suffer the injected faults."""

    def __init__(self, clock: Clock | None = None, *, nodes: int = 4, seed: int = 0) -> None:
        # Not Kube.__init__: there is no API client; the attributes it sets are given here.
        self.timeout = 10.0
        self.may_write = lambda: True
        self.clock = clock or Clock()
        self.rng = random.Random(seed)
        self.objects: dict[Ref, JSON] = {}
        self.revision = 0
        self.nodes: dict[str, bool] = {f"gpu-{i}": True for i in range(nodes)}  # name -> Ready
        self.node_since: dict[str, dt.datetime] = {}  # name -> when its Ready condition changed
        self.out_of_service: set[str] = set()  # nodes tainted node.kubernetes.io/out-of-service
        self.gone_nodes: dict[str, dt.datetime] = {}  # Node objects deleted, and when
        # Roles whose pods created from now on never start (an image that does not pull).
        self.unstartable: dict[str, dt.datetime] = {}
        self.log: list[Write] = []
        self.actor = "operator"
        self.history: dict[str, list[tuple[Ref, JSON | None]]] = {k: [] for k in WATCHED_KINDS}
        self.index = Index(self)
        self._applied: dict[Ref, JSON] = {}  # what our field manager last applied, per object
        self._lost: dict[str, list[str]] = {}  # Job uid -> its pods that vanished unfinished
        self._counted: set[str] = set()  # uids of ended pods their Job has counted
        self.controllers: dict[str, str] = {}  # uid -> its controller's uid, as first stored
        self._live_uids: set[str] = set()  # of every stored object
        self._status_conflicts = 0
        self._write_errors: list[int] = []
        self._writes_until_death: int | None = None
        # The operator's leader Lease: its holder's identity (None: no leader election), and
        # the operator writes that arrived from a replica not holding it.
        self.lease_holder: str | None = None
        self.unleased_writes: list[str] = []
        self._lease_moves: tuple[int, str] | None = None  # (writes before it moves, new holder)
        # Called with (actor, the pod as it was) when a delete of a pod is accepted.
        self.pod_delete_observers: list[Callable[[str, JSON], None]] = []
        # Called with the RLJob as stored after each status write.
        self.status_observers: list[Callable[[JSON], None]] = []
        # Called with (verb, ref) as an operator write arrives, before it changes anything, and
        # with its logged Write (None: none logged) once it is done.
        self.arrival_observers: list[Callable[[str, Ref], None]] = []
        self.write_observers: list[Callable[[Write | None], None]] = []
        self._arrived_at: int | None = None  # the log's length as the write under way arrived
        self._ips = 0  # pod IPs handed out

    # -- the Kube adapter's methods (the operator's side) --------------------------------------

    async def close(self) -> None:
        return None

    async def request(
        self,
        method: str,
        path: str,
        body: JSON | None = None,
        *,
        content_type: str | None = None,
        **params: Any,
    ) -> JSON:
        with self._operator_write():
            return self._serve(method.lower(), path, body, content_type, self.actor)

    async def apply(self, body: JSON) -> JSON:
        with self._operator_write():
            return self._apply(body, self.actor)

    async def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        uid: str,
        *,
        grace_period_seconds: int | None = None,
    ) -> None:
        propagation = "Foreground" if kind == "Job" else None
        with self._operator_write(), _absent_ok():
            self._delete(
                (kind, namespace, name), self.actor, uid=uid, propagation=propagation,
                grace=grace_period_seconds,
            )  # fmt: skip

    async def patch_status(
        self, namespace: str, name: str, status: JSON, resource_version: str | None = None
    ) -> JSON:
        patch: JSON = {"status": status}
        if resource_version:
            patch["metadata"] = {"resourceVersion": resource_version}
        with self._operator_write():
            return self._patch((KIND, namespace, name), patch, self.actor, status_only=True)

    @contextlib.contextmanager
    def _operator_write(self) -> Iterator[None]:
        """Tells the write observers about the operator's write once it is done, whatever the
        API answered (a write that never arrived, a read, tells nothing)."""
        try:
            yield
        finally:
            start, self._arrived_at = self._arrived_at, None
            if start is not None:
                write = self.log[start] if len(self.log) > start else None
                for observer in self.write_observers:
                    observer(write)

    def _arrives(self, verb: str, ref: Ref) -> None:
        self._arrived_at = len(self.log)
        for observer in self.arrival_observers:
            observer(verb, ref)

    # -- faults --------------------------------------------------------------------------------

    def conflict_next_status_writes(self, count: int = 1) -> None:
        """The next `count` status patches answer 409 (another writer got there first)."""
        self._status_conflicts += count

    def fail_next_writes(self, count: int = 1, status: int = 500) -> None:
        """The next `count` operator writes answer `status` without changing anything."""
        self._write_errors.extend([status] * count)

    def die_before_write(self, writes: int) -> None:
        """The operator process dies after `writes` more writes: the next one raises
        ProcessDied and never arrives."""
        self._writes_until_death = writes

    def move_lease_after_writes(self, writes: int, holder: str) -> None:
        """The Lease goes to `holder` once `writes` more operator writes arrived (0: now): the
        writer stalled past the lease duration right after its last one."""
        if writes <= 0:
            self.lease_holder, self._lease_moves = holder, None
        else:
            self._lease_moves = (writes, holder)

    def survive(self) -> None:
        self._writes_until_death = None

    def _faults(self, actor: str, verb: str, ref: Ref) -> None:
        """The injected faults, for the operator's writes only; first the Kube adapter's own
        guard (`may_write`, the leadership's): a replica that is not acting sends nothing."""
        if actor != self.actor:
            return
        if not self.may_write():
            raise _error(0, f"not the leader: {verb} {ref[0]} {ref[2]} not sent")
        if self._writes_until_death is not None:
            if self._writes_until_death <= 0:
                self._writes_until_death = None
                raise ProcessDied(f"the operator died before {verb} {ref[0]} {ref[2]}")
            self._writes_until_death -= 1
        self._arrives(verb, ref)
        if self._write_errors:
            status = self._write_errors.pop(0)
            uid = (self.objects.get(ref) or {"metadata": {}})["metadata"].get("uid", "")
            self._log(actor, verb, ref, uid, status)
            raise _error(status, "Internal error occurred: injected fault")

    # -- the user's side -----------------------------------------------------------------------

    def create(self, body: JSON, actor: str = "user") -> JSON:
        """kubectl create: a new object (a client-set uid, resourceVersion or status is ignored)."""
        body = clone(body)
        body.pop("status", None)
        meta = body["metadata"]
        for server_field in ("uid", "resourceVersion", "generation", "creationTimestamp"):
            meta.pop(server_field, None)
        ref = (body["kind"], meta.get("namespace") or NAMESPACE, meta["name"])
        return self._create_new(ref, body, actor, "create")

    def edit(self, kind: str, name: str, mutate: Callable[[JSON], object]) -> JSON:
        """kubectl edit: a read-modify-write of metadata and spec (never status)."""
        ref = (kind, NAMESPACE, name)
        live = self._get(ref)
        edited = clone(live)
        mutate(edited)
        edited.pop("status", None)
        if "status" in live:
            edited["status"] = clone(live["status"])
        self._replace(ref, edited)
        self._log("user", "update", ref, live["metadata"]["uid"], 200)
        return clone(self.objects[ref])

    def remove(self, kind: str, name: str, propagation: str | None = None) -> None:
        """kubectl delete (background propagation, like kubectl's default cascade)."""
        with _absent_ok():
            self._delete((kind, NAMESPACE, name), "user", propagation=propagation or "Background")

    # -- what the nodes do ---------------------------------------------------------------------

    def fail_pod(self, name: str, exit_code: int, reason: str = "Error", message: str = "") -> None:
        """The pod's container ends with this exit code: the pod is Failed."""
        self._end_pod(name, "Failed", exit_code, reason, message)

    def succeed_pod(self, name: str) -> None:
        self._end_pod(name, "Succeeded", 0, "Completed", "")

    def crash_container(
        self, name: str, reason: str = "OOMKilled", exit_code: int = 137, message: str = ""
    ) -> None:
        """The container restarts in place (restartPolicy Always): restartCount + 1, the end in
        lastState, not ready until its kubelet starts it again."""
        ref = ("Pod", NAMESPACE, name)
        pod = clone(self._get(ref))
        status = pod["status"]
        for container in status["containerStatuses"]:
            container["restartCount"] += 1
            container["lastState"] = {"terminated": self._terminated(exit_code, reason, message)}
            container["state"] = {"waiting": {"reason": "ContainerCreating"}}
            container["ready"] = False
        # The kubelet owns Ready, not others' conditions: a readiness gate's stays as it was.
        others = [c for c in status.get("conditions") or [] if c["type"] not in _KUBELETS]
        status["conditions"] = [*self._pod_conditions(scheduled=True, ready=False), *others]
        self._put(ref, pod)

    def node_not_ready(self, node: str, *, evict: bool = True) -> None:
        """The node stops answering (its Ready turns Unknown): the node lifecycle controller
        sets its pods not ready; with `evict`, the taint manager deletes them (DisruptionTarget)
        once their toleration ends, and they stay terminating while the node is down."""
        if node not in self.nodes:
            return
        if self.nodes[node]:
            self.node_since[node] = self.clock.now
        self.nodes[node] = False
        for ref, live in self._pods_on(node):
            pod = clone(live)
            pod["status"]["conditions"] = [
                c for c in pod["status"]["conditions"] if c["type"] != "Ready"
            ] + [{"type": "Ready", "status": "False", "reason": "NodeNotReady"}]
            if evict and not _terminal(pod):
                pod["status"]["conditions"].append(
                    {"type": "DisruptionTarget", "status": "True",
                     "reason": "DeletionByTaintManager", "message": f"{node} is not ready"}
                )  # fmt: skip
            self._put(ref, pod)
            if evict and not _deleting(pod):
                self._delete(ref, "controller")

    def node_ready(self, node: str) -> None:
        """The node answers again (a person cleared its out-of-service taint after the repair)."""
        if node not in self.nodes:
            return
        if not self.nodes[node]:
            self.node_since[node] = self.clock.now
        self.nodes[node] = True
        self.out_of_service.discard(node)

    def node_deleted(self, node: str) -> None:
        """Its Node object is deleted (the machine is gone): PodGC force-deletes its pods once
        the name stayed absent for PODGC_QUARANTINE."""
        if self.nodes.pop(node, None) is not None:
            self.gone_nodes[node] = self.clock.now
            self.out_of_service.discard(node)

    def node_out_of_service(self, node: str) -> None:
        """A person or a remediator taints a node that does not answer out-of-service (it is
        powered off): PodGC force-deletes the pods terminating on it."""
        if node in self.nodes and not self.nodes[node]:
            self.out_of_service.add(node)

    def node_body(self, node: str) -> JSON:
        """The Node as the API serves it: its Ready condition (Unknown when it does not
        answer, as the node lifecycle controller sets it) and its taints."""
        if node not in self.nodes:
            raise _error(404, f'nodes "{node}" not found')
        since = _stamp(self.node_since.get(node, T0))
        taints = [{"key": OUT_OF_SERVICE_TAINT, "effect": "NoExecute"}] * (
            node in self.out_of_service
        )
        ready = "True" if self.nodes[node] else "Unknown"
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node},
            "spec": {"taints": taints},
            "status": {
                "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": since}]
            },
        }

    def kubelet_confirm(self, name: str) -> bool:
        """The pod's kubelet confirms its deletion: the pod goes (its Job, if it was still
        running, counts it as failed). False while its node is down."""
        ref = ("Pod", NAMESPACE, name)
        pod = self.objects.get(ref)
        if pod is None or not _deleting(pod):
            return False
        node = pod["spec"].get("nodeName")
        if node in self.gone_nodes or not self.nodes.get(node, True):
            return False
        self._remove(ref)
        return True

    def kubelet_confirm_all(self) -> int:
        """Every terminating pod on a Ready node goes; returns how many."""
        names = [ref[2] for ref, pod in self._items("Pod") if _deleting(pod)]
        return sum(self.kubelet_confirm(name) for name in names)

    # -- the controllers -----------------------------------------------------------------------

    def step_controllers(self) -> None:
        """One round of every controller: kubelets start pods, the Job and Deployment
        controllers reconcile, the garbage collector follows owners and foreground deletions."""
        self._kubelets()
        for ref, job in self._items("Job"):
            self._step_job(ref, job)
        for ref, deployment in self._items("Deployment"):
            self._step_deployment(ref, deployment)
        self._collect_pods()
        self._collect_garbage()

    def _collect_pods(self) -> None:
        """PodGC: a pod whose Node is gone (after the quarantine), or terminating on an
        out-of-service node, ends Failed (DisruptionTarget DeletionByPodGC for the first) and is
        force-deleted; the Job's tracking finalizer keeps it one round, until its Job counted it
        (pkg/controller/podgc/gc_controller.go @v1.36.3)."""
        for ref, pod in self._items("Pod"):
            node = pod["spec"].get("nodeName")
            gone = self.gone_nodes.get(node)
            orphaned = gone is not None and self.clock.now - gone >= PODGC_QUARANTINE
            released = node in self.out_of_service and _deleting(pod)
            if not (orphaned or released):
                continue
            if _terminal(pod):
                if not self._job_owned(pod):  # a Job's pod goes once its Job counted it
                    self._remove(ref)
                continue
            failed = clone(pod)
            failed["status"]["phase"] = "Failed"
            if orphaned:
                failed["status"]["conditions"].append(
                    {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
                     "message": "PodGC: node no longer exists"}
                )  # fmt: skip
            failed["metadata"].setdefault("deletionTimestamp", _stamp(self.clock.now))
            self._put(ref, failed)

    def _kubelets(self) -> None:
        ready_nodes = sorted(n for n, ok in self.nodes.items() if ok)
        for ref, pod in self._items("Pod"):
            if _deleting(pod) or _terminal(pod) or self._never_starts(pod):
                continue
            node = pod["spec"].get("nodeName")
            if node is None:
                node = self._schedule(pod, ready_nodes)
                if node is None:
                    self._unschedulable(ref, pod)
                    continue
            gates_open = _gates_open(pod)
            if not self.nodes.get(node, False) or self._as_started(pod, gates_open):
                continue
            started = clone(pod)
            started["spec"]["nodeName"] = node
            status = started["status"]
            status["phase"] = "Running"
            status.setdefault("podIP", self._pod_ip())
            # Ready only once every readiness gate's condition is True (others' conditions stay).
            others = [c for c in status.get("conditions") or [] if c["type"] not in _KUBELETS]
            status["conditions"] = [
                *self._pod_conditions(scheduled=True, ready=gates_open, containers_ready=True),
                *others,
            ]
            for container in status["containerStatuses"]:
                # A readiness change leaves a running container as it is: only a start stamps it.
                if "running" not in (container.get("state") or {}):
                    container["state"] = {"running": {"startedAt": _stamp(self.clock.now)}}
                container["ready"] = True
            self._put(ref, started)

    @staticmethod
    def _as_started(pod: Mapping[str, Any], gates_open: bool) -> bool:
        """Running with every container running and ready, Ready as its gates say: nothing for
        its kubelet to do (a container that crashed starts again, whatever its gates say)."""
        running = pod["status"]["phase"] == "Running" and pod["spec"].get("nodeName")
        containers = pod["status"].get("containerStatuses") or []
        started = all("running" in (c.get("state") or {}) for c in containers)
        return bool(running) and started and _ready(pod) == gates_open

    def _pod_ip(self) -> str:
        self._ips += 1
        return f"10.244.{self._ips // 250}.{self._ips % 250 + 1}"

    def _schedule(self, pod: JSON, ready_nodes: list[str]) -> str | None:
        """A Ready node the pod's required node affinity admits: the most preferred, then the
        least loaded (kube-scheduler's NodeAffinity filter and score, by node name only)."""
        fitting = [node for node in ready_nodes if _admits(pod, node)]
        load = {node: 0 for node in fitting}
        for _, other in self._items("Pod"):
            node = other["spec"].get("nodeName")
            if node in load and not _terminal(other):
                load[node] += 1
        return min(fitting, key=lambda n: (-_preference(pod, n), load[n], n), default=None)

    def _never_starts(self, pod: JSON) -> bool:
        role = (pod["metadata"].get("labels") or {}).get("rljob.io/role", "")
        since = self.unstartable.get(role)
        born = dt.datetime.fromisoformat(
            pod["metadata"]["creationTimestamp"].replace("Z", "+00:00")
        )
        return since is not None and born >= since and pod["status"]["phase"] != "Running"

    def _unschedulable(self, ref: Ref, pod: JSON) -> None:
        message = f"0/{len(self.nodes)} nodes are available: {len(self.nodes)} node(s) not ready"
        if (_condition(pod, "PodScheduled") or {}).get("message") == message:
            return
        pod = clone(pod)
        pod["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": message}
        ]  # fmt: skip
        self._put(ref, pod)

    def _step_job(self, ref: Ref, job: JSON) -> None:
        uid = job["metadata"]["uid"]
        done = _deleting(job) or _condition(job, "Complete") or _condition(job, "Failed")
        job = clone(job)
        conditions: list[JSON] = job.setdefault("status", {}).setdefault("conditions", [])
        if not done and not _condition(job, "FailureTarget"):
            why = self._job_failure(job, [p for _, p in self._owned(uid)])
            if why is not None:
                conditions.append(self._job_condition("FailureTarget", *why))
        self._release_counted(uid)
        if done:
            return
        pods = self._owned(uid)
        live = [(r, p) for r, p in pods if not _terminal(p)]
        target = _condition(job, "FailureTarget")
        if target is not None:
            for pod_ref, pod in live:
                if not _deleting(pod):
                    self._delete(pod_ref, "controller")
            if not live:
                failed = self._job_condition("Failed", target["reason"], target["message"])
                conditions.append(failed)
        else:
            self._run_indexes(job, pods, live)
        self._job_status(job)
        if job["status"] != self.objects[ref].get("status"):
            self._put(ref, job)

    def _release_counted(self, uid: str) -> None:
        """The tracking finalizer goes once the Job counted the pod: one round after it ended."""
        for pod_ref, pod in self._owned(uid):
            if not (_deleting(pod) and _terminal(pod)):
                continue
            if pod["metadata"]["uid"] in self._counted:
                self._remove(pod_ref)
            else:
                self._counted.add(pod["metadata"]["uid"])

    def _run_indexes(
        self, job: JSON, pods: list[tuple[Ref, JSON]], live: list[tuple[Ref, JSON]]
    ) -> None:
        """Completes the Job once every index succeeded, else starts the missing indexes."""
        done = {
            p["metadata"]["annotations"][COMPLETION_INDEX_ANNOTATION]
            for _, p in pods
            if p["status"]["phase"] == "Succeeded"
        }
        if len(done) >= job["spec"]["completions"]:
            if not live:
                job["status"]["conditions"].append(self._job_condition("Complete", "", ""))
            return
        taken = done | {p["metadata"]["annotations"][COMPLETION_INDEX_ANNOTATION] for _, p in live}
        for index in range(job["spec"]["completions"]):
            if str(index) not in taken:
                self._create_job_pod(job, index)

    def _job_status(self, job: JSON) -> None:
        uid = job["metadata"]["uid"]
        pods = [p for _, p in self._owned(uid)]
        active = [p for p in pods if not _terminal(p) and not _deleting(p)]
        job["status"].update(
            active=len(active),
            ready=sum(1 for p in active if _ready(p)),
            failed=sum(1 for p in pods if p["status"]["phase"] == "Failed")
            + len(self._lost.get(uid, [])),
            succeeded=sum(1 for p in pods if p["status"]["phase"] == "Succeeded"),
            terminating=sum(1 for p in pods if _deleting(p) and not _terminal(p)),
        )

    def _job_failure(self, job: JSON, pods: list[JSON]) -> tuple[str, str] | None:
        """(reason, message) of the Job's failure: a failed pod matching the podFailurePolicy
        (any non-zero exit fails the Job), or a pod lost unfinished (backoffLimit 0)."""
        for pod in pods:
            if pod["status"]["phase"] != "Failed":
                continue
            for container in pod["status"].get("containerStatuses") or []:
                code = ((container.get("state") or {}).get("terminated") or {}).get("exitCode")
                if code not in (None, 0):
                    message = (
                        f"Container {container['name']} for pod {NAMESPACE}/"
                        f"{pod['metadata']['name']} failed with exit code {code} matching "
                        "FailJob rule at index 0"
                    )
                    return "PodFailurePolicy", message
        # A pod failed with no exit code the policy matches (PodGC's): backoffLimit 0.
        lost = self._lost.get(job["metadata"]["uid"], []) + [
            p["metadata"]["name"] for p in pods if p["status"]["phase"] == "Failed"
        ]
        if lost:
            return "BackoffLimitExceeded", f"Job has reached the specified backoff limit: {lost[0]}"
        return None

    def _job_condition(self, kind: str, reason: str, message: str) -> JSON:
        now = _stamp(self.clock.now)
        return {"type": kind, "status": "True", "reason": reason, "message": message,
                "lastProbeTime": now, "lastTransitionTime": now}  # fmt: skip

    def _create_job_pod(self, job: JSON, index: int) -> None:
        meta = job["metadata"]
        template = clone(job["spec"]["template"])
        labels = {
            **(template["metadata"].get("labels") or {}),
            "job-name": meta["name"],
            "controller-uid": meta["uid"],
            INDEX_LABEL: str(index),
        }
        annotations = {
            **(template["metadata"].get("annotations") or {}),
            COMPLETION_INDEX_ANNOTATION: str(index),
        }
        spec = template["spec"]
        spec["hostname"] = f"{meta['name']}-{index}"
        self._create_pod(f"{meta['name']}-{index}-{self._suffix()}", job, labels, annotations, spec)

    def _step_deployment(self, ref: Ref, deployment: JSON) -> None:
        """maxSurge 0 rolling update: old pods go only while at most maxUnavailable replicas
        are unavailable; missing pods are replaced by pods of the current template."""
        if _deleting(deployment):
            return
        spec = deployment["spec"]
        replicas = int(spec.get("replicas", 1))
        strategy = (spec.get("strategy") or {}).get("rollingUpdate") or {}
        max_unavailable = max(1, int(strategy.get("maxUnavailable", 1)))
        current = self.template_hash(spec["template"])
        pods = [
            (r, p)
            for r, p in self._owned(deployment["metadata"]["uid"])
            if not _deleting(p) and not _terminal(p)
        ]
        # Unready and old pods go first.
        pods.sort(key=lambda rp: (_ready(rp[1]), rp[1]["metadata"]["labels"].get(
            TEMPLATE_HASH_LABEL) == current))  # fmt: skip
        for pod_ref, _ in pods[: max(0, len(pods) - replicas)]:
            self._delete(pod_ref, "controller")
        pods = pods[max(0, len(pods) - replicas) :]
        unavailable = replicas - sum(1 for _, p in pods if _ready(p))
        budget = max(0, max_unavailable - unavailable)
        old = [rp for rp in pods if rp[1]["metadata"]["labels"].get(TEMPLATE_HASH_LABEL) != current]
        for pod_ref, _ in old[:budget]:
            self._delete(pod_ref, "controller")
        active = len(pods) - min(budget, len(old))
        for _ in range(replicas - active):
            self._create_deployment_pod(deployment, current)
        status = self._deployment_status(deployment, current)
        if status != deployment.get("status"):
            updated = clone(deployment)
            updated["status"] = status
            self._put(ref, updated)

    def _deployment_status(self, deployment: JSON, current: str) -> JSON:
        pods = [
            p
            for _, p in self._owned(deployment["metadata"]["uid"])
            if not _deleting(p) and not _terminal(p)
        ]
        ready = sum(1 for p in pods if _ready(p))
        return {
            "observedGeneration": deployment["metadata"]["generation"],
            "replicas": len(pods),
            "updatedReplicas": sum(
                1 for p in pods if p["metadata"]["labels"].get(TEMPLATE_HASH_LABEL) == current
            ),
            "readyReplicas": ready,
            "availableReplicas": ready,
        }

    def _create_deployment_pod(self, deployment: JSON, template_hash: str) -> None:
        template = clone(deployment["spec"]["template"])
        labels = {**(template["metadata"].get("labels") or {}), TEMPLATE_HASH_LABEL: template_hash}
        annotations = dict(template["metadata"].get("annotations") or {})
        name = f"{deployment['metadata']['name']}-{template_hash}-{self._suffix()}"
        self._create_pod(name, deployment, labels, annotations, template["spec"])

    def _create_pod(
        self, name: str, owner: JSON, labels: JSON, annotations: JSON, spec: JSON
    ) -> None:
        meta = owner["metadata"]
        body: JSON = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": owner["apiVersion"],
                        "kind": owner["kind"],
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": spec,
            "status": {
                "phase": "Pending",
                "conditions": [],
                "containerStatuses": [
                    {
                        "name": c.get("name", TRAINER_CONTAINER),
                        "restartCount": 0,
                        "ready": False,
                        "state": {"waiting": {"reason": "ContainerCreating"}},
                    }
                    for c in spec.get("containers") or [{}]
                ],
            },
        }
        ref = ("Pod", NAMESPACE, name)
        created = self._create(ref, body)
        self._log("controller", "create", ref, created["metadata"]["uid"], 201)

    def _collect_garbage(self) -> None:
        alive = {o["metadata"]["uid"] for o in self.objects.values()}
        for ref, body in list(self.objects.items()):
            if ref not in self.objects:
                continue
            owner = _owner_uid(body)
            if owner is not None and owner not in alive and not _deleting(body):
                self._delete(ref, "controller", propagation="Background")
        for ref, body in list(self.objects.items()):
            if FOREGROUND not in (body["metadata"].get("finalizers") or []):
                continue
            dependents = self._owned(body["metadata"]["uid"])
            for dependent_ref, dependent in dependents:
                if not _deleting(dependent):
                    self._delete(dependent_ref, "controller", propagation="Background")
            if not any(r in self.objects for r, _ in dependents):
                self._remove(ref)

    # -- the API server ----------------------------------------------------------------------------

    def _serve(
        self, verb: str, path: str, body: JSON | None, content_type: str | None, actor: str
    ) -> JSON:
        node = _NODE_PATH.match(path)
        if node is not None and verb == "get":
            return self.node_body(node["name"])
        match = _PATH.match(path.split("?", maxsplit=1)[0])
        if match is None or match["plural"] not in _PLURALS:
            raise _error(404, f"the server could not find the requested resource ({path})")
        kind = _PLURALS[match["plural"]][1]
        ref = (kind, match["ns"], match["name"] or "")
        if verb == "get":
            if match["name"]:
                return clone(self._get(ref))
            return {"items": [clone(b) for r, b in self._items(kind) if r[1] == ref[1]]}
        if verb == "post":
            return self._post(kind, match["ns"], body or {}, actor)
        if verb == "patch" and content_type == "application/apply-patch+yaml":
            return self._apply(body or {}, actor)
        if verb == "patch":
            return self._patch(ref, body or {}, actor, status_only=match["sub"] == "status")
        if verb == "delete":
            options = body or {}
            self._delete(
                ref, actor, uid=(options.get("preconditions") or {}).get("uid"),
                propagation=options.get("propagationPolicy"),
                grace=options.get("gracePeriodSeconds"),
            )  # fmt: skip
            return {"kind": "Status", "status": "Success"}
        raise _error(405, f"{verb.upper()} is not supported here")

    def _post(self, kind: str, namespace: str, body: JSON, actor: str) -> JSON:
        body = clone(body)
        meta = body.setdefault("metadata", {})
        if not meta.get("name"):
            meta["name"] = f"{meta.get('generateName', '')}{self._suffix(10)}"
        ref = (kind, namespace, meta["name"])
        self._faults(actor, "post", ref)
        return self._create_new(ref, body, actor, "post")

    def _create_new(self, ref: Ref, body: JSON, actor: str, verb: str) -> JSON:
        if ref in self.objects:
            self._log(actor, verb, ref, "", 409)
            raise _error(409, f'{ref[0].lower()}s "{ref[2]}" already exists')
        created = self._create(ref, body)
        self._log(actor, verb, ref, created["metadata"]["uid"], 201)
        return clone(created)

    def _apply(self, body: JSON, actor: str) -> JSON:
        meta = body["metadata"]
        ref = (body["kind"], meta.get("namespace") or NAMESPACE, meta["name"])
        self._faults(actor, "apply", ref)
        live = self.objects.get(ref)
        if live is None:
            created = self._create(ref, clone(body))
            self._applied[ref] = clone(body)
            self._log(actor, "apply", ref, created["metadata"]["uid"], 201, self._labels(body))
            return clone(created)
        before = self._applied.get(ref, {})
        merged = clone(live)
        for part in ("spec",):
            merged[part] = _apply_merge(live.get(part), before.get(part), body.get(part, {}))
        merged["metadata"] = _apply_merge(
            live["metadata"], before.get("metadata", {}), body["metadata"]
        )
        if ref[0] == "Job" and merged["spec"].get("template") != live["spec"].get("template"):
            self._log(actor, "apply", ref, live["metadata"]["uid"], 422)
            raise _error(422, f'Job.batch "{ref[2]}" is invalid: spec.template: field is immutable')
        self._applied[ref] = clone(body)
        self._replace(ref, merged)
        self._log(actor, "apply", ref, live["metadata"]["uid"], 200, self._labels(body))
        return clone(self.objects[ref])

    def _patch(self, ref: Ref, patch: JSON, actor: str, *, status_only: bool) -> JSON:
        verb = "patch_status" if status_only else "patch"
        self._faults(actor, verb, ref)
        live = self.objects.get(ref)
        if live is None:
            self._log(actor, verb, ref, "", 404)
            raise _error(404, f'{ref[0].lower()}s "{ref[2]}" not found')
        uid = live["metadata"]["uid"]
        precondition = (patch.get("metadata") or {}).get("uid")
        if precondition is not None and precondition != uid:
            self._log(actor, verb, ref, precondition, 409)
            raise _error(
                409,
                f"Precondition failed: UID in precondition: {precondition}, UID in object meta: "
                f"{uid}",
            )
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        stale = wanted is not None and wanted != live["metadata"]["resourceVersion"]
        if stale or (status_only and ref[0] == KIND and self._status_conflicts > 0):
            if not stale:
                self._status_conflicts -= 1
            self._log(actor, verb, ref, uid, 409)
            raise _error(
                409,
                f'Operation cannot be fulfilled on {ref[0].lower()}s "{ref[2]}": the object has '
                "been modified; please apply your changes to the latest version and try again",
            )
        if status_only and ref[0] == "Pod":  # a strategic merge: conditions by type
            status = _merge_conditions(live.get("status") or {}, patch.get("status") or {})
            patched = {**live, "status": status}
        elif status_only:
            status = _merge_patch(live.get("status") or {}, patch.get("status") or {})
            patched = {**live, "status": status}
        else:
            patch = clone({k: v for k, v in patch.items() if k != "status"})
            patch.get("metadata", {}).pop("resourceVersion", None)
            patched = _merge_patch(live, patch)
        self._replace(ref, patched)
        detail = self._patch_detail(patch, patched)
        if ref[0] == KIND:
            detail["trainer_failed"] = self._trainer_failed(patched["metadata"]["uid"])
        self._log(actor, verb, ref, uid, 200, detail)
        if status_only and ref[0] == KIND:
            for observer in self.status_observers:
                observer(self.objects[ref])
        return clone(self.objects[ref])

    def _delete(
        self,
        ref: Ref,
        actor: str,
        *,
        uid: str | None = None,
        propagation: str | None = None,
        grace: int | None = None,
    ) -> None:
        self._faults(actor, "delete", ref)
        live = self.objects.get(ref)
        detail = {"grace": grace, "propagation": propagation}
        if live is None:
            self._log(actor, "delete", ref, uid or "", 404, detail)
            raise _error(404, f'{ref[0].lower()}s "{ref[2]}" not found')
        actual = live["metadata"]["uid"]
        if uid is not None and uid != actual:
            self._log(actor, "delete", ref, uid, 409, detail)
            raise _error(
                409,
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}",
            )
        self._log(actor, "delete", ref, actual, 200, detail)
        if ref[0] == "Pod":
            for observer in self.pod_delete_observers:
                observer(actor, live)
            self._delete_pod(ref, live, grace)
            return
        policy = propagation or ("Orphan" if ref[0] == "Job" else "Background")
        if policy == "Foreground":
            if not _deleting(live):
                doomed = clone(live)
                doomed["metadata"]["deletionTimestamp"] = _stamp(self.clock.now)
                doomed["metadata"].setdefault("finalizers", []).append(FOREGROUND)
                self._put(ref, doomed)
            return
        if policy == "Orphan":
            for dependent_ref, dependent in self._owned(actual):
                orphan = clone(dependent)
                orphan["metadata"]["ownerReferences"] = []
                self._put(dependent_ref, orphan)
        self._remove(ref)

    def _delete_pod(self, ref: Ref, pod: JSON, grace: int | None) -> None:
        if grace == 0 or not pod["spec"].get("nodeName"):
            self._remove(ref)  # nothing runs it (unscheduled), or forced: gone at once
            return
        if not _deleting(pod):
            doomed = clone(pod)
            doomed["metadata"]["deletionTimestamp"] = _stamp(self.clock.now)
            self._put(ref, doomed)

    # -- storage -------------------------------------------------------------------------------

    def _create(self, ref: Ref, body: JSON) -> JSON:
        meta = body["metadata"]
        meta.update(
            name=ref[2],
            namespace=ref[1],
            uid=str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
            creationTimestamp=_stamp(self.clock.now),
        )
        if ref[0] in _GENERATION_KINDS:
            meta["generation"] = 1
        self._put(ref, body)
        return body

    def _replace(self, ref: Ref, body: JSON) -> None:
        live = self.objects[ref]
        meta = body["metadata"] = dict(body["metadata"])
        for server_field in ("uid", "creationTimestamp", "generation", "deletionTimestamp"):
            if server_field in live["metadata"]:
                meta[server_field] = live["metadata"][server_field]
        if ref[0] in _GENERATION_KINDS and body.get("spec") != live.get("spec"):
            meta["generation"] = live["metadata"]["generation"] + 1
        self._put(ref, body)

    def _put(self, ref: Ref, body: JSON) -> None:
        """Stores a new body (stored bodies are never changed in place: the history and the
        index share them)."""
        self.revision += 1
        body["metadata"] = {**body["metadata"], "resourceVersion": str(self.revision)}
        self.objects[ref] = body
        self._live_uids.add(body["metadata"]["uid"])
        if ref[0] in self.history:
            self.history[ref[0]].append((ref, body))
        if (owner := _owner_uid(body)) is not None:  # the first controller stays, orphaned or not
            self.controllers.setdefault(body["metadata"]["uid"], owner)

    def controlled_by(self, body: Mapping[str, Any], uid: str) -> bool:
        """Whether the object's controller chain (as it was when each link was stored) ends at
        `uid`: an RLJob's own children and pods, never a namesake's leftovers."""
        link = body["metadata"]["uid"]
        for _ in range(3):
            link = self.controllers.get(link, "")
            if link == uid:
                return True
            if not link:
                return False
        return False

    def orphaned(self, body: Mapping[str, Any]) -> bool:
        """Its controller is gone: the garbage collector removes it (a Deployment deleted by
        hand takes its pods with it), whoever asked for its delete."""
        owner = _owner_uid(body)
        return owner is not None and owner not in self._live_uids

    def role_child(self, kind: str, rljob_uid: str, role: str) -> Mapping[str, Any] | None:
        """That RLJob's own child of `kind` for `role`, whatever it is named."""
        return next(
            (
                body for _, body in self._items(kind)
                if (body["metadata"].get("labels") or {}).get(ROLE_LABEL) == role
                and self.controlled_by(body, rljob_uid)
            ),
            None,
        )  # fmt: skip

    def _remove(self, ref: Ref) -> None:
        body = self.objects.pop(ref)
        self._live_uids.discard(body["metadata"]["uid"])
        self.revision += 1
        self._applied.pop(ref, None)
        if ref[0] in self.history:
            self.history[ref[0]].append((ref, None))
        owner = _owner_uid(body)
        if ref[0] == "Pod" and owner is not None and not _terminal(body):
            self._lost.setdefault(owner, []).append(ref[2])  # a Job counts it as failed

    def _get(self, ref: Ref) -> JSON:
        live = self.objects.get(ref)
        if live is None:
            raise _error(404, f'{ref[0].lower()}s "{ref[2]}" not found')
        return live

    def _items(self, kind: str) -> list[tuple[Ref, JSON]]:
        return sorted((r, b) for r, b in self.objects.items() if r[0] == kind)

    def _owned(self, uid: str) -> list[tuple[Ref, JSON]]:
        return sorted((r, b) for r, b in self.objects.items() if _owner_uid(b) == uid)

    def _job_owned(self, pod: JSON) -> bool:
        owner = _owner_uid(pod)
        return any(
            ref[0] == "Job" and b["metadata"]["uid"] == owner for ref, b in self._items("Job")
        )

    def _pods_on(self, node: str) -> list[tuple[Ref, JSON]]:
        return [(r, p) for r, p in self._items("Pod") if p["spec"].get("nodeName") == node]

    def _end_pod(self, name: str, phase: str, exit_code: int, reason: str, message: str) -> None:
        ref = ("Pod", NAMESPACE, name)
        pod = clone(self._get(ref))
        status = pod["status"]
        status["phase"] = phase
        status["conditions"] = self._pod_conditions(scheduled=True, ready=False)
        for container in status["containerStatuses"]:
            container["state"] = {"terminated": self._terminated(exit_code, reason, message)}
            container["ready"] = False
        self._put(ref, pod)

    def _terminated(self, exit_code: int, reason: str, message: str) -> JSON:
        return {"exitCode": exit_code, "reason": reason, "message": message,
                "finishedAt": _stamp(self.clock.now)}  # fmt: skip

    @staticmethod
    def _pod_conditions(
        *, scheduled: bool, ready: bool, containers_ready: bool = False
    ) -> list[JSON]:
        """The kubelet's: Ready needs the containers ready and every readiness gate True."""
        return [
            {"type": "PodScheduled", "status": str(scheduled)},
            {"type": "ContainersReady", "status": str(containers_ready)},
            {"type": "Ready", "status": str(ready)},
        ]

    @staticmethod
    def template_hash(template: JSON) -> str:
        digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
        return digest[:10]

    def _suffix(self, length: int = 5) -> str:
        return "".join(self.rng.choice(_SUFFIX_ALPHABET) for _ in range(length))

    def _log(
        self,
        actor: str,
        verb: str,
        ref: Ref,
        uid: str,
        code: int,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        self.log.append(
            Write(len(self.log), actor, verb, ref[0], ref[2], uid, code, self._in_flight(ref),
                  {**(detail or {}), "at": self.clock.now})
        )  # fmt: skip
        if actor.startswith("operator") and self.lease_holder not in (None, actor):
            self.unleased_writes.append(
                f"{actor} sent {verb} {ref[0]} {ref[2]} while {self.lease_holder} held the Lease"
            )
        if actor.startswith("operator") and self._lease_moves is not None:
            writes, holder = self._lease_moves
            self._lease_moves = (writes - 1, holder) if writes > 1 else None
            if writes <= 1:
                self.lease_holder = holder

    def _in_flight(self, ref: Ref) -> str | None:
        """The inFlight action id of the RLJob that owns `ref` (or is `ref`)."""
        if ref[0] == KIND:
            job = self.objects.get(ref)
        elif ref[0] == "Event":
            job = self.objects.get((KIND, ref[1], ref[2].split(".")[0]))
        else:
            live = self.objects.get(ref) or {"metadata": {}}
            name = (live["metadata"].get("labels") or {}).get(JOB_LABEL, "")
            job = self.objects.get((KIND, ref[1], name))
        action = ((job or {}).get("status") or {}).get("inFlight") or {}
        return action.get("id")

    @staticmethod
    def _labels(body: JSON) -> JSON:
        labels = body["metadata"].get("labels") or {}
        owner = _owner_uid(body)
        return {
            "attempt": labels.get(ATTEMPT_LABEL),
            "role": labels.get(ROLE_LABEL),
            "owner": owner,
            "replicas": (body.get("spec") or {}).get("replicas"),
        }

    def _trainer_failed(self, rljob_uid: str) -> bool:
        """Whether a trainer Job of that RLJob has failed and is not being deleted yet."""
        return any(
            self.controlled_by(job, rljob_uid)
            and not _deleting(job)
            and bool(_condition(job, "FailureTarget") or _condition(job, "Failed"))
            for _, job in self._items("Job")
        )

    @staticmethod
    def _patch_detail(patch: JSON, patched: JSON) -> JSON:
        template = ((patch.get("spec") or {}).get("template") or {}).get("metadata") or {}
        status = patched.get("status") or {}
        return {
            "annotations": dict(template.get("annotations") or {}),
            "in_flight_after": clone(status.get("inFlight")),
            "attempt_after": status.get("attempt"),
            "phase_after": status.get("phase"),
            "restarts_after": (status.get("restarts") or {}).get("total", 0),
            "suspension_after": clone(status.get("suspension")),
            "resume_after": clone(status.get("lastResumeRequest")),
            "seen_jobs_after": {
                record["attempt"]: record["jobUid"]
                for record in status.get("attempts") or []
                if record.get("jobUid")
            },
        }

    # -- reading (tests) --------------------------------------------------------------------

    def view(self, kind: str) -> list[Mapping[str, Any]]:
        """The stored objects of a kind, by name, not copied: read them, never change them."""
        return [body for _, body in self._items(kind)]

    def peek(self, kind: str, name: str) -> Mapping[str, Any] | None:
        """One stored object, not copied (see `view`)."""
        return self.objects.get((kind, NAMESPACE, name))

    def get(self, kind: str, name: str) -> JSON | None:
        live = self.objects.get((kind, NAMESPACE, name))
        return clone(live) if live is not None else None

    def select(self, kind: str, labels: Mapping[str, str] | None = None) -> list[JSON]:
        """Objects of a kind whose labels include `labels`, by name."""
        wanted = dict(labels or {})
        return [
            clone(body)
            for _, body in self._items(kind)
            if wanted.items() <= (body["metadata"].get("labels") or {}).items()
        ]

    def pods(self, role: str | None = None) -> list[JSON]:
        return [
            pod
            for pod in self.select("Pod")
            if role is None or (pod["metadata"].get("labels") or {}).get(ROLE_LABEL) == role
        ]

    def events(self, reason: str | None = None) -> list[JSON]:
        return [e for e in self.select("Event") if reason is None or e.get("reason") == reason]

    def writes(self, actor_prefix: str = "operator") -> Iterator[Write]:
        return (w for w in self.log if w.actor.startswith(actor_prefix))


class _absent_ok:  # noqa: N801 - used like contextlib.suppress
    """Swallows the 404 of deleting what is already gone (as the Kube adapter does)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> bool:
        return isinstance(exc, KubeError) and exc.not_found


@dataclass
class _Stream:
    """One kind's watch: how far it delivered, what it shows, and how long it stalls."""

    cursor: int = 0
    shown: dict[Ref, JSON] = field(default_factory=dict)
    stalled: int = 0  # deliveries still to skip


class Index:
    """What the operator's watches (kopf indexes) show: each kind's stream delivers the
    cluster's changes in order at `deliver()`, unless it is lagging (stalled for some
    deliveries); `relist()` catches every stream up at once."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._streams = {kind: _Stream() for kind in WATCHED_KINDS}

    def lag(self, deliveries: int, kinds: tuple[str, ...] = WATCHED_KINDS) -> None:
        """The streams of `kinds` skip the next `deliveries` deliveries (they keep showing the
        state of their last delivery)."""
        for kind in kinds:
            self._streams[kind].stalled = max(self._streams[kind].stalled, deliveries)

    def deliver(self) -> frozenset[str]:
        """Each stream that is not lagging catches up; returns the kinds that changed."""
        changed = set()
        for kind, stream in self._streams.items():
            if stream.stalled > 0:
                stream.stalled -= 1
                continue
            if self._catch_up(kind, stream):
                changed.add(kind)
        return frozenset(changed)

    def lagging(self) -> bool:
        """Whether a stream still skips deliveries (a pass now may read a stale view)."""
        return any(stream.stalled > 0 for stream in self._streams.values())

    def relist(self) -> None:
        for kind, stream in self._streams.items():
            stream.stalled = 0
            self._catch_up(kind, stream)

    def _catch_up(self, kind: str, stream: _Stream) -> bool:
        events = self._cluster.history[kind][stream.cursor :]
        stream.cursor += len(events)
        for ref, body in events:
            managed = body is not None and (
                kind in (KIND, "Workload")
                or (body["metadata"].get("labels") or {}).get(MANAGED_BY_LABEL)
            )
            if managed and body is not None:
                stream.shown[ref] = body
            else:
                stream.shown.pop(ref, None)
        return bool(events)

    def workload(self) -> JSON | None:
        """The Workload the watch shows (the model has one job, so one at most that lives)."""
        shown = self._streams["Workload"].shown.values()
        live = [b for b in shown if not b["metadata"].get("deletionTimestamp")]
        return clone(live[0]) if live else None

    def rljob(self, name: str) -> JSON | None:
        body = self._streams[KIND].shown.get((KIND, NAMESPACE, name))
        return clone(body) if body is not None else None

    def children(self, kind: str, key: JobKey) -> list[ObservedChild]:
        return [summarize_child(b) for b in self._shown(kind, key)]

    def pods(self, key: JobKey) -> list[ObservedPod]:
        return [summarize_pod(b) for b in self._shown("Pod", key)]

    def observed(self, key: JobKey) -> Observed:
        children = [c for kind in CHILD_KINDS for c in self.children(kind, key)]
        return observed_from(children, self.pods(key))

    def kopf_indexes(self) -> dict[str, Mapping[Any, list[Any]]]:
        """The kopf indexes the operator's handlers declare, as views of this index."""
        return {
            "rljobs_idx": _RLJobView(self),
            "deployments_idx": _KindView(self, "Deployment"),
            "jobs_idx": _KindView(self, "Job"),
            "services_idx": _KindView(self, "Service"),
            "pods_idx": _KindView(self, "Pod"),
            "workloads_idx": _WorkloadView(self),
            "resourceflavors_idx": {name: [flavor] for name, flavor in FLAVORS.items()},
        }

    def _shown(self, kind: str, key: JobKey) -> list[JSON]:
        return [b for b in self._streams[kind].shown.values() if job_key(b) == key]


class _KindView(Mapping[JobKey, list[Any]]):
    """One kopf index: job key -> the summaries of that job's objects of one kind."""

    def __init__(self, index: Index, kind: str) -> None:
        self._index = index
        self._kind = kind

    def __getitem__(self, key: JobKey) -> list[Any]:
        if self._kind == "Pod":
            return list(self._index.pods(key))
        return list(self._index.children(self._kind, key))

    def __iter__(self) -> Iterator[JobKey]:
        keys = {job_key(b) for b in self._index._streams[self._kind].shown.values()}
        return iter(sorted(k for k in keys if k is not None))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _WorkloadView(Mapping[JobKey, list[Any]]):
    """The Workload index (rljob.kueue_handlers): the RLJob that controls it -> its bodies."""

    def __init__(self, index: Index) -> None:
        self._index = index

    def _by_owner(self) -> dict[JobKey, list[JSON]]:
        found: dict[JobKey, list[JSON]] = {}
        for body in self._index._streams["Workload"].shown.values():
            key = workload_owner(body)
            if key is not None:
                found.setdefault(key, []).append(clone(body))
        return found

    def __getitem__(self, key: JobKey) -> list[Any]:
        return self._by_owner()[key]

    def __iter__(self) -> Iterator[JobKey]:
        return iter(sorted(self._by_owner()))

    def __len__(self) -> int:
        return len(self._by_owner())


class _RLJobView(Mapping[JobKey, list[str]]):
    """The RLJob index: (namespace, name) -> the uids of the RLJobs the watch shows."""

    def __init__(self, index: Index) -> None:
        self._index = index

    def _uids(self) -> dict[JobKey, list[str]]:
        uids: dict[JobKey, list[str]] = {}
        for body in self._index._streams[KIND].shown.values():
            meta = body["metadata"]
            uids.setdefault((meta["namespace"], meta["name"]), []).append(meta["uid"])
        return uids

    def __getitem__(self, key: JobKey) -> list[str]:
        return self._uids()[key]

    def __iter__(self) -> Iterator[JobKey]:
        return iter(sorted(self._uids()))

    def __len__(self) -> int:
        return len(self._uids())
