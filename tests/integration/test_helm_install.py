"""Issue #7: `helm install` of charts/rljob-operator into the real API server (every object
accepted, the Deployment available), and the operator, run with the chart's flags and
environment under the chart's ServiceAccount token, reconciles an RLJob to Ready: cluster-wide
(ClusterRole) and namespace-scoped (a Role in the watched namespace)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml

from rljob.dev.audit import writes_by_user
from tests.integration.chart_release import (
    CHART,
    Release,
    allowed,
    chart_operator,
    installed,
    new_release,
    run_helm,
    step_aside,
)
from tests.integration.conftest import Cluster, Operator
from tests.integration.rljobs import apply_rljob, example, kubectl, wait_condition

# cluster_wide: the chart's cluster-scoped objects and a cluster-wide operator.
pytestmark = [pytest.mark.integration, pytest.mark.cluster_wide]

NAME = "grpo-minimal"
RLJOB_RULE_RESOURCES = {"rljobs", "rljobs/status", "rljobs/finalizers"}


@pytest.fixture
def release(cluster: Cluster, operator: Operator) -> Release:
    """A new release; the session's operator steps aside for the test."""
    step_aside(operator)
    return new_release(cluster)


def _reconciles_to_ready(
    cluster: Cluster, release: Release, namespace: str, workdir: Path
) -> dict[str, Any]:
    """Runs the chart's operator, applies the minimal example and waits for Ready; no request
    of the chart's ServiceAccount is refused on the way."""
    since = dt.datetime.now(dt.UTC)
    with chart_operator(release, workdir) as op:
        apply_rljob(cluster, namespace, example())
        job = wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
        audit = writes_by_user(cluster.run.audit_log, release.user, since=since)
        # Only this test's namespace: a cluster-wide operator also meets earlier tests' jobs,
        # whose namespaces may be terminating (a 403 that is not about RBAC).
        here = [w for w in audit if w.namespace == namespace]
        assert [w for w in here if w.code == 403] == []
        assert any(w.resource == "rljobs" and w.subresource == "status" for w in here)
        log = op.log.read_text().lower()
        assert "forbidden" not in log.replace("is forbidden: unable to create new content", "")
    return job


def _every_object_exists(cluster: Cluster, release: Release, path: Path) -> None:
    path.write_text(yaml.safe_dump_all(release.objects))
    names = kubectl(cluster, "get", "-f", str(path), "-o", "name").split()
    assert len(names) == len(release.objects), names


def test_cluster_wide_install_reconciles_a_job_under_the_charts_account(
    cluster: Cluster, release: Release, namespace: str, tmp_path: Path
) -> None:
    with installed(release, {}):  # the chart's defaults
        kinds = sorted(o["kind"] for o in release.objects)
        # Four ClusterRoles: the operator's, the workload reader users bind to a trainer, and
        # the editor and viewer roles aggregated into the built-in edit/admin and view; the
        # allowlist's admission policy and its binding.
        assert kinds == [*["ClusterRole"] * 4, "ClusterRoleBinding", "Deployment",
                         "Service", "ServiceAccount", "ValidatingAdmissionPolicy",
                         "ValidatingAdmissionPolicyBinding"]  # fmt: skip
        _every_object_exists(cluster, release, tmp_path / "manifest.yaml")
        # The CRD comes from crds/ (helm skips it when present): the API server accepts it.
        kubectl(cluster, "apply", "--server-side", "--dry-run=server", "--force-conflicts",
                "--field-manager=chart-crds", "-f", str(CHART / "crds"))  # fmt: skip
        assert "--namespace" not in " ".join(release.operator_args())
        job = _reconciles_to_ready(cluster, release, namespace, tmp_path)
    assert job["status"]["phase"] == "Running"


def _rljob_rule_kinds(release: Release) -> set[str]:
    """Kinds of the chart's RBAC objects that grant the operator anything on RLJobs: those its
    bindings name (not the workload-reader or the user roles, which the chart binds to no one)."""
    bound = {
        (b["roleRef"]["kind"], b["roleRef"]["name"])
        for b in release.find("ClusterRoleBinding") + release.find("RoleBinding")
    }
    return {
        o["kind"]
        for o in release.find("ClusterRole") + release.find("Role")
        if (o["kind"], o["metadata"]["name"]) in bound
        for rule in o["rules"]
        if RLJOB_RULE_RESOURCES & set(rule["resources"])
    }


def test_namespaced_install_grants_a_role_and_reconciles_its_namespace(
    cluster: Cluster, release: Release, namespace: str, tmp_path: Path
) -> None:
    with installed(release, {"watchNamespace": namespace}):
        _every_object_exists(cluster, release, tmp_path / "manifest.yaml")
        assert _rljob_rule_kinds(release) == {"Role"}
        assert f"--namespace={namespace}" in release.operator_args()
        api = release.api()
        assert allowed(api, "list", "rljobs", group="rljob.io", namespace=namespace)
        assert not allowed(api, "list", "rljobs", group="rljob.io", namespace=release.namespace)
        assert not allowed(api, "list", "rljobs", group="rljob.io")  # cluster-wide
        assert not allowed(api, "create", "jobs", group="batch", namespace=release.namespace)
        assert allowed(api, "list", "nodes")  # NodeLost detection: the small ClusterRole
        job = _reconciles_to_ready(cluster, release, namespace, tmp_path)
    assert job["status"]["phase"] == "Running"


def _render(release: str, namespace: str, watch: str) -> list[dict[str, Any]]:
    extras = ("replicas=2", "serviceMonitor.enabled=true", "workloadPodMonitor.enabled=true",
              "grafanaDashboard.enabled=true", f"watchNamespace={watch}")  # fmt: skip
    sets = [f"--set={value}" for value in extras]
    text = run_helm("template", release, str(CHART), f"--namespace={namespace}", *sets)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _boolean_paths(value: Any, path: str = "") -> set[str]:
    if isinstance(value, bool):
        return {path}
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in _boolean_paths(v, f"{path}.{k}")}
    if isinstance(value, list):
        return {p for i, v in enumerate(value) for p in _boolean_paths(v, f"{path}[{i}]")}
    return set()


def test_names_that_yaml_reads_as_booleans_stay_strings() -> None:
    """`helm install yes -n on` or watchNamespace=off: unquoted, YAML 1.1 reads a boolean and
    helm cannot decode the manifest. The booleans are where they are with ordinary names."""
    ordinary = _render("release", "system", "team")
    tricky = _render("yes", "on", "off")
    misread = {
        f"{odd['kind']} {odd['metadata']['name']}": sorted(_boolean_paths(odd) - _boolean_paths(o))
        for o, odd in zip(ordinary, tricky, strict=True)
    }
    assert {name: paths for name, paths in misread.items() if paths} == {}
