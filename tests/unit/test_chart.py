"""The Helm chart (charts/rljob-operator): `helm lint`, `helm template` golden files, and the
properties that matter whatever the values: least-privilege RBAC equal to files/rbac-rules.yaml,
a locked-down pod, the CRD never templated, and the same alert rules and dashboard as the files.

helm is the one tools/helm builds: $RLJOB_BIN_DIR/helm (tools/build.sh), or the binary named by
$RLJOB_HELM. Regenerate the golden files with UPDATE_GOLDEN=1."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from rljob.api import RESERVED_ENV_NAMES, RoleName, crd_yaml
from rljob.version import __version__
from tests.unit.monitoring import CHART, DASHBOARD_FILE, REPO, RULES_FILE

GOLDEN = REPO / "tests" / "golden"
RBAC_RULES = CHART / "files" / "rbac-rules.yaml"
CRD_FILE = REPO / "crds" / "rljob.io_rljobs.yaml"
CHART_CRD = CHART / "crds" / "rljob.io_rljobs.yaml"
RELEASE = "rljob-operator"
NAMESPACE = "rljob-system"
# Pinned so the output does not depend on how helm was built.
KUBE_VERSION = "1.30.0"
CLUSTER_SCOPED_RESOURCES = {"customresourcedefinitions", "nodes"}
CLUSTER_SCOPED_KINDS = {
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}

# The golden variants: name -> --set values.
VARIANTS: dict[str, dict[str, str]] = {
    "default": {},
    "namespaced": {
        "watchNamespace": "team-a",
        "replicas": "2",
        "checkpointStore.credentialsSecret": "rljob-operator-s3",
        "serviceMonitor.enabled": "true",
        "workloadPodMonitor.enabled": "true",
    },
}
# The rules and the dashboard are checked against their files, not against golden copies.
EXTRAS = {
    **VARIANTS["namespaced"],
    "prometheusRule.enabled": "true",
    "grafanaDashboard.enabled": "true",
}

Obj = dict[str, Any]


def _helm() -> Path | None:
    candidates = []
    if os.environ.get("RLJOB_HELM"):
        candidates.append(Path(os.environ["RLJOB_HELM"]))
    if os.environ.get("RLJOB_BIN_DIR"):
        candidates.append(Path(os.environ["RLJOB_BIN_DIR"]) / "helm")
    return next((path for path in candidates if path.is_file()), None)


@pytest.fixture(scope="module")
def helm() -> Path:
    found = _helm()
    if found is None:
        pytest.skip(
            "helm not found: build it from tools/helm (tools/build.sh puts it in RLJOB_BIN_DIR) "
            "or point RLJOB_HELM at a helm binary"
        )
    return found


def _sets(values: dict[str, str]) -> list[str]:
    args: list[str] = []
    for key, value in values.items():
        args += ["--set-string" if key.endswith("Secret") else "--set", f"{key}={value}"]
    return args


def _run(helm: Path, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *args], capture_output=True, text=True, check=False, cwd=REPO, timeout=120
    )


def render_text(helm: Path, values: dict[str, str], *extra: str) -> str:
    args = ["template", RELEASE, str(CHART.relative_to(REPO)), "--namespace", NAMESPACE]
    result = _run(helm, [*args, "--kube-version", KUBE_VERSION, *_sets(values), *extra])
    assert result.returncode == 0, result.stderr
    return result.stdout


def render(helm: Path, values: dict[str, str], *extra: str) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(render_text(helm, values, *extra)) if doc]


def find(objects: list[Obj], kind: str, name: str | None = None) -> list[Obj]:
    return [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    (found,) = find(objects, kind, name)
    return found


def file_rules() -> list[Obj]:
    rules: list[Obj] = yaml.safe_load(RBAC_RULES.read_text())
    return rules


def is_lease_rule(rule: Obj) -> bool:
    return "leases" in rule["resources"]


def is_cluster_rule(rule: Obj) -> bool:
    return bool(CLUSTER_SCOPED_RESOURCES & set(rule["resources"]))


@pytest.fixture(scope="module")
def default(helm: Path) -> list[Obj]:
    return render(helm, VARIANTS["default"])


@pytest.fixture(scope="module")
def namespaced(helm: Path) -> list[Obj]:
    return render(helm, VARIANTS["namespaced"])


@pytest.fixture(scope="module")
def extras(helm: Path) -> list[Obj]:
    return render(helm, EXTRAS)


# ------------------------------------------------------------------------- lint and golden


@pytest.mark.parametrize("values", [VARIANTS["default"], EXTRAS], ids=["default", "extras"])
def test_helm_lint(helm: Path, values: dict[str, str]) -> None:
    args = ["lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART)]
    result = _run(helm, [*args, *_sets(values)])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_helm_template_matches_golden(helm: Path, variant: str) -> None:
    text = render_text(helm, VARIANTS[variant])
    golden = GOLDEN / f"chart-{variant}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"{golden} is missing: run with UPDATE_GOLDEN=1"
    assert text == golden.read_text(), (
        f"helm template output differs from {golden.relative_to(REPO)}; if the change is "
        "intended, regenerate with UPDATE_GOLDEN=1 and review the diff"
    )


@pytest.mark.parametrize("values", [VARIANTS["default"], EXTRAS], ids=["default", "extras"])
def test_every_rendered_object_parses_and_is_placed(helm: Path, values: dict[str, str]) -> None:
    objects = render(helm, values)
    assert objects
    seen = set()
    for obj in objects:
        assert {"apiVersion", "kind", "metadata"} <= set(obj), obj
        key = (obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
        assert key not in seen, f"rendered twice: {key}"
        seen.add(key)
        if obj["kind"] in CLUSTER_SCOPED_KINDS:
            assert "namespace" not in obj["metadata"], key
        else:
            assert obj["metadata"].get("namespace"), f"{key} has no namespace"


def test_values_schema_rejects_bad_values(helm: Path) -> None:
    args = ["template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION]
    for bad in (
        "replicas=0",
        "unknownKey=1",
        "watchNamespace=Not_A_Namespace",
        "health.defaultSource=prometheus",  # without a URL
        "health.defaultSource=somewhere",
        "rbac.aggregateToDefaultRoles=maybe",
        "allowlist.prometheusUrls={prom.monitoring:9090}",  # no scheme
        "allowlist.s3Endpoints={http://user@minio:9000}",  # user info
        "allowlist.s3Buckets={Not_A_Bucket}",
        "checkpointStore.endpoint=minio:9000",
    ):
        result = _run(helm, [*args, "--set", bad])
        assert result.returncode != 0, bad
        assert "values don't meet the specifications of the schema" in result.stderr, bad


def operator_container(objects: list[Obj]) -> Obj:
    (deployment,) = find(objects, "Deployment")
    container: Obj = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


@pytest.mark.parametrize(
    ("values", "flags", "mounted"),
    [
        pytest.param({}, ["--direct-scrape"], False, id="default-direct"),
        pytest.param({"health.defaultSource": "none"}, [], False, id="none"),
        pytest.param(
            {
                "health.defaultSource": "prometheus",
                "health.prometheus.url": "http://prom.monitoring:9090",
                "health.prometheus.tokenSecret.name": "prom-token",
                "health.prometheus.headers.X-Scope-OrgID": "team-a",
            },
            [
                "--prometheus-url=http://prom.monitoring:9090",
                "--prometheus-pod-label=pod",
                "--prometheus-namespace-label=namespace",
                "--prometheus-header=X-Scope-OrgID: team-a",
                "--prometheus-token-file=/var/run/secrets/rljob/prometheus/token",
            ],
            True,
            id="prometheus-with-token-file",
        ),
    ],
)
def test_the_default_metrics_source_comes_from_values(
    helm: Path, values: dict[str, str], flags: list[str], mounted: bool
) -> None:
    """Jobs without spec.health.source are health-checked after a plain install; a token is a
    file the kubelet mounts (the operator has no right to read Secrets)."""
    objects = render(helm, values)
    container = operator_container(objects)
    source_flags = [a for a in container["args"] if a.startswith(("--prometheus", "--direct"))]
    assert source_flags == flags
    mounts = {m["name"] for m in container["volumeMounts"]}
    assert ("prometheus-token" in mounts) is mounted
    volumes = one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    secrets = [v["secret"]["secretName"] for v in volumes if "secret" in v]
    assert secrets == (["prom-token"] if mounted else [])


# ------------------------------------------------------------------------------- allowlist

REACH = f"{RELEASE}-reach"


@pytest.mark.parametrize(
    ("values", "flags", "lists"),
    [
        pytest.param(
            {},
            ["--allow-s3-bucket=*"],
            {"prometheusUrls": "[]", "s3Endpoints": "[]", "s3Buckets": '["*"]'},
            id="by-default-only-the-operators-own-and-any-bucket",
        ),
        pytest.param(
            {
                "health.defaultSource": "prometheus",
                "health.prometheus.url": "http://prom.monitoring:9090/",
                "checkpointStore.endpoint": "https://minio.storage:9000",
                "allowlist.prometheusUrls": "{http://tenant-prom.team-a:9090/,http://127.0.0.1:*}",
                "allowlist.s3Endpoints": "{https://s3.team-b:443}",
                "allowlist.s3Buckets": "{team-a,team-b}",
            },
            [
                "--allow-prometheus-url=http://tenant-prom.team-a:9090",
                "--allow-prometheus-url=http://127.0.0.1:*",
                "--allow-prometheus-url=http://prom.monitoring:9090",
                "--allow-s3-endpoint=https://s3.team-b:443",
                "--allow-s3-endpoint=https://minio.storage:9000",
                "--allow-s3-bucket=team-a",
                "--allow-s3-bucket=team-b",
            ],
            {
                "prometheusUrls": '["http://tenant-prom.team-a:9090","http://127.0.0.1:*",'
                '"http://prom.monitoring:9090"]',
                "s3Endpoints": '["https://s3.team-b:443","https://minio.storage:9000"]',
                "s3Buckets": '["team-a","team-b"]',
            },
            id="listed-plus-the-default-source-and-endpoint",
        ),
    ],
)
def test_the_operator_and_the_admission_policy_allow_the_same(
    helm: Path, values: dict[str, str], flags: list[str], lists: dict[str, str]
) -> None:
    objects = render(helm, values)
    container = operator_container(objects)
    assert [a for a in container["args"] if a.startswith("--allow-")] == flags
    variables = one(objects, "ValidatingAdmissionPolicy", REACH)["spec"]["variables"]
    assert {v["name"]: v["expression"] for v in variables if v["name"] in lists} == lists
    endpoint = values.get("checkpointStore.endpoint")
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env.get("RLJOB_S3_ENDPOINT") == endpoint


def test_the_policy_denies_every_rljob_write_but_a_deletions(default: list[Obj]) -> None:
    policy = one(default, "ValidatingAdmissionPolicy", REACH)
    binding = one(default, "ValidatingAdmissionPolicyBinding", REACH)
    assert policy["spec"]["failurePolicy"] == "Fail"
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["rljobs"], ["CREATE", "UPDATE"])
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == "!has(object.metadata.deletionTimestamp)"
    assert binding["spec"] == {"policyName": REACH, "validationActions": ["Deny"]}


def test_the_policys_operator_owned_names_are_the_models() -> None:
    owned = yaml.safe_load((CHART / "files" / "operator-owned.yaml").read_text())
    assert owned == {
        "reservedEnv": list(RESERVED_ENV_NAMES),
        "roles": [role.value for role in RoleName],
    }


def test_without_the_admission_policy_only_the_operator_refuses(helm: Path) -> None:
    objects = render(helm, {"allowlist.admissionPolicy": "false"})
    kinds = {obj["kind"] for obj in objects}
    assert not kinds & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    assert "--allow-s3-bucket=*" in operator_container(objects)["args"]


# ------------------------------------------------------------------------------------ RBAC


def test_cluster_role_rules_equal_the_rules_file_but_the_lease(default: list[Obj]) -> None:
    role = one(default, "ClusterRole", RELEASE)
    assert role["rules"] == [rule for rule in file_rules() if not is_lease_rule(rule)]
    binding = one(default, "ClusterRoleBinding", RELEASE)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": RELEASE,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}
    ]
    # One replica: no leader election, so no Lease access at all.
    assert find(default, "Role") == []


def test_namespaced_mode_grants_the_same_rules_where_they_apply(namespaced: list[Obj]) -> None:
    rules = file_rules()
    cluster = one(namespaced, "ClusterRole", f"{RELEASE}-cluster")
    assert cluster["rules"] == [r for r in rules if is_cluster_rule(r) and not is_lease_rule(r)]
    role = one(namespaced, "Role", RELEASE)
    assert role["metadata"]["namespace"] == "team-a"
    assert role["rules"] == [r for r in rules if not is_cluster_rule(r) and not is_lease_rule(r)]
    binding = one(namespaced, "RoleBinding", RELEASE)
    assert binding["metadata"]["namespace"] == "team-a"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}
    ]
    # Together they grant exactly the file's rules, the Lease in the release namespace only.
    lease = one(namespaced, "Role", f"{RELEASE}-leader-election")
    assert lease["metadata"]["namespace"] == NAMESPACE
    assert lease["rules"] == [r for r in rules if is_lease_rule(r)]
    granted = cluster["rules"] + role["rules"] + lease["rules"]
    assert sorted(map(json.dumps, granted)) == sorted(map(json.dumps, rules))


def test_kueue_enabled_adds_its_rules_and_the_flag(helm: Path) -> None:
    objects = render(helm, {"kueue.enabled": "true"})
    kueue_rules = yaml.safe_load((CHART / "files" / "rbac-rules-kueue.yaml").read_text())
    role = one(objects, "ClusterRole", RELEASE)
    assert role["rules"] == [r for r in file_rules() if not is_lease_rule(r)] + kueue_rules
    assert "--kueue" in operator_container(objects)["args"]
    assert "--kueue" not in operator_container(render(helm, {}))["args"]


def test_rules_are_least_privilege() -> None:
    rules = file_rules()
    for rule in rules:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], rule
        assert "secrets" not in rule["resources"], "the operator never reads Secrets"
    finalizers = [r for r in rules if "rljobs/finalizers" in r["resources"]]
    assert finalizers and "update" in finalizers[0]["verbs"]


WORKLOAD_READER = f"{RELEASE}-workload-reader"


@pytest.mark.parametrize("fixture", ["default", "namespaced"])
def test_a_workload_reader_role_reads_rljobs_and_nothing_else(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    """For a trainer's EngineRoster to watch its own RLJob: read-only, bound by the user in the
    job's namespace (a RoleBinding), never by the chart."""
    objects: list[Obj] = request.getfixturevalue(fixture)
    reader = one(objects, "ClusterRole", WORKLOAD_READER)
    assert reader["rules"] == [
        {"apiGroups": ["rljob.io"], "resources": ["rljobs"], "verbs": ["get", "list", "watch"]}
    ]
    bindings = find(objects, "ClusterRoleBinding") + find(objects, "RoleBinding")
    assert WORKLOAD_READER not in {binding["roleRef"]["name"] for binding in bindings}


AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"
EDITOR_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
RLJOBS_STATUS_GET = {"apiGroups": ["rljob.io"], "resources": ["rljobs/status"], "verbs": ["get"]}
# The ClusterRoles for people (templates/user-roles.yaml): name -> the built-in roles they are
# aggregated into, and exactly their rules. Neither may write rljobs/status: the operator owns it.
USER_ROLES: dict[str, tuple[set[str], list[Obj]]] = {
    f"{RELEASE}-rljob-editor-role": (
        {"edit", "admin"},
        [
            {"apiGroups": ["rljob.io"], "resources": ["rljobs"], "verbs": EDITOR_VERBS},
            RLJOBS_STATUS_GET,
        ],
    ),
    f"{RELEASE}-rljob-viewer-role": (
        {"view"},
        [
            {"apiGroups": ["rljob.io"], "resources": ["rljobs"], "verbs": ["get", "list", "watch"]},
            RLJOBS_STATUS_GET,
        ],
    ),
}


@pytest.mark.parametrize("fixture", ["default", "namespaced"])
@pytest.mark.parametrize("name", sorted(USER_ROLES), ids=lambda name: name.split("-rljob-")[1])
def test_user_roles_are_aggregated_into_the_built_in_roles_with_exactly_their_rules(
    name: str, fixture: str, request: pytest.FixtureRequest
) -> None:
    """As KubeRay's aggregate-clusterroles.yaml: whoever holds edit/admin (or view) in a namespace
    may work with (or read) RLJobs there, through kube-controller-manager's aggregation, in both
    install modes; the chart binds them to no one."""
    objects: list[Obj] = request.getfixturevalue(fixture)
    role = one(objects, "ClusterRole", name)
    into, rules = USER_ROLES[name]
    labels = role["metadata"]["labels"]
    aggregated = {key.removeprefix(AGGREGATE) for key in labels if key.startswith(AGGREGATE)}
    assert aggregated == into
    assert {labels[f"{AGGREGATE}{built_in}"] for built_in in into} == {"true"}
    assert role["rules"] == rules
    assert "aggregationRule" not in role
    bindings = find(objects, "ClusterRoleBinding") + find(objects, "RoleBinding")
    assert name not in {binding["roleRef"]["name"] for binding in bindings}


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({"rbac.aggregateToDefaultRoles": "false"}, id="aggregateToDefaultRoles-false"),
        pytest.param({"rbac.create": "false"}, id="rbac-create-false"),
    ],
)
def test_user_roles_can_be_left_out(helm: Path, values: dict[str, str]) -> None:
    objects = render(helm, values)
    names = {o["metadata"]["name"] for o in find(objects, "ClusterRole")}
    assert not names & set(USER_ROLES)
    labels = [o["metadata"].get("labels", {}) for o in objects]
    assert [key for keys in labels for key in keys if key.startswith(AGGREGATE)] == []
    # Only the user roles go: the operator's own rules stay unless rbac.create is false.
    assert (RELEASE in names) is (values.get("rbac.create") != "false")


