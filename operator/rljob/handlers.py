"""kopf routing only: settings at startup, child indexes, and events routed to the per-job
workers. Every decision lives in the pure layers; every write in the adapters."""

from __future__ import annotations

from typing import Any

import kopf

from rljob.adapters.observe import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    job_key,
    summarize_child,
    summarize_owner_link,
    summarize_pod,
)
from rljob.api import GROUP, PLURAL, VERSION
from rljob.runtime.runtime import Runtime, RuntimeOptions

FINALIZER = "rljob.io/finalizer"
ANNOTATION_PREFIX = "rljob.io"
MANAGED = {MANAGED_BY_LABEL: MANAGED_BY}
CHILD_RESOURCES = (
    ("apps", "v1", "deployments"),
    ("apps", "v1", "replicasets"),  # links of a Deployment pod's controller chain
    ("batch", "v1", "jobs"),
    ("", "v1", "services"),
)
POD_RESOURCE = ("", "v1", "pods")


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf builds a diff base (a deep copy of the body) on every watch event for its change
    handlers; the operator has none (kopf serves watches only: docs/architecture.md section 4),
    so it builds nothing and stores nothing. A tenth of a fleet's steady-state CPU was this copy."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def in_scope(namespace: str | None, memo: kopf.Memo, **_: Any) -> bool:
    """Whether an object's namespace is the operator's: with namespace patterns kopf watches
    every namespace (no watch per namespace to start and stop as they come and go) and the
    handlers keep only the namespaces that match."""
    options: RuntimeOptions = memo["options"]
    return options.watches(namespace)


def configure_settings(settings: kopf.OperatorSettings) -> None:
    """All of kopf's settings in one place."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.posting.reporting_component = "rljob-operator"
    settings.peering.standalone = True  # kopf peering is not leader election
    settings.watching.connect_timeout = 10
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 30
    for group, version, plural in (*CHILD_RESOURCES, POD_RESOURCE):
        # Server-side filtering: the operator never receives unrelated objects.
        selector = (group, plural) if group else (version, plural)
        settings.watching.label_selectors[selector] = f"{MANAGED_BY_LABEL}={MANAGED_BY}"


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    configure_settings(settings)
    options: RuntimeOptions = memo["options"]
    # A namespaced install has no cluster-wide namespace list: do not let kopf try it.
    settings.scanning.disabled = not options.clusterwide
    memo["runtime"] = await Runtime.start(options)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    runtime: Runtime | None = memo.get("runtime")
    if runtime is not None:
        await runtime.stop()


@kopf.index("apps", "v1", "deployments", labels=MANAGED, when=in_scope)
def deployments_idx(body: kopf.Body, **_: Any) -> dict[Any, Any]:
    key = job_key(body)
    return {key: summarize_child(body)} if key else {}


@kopf.index("apps", "v1", "replicasets", labels=MANAGED, when=in_scope)
def replicasets_idx(body: kopf.Body, **_: Any) -> dict[Any, Any]:
    key = job_key(body)
    return {key: summarize_owner_link(body)} if key else {}


@kopf.index("batch", "v1", "jobs", labels=MANAGED, when=in_scope)
def jobs_idx(body: kopf.Body, **_: Any) -> dict[Any, Any]:
    key = job_key(body)
    return {key: summarize_child(body)} if key else {}


@kopf.index("", "v1", "services", labels=MANAGED, when=in_scope)
def services_idx(body: kopf.Body, **_: Any) -> dict[Any, Any]:
    key = job_key(body)
    return {key: summarize_child(body)} if key else {}


@kopf.index("", "v1", "pods", labels=MANAGED, when=in_scope)
def pods_idx(body: kopf.Body, **_: Any) -> dict[Any, Any]:
    key = job_key(body)
    return {key: summarize_pod(body)} if key else {}


@kopf.index(GROUP, VERSION, PLURAL, when=in_scope)
def rljobs_idx(body: kopf.Body, **_: Any) -> dict[Any, Any]:
    meta = body["metadata"]
    return {(meta["namespace"], meta["name"]): meta["uid"]}


@kopf.on.event("apps", "v1", "deployments", labels=MANAGED, when=in_scope)
@kopf.on.event("batch", "v1", "jobs", labels=MANAGED, when=in_scope)
@kopf.on.event("", "v1", "services", labels=MANAGED, when=in_scope)
@kopf.on.event("", "v1", "pods", labels=MANAGED, when=in_scope)
async def child_changed(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    runtime: Runtime = memo["runtime"]
    runtime.bind_indexes(kwargs)
    key = job_key(body)
    if key:
        runtime.workers.wake(key)


@kopf.on.event(GROUP, VERSION, PLURAL, when=in_scope)
async def rljob_changed(
    event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **kwargs: Any
) -> None:
    runtime: Runtime = memo["runtime"]
    runtime.bind_indexes(kwargs)
    if event["type"] == "DELETED":
        runtime.forget(dict(body))
    else:
        runtime.submit(dict(body))


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    # kopf's own credential readers: no dependency on a client library's config loading.
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
