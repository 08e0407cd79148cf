"""Issue #9, least privilege, with the chart installed cluster-wide: what its ServiceAccount may
and may not do (SelfSubjectAccessReviews and real dry-run requests, and the complete list of
what it is granted), and a job whose checkpoints use real S3 credentials from a Secret: the
operator, run under the chart's ServiceAccount, reconciles it while the credentials appear
nowhere it writes or serves. Also: the pod-security defaults of the children, and the chart's
workload-reader ClusterRole, which a RoleBinding lets a trainer read (only) its namespace's RLJobs
with."""

from __future__ import annotations

import base64
import json
import secrets
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from rljob.dev.bed import OperatorProcess, ensure_namespace, service_account_token
from rljob.dev.kubeapi import ApiError, Credentials, KubeApi
from rljob.dev.processes import free_ports
from rljob.dev.s3server import S3Server
from tests.integration.chart_release import (
    CHART,
    Release,
    allowed,
    chart_operator,
    installed,
    new_release,
    step_aside,
)
from tests.integration.conftest import Cluster, Operator, delete_namespace
from tests.integration.rljobs import (
    DEPLOYMENTS,
    JOBS,
    PODS,
    REPLICASETS,
    SERVICES,
    apply_rljob,
    children,
    condition,
    example,
    rljob_path,
    wait_condition,
)
from tests.integration.s3_fixtures import s3_bin_dir

# cluster_wide: cluster-wide operators and the chart's cluster-scoped objects.
pytestmark = [pytest.mark.integration, pytest.mark.cluster_wide]

NAME = "grpo-minimal"
BUCKET = "ckpt"
JOB_SECRET = "s3-credentials"
OPERATOR_SECRET = "rljob-operator-s3"
CREDENTIAL_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
VERSIONS = {"": "v1", "rljob.io": "v1alpha1"}  # every other group used here serves v1
# What every authenticated user may do (system:basic-user): ask what it may do.
SELF_REVIEWS = {
    ("authorization.k8s.io", "selfsubjectaccessreviews", "create"),
    ("authorization.k8s.io", "selfsubjectrulesreviews", "create"),
    ("authentication.k8s.io", "selfsubjectreviews", "create"),
}
# The rollout role's podTemplate: a user loosening the pod security settings on purpose.
USER_SECURITY = {
    "spec": {
        "securityContext": {"seccompProfile": {"type": "Unconfined"}},
        "containers": [{
            "name": "rollout",
            "securityContext": {"allowPrivilegeEscalation": True,
                                "capabilities": {"add": ["SYS_PTRACE"]}},
        }],
    }
}  # fmt: skip

# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """An S3 server of this module's own, with credentials no other string can match."""
    server = S3Server(
        tmp_path_factory.mktemp("s3"), s3_bin_dir(), free_ports(1)[0],
        access_key=f"AKRLJOB{secrets.token_hex(8).upper()}", secret_key=secrets.token_hex(20),
    )  # fmt: skip
    with server:
        server.create_bucket(BUCKET)
        yield server


def _create_secret(cluster: Cluster, namespace: str, name: str, values: dict[str, str]) -> None:
    body = {"metadata": {"name": name}, "type": "Opaque", "stringData": values}
    cluster.api.create(f"/api/v1/namespaces/{namespace}/secrets", body)


@pytest.fixture(scope="module")
def release(cluster: Cluster, crd: list[str], store: S3Server) -> Iterator[Release]:
    """The chart, cluster-wide, with the operator's own S3 identity in a Secret (envFrom)."""
    release = new_release(cluster)
    _create_secret(cluster, release.namespace, OPERATOR_SECRET, store.env())
    values = {"checkpointStore.credentialsSecret": OPERATOR_SECRET, "operator.logLevel": "DEBUG"}
    with installed(release, values):
        yield release


@pytest.fixture(scope="module")
def account(release: Release) -> KubeApi:
    """A client authenticated as the chart's ServiceAccount."""
    return release.api()