def test_without_rbac_the_chart_ships_no_roles(helm: Path) -> None:
    objects = render(helm, {"rbac.create": "false"})
    assert not {o["kind"] for o in objects} & {"ClusterRole", "Role", "RoleBinding"}


def test_the_operator_may_set_a_pods_gate_and_slot_labels_and_never_create_one() -> None:
    """pods/status patch for the rljob.io/policy-current gate, pods patch for the slot labels of
    slotServices engines; never create pods."""
    pod_rules = {r["resources"][0]: r["verbs"] for r in file_rules() if "pods" in r["resources"][0]}
    assert pod_rules == {
        "pods": ["get", "list", "watch", "patch", "delete"],
        "pods/status": ["patch"],
    }


# ------------------------------------------------------------------------------ Deployment


def _container(objects: list[Obj]) -> Obj:
    deployment = one(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


@pytest.mark.parametrize("fixture", ["default", "namespaced"])
def test_pod_is_locked_down(fixture: str, request: pytest.FixtureRequest) -> None:
    objects: list[Obj] = request.getfixturevalue(fixture)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = _container(objects)
    context = container["securityContext"]
    assert context["runAsNonRoot"] is True
    assert isinstance(context["runAsUser"], int) and context["runAsUser"] > 0
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    # A writable /tmp on the read-only root filesystem.
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


@pytest.mark.parametrize("fixture", ["default", "namespaced"])
def test_probes_use_the_liveness_port(fixture: str, request: pytest.FixtureRequest) -> None:
    container = _container(request.getfixturevalue(fixture))
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert f"--liveness-port={ports['health']}" in container["args"]
    assert f"--metrics-port={ports['metrics']}" in container["args"]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}, probe


