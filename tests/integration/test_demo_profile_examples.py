"""The stock examples on the demo profile (4 nodes x 8 GPUs, the bed `rljob dev demo` runs):
each of rljob-minimal, rljob-demo and rljob-disaggregated, applied as shipped (its checkpoints
pointed at the bed's S3 server), reaches Ready, then is deleted for the next. Their small
pods must never strand the whole nodes their trainer's ranks need (docs/architecture.md,
"A gang that fits")."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from rljob.dev.bed import ensure_namespace
from rljob.dev.demo import DEMO_NAMESPACE, DemoBed
from rljob.dev.kubeapi import ApiError, KubeApi
from rljob.dev.services import DEMO_BUCKET
from tests.helpers import wait_for
from tests.integration.rljobs import EXAMPLES

# own_plane: starts a control plane of its own.
pytestmark = [pytest.mark.integration, pytest.mark.own_plane]

RLJOBS = f"/apis/rljob.io/v1alpha1/namespaces/{DEMO_NAMESPACE}/rljobs"
_PATHS = {
    "ServiceAccount": f"/api/v1/namespaces/{DEMO_NAMESPACE}/serviceaccounts",
    "RoleBinding": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{DEMO_NAMESPACE}/rolebindings",
    "RLJob": RLJOBS,
}


@pytest.fixture(scope="module")
def demo_bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DemoBed, KubeApi]]:
    bed = DemoBed(tmp_path_factory.mktemp("demo-profile"))
    try:
        api = bed.start(time.monotonic())
        ensure_namespace(api, DEMO_NAMESPACE, 30)
        yield bed, api
    finally:
        bed.stop()


def _documents(example: str, bed: DemoBed) -> list[dict[str, Any]]:
    """The example's objects as shipped; its checkpoints kept in the bed's S3 server."""
    docs = [d for d in yaml.safe_load_all((EXAMPLES / f"{example}.yaml").read_text()) if d]
    store = bed.services.store
    for doc in docs:
        doc["metadata"]["namespace"] = DEMO_NAMESPACE
        checkpoint = doc.get("spec", {}).get("checkpoint") if doc["kind"] == "RLJob" else None
        if checkpoint is not None:
            prefix = checkpoint["uri"].removeprefix("s3://").partition("/")[2]
            checkpoint.update(
                uri=f"s3://{DEMO_BUCKET}/{example}/{prefix}".rstrip("/"),
                endpoint=store.endpoint,
                addressingStyle="path",
            )
    return docs


@pytest.mark.parametrize("example", ["rljob-minimal", "rljob-demo", "rljob-disaggregated"])
def test_each_stock_example_reaches_ready_on_the_demo_profile(
    demo_bed: tuple[DemoBed, KubeApi], example: str
) -> None:
    bed, api = demo_bed
    docs = _documents(example, bed)
    (job,) = [d for d in docs if d["kind"] == "RLJob"]
    name = job["metadata"]["name"]
    for doc in docs:
        path = f"{_PATHS[doc['kind']]}/{doc['metadata']['name']}?fieldValidation=Strict"
        api.apply(path, doc, field_manager="test")
    try:
        wait_for(lambda: _ready(api, name), 180, f"{example} Ready on the demo profile")
    finally:
        _delete_and_wait(api, name)


def _ready(api: KubeApi, name: str) -> dict[str, Any] | None:
    job = api.get(f"{RLJOBS}/{name}")
    conditions = (job.get("status") or {}).get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    return job if ready else None


def _delete_and_wait(api: KubeApi, name: str) -> None:
    """Deletes the job and waits until none of its pods hold a GPU, for the next example."""
    try:
        api.delete(f"{RLJOBS}/{name}")
    except ApiError as exc:
        if exc.status != 404:
            raise
    pods = f"/api/v1/namespaces/{DEMO_NAMESPACE}/pods?labelSelector=rljob.io/job={name}"
    wait_for(lambda: not api.get(pods)["items"], 120, f"{name}'s pods gone")
