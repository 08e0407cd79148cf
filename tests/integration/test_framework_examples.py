"""The framework examples (examples/frameworks/*.yaml) on the real API server with the CRD
installed: each passes a server-side dry-run create under strict field validation, without
warnings, and the object the server would store renders the same children as the file (the
trainer's Service and one Job, as docs/frameworks.md says; tests/unit/test_framework_examples.py
checks what is in them). A misspelt field is rejected, naming it."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.api import PLURAL, parse_rljob
from rljob.dev.kubeapi import ApiError
from rljob.reconcile import DesiredChild, RenderContext, render_children
from tests.integration.conftest import Cluster
from tests.integration.rljobs import example
from tests.unit.test_framework_examples import FRAMEWORKS, Framework

pytestmark = pytest.mark.integration


def dry_run_create(cluster: Cluster, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    """Schema, CEL and admission run; nothing is stored."""
    path = f"/apis/rljob.io/v1alpha1/namespaces/{namespace}/{PLURAL}"
    return cluster.api.create(f"{path}?dryRun=All&fieldValidation=Strict", body)


def children(body: dict[str, Any], namespace: str, uid: str) -> list[DesiredChild]:
    body = {**body, "metadata": {**body["metadata"], "namespace": namespace, "uid": uid}}
    job = parse_rljob(body)
    context = RenderContext(name=job.metadata.name, namespace=namespace, uid=uid, attempt=1)
    return render_children(job, context)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_example_passes_a_strict_dry_run_and_renders_as_the_file_does(
    cluster: Cluster, crd: list[str], namespace: str, framework: Framework
) -> None:
    body = example(f"frameworks/{framework.example}")
    stored = dry_run_create(cluster, namespace, body)
    assert cluster.api.last_warnings == []
    name, uid = stored["metadata"]["name"], stored["metadata"]["uid"]
    rendered = children(stored, namespace, uid)
    assert [(child.kind, child.name) for child in rendered] == [
        ("Service", f"{name}-trainer"),
        ("Job", f"{name}-trainer-a1"),
    ]
    assert [child.body for child in rendered] == [
        child.body for child in children(body, namespace, uid)
    ]


def test_a_misspelt_field_is_rejected_naming_it(
    cluster: Cluster, crd: list[str], namespace: str
) -> None:
    body = example("frameworks/verl")
    engines = body["spec"]["roles"]["trainer"]["engines"]
    engines["exporters"] = engines.pop("exporter")
    with pytest.raises(ApiError) as rejected:
        dry_run_create(cluster, namespace, body)
    assert rejected.value.status in (400, 422), rejected.value.body
    assert 'unknown field "spec.roles.trainer.engines.exporters"' in rejected.value.body["message"]


def test_the_disaggregated_slime_example_passes_a_strict_dry_run(
    cluster: Cluster, crd: list[str], namespace: str
) -> None:
    """Its rollout role (slot Services, Gated SGLang engines) is what the server would store."""
    body = example("frameworks/slime-disaggregated")
    stored = dry_run_create(cluster, namespace, body)
    assert cluster.api.last_warnings == []
    name, uid = stored["metadata"]["name"], stored["metadata"]["uid"]
    rendered = children(stored, namespace, uid)
    slots = [("Service", f"{name}-rollout-{k}") for k in range(4)]
    assert set(slots) <= {(child.kind, child.name) for child in rendered}
    assert [child.body for child in rendered] == [
        child.body for child in children(body, namespace, uid)
    ]