@dataclass
class Reconciled:
    """A job reconciled to Ready by the chart's operator."""

    namespace: str
    operator: OperatorProcess
    store: S3Server
    since: str  # the RLJobs' resourceVersion before the job was applied


def _job(store: S3Server) -> dict[str, Any]:
    """Checkpoints with credentials by reference; the rollout role overrides the pod security
    settings through its podTemplate."""
    checkpoint = {"uri": f"s3://{BUCKET}/ckpt", "endpoint": store.endpoint,
                  "addressingStyle": "path", "credentialsSecret": JOB_SECRET}  # fmt: skip
    rollout = {"engine": "vllm", "replicas": 1, "gpus": 1, "podTemplate": USER_SECURITY}
    return example(checkpoint=checkpoint, roles={"rollout": rollout, "trainer": {"nodes": 1}})


@pytest.fixture(scope="module")
def reconciled(
    cluster: Cluster,
    release: Release,
    store: S3Server,
    operator_session: Operator,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Reconciled]:
    step_aside(operator_session)
    namespace = f"least-privilege-{secrets.token_hex(3)}"
    ensure_namespace(cluster.api, namespace)
    credentials = {key: store.env()[key] for key in CREDENTIAL_KEYS}
    _create_secret(cluster, namespace, JOB_SECRET, credentials)
    try:
        with chart_operator(release, tmp_path_factory.mktemp("chart-operator")) as op:
            since = cluster.api.get(rljob_path(namespace))["metadata"]["resourceVersion"]
            apply_rljob(cluster, namespace, _job(store))
            job = wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
            # The operator used the credentials: it found the store empty and wrote a marker.
            assert condition(job, "CheckpointReady")["reason"] == "NoCheckpoint"
            assert store.client().list_objects_v2(Bucket=BUCKET)["KeyCount"] > 0
            yield Reconciled(namespace, op, store, since)
    finally:
        delete_namespace(cluster, namespace)
        operator_session.ensure_default()


# ------------------------------------------------------------------ what the account may do


@dataclass(frozen=True)
class Access:
    """One request kind: a verb on a (sub)resource, namespaced or cluster-wide."""

    verb: str
    resource: str
    group: str = ""
    subresource: str = ""
    namespaced: bool = True

    def attributes(self, namespace: str) -> dict[str, str]:
        found = {"group": self.group, "subresource": self.subresource,
                 "namespace": namespace if self.namespaced else ""}  # fmt: skip
        return {key: value for key, value in found.items() if value}

    def _paths(self, namespace: str) -> tuple[str, str]:
        version = VERSIONS.get(self.group, "v1")
        root = f"/apis/{self.group}/{version}" if self.group else f"/api/{version}"
        scope = f"/namespaces/{namespace}" if self.namespaced else ""
        collection = f"{root}{scope}/{self.resource}"
        item = f"{collection}/probe-{secrets.token_hex(3)}"
        return collection, f"{item}/{self.subresource}" if self.subresource else item

    def request(self, api: KubeApi, namespace: str) -> int | None:
        """The status of a real request, dry-run where it writes (a missing object is fine:
        authorization comes first, so only 403 means denied); None for verbs without one."""
        collection, item = self._paths(namespace)
        dry_run = "?dryRun=All"
        calls: dict[str, tuple[str, str]] = {
            "get": ("GET", item),
            "list": ("GET", collection),
            "create": ("POST", (item if self.subresource else collection) + dry_run),
            "update": ("PUT", item + dry_run),
            "patch": ("PATCH", item + dry_run),
            "delete": ("DELETE", item + dry_run),
        }
        if self.verb not in calls:
            return None
        method, path = calls[self.verb]
        body: dict[str, Any] | None = {} if method in {"POST", "PUT", "PATCH"} else None
        content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        try:
            api.request(method, path, body, content_type)
        except ApiError as exc:
            return exc.status
        return 200


