"""A small synchronous client of the simulator's control API (tests, demo, launcher)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode


class SimError(RuntimeError):
    """The control API answered with an error status."""

    def __init__(self, status: int, body: Any) -> None:
        message = body.get("error", body) if isinstance(body, dict) else body
        super().__init__(f"{status}: {message}")
        self.status = status
        self.body = body


class SimClient:
    """Calls against one simulator's control URL, e.g. http://127.0.0.1:9100."""

    def __init__(self, control_url: str, timeout: float = 5.0) -> None:
        self.url = control_url.rstrip("/")
        self.timeout = timeout

    def _call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, str | None] | None = None,
    ) -> Any:
        params = {k: v for k, v in (query or {}).items() if v is not None}
        url = f"{self.url}{path}" + (f"?{urlencode(params)}" if params else "")
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                decoded: Any = json.loads(raw)
            except ValueError:
                decoded = raw.decode(errors="replace")
            raise SimError(exc.code, decoded) from None
        return json.loads(raw) if raw else None

    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/healthz")
        return result

    def workloads(
        self,
        *,
        namespace: str | None = None,
        job: str | None = None,
        role: str | None = None,
        pod: str | None = None,
    ) -> list[dict[str, Any]]:
        """Attached workloads with their address, profile, faults and current state."""
        query = {"namespace": namespace, "job": job, "role": role, "pod": pod}
        result: list[dict[str, Any]] = self._call("GET", "/workloads", query=query)
        return result

    def inject(
        self,
        kind: str,
        *,
        namespace: str,
        pod: str | None = None,
        job: str | None = None,
        role: str | None = None,
        survive_restart: bool | None = None,
        **params: Any,
    ) -> dict[str, Any]:
        """Injects a fault into one pod, or into a job's pods (of one role). Kinds and params:
        drift(drop, over_seconds=0), stall(), hang(), latency(p99_seconds), errors(rate),
        sleep(on=True, level=1), load(waiting, fraction=None), unreachable().
        Returns {"id", "matched", "replaced", "rule"}."""
        body: dict[str, Any] = {"kind": kind, "namespace": namespace, **params}
        for key, value in (("pod", pod), ("job", job), ("role", role)):
            if value is not None:
                body[key] = value
        if survive_restart is not None:
            body["survive_restart"] = survive_restart
        result: dict[str, Any] = self._call("POST", "/faults", body)
        return result

    def clear(
        self,
        *,
        id: str | None = None,
        namespace: str | None = None,
        pod: str | None = None,
        job: str | None = None,
        role: str | None = None,
        kind: str | None = None,
    ) -> list[str]:
        """Clears rules: one by id; those of exactly one selector; a namespace's; or all
        (no arguments); each optionally of one kind. Returns the cleared ids."""
        query = {
            "id": id, "namespace": namespace, "pod": pod, "job": job, "role": role, "kind": kind,
        }  # fmt: skip
        result: dict[str, list[str]] = self._call("DELETE", "/faults", query=query)
        return result["cleared"]

    def faults(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/faults")
        return result

    def set_profile(
        self,
        profile: Mapping[str, Any],
        *,
        namespace: str,
        pod: str | None = None,
        job: str | None = None,
        role: str | None = None,
    ) -> dict[str, Any]:
        """Overrides profile fields for matching workloads, now and when they restart."""
        body: dict[str, Any] = {"namespace": namespace, "profile": dict(profile)}
        for key, value in (("pod", pod), ("job", job), ("role", role)):
            if value is not None:
                body[key] = value
        result: dict[str, Any] = self._call("POST", "/profiles", body)
        return result

    def sync(self) -> dict[str, Any]:
        """Polls the API server now instead of at the next interval."""
        result: dict[str, Any] = self._call("POST", "/sync")
        return result

    def push_weights(self, generation: int, *, namespace: str, pod: str) -> dict[str, Any]:
        """Sets the policy generation one engine serves (rljob_engine_policy_generation)."""
        body = {"namespace": namespace, "pod": pod, "generation": generation}
        result: dict[str, Any] = self._call("POST", "/weights", body)
        return result

    def start_driver(self, *, namespace: str, job: str, **settings: float) -> dict[str, Any]:
        """A simulated rollout driver for the job (rljob.dev.sim.driver.DriverSettings)."""
        body = {"namespace": namespace, "job": job, **settings}
        result: dict[str, Any] = self._call("POST", "/drivers", body)
        return result

    def start_slot_driver(self, *, namespace: str, job: str, **settings: float) -> dict[str, Any]:
        """A slime-like driver on the job's slot Services (rljob.dev.sim.slot_driver's
        SlotSettings); a SimError 409 while the job has no slot Services."""
        body = {"namespace": namespace, "job": job, "addressing": "slots", **settings}
        result: dict[str, Any] = self._call("POST", "/drivers", body)
        return result

    def driver(self, *, namespace: str, job: str) -> dict[str, Any]:
        """The job's driver: generation and counters (sent, lost, hangs or failed updates,
        ...); a slot driver's has "addressing": "slots"."""
        query = {"namespace": namespace, "job": job}
        result: dict[str, Any] = self._call("GET", "/drivers", query=query)
        return result

    def stop_driver(self, *, namespace: str, job: str) -> bool:
        query = {"namespace": namespace, "job": job}
        result: dict[str, bool] = self._call("DELETE", "/drivers", query=query)
        return result["stopped"]

    def targets(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/targets")
        return result

    def addresses(self) -> dict[str, str]:
        result: dict[str, str] = self._call("GET", "/addresses")
        return result

    def events(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/events")
        return result
