"""rljob.sdk.EngineRoster against the bed's real kube-apiserver, as a trainer runs it: under a
ServiceAccount token bound to the chart's workload-reader rules, watching its RLJob while the
test writes the roster into the /status subresource (as the operator would; the session's
operator steps aside)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rljob.dev.bed import service_account_token
from rljob.sdk.kube_watch import WatchError
from rljob.sdk.roster import Engine, EngineRoster
from tests.helpers import wait_for
from tests.integration.chart_release import step_aside
from tests.integration.conftest import Cluster, Operator
from tests.integration.rljobs import apply_rljob, example, rljob_path

# cluster_wide: a ClusterRole, and the session operator stepping aside.
pytestmark = [pytest.mark.integration, pytest.mark.cluster_wide]

READER_TEMPLATE = (
    Path(__file__).resolve().parents[2] / "charts/rljob-operator/templates/workload-reader.yaml"
)
RBAC = "rbac.authorization.k8s.io"
ACCOUNT = "trainer"
JOB = "roster"
TIMEOUT = 30.0


def chart_reader_rules() -> list[dict[str, Any]]:
    """The rules of the chart's <release>-workload-reader ClusterRole (they hold no template)."""
    text = READER_TEMPLATE.read_text()
    rules = text[text.index("rules:") : text.index("{{- end }}")]
    loaded: list[dict[str, Any]] = yaml.safe_load(rules)["rules"]
    return loaded


def trainer_token(cluster: Cluster, namespace: str) -> str:
    """A token of the trainer's ServiceAccount (bound to nothing yet)."""
    account = {"metadata": {"name": ACCOUNT}}
    cluster.api.create(f"/api/v1/namespaces/{namespace}/serviceaccounts", account)
    return service_account_token(cluster.api, namespace, ACCOUNT)


def bind_reader(cluster: Cluster, namespace: str) -> None:
    base = f"/apis/{RBAC}/v1/namespaces/{namespace}"
    role = {"metadata": {"name": "workload-reader"}, "rules": chart_reader_rules()}
    cluster.api.create(f"{base}/roles", role)
    binding = {
        "metadata": {"name": "trainer-reads-rljobs"},
        "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "workload-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}],
    }
    cluster.api.create(f"{base}/rolebindings", binding)


def set_engines(cluster: Cluster, namespace: str, *members: dict[str, Any]) -> None:
    status = {"status": {"roles": {"rollout": {"engines": list(members)}}}}
    cluster.api.merge_patch(rljob_path(namespace, JOB) + "/status", status)


def member(pod: str, state: str, generation: int | None = None) -> dict[str, Any]:
    found = {"pod": pod, "address": f"10.244.0.{pod[-1]}", "state": state}
    return found if generation is None else {**found, "generation": generation}


@pytest.fixture
def roster_env(
    cluster: Cluster, crd: list[str], namespace: str, operator_session: Operator
) -> Iterator[dict[str, Any]]:
    """The test writes the roster: the session's operator (started by an earlier test, or now)
    steps aside so that it does not write its own over the test's, and is back afterwards."""
    step_aside(operator_session)
    try:
        apply_rljob(cluster, namespace, {**example(), "metadata": {"name": JOB}})
        token = trainer_token(cluster, namespace)
        yield {
            "name": JOB,
            "namespace": namespace,
            "api_server": cluster.server,
            "token": token,
            "ca_file": cluster.api.creds.ca_file,
        }
    finally:
        operator_session.ensure_default()


def test_the_roster_needs_the_workload_reader_binding(
    cluster: Cluster, roster_env: dict[str, Any]
) -> None:
    roster = EngineRoster(**roster_env)
    with pytest.raises(WatchError) as refused:
        roster.refresh()
    assert refused.value.code == 403
    bind_reader(cluster, roster_env["namespace"])
    wait_for(lambda: roster.refresh() == {}, TIMEOUT, "the bound reader to list its RLJob")


def test_callbacks_follow_the_status_roster(cluster: Cluster, roster_env: dict[str, Any]) -> None:
    namespace = roster_env["namespace"]
    bind_reader(cluster, namespace)
    set_engines(cluster, namespace, member("e1", "serving", 2))
    fired: list[str] = []
    callbacks: dict[str, Any] = {
        f"on_{event}": (lambda e, event=event: fired.append(f"{event}:{e.pod}"))
        for event in ("join", "serving", "drain", "leave")
    }
    with EngineRoster(**roster_env, **callbacks) as roster:
        wait_for(lambda: fired == ["join:e1", "serving:e1"], TIMEOUT, "the listed engine")
        # The operator drains e1 and its replacement e2 appears in the same status write.
        set_engines(cluster, namespace, member("e1", "draining", 2), member("e2", "joining"))
        wait_for(lambda: len(fired) == 4, TIMEOUT, "the drain and the join")
        assert fired[2:] == ["drain:e1", "join:e2"]
        assert roster.serving() == []
        # e1 is gone; e2 reported the current generation and turned serving.
        set_engines(cluster, namespace, member("e2", "serving", 3))
        assert roster.wait_until(lambda engines: set(engines) == {"e2"}, TIMEOUT)
        wait_for(lambda: len(fired) == 6, TIMEOUT, "the leave and the serving")
        assert roster.serving() == [Engine("e2", "10.244.0.2", "serving", 3)]
        cluster.api.delete(rljob_path(namespace, JOB))
        assert roster.wait_until(lambda engines: not engines, TIMEOUT)
    assert fired == [
        "join:e1",
        "serving:e1",
        "drain:e1",
        "join:e2",
        "leave:e1",
        "serving:e2",
        "leave:e2",
    ]
