"""The generated CRD on the real API server: accepted cleanly, and it rejects every invalid
manifest naming the same field the pydantic models name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rljob.api import PLURAL, crd_manifest
from rljob.dev.bed import CRD_NAME
from rljob.dev.kubeapi import ApiError
from tests.integration.conftest import Cluster
from tests.manifests import EXAMPLES, documents, example_rljob, expected_field, invalid_manifests

pytestmark = pytest.mark.integration


def _collection(namespace: str) -> str:
    return f"/apis/rljob.io/v1alpha1/namespaces/{namespace}/{PLURAL}"


def _create(cluster: Cluster, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return cluster.api.create(f"{_collection(namespace)}?fieldValidation=Strict", body)


def _rejection(call: Any) -> ApiError:
    with pytest.raises(ApiError) as rejected:
        call()
    assert rejected.value.status in (400, 422), rejected.value.body
    return rejected.value


def _named_fields(error: ApiError) -> set[str]:
    causes = error.body.get("details", {}).get("causes", [])
    return {cause.get("field", "") for cause in causes}


def test_crd_is_accepted_structural_with_no_warnings(cluster: Cluster, crd: list[str]) -> None:
    assert crd == []
    stored = cluster.api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}")
    conditions = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
    assert conditions.get("NonStructuralSchema", "False") == "False"
    assert conditions["Established"] == "True"
    assert stored["spec"]["names"]["shortNames"] == crd_manifest()["spec"]["names"]["shortNames"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_are_accepted_without_warnings(
    cluster: Cluster, crd: list[str], namespace: str, path: Path
) -> None:
    body = example_rljob(path)
    created = _create(cluster, namespace, body)
    assert cluster.api.last_warnings == []
    assert created["metadata"]["name"] == body["metadata"]["name"]


@pytest.mark.parametrize("path", invalid_manifests(updates=False))
def test_invalid_manifest_is_rejected_naming_the_field(
    cluster: Cluster, crd: list[str], namespace: str, path: Path
) -> None:
    (body,) = documents(path)
    error = _rejection(lambda: _create(cluster, namespace, body))
    field = expected_field(path)
    if not _named_fields(error):  # strict decoding errors name the field only in the message
        assert f".{field}" in error.body["message"] or field in error.body["message"], error.body
        return
    assert field in _named_fields(error), error.body


@pytest.mark.parametrize("path", invalid_manifests(updates=True))
def test_invalid_update_is_rejected_naming_the_field(
    cluster: Cluster, crd: list[str], namespace: str, path: Path
) -> None:
    original, changed = documents(path)
    _create(cluster, namespace, original)
    name = original["metadata"]["name"]
    url = f"{_collection(namespace)}/{name}?fieldValidation=Strict"

    def update() -> None:
        """PUT at the current resourceVersion: an operator running for an earlier test writes
        the new job's status (its roster) meanwhile, and a 409 would hide the validation."""
        for _ in range(10):
            current = cluster.api.get(f"{_collection(namespace)}/{name}")
            changed["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            try:
                cluster.api.request("PUT", url, changed)
            except ApiError as exc:
                if exc.status != 409:
                    raise
                continue
            return

    error = _rejection(update)
    assert expected_field(path) in _named_fields(error), error.body
