"""kopf's settings: the per-event diff base is replaced by one that copies nothing (the operator
has no change handlers for it to serve), and the server-side label selectors stay."""

from __future__ import annotations

from typing import Any, cast

import kopf

from rljob.handlers import NoDiffBase, configure_settings

BODY: dict[str, Any] = {
    "apiVersion": "rljob.io/v1alpha1",
    "kind": "RLJob",
    "metadata": {"name": "grpo", "namespace": "rl", "annotations": {"a": "b"}},
    "spec": {"roles": {"trainer": {"replicas": 2}}},
}


def test_the_diff_base_builds_fetches_and_stores_nothing() -> None:
    settings = kopf.OperatorSettings()
    configure_settings(settings)
    storage = settings.persistence.diffbase_storage
    body = kopf.Body(cast(kopf.RawBody, BODY))
    patch = kopf.Patch()

    storage.store(body=body, patch=patch, essence=storage.build(body=body))

    assert isinstance(storage, NoDiffBase)
    assert storage.build(body=body) == {}
    assert storage.fetch(body=body) is None
    assert not patch, "nothing is written back to the object"


def test_children_are_filtered_by_the_managed_by_label_on_the_server() -> None:
    settings = kopf.OperatorSettings()
    configure_settings(settings)
    assert settings.watching.label_selectors[("v1", "pods")] == (
        "app.kubernetes.io/managed-by=rljob-operator"
    )
