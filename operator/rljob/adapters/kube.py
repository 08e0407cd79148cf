"""The operator's Kubernetes writes and reads through kubernetes.aio: never blocks the loop,
a timeout on every call, errors mapped to one exception type with the HTTP status."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from typing import Any

from kubernetes.aio import config
from kubernetes.aio.client import ApiClient
from kubernetes.aio.client.exceptions import ApiException
from kubernetes.aio.dynamic import DynamicClient
from kubernetes.aio.dynamic.exceptions import DynamicApiError

from rljob.adapters.paths import object_path, rljob_path
from rljob.observability import API_ERRORS

FIELD_MANAGER = "rljob-operator"
JSON = dict[str, Any]


class KubeError(Exception):
    """A failed API call: `status` is the HTTP status (0 when no answer came back)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def namespace_terminating(self) -> bool:
        """The namespace is being deleted: nothing can be created in it any more."""
        return self.status == 403 and "being terminated" in self.message


def _error_message(body: object) -> str:
    try:
        return str(json.loads(body)["message"])  # type: ignore[arg-type]
    except (TypeError, ValueError, KeyError):
        return str(body)[:500]


def replica_identity() -> str:
    """This operator process: its Lease holder identity and, in its User-Agent, its name in
    the API server's audit log (replicas share one ServiceAccount)."""
    return f"{socket.gethostname()}-{os.getpid()}"


async def connect(kubeconfig: str | None) -> ApiClient:
    """A client from in-cluster credentials, or from the given kubeconfig file."""
    if kubeconfig:
        api = await config.new_client_from_config(config_file=kubeconfig)
    else:
        config.load_incluster_config()
        api = ApiClient()
    api.user_agent = f"rljob-operator/{replica_identity()}"
    # As kopf's own connections (its ConnectionInfo.trust_env is False): no proxy variables and
    # no ~/.netrc for the API server, which kubernetes.aio would read on an executor thread for
    # every request.
    api.configuration.client_session_kwargs = {"trust_env": False}
    return api


class Kube:
    """JSON requests against the API server with a per-call timeout."""

    def __init__(
        self, api: ApiClient, timeout: float = 10.0, may_write: Callable[[], bool] | None = None
    ) -> None:
        self._dynamic = DynamicClient(api)
        self._api = api
        self.timeout = timeout
        # Checked right before every write: a leader frozen mid-pass (SIGSTOP, a long GC pause)
        # that wakes after losing its Lease sends nothing.
        self.may_write = may_write or (lambda: True)

    async def close(self) -> None:
        await self._api.close()

    async def request(
        self,
        method: str,
        path: str,
        body: JSON | None = None,
        *,
        content_type: str | None = None,
        **params: Any,
    ) -> JSON:
        if content_type:
            params["content_type"] = content_type
        if method.lower() != "get" and not self.may_write():
            raise KubeError(0, f"not the leader: {method.upper()} {path} not sent")
        try:
            resp = await self._dynamic.request(
                method, path, body=body, serialize=False, _request_timeout=self.timeout, **params
            )
            data: JSON = await resp.json()
        except (DynamicApiError, ApiException) as exc:
            status = int(getattr(exc, "status", 0) or 0)
            API_ERRORS.labels(status=str(status)).inc()
            raise KubeError(status, _error_message(getattr(exc, "body", exc))) from None
        except (OSError, TimeoutError) as exc:
            API_ERRORS.labels(status="0").inc()
            raise KubeError(0, f"{type(exc).__name__}: {exc}") from None
        return data

    async def apply(self, body: JSON) -> JSON:
        """Server-side apply of a full manifest under our field manager."""
        meta = body["metadata"]
        path = object_path(body["apiVersion"], body["kind"], meta.get("namespace"), meta["name"])
        return await self.request(
            "patch",
            path,
            body,
            content_type="application/apply-patch+yaml",
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )

    async def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        uid: str,
        *,
        grace_period_seconds: int | None = None,
    ) -> None:
        """Deletes exactly the object with this uid; Jobs always with Foreground propagation,
        because the API's default for Jobs orphans their pods. A 404 means already gone."""
        options: JSON = {"preconditions": {"uid": uid}}
        if kind == "Job":
            options["propagationPolicy"] = "Foreground"
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        try:
            await self.request("delete", object_path(api_version, kind, namespace, name), options)
        except KubeError as exc:
            if not exc.not_found:
                raise

    async def set_pod_condition(self, namespace: str, name: str, condition: JSON) -> bool:
        """Sets one condition of a pod's status (a strategic merge on status.conditions, by
        type: its other conditions stay). False when the pod is gone (404) or the write lost a
        race (409): a later pass sees it again."""
        path = object_path("v1", "Pod", namespace, name) + "/status"
        body = {"status": {"conditions": [condition]}}
        return await self._patch_pod(path, body, "application/strategic-merge-patch+json")

    async def set_pod_labels(
        self, namespace: str, name: str, uid: str, labels: dict[str, str | None]
    ) -> bool:
        """Sets (a value) or removes (None) labels of the pod with that uid (a merge patch: its
        other labels stay; the uid makes a namesake's patch a 409). False when the pod is gone
        (404) or another (409): a later pass sees it again."""
        path = object_path("v1", "Pod", namespace, name)
        body = {"metadata": {"uid": uid, "labels": labels}}
        return await self._patch_pod(path, body, "application/merge-patch+json")

    async def _patch_pod(self, path: str, body: JSON, content_type: str) -> bool:
        """A pod patch; False on a 404 or a 409 (a later pass sees the pod again)."""
        try:
            await self.request(
                "patch", path, body, content_type=content_type, field_manager=FIELD_MANAGER
            )
        except KubeError as exc:
            if exc.not_found or exc.conflict:
                return False
            raise
        return True

    async def patch_status(
        self, namespace: str, name: str, status: JSON, resource_version: str | None = None
    ) -> JSON:
        """Merge-patches the RLJob's status; with resource_version the write fails (409) if the
        object changed since it was read."""
        body: JSON = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        return await self.request(
            "patch",
            rljob_path(namespace, name) + "/status",
            body,
            content_type="application/merge-patch+json",
        )