def _case(allow: bool, verb: str, resource: str, **kw: Any) -> Any:
    """A table row, e.g. id allow-patch-rljobs.rljob/status."""
    access = Access(verb, resource, **kw)
    target = f"{resource}.{access.group.split('.')[0]}" if access.group else resource
    target += f"/{access.subresource}" if access.subresource else ""
    return pytest.param(access, allow, id=f"{'allow' if allow else 'deny'}-{verb}-{target}")


NODES, CRDS = {"namespaced": False}, {"group": "apiextensions.k8s.io", "namespaced": False}
RBAC = "rbac.authorization.k8s.io"
WEBHOOKS = {"group": "admissionregistration.k8s.io", "namespaced": False}

ACCESS = [
    # Never Secrets or ConfigMaps: credentials reach pods by reference only.
    *(_case(False, verb, "secrets") for verb in ("get", "list", "watch", "create")),
    _case(False, "list", "configmaps"),
    # Pods only through Jobs and Deployments; no exec, no tokens minted for other accounts.
    _case(False, "create", "pods"),
    _case(False, "deletecollection", "pods"),
    _case(False, "create", "pods", subresource="exec"),
    _case(False, "create", "serviceaccounts", subresource="token"),
    _case(False, "impersonate", "serviceaccounts"),
    _case(False, "create", "rljobs", group="rljob.io"),
    _case(False, "update", "rljobs", group="rljob.io"),
    _case(False, "create", "leases", group="coordination.k8s.io"),  # one replica: no election
    # Nothing cluster-wide it does not need.
    _case(False, "create", "namespaces", namespaced=False),
    _case(False, "delete", "namespaces", namespaced=False),
    _case(False, "patch", "nodes", **NODES),
    _case(False, "update", "nodes", subresource="status", **NODES),
    _case(False, "delete", "nodes", **NODES),
    *(_case(False, verb, "customresourcedefinitions", **CRDS) for verb in ("create", "update")),
    _case(False, "delete", "customresourcedefinitions", **CRDS),
    _case(False, "create", "clusterroles", group=RBAC, namespaced=False),
    _case(False, "escalate", "clusterroles", group=RBAC, namespaced=False),
    _case(False, "bind", "clusterroles", group=RBAC, namespaced=False),
    _case(False, "create", "clusterrolebindings", group=RBAC, namespaced=False),
    _case(False, "create", "roles", group=RBAC),
    _case(False, "create", "rolebindings", group=RBAC),
    _case(False, "create", "validatingwebhookconfigurations", **WEBHOOKS),
    # What it needs.
    *(_case(True, verb, "rljobs", group="rljob.io") for verb in ("get", "list", "watch")),
    _case(True, "patch", "rljobs", group="rljob.io"),
    _case(True, "delete", "rljobs", group="rljob.io"),  # ttlSecondsAfterFinished
    _case(True, "patch", "rljobs", group="rljob.io", subresource="status"),
    _case(True, "update", "rljobs", group="rljob.io", subresource="status"),
    _case(True, "update", "rljobs", group="rljob.io", subresource="finalizers"),
    *(_case(True, verb, "jobs", group="batch") for verb in ("create", "patch", "delete")),
    *(_case(True, verb, "deployments", group="apps") for verb in ("create", "update", "watch")),
    # A rollout pod's controller chain (pod -> ReplicaSet -> Deployment -> RLJob): read only.
    *(_case(True, verb, "replicasets", group="apps") for verb in ("list", "watch")),
    *(_case(False, verb, "replicasets", group="apps") for verb in ("create", "patch", "delete")),
    _case(True, "create", "services"),
    _case(True, "list", "pods"),
    _case(True, "delete", "pods"),
    # A Gated engine's rljob.io/policy-current readiness gate, and nothing else of a pod's status.
    _case(True, "patch", "pods", subresource="status"),
    # The rljob.io/slot-<k> labels of slotServices engines (docs/weight-sync.md#engine-slots).
    _case(True, "patch", "pods"),
    _case(False, "update", "pods"),
    _case(False, "update", "pods", subresource="status"),
    _case(True, "list", "nodes", **NODES),
    _case(True, "watch", "nodes", **NODES),
    _case(True, "create", "events"),
    _case(True, "create", "events", group="events.k8s.io"),
    _case(True, "list", "customresourcedefinitions", **CRDS),
]


