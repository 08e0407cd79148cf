"""The simulator's control API on 127.0.0.1:<control-port>: lists workloads, injects and clears
faults, overrides profiles, shows targets, addresses and events, forces a pod sync and serves the
simulator's own /metrics."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import generate_latest

from rljob.dev.sim import faults as faultlib
from rljob.dev.sim.driver import DriverSettings
from rljob.dev.sim.drivers import DriverUnavailableError
from rljob.dev.sim.exposition import CONTENT_TYPE
from rljob.dev.sim.httpserver import Request, Response
from rljob.dev.sim.models import EngineModel
from rljob.dev.sim.profiles import ProfileError, as_json, override
from rljob.dev.sim.simulation import ProfileRule, Simulation
from rljob.dev.sim.slot_driver import SlotSettings
from rljob.dev.sim.targets import file_sd

if TYPE_CHECKING:
    from rljob.dev.sim.workload import Workload

log = logging.getLogger("rljob.dev.sim")

MAX_PROFILE_RULES = 200


class ControlApi:
    """Routes control requests to the app they inspect and change."""

    def __init__(self, app: Simulation) -> None:
        self.app = app
        self._profile_seq = 0

    def workload_json(self, workload: Workload) -> dict[str, Any]:
        pod = workload.pod
        active = self.app.faults_of(workload)
        rules = [
            rule.id
            for rule in self.app.rules.rules()
            if rule.applies(pod.instance, pod.namespace, pod.name, pod.job, pod.role)
        ]
        return {
            "namespace": pod.namespace,
            "pod": pod.name,
            "uid": pod.uid,
            "job": pod.job,
            "role": pod.role,
            "attempt": pod.attempt,
            "restarts": pod.restarts,
            "instance": pod.instance,
            "address": f"127.0.0.1:{workload.listener.port}",
            "port": workload.listener.port,
            "started": workload.started,
            "scrapes": workload.scrapes,
            "faults": rules,
            "unreachable": active.unreachable,
            "profile": as_json(workload.model.profile),
            "state": workload.model.state(),
            "engines": workload.gang.state() if workload.gang is not None else [],
        }

    def _matching(self, selector: faultlib.Selector) -> list[Workload]:
        return [
            w
            for w in self.app.workloads.values()
            if selector.matches(w.pod.namespace, w.pod.name, w.pod.job, w.pod.role)
        ]

    async def handle(self, request: Request) -> Response:
        try:
            return await self._route(request)
        except (faultlib.FaultError, ProfileError) as exc:
            return Response.json({"error": str(exc)}, 400)
        except json.JSONDecodeError as exc:
            return Response.json({"error": f"body is not JSON: {exc}"}, 400)

    async def _route(self, request: Request) -> Response:
        method, path = request.method, request.path.rstrip("/") or "/"
        routes: dict[tuple[str, str], Callable[[Request], Any]] = {
            ("GET", "/healthz"): self._health,
            ("GET", "/workloads"): self._workloads,
            ("GET", "/faults"): self._faults,
            ("POST", "/faults"): self._inject,
            ("DELETE", "/faults"): self._clear,
            ("GET", "/profiles"): self._profiles,
            ("POST", "/profiles"): self._set_profile,
            ("DELETE", "/profiles"): self._clear_profiles,
            ("GET", "/targets"): self._targets,
            ("GET", "/addresses"): self._addresses,
            ("GET", "/events"): self._events,
            ("POST", "/sync"): self._sync,
            ("POST", "/weights"): self._push_weights,
            ("GET", "/drivers"): self._driver_report,
            ("POST", "/drivers"): self._start_driver,
            ("DELETE", "/drivers"): self._stop_driver,
            ("GET", "/metrics"): self._own_metrics,
        }
        route = routes.get((method, path))
        if route is None:
            if any(p == path for _, p in routes):
                return Response.json({"error": f"{method} not allowed on {path}"}, 405)
            return Response.json(
                {"error": f"no route {path}", "routes": sorted({p for _, p in routes})}, 404
            )
        response: Response = await route(request)
        return response

    async def _health(self, _: Request) -> Response:
        return Response.json(
            {
                "ok": True,
                "workloads": len(self.app.workloads),
                "rules": len(self.app.rules),
                "polls_ok": self.app.polls_ok,
                "last_poll_error": self.app.last_poll_error,
            }
        )

    async def _workloads(self, request: Request) -> Response:
        self.app.advance_all()
        wanted = {k: request.arg(k) for k in ("namespace", "job", "role", "pod")}
        listed = [
            self.workload_json(w)
            for w in sorted(self.app.workloads.values(), key=lambda w: w.pod.key)
            if all(v is None or self._field(w, k) == v for k, v in wanted.items())
        ]
        return Response.json(listed)

    @staticmethod
    def _field(workload: Workload, name: str) -> str:
        pod = workload.pod
        return {"namespace": pod.namespace, "job": pod.job, "role": pod.role, "pod": pod.name}[name]

    async def _faults(self, _: Request) -> Response:
        return Response.json([rule.as_json() for rule in self.app.rules.rules()])

    async def _inject(self, request: Request) -> Response:
        injection = faultlib.parse_injection(request.json())
        kind = injection.fault.kind
        selected = self._matching(injection.selector)
        matched = [w for w in selected if kind in faultlib.ROLE_KINDS[w.pod.role]]
        if injection.selector.pod is not None and selected and not matched:
            role = selected[0].pod.role
            raise faultlib.FaultError(f"{selected[0].pod.key} is a {role}: it takes no {kind}")
        if not matched and not injection.survive_restart:
            return Response.json(
                {"error": "no attached workload matches (and the rule does not survive restarts)"},
                404,
            )
        # Integrate the past with the faults that were in force, then change the rules.
        self.app.advance_all()
        rule, replaced = self.app.rules.add(
            injection, self.app.clock(), {w.instance for w in matched}
        )
        self.app.metrics.rules.set(len(self.app.rules))
        for workload in matched:
            self.app.event("injected", workload.pod, rule=rule.id, kind=kind)
        log.info(
            "injected %s as %s into %s", rule.fault.as_json(), rule.id, [w.pod.key for w in matched]
        )
        body = {
            "id": rule.id,
            "replaced": replaced,
            "matched": [w.pod.key for w in matched],
            "rule": rule.as_json(),
        }
        return Response.json(body, 201)

    async def _clear(self, request: Request) -> Response:
        args = {k: request.arg(k) for k in ("id", "namespace", "pod", "job", "role", "kind")}
        selector = None
        if args["pod"] is not None or args["job"] is not None:
            selector = faultlib.parse_selector(
                {k: args[k] for k in ("namespace", "pod", "job", "role") if args[k] is not None}
            )
        self.app.advance_all()
        removed = self.app.rules.clear(
            rule_id=args["id"],
            selector=selector,
            namespace=args["namespace"] if selector is None else None,
            kind=args["kind"],
        )
        self.app.metrics.rules.set(len(self.app.rules))
        if removed:
            log.info("cleared %s", [rule.id for rule in removed])
        return Response.json({"cleared": [rule.id for rule in removed]})

    async def _profiles(self, _: Request) -> Response:
        return Response.json([rule.as_json() for rule in self.app.profile_rules])

    async def _set_profile(self, request: Request) -> Response:
        body = request.json()
        if not isinstance(body, dict) or not isinstance(body.get("profile"), dict):
            raise ProfileError('the body needs a selector and a "profile" object')
        selector = faultlib.parse_selector(body)
        changes: dict[str, Any] = body["profile"]
        roles = (
            [selector.role]
            if selector.role
            else sorted({w.pod.role for w in self._matching(selector)})
        )
        for role in roles or ["rollout"]:
            override(self.app.config.profiles.for_role(role), changes)  # validates
        if len(self.app.profile_rules) >= MAX_PROFILE_RULES:
            raise ProfileError(f"at most {MAX_PROFILE_RULES} profile rules")
        self._profile_seq += 1
        self.app.profile_rules.append(ProfileRule(self._profile_seq, selector, changes))
        matched = self._rebase(selector)
        return Response.json({"seq": self._profile_seq, "matched": matched}, 201)

    async def _clear_profiles(self, _: Request) -> Response:
        cleared = [rule.seq for rule in self.app.profile_rules]
        self.app.profile_rules.clear()
        for workload in self.app.workloads.values():
            self._rebase_one(workload)
        return Response.json({"cleared": cleared})

    def _rebase(self, selector: faultlib.Selector) -> list[str]:
        matched = self._matching(selector)
        for workload in matched:
            self._rebase_one(workload)
        return [w.pod.key for w in matched]

    def _rebase_one(self, workload: Workload) -> None:
        self.app.advance(workload)
        profile = self.app.effective_profile(workload.pod)
        with contextlib.suppress(ValueError):
            workload.model.set_profile(profile)

    async def _targets(self, _: Request) -> Response:
        return Response.json(file_sd(t for w in self.app.workloads.values() for t in w.targets()))

    async def _addresses(self, _: Request) -> Response:
        # Where each workload listens (its pod IP and metrics port): for people, not the operator.
        targets = (w.targets()[0] for w in self.app.workloads.values())
        return Response.json({f"{t.namespace}/{t.pod}": t.address for t in targets})

    async def _events(self, _: Request) -> Response:
        return Response.json(list(self.app.events))

    async def _push_weights(self, request: Request) -> Response:
        """{namespace, pod, generation}: a weight update of one engine (as a driver's push)."""
        body = request.json()
        generation = body.get("generation") if isinstance(body, dict) else None
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
            raise faultlib.FaultError("generation must be a whole number >= 0")
        selector = faultlib.parse_selector({k: body.get(k) for k in ("namespace", "pod")})
        engines = [w for w in self._matching(selector) if isinstance(w.model, EngineModel)]
        if not engines:
            return Response.json({"error": "no attached rollout engine matches"}, 404)
        for workload in engines:
            assert isinstance(workload.model, EngineModel)
            workload.model.weights.push(generation)
        return Response.json({"pushed": [w.pod.key for w in engines], "generation": generation})

    def _driver_job(self, namespace: Any, job: Any) -> tuple[str, str]:
        if self.app.drivers is None:
            raise faultlib.FaultError("this simulator runs no drivers (no API access)")
        selector = faultlib.parse_selector({"namespace": namespace, "job": job})
        return selector.namespace, selector.job or ""

    async def _start_driver(self, request: Request) -> Response:
        """{namespace, job, <DriverSettings>}: a rollout driver following the job's roster
        (sim.driver); {namespace, job, "addressing": "slots", <SlotSettings>}: a slime-like one
        on the job's slot Services (sim.slot_driver), 409 while the job has none."""
        body = request.json()
        if not isinstance(body, dict):
            raise faultlib.FaultError("the body must be a JSON object")
        namespace, job = self._driver_job(body.pop("namespace", None), body.pop("job", None))
        addressing = body.pop("addressing", "roster")
        if addressing not in ("roster", "slots"):
            raise faultlib.FaultError('addressing must be "roster" or "slots"')
        drivers = self.app.drivers
        assert drivers is not None
        try:
            settings = (SlotSettings if addressing == "slots" else DriverSettings).parse(body)
        except ValueError as exc:
            raise faultlib.FaultError(str(exc)) from None
        if isinstance(settings, DriverSettings):
            return Response.json(await drivers.start(namespace, job, settings), 201)
        try:
            return Response.json(await drivers.start_slots(namespace, job, settings), 201)
        except DriverUnavailableError as exc:
            return Response.json({"error": str(exc)}, 409)

    async def _driver_report(self, request: Request) -> Response:
        namespace, job = self._driver_job(request.arg("namespace"), request.arg("job"))
        assert self.app.drivers is not None
        report = self.app.drivers.report(namespace, job)
        if report is None:
            return Response.json({"error": f"no driver for {namespace}/{job}"}, 404)
        return Response.json(report)

    async def _stop_driver(self, request: Request) -> Response:
        namespace, job = self._driver_job(request.arg("namespace"), request.arg("job"))
        assert self.app.drivers is not None
        return Response.json({"stopped": await self.app.drivers.stop(namespace, job)})

    async def _sync(self, _: Request) -> Response:
        ok = await self.app.sync()
        return Response.json(
            {"ok": ok, "workloads": len(self.app.workloads), "error": self.app.last_poll_error},
            200 if ok else 503,
        )

    async def _own_metrics(self, _: Request) -> Response:
        return Response(200, generate_latest(self.app.metrics.registry), CONTENT_TYPE)
