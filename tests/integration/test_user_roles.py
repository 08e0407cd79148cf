"""The chart's ClusterRoles for people (templates/user-roles.yaml) on the real control plane:
kube-controller-manager's clusterrole-aggregation controller folds them into the built-in edit,
admin and view roles, and SubjectAccessReviews show what a made-up user bound to each by a
RoleBinding in a fresh namespace may do with RLJobs there: edit and admin create, change and
delete them but never write their status (the operator's alone), view only reads them, and a user
bound to nothing may do nothing. Aggregation is asynchronous: the fixture waits for it."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from rljob.dev.bed import ensure_namespace
from tests.helpers import wait_for
from tests.integration.chart_release import Release, installed, new_release
from tests.integration.conftest import Cluster, delete_namespace

# cluster_wide: the chart's aggregated ClusterRoles.
pytestmark = [pytest.mark.integration, pytest.mark.cluster_wide]

RBAC = "rbac.authorization.k8s.io"
GROUP = "rljob.io"
BUILT_IN = ("edit", "admin", "view")
UNBOUND = "unbound"
# A request each built-in role answers only once it has taken in the chart's rules.
PROBE = {"edit": "create", "admin": "create", "view": "get"}
EDITOR_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
AGGREGATION_SECONDS = 60


def _allowed(cluster: Cluster, user: str, attributes: dict[str, str]) -> bool:
    """A SubjectAccessReview, asked as the cluster's admin."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": user, "resourceAttributes": attributes}}  # fmt: skip
    answer = cluster.api.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(answer["status"].get("allowed"))


def may(cluster: Cluster, user: str, verb: str, namespace: str, subresource: str = "") -> bool:
    """May `user` do `verb` on rljobs (or on their `subresource`) in `namespace`?"""
    attributes = {"namespace": namespace, "verb": verb, "group": GROUP, "resource": "rljobs"}
    if subresource:
        attributes["subresource"] = subresource
    return _allowed(cluster, user, attributes)


def bound(cluster: Cluster, user: str, namespace: str) -> bool:
    """Whether the user's RoleBinding is in effect: every built-in role lists ConfigMaps."""
    attributes = {"namespace": namespace, "verb": "list", "resource": "configmaps"}
    return _allowed(cluster, user, attributes)


@dataclass(frozen=True)
class Users:
    """Made-up users, one per built-in role (RoleBindings in `namespace`) and one unbound, with
    the chart installed."""

    release: Release
    namespace: str
    names: dict[str, str]  # built-in role, or UNBOUND -> user name


def _bind(cluster: Cluster, namespace: str, built_in: str, user: str) -> None:
    binding = {
        "metadata": {"name": f"{built_in}-{user}"},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": built_in},
        "subjects": [{"apiGroup": RBAC, "kind": "User", "name": user}],
    }
    cluster.api.create(f"/apis/{RBAC}/v1/namespaces/{namespace}/rolebindings", binding)


@pytest.fixture(scope="module")
def users(cluster: Cluster, crd: list[str]) -> Iterator[Users]:
    suffix = secrets.token_hex(3)
    namespace = f"user-roles-{suffix}"
    names = {role: f"{role}-user-{suffix}" for role in (*BUILT_IN, UNBOUND)}
    ensure_namespace(cluster.api, namespace)
    try:
        for built_in in BUILT_IN:
            _bind(cluster, namespace, built_in, names[built_in])

        def bound_but_not_to_rljobs() -> bool:
            return all(
                bound(cluster, names[role], namespace)
                and not may(cluster, names[role], PROBE[role], namespace)
                for role in BUILT_IN
            )

        # Before the chart the built-in roles know nothing of RLJobs (once any earlier
        # release's aggregated rules are gone).
        wait_for(bound_but_not_to_rljobs, AGGREGATION_SECONDS,
                 "the RoleBindings in effect and no RLJob rule in edit, admin or view")  # fmt: skip
        release = new_release(cluster)
        with installed(release, {}):  # the chart's defaults: rbac.aggregateToDefaultRoles true

            def aggregated() -> bool:
                return all(may(cluster, names[role], PROBE[role], namespace) for role in BUILT_IN)

            wait_for(aggregated, AGGREGATION_SECONDS,
                     "kube-controller-manager to aggregate the chart's roles")  # fmt: skip
            yield Users(release, namespace, names)
    finally:
        delete_namespace(cluster, namespace)


def _row(role: str, allow: bool, verb: str, subresource: str = "") -> Any:
    """A table row, e.g. id edit-may-not-update-rljobs/status."""
    target = f"rljobs/{subresource}" if subresource else "rljobs"
    return pytest.param(role, verb, subresource, allow,
                        id=f"{role}-{'may' if allow else 'may-not'}-{verb}-{target}")  # fmt: skip


EDITORS = ("edit", "admin")
STATUS_WRITES = ("update", "patch")
VIEWER_VERBS = ("get", "list", "watch")
ACCESS = [
    # edit and admin: everything on RLJobs but writing their status, which the operator owns.
    *(_row(role, True, verb) for role in EDITORS for verb in EDITOR_VERBS),
    *(_row(role, True, "get", "status") for role in EDITORS),
    *(_row(role, False, verb, "status") for role in EDITORS for verb in STATUS_WRITES),
    # view: reads only.
    *(_row("view", True, verb) for verb in VIEWER_VERBS),
    _row("view", True, "get", "status"),
    *(_row("view", False, verb) for verb in EDITOR_VERBS if verb not in VIEWER_VERBS),
    *(_row("view", False, verb, "status") for verb in STATUS_WRITES),
    # Bound to nothing: nothing.
    *(_row(UNBOUND, False, verb) for verb in EDITOR_VERBS),
    _row(UNBOUND, False, "get", "status"),
    *(_row(UNBOUND, False, verb, "status") for verb in STATUS_WRITES),
]


@pytest.mark.parametrize(("role", "verb", "subresource", "allow"), ACCESS)
def test_built_in_roles_grant_rljobs_through_the_charts_aggregated_roles(
    cluster: Cluster, users: Users, role: str, verb: str, subresource: str, allow: bool
) -> None:
    user = users.names[role]
    assert may(cluster, user, verb, users.namespace, subresource) is allow
    # A RoleBinding grants its namespace only: nothing in another one.
    assert not may(cluster, user, verb, users.release.namespace, subresource)


@pytest.mark.parametrize(
    ("built_in", "chart_role"),
    [
        pytest.param("edit", "-rljob-editor-role", id="edit-takes-in-the-editor-role"),
        pytest.param("admin", "-rljob-editor-role", id="admin-takes-in-the-editor-role"),
        pytest.param("view", "-rljob-viewer-role", id="view-takes-in-the-viewer-role"),
    ],
)
def test_the_built_in_role_holds_the_charts_rules(
    cluster: Cluster, users: Users, built_in: str, chart_role: str
) -> None:
    """What the access reviews rest on: the controller copied the chart's rules into the
    built-in ClusterRole."""
    (name,) = [
        o["metadata"]["name"]
        for o in users.release.find("ClusterRole")
        if o["metadata"]["name"].endswith(chart_role)
    ]
    rules = cluster.api.get(f"/apis/{RBAC}/v1/clusterroles/{name}")["rules"]
    held = cluster.api.get(f"/apis/{RBAC}/v1/clusterroles/{built_in}")["rules"]
    assert [rule for rule in rules if rule not in held] == []