@pytest.mark.parametrize(("access", "allow"), ACCESS)
def test_the_charts_account_may_do_only_what_the_operator_needs(
    account: KubeApi, access: Access, allow: bool
) -> None:
    namespace = f"nowhere-{secrets.token_hex(3)}"  # rights are cluster-wide; nothing is in it
    assert allowed(account, access.verb, access.resource, **access.attributes(namespace)) is allow
    status = access.request(account, namespace)
    if status is not None:
        assert (status != 403) is allow, f"real request answered {status}"


def _granted(api: KubeApi, namespace: str) -> set[tuple[str, str, str]]:
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
              "spec": {"namespace": namespace}}  # fmt: skip
    answer = api.create("/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", review)
    return _triples(answer["status"]["resourceRules"])


def _triples(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule["verbs"]
    }


def test_the_account_is_granted_exactly_the_rules_file(account: KubeApi) -> None:
    """Nothing beyond files/rbac-rules.yaml (the Lease rule needs replicas > 1), no wildcard,
    no Secrets."""
    rules = yaml.safe_load((CHART / "files" / "rbac-rules.yaml").read_text())
    expected = _triples([r for r in rules if "leases" not in r["resources"]])
    granted = _granted(account, f"nowhere-{secrets.token_hex(3)}") - SELF_REVIEWS
    assert granted == expected
    assert not any("*" in triple for triple in granted)
    assert not any(resource == "secrets" for _, resource, _ in granted)


# ------------------------------------------------------------------ the workload reader

TRAINER_ACCOUNT = "trainer"


@dataclass(frozen=True)
class Reader:
    """A trainer's ServiceAccount bound by a RoleBinding in its namespace to the chart's
    workload-reader ClusterRole, as docs/weight-sync.md tells users to bind it."""

    api: KubeApi
    namespace: str


@pytest.fixture(scope="module")
def reader(cluster: Cluster, release: Release) -> Iterator[Reader]:
    roles = [o["metadata"]["name"] for o in release.find("ClusterRole")]
    (role,) = [name for name in roles if name.endswith("-workload-reader")]
    namespace = f"reader-{secrets.token_hex(3)}"
    ensure_namespace(cluster.api, namespace)
    try:
        account = {"metadata": {"name": TRAINER_ACCOUNT}}
        cluster.api.create(f"/api/v1/namespaces/{namespace}/serviceaccounts", account)
        binding = {
            "metadata": {"name": "trainer-reads-rljobs"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": TRAINER_ACCOUNT,
                          "namespace": namespace}],
        }  # fmt: skip
        cluster.api.create(f"/apis/{RBAC}/v1/namespaces/{namespace}/rolebindings", binding)
        token = service_account_token(cluster.api, namespace, TRAINER_ACCOUNT)
        api = KubeApi(Credentials(cluster.server, cluster.api.creds.ca_file, token=token))
        yield Reader(api, namespace)
    finally:
        delete_namespace(cluster, namespace)


READER_ACCESS = [
    *(_case(True, verb, "rljobs", group="rljob.io") for verb in ("get", "list", "watch")),
    *(_case(False, verb, "rljobs", group="rljob.io") for verb in ("create", "patch", "delete")),
    _case(False, "patch", "rljobs", group="rljob.io", subresource="status"),
    _case(False, "get", "secrets"),
    _case(False, "list", "pods"),
    _case(False, "get", "rljobs", group="rljob.io", namespaced=False),  # not cluster-wide
]