def test_one_replica_is_recreated_without_leader_election(default: list[Obj]) -> None:
    deployment = one(default, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    args = _container(default)["args"]
    assert not any(a.startswith("--leader-election-namespace") for a in args)
    assert not any(a.startswith("--namespace") for a in args)
    assert find(default, "PodDisruptionBudget") == []


def test_replicas_elect_a_leader_in_the_release_namespace(namespaced: list[Obj]) -> None:
    deployment = one(namespaced, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    container = _container(namespaced)
    assert f"--leader-election-namespace={NAMESPACE}" in container["args"]
    assert "--namespace=team-a" in container["args"]
    assert container["envFrom"] == [{"secretRef": {"name": "rljob-operator-s3"}}]
    assert one(namespaced, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_metrics_service_selects_the_operator(default: list[Obj]) -> None:
    service = one(default, "Service")
    labels = one(default, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


# ------------------------------------------------------------------ monitoring extras, CRD


def test_monitoring_extras_are_off_by_default(default: list[Obj]) -> None:
    kinds = {obj["kind"] for obj in default}
    assert not kinds & {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    assert dashboards(default) == []


def dashboards(objects: list[Obj]) -> list[Obj]:
    return [c for c in find(objects, "ConfigMap") if "grafana_dashboard" in c["metadata"]["labels"]]


def test_prometheus_rule_is_the_rules_file(extras: list[Obj]) -> None:
    rule = one(extras, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load(RULES_FILE.read_text())


def test_service_monitor_keeps_the_operators_labels(namespaced: list[Obj]) -> None:
    monitor = one(namespaced, "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["honorLabels"] is True and endpoint["port"] == "metrics"
    service = one(namespaced, "Service")
    # The scrape job is named after this label: the alert rules expect "rljob-operator".
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "rljob-operator"


def test_dashboard_config_map_is_the_dashboard_file(extras: list[Obj]) -> None:
    (config_map,) = dashboards(extras)
    (text,) = config_map["data"].values()
    assert json.loads(text) == json.loads(DASHBOARD_FILE.read_text())


def test_the_crd_is_shipped_in_crds_and_never_templated(helm: Path, default: list[Obj]) -> None:
    assert find(default, "CustomResourceDefinition") == []
    for template in (CHART / "templates").iterdir():
        assert "CustomResourceDefinition" not in template.read_text(), template
    with_crds = render(helm, {}, "--include-crds")
    assert one(with_crds, "CustomResourceDefinition")["metadata"]["name"] == "rljobs.rljob.io"


def test_the_charts_crd_is_the_generated_one() -> None:
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == [CHART_CRD.name]
    assert CHART_CRD.read_text() == CRD_FILE.read_text(), (
        f"cp {CRD_FILE.relative_to(REPO)} {CHART_CRD.relative_to(REPO)}"
    )
    assert CHART_CRD.read_text() == crd_yaml(), "regenerate: rljob crd > crds/rljob.io_rljobs.yaml"


def test_chart_app_version_is_the_operators() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    assert chart["version"] == __version__