@pytest.mark.parametrize(("access", "allow"), READER_ACCESS)
def test_a_bound_workload_reader_reads_the_rljobs_of_its_namespace_only(
    reader: Reader, access: Access, allow: bool
) -> None:
    own, other = reader.namespace, f"elsewhere-{secrets.token_hex(3)}"
    assert allowed(reader.api, access.verb, access.resource, **access.attributes(own)) is allow
    assert not allowed(reader.api, access.verb, access.resource, **access.attributes(other))
    status = access.request(reader.api, own)
    if status is not None:
        assert (status != 403) is allow, f"real request answered {status}"
    if status is not None and access.namespaced:
        assert access.request(reader.api, other) == 403


@pytest.mark.parametrize(
    ("where", "allow"),
    [pytest.param("own", True, id="own-namespace"), pytest.param("other", False, id="other")],
)
def test_a_bound_workload_reader_can_watch_one_rljob_as_the_roster_does(
    reader: Reader, where: str, allow: bool
) -> None:
    """A real watch of one RLJob by name (rljob.sdk.EngineRoster's request), which the API
    server ends after a second (no RLJob there: no event, an empty answer)."""
    namespace = reader.namespace if where == "own" else f"elsewhere-{secrets.token_hex(3)}"
    query = "?watch=1&fieldSelector=metadata.name%3Dgrpo&timeoutSeconds=1"
    try:
        reader.api.get(rljob_path(namespace) + query)
        status = 200
    except ApiError as exc:
        status = exc.status
    assert (status == 200) is allow, status
    assert status in (200, 403)


# ------------------------------------------------------------------ credentials by reference


def _needles(store: S3Server) -> dict[str, str]:
    """The credential values, plain and base64 (as a Secret's data holds them)."""
    plain = {"access key": store.access_key, "secret key": store.secret_key}
    encoded = {f"{k} (base64)": base64.b64encode(v.encode()).decode() for k, v in plain.items()}
    return {**plain, **encoded}


def _leaks(documents: list[str], store: S3Server) -> list[str]:
    return [label for label, value in _needles(store).items() if any(value in d for d in documents)]


def _items(cluster: Cluster, *paths: str) -> list[str]:
    return [json.dumps(item) for path in paths for item in cluster.api.get(path)["items"]]


def _history(cluster: Cluster, job: Reconciled) -> list[dict[str, Any]]:
    """Every version of the RLJob since it was applied: a watch from the earlier
    resourceVersion replays them, and the server ends it after two seconds."""
    query = f"?watch=1&resourceVersion={job.since}&timeoutSeconds=2"
    lines = cluster.api.raw_get(rljob_path(job.namespace) + query).splitlines()
    versions = [json.loads(line)["object"] for line in lines if line.strip()]
    assert len(versions) > 1 and all(v["kind"] == "RLJob" for v in versions), versions
    return versions


def _http(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


EVENTS = ("/api/v1/namespaces/{ns}/events", "/apis/events.k8s.io/v1/namespaces/{ns}/events")
Place = Callable[[Cluster, Reconciled, Release], list[str]]


def _children(plural_path: str) -> Place:
    return lambda cluster, job, _: _items(cluster, plural_path.format(ns=job.namespace))


def _log(above_debug: bool) -> Place:
    """The operator's JSON log lines, all or those above DEBUG."""

    def lines(_: Cluster, job: Reconciled, __: Release) -> list[str]:
        every = job.operator.log.read_text().splitlines()
        return [line for line in every if not (above_debug and _level(line) == "debug")]

    return lines


def _level(line: str) -> str:
    try:
        return str(json.loads(line).get("level", ""))
    except ValueError:
        return ""  # not a JSON record (a raw traceback): kept


PLACES: dict[str, Place] = {
    # The chart runs the operator at operator.logLevel (INFO by default), here DEBUG.
    "operator-log": _log(above_debug=True),
    "operator-log-debug": _log(above_debug=False),
    "operator-metrics": lambda c, r, _: [_http(r.operator.metrics_url)],
    "events": lambda c, r, _: _items(c, *(p.format(ns=r.namespace) for p in EVENTS)),
    # Every version the API server stored: spec, status, annotations (kopf's, whenever it
    # writes any), managedFields.
    "rljob-history": lambda c, r, _: [json.dumps(o) for o in _history(c, r)],
    "deployments": _children(DEPLOYMENTS),
    "replicasets": _children(REPLICASETS),
    "jobs": _children(JOBS),
    "pods": _children(PODS),
    "services": _children(SERVICES),
    # The chart's own Deployment and pod: the operator's identity by envFrom reference too.
    "chart-operator-pod": lambda c, _, rel: _items(
        c, DEPLOYMENTS.format(ns=rel.namespace), PODS.format(ns=rel.namespace)
    ),
}


@pytest.mark.parametrize(
    "place",
    PLACES,
)
def test_credentials_appear_nowhere(
    cluster: Cluster, reconciled: Reconciled, release: Release, place: str
) -> None:
    documents = PLACES[place](cluster, reconciled, release)
    assert documents and all(documents), f"nothing to scan in {place}"
    assert _leaks(documents, reconciled.store) == []


def test_the_scan_finds_the_credentials_where_they_are(
    cluster: Cluster, reconciled: Reconciled
) -> None:
    secret = cluster.api.get(f"/api/v1/namespaces/{reconciled.namespace}/secrets/{JOB_SECRET}")
    assert _leaks([json.dumps(secret)], reconciled.store) == ["access key (base64)",
                                                              "secret key (base64)"]  # fmt: skip


def _secret_refs(template: dict[str, Any]) -> list[str]:
    return [
        source["secretRef"]["name"]
        for container in template["spec"]["containers"]
        for source in container.get("envFrom", [])
        if "secretRef" in source
    ]


def test_only_trainer_pods_reference_the_credentials_secret(
    cluster: Cluster, reconciled: Reconciled
) -> None:
    (trainer,) = children(cluster, reconciled.namespace, JOBS, NAME, "trainer")
    (rollout,) = children(cluster, reconciled.namespace, DEPLOYMENTS, NAME, "rollout")
    assert _secret_refs(trainer["spec"]["template"]) == [JOB_SECRET]
    assert _secret_refs(rollout["spec"]["template"]) == []
    pods = children(cluster, reconciled.namespace, PODS, NAME)
    assert sorted(tuple(_secret_refs(p)) for p in pods) == [(), (JOB_SECRET,)]


# ------------------------------------------------------------------ pod security of children


def _security(template: dict[str, Any], container: str) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = template["spec"]
    (main,) = [c for c in spec["containers"] if c["name"] == container]
    return spec.get("securityContext", {}), main.get("securityContext", {})


def test_children_get_safe_pod_security_defaults(cluster: Cluster, reconciled: Reconciled) -> None:
    (trainer,) = children(cluster, reconciled.namespace, JOBS, NAME, "trainer")
    pod, container = _security(trainer["spec"]["template"], "trainer")
    seccomp = container.get("seccompProfile") or pod.get("seccompProfile") or {}
    assert seccomp.get("type") == "RuntimeDefault"
    assert container.get("allowPrivilegeEscalation") is False
    assert "ALL" in container.get("capabilities", {}).get("drop", [])


def test_a_users_pod_template_overrides_the_security_settings(
    cluster: Cluster, reconciled: Reconciled
) -> None:
    (rollout,) = children(cluster, reconciled.namespace, DEPLOYMENTS, NAME, "rollout")
    pod, container = _security(rollout["spec"]["template"], "rollout")
    assert pod["seccompProfile"] == {"type": "Unconfined"}
    assert container["allowPrivilegeEscalation"] is True
    assert container["capabilities"]["add"] == ["SYS_PTRACE"]
