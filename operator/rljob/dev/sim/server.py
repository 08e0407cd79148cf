"""The simulator process: one asyncio loop serving every simulated pod.

- A watcher lists the operator's pods (label app.kubernetes.io/managed-by=rljob-operator, phase
  Running) every `poll_interval` seconds and attaches a workload by role to each Running pod that
  is not terminating, on its own listener at 127.0.0.1:<kernel-picked port>. A pod that goes
  away, terminates or is replaced (new uid) detaches: its listener and open connections close. A
  container restart (restartCount up) keeps the port and starts a fresh model: counters from zero,
  faults that do not survive restarts gone.
- After each change it writes the Prometheus file_sd targets and the dev-only address map, each
  to a temporary file renamed into place.
- The control API on 127.0.0.1:<control-port> injects and clears faults, overrides profiles,
  lists workloads and serves the simulator's own /metrics.

Models advance lazily (on scrape, on a 1 s tick, and before every rule change), so each span of
time is integrated with the faults that were in force over it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    ProcessCollector,
    generate_latest,
)

from rljob.dev.sim import faults as faultlib
from rljob.dev.sim.exposition import CONTENT_TYPE
from rljob.dev.sim.httpserver import Listener, Request, Response, listen
from rljob.dev.sim.models import (
    EngineModel,
    Model,
    ReferenceModel,
    TrainerModel,
    VerifierModel,
)
from rljob.dev.sim.pods import SELECTOR, PodInfo, parse_pod
from rljob.dev.sim.profiles import (
    ROLES,
    AnyProfile,
    EngineProfile,
    ProfileError,
    Profiles,
    ReferenceProfile,
    TrainerProfile,
    VerifierProfile,
    as_json,
    override,
)
from rljob.dev.sim.targets import Target, address_map, file_sd, write_json_atomic

if TYPE_CHECKING:
    from rljob.dev.sim.checkpoints import CheckpointSink

log = logging.getLogger("rljob.dev.sim")

MAX_WORKLOADS = 5000
MAX_PROFILE_RULES = 200
TICK_SECONDS = 1.0
EVENTS_KEPT = 200
PodLister = Callable[[], list[dict[str, Any]]]


@dataclass
class SimConfig:
    control_port: int
    targets_file: Path
    address_map_file: Path
    poll_interval: float = 0.5
    namespaces: tuple[str, ...] = ()
    profiles: Profiles = field(default_factory=Profiles)
    max_workloads: int = MAX_WORKLOADS
    checkpoints: bool = False


@dataclass
class ProfileRule:
    seq: int
    selector: faultlib.Selector
    changes: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "selector": self.selector.as_json(), "profile": self.changes}


@dataclass
class Workload:
    pod: PodInfo
    listener: Listener
    model: Model
    started: float
    scrapes: int = 0
    pending_write: Future[int] | None = None
    writes_checkpoints: bool = False

    @property
    def instance(self) -> str:
        return self.pod.instance

    def target(self) -> Target:
        return Target(
            self.pod.namespace, self.pod.name, self.pod.role, self.pod.job, self.listener.port
        )


class _Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        self.workloads = Gauge(
            "rljob_sim_workloads", "Attached simulated workloads.", ["role"], registry=r
        )
        self.scrapes = Counter("rljob_sim_scrapes", "Metrics pages served.", ["role"], registry=r)
        self.polls = Counter("rljob_sim_kube_polls", "Pod list calls.", ["outcome"], registry=r)
        self.lifecycle = Counter(
            "rljob_sim_workload_events",
            "Workloads attached, detached and restarted.",
            ["event"],
            registry=r,
        )
        self.rules = Gauge("rljob_sim_fault_rules", "Fault rules in force.", registry=r)
        self.checkpoints = Counter(
            "rljob_sim_checkpoints", "Checkpoint writes.", ["outcome"], registry=r
        )


class SimulatorApp:
    """The simulator without process concerns: tests may drive it in-process with a fake
    pod lister and clock."""

    def __init__(
        self,
        config: SimConfig,
        list_pods: PodLister,
        *,
        clock: Callable[[], float] = time.time,
        sink: CheckpointSink | None = None,
    ) -> None:
        self.config = config
        self.list_pods = list_pods
        self.clock = clock
        self.sink = sink
        self.rules = faultlib.RuleBook()
        self.profile_rules: list[ProfileRule] = []
        self.workloads: dict[str, Workload] = {}
        self.events: deque[dict[str, Any]] = deque(maxlen=EVENTS_KEPT)
        self.metrics = _Metrics()
        self.control: Listener | None = None
        self.polls_ok = 0
        self.last_poll_error: str | None = None
        self._profile_seq = 0
        self._over_capacity_logged = False
        self._stop = asyncio.Event()
        self._poll_now = asyncio.Event()
        self._sync_lock = asyncio.Lock()

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self.publish()
        self.control = await listen(self.handle_control, self.config.control_port)
        log.info("control API on 127.0.0.1:%d", self.control.port)

    async def run(self) -> None:
        """Polls and ticks until stop() is called."""
        tasks = [asyncio.create_task(self._poll_loop()), asyncio.create_task(self._tick_loop())]
        try:
            await self._stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.close()

    def stop(self) -> None:
        self._stop.set()

    async def close(self) -> None:
        for workload in list(self.workloads.values()):
            await workload.listener.close()
        self.workloads.clear()
        if self.control is not None:
            await self.control.close()
            self.control = None
        if self.sink is not None:
            self.sink.close()

    async def _poll_loop(self) -> None:
        while True:
            try:
                await self.sync()
            except Exception:  # one bad pod or listener must not end the polling for good
                self.metrics.polls.labels("crashed").inc()
                log.exception("applying the pod list failed; retrying next poll")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poll_now.wait(), self.config.poll_interval)
            self._poll_now.clear()

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            self.advance_all()
            self._checkpoints()

    # ---------------------------------------------------------------- pods

    async def sync(self) -> bool:
        """One poll: lists pods and attaches, restarts and detaches workloads. False when the
        list call failed (workloads are then left as they are)."""
        async with self._sync_lock:
            try:
                pods = await asyncio.to_thread(self.list_pods)
            except Exception as exc:
                self.metrics.polls.labels("error").inc()
                if self.last_poll_error is None:
                    log.warning("listing pods failed: %s", exc)
                self.last_poll_error = f"{type(exc).__name__}: {exc}"
                return False
            self.metrics.polls.labels("ok").inc()
            self.polls_ok += 1
            self.last_poll_error = None
            await self.apply_pods(pods)
            return True

    async def apply_pods(self, pods: Sequence[Mapping[str, Any]]) -> None:
        seen: dict[str, PodInfo] = {}
        for obj in pods:
            info = parse_pod(obj)
            if info is None or not info.attachable:
                continue
            if self.config.namespaces and info.namespace not in self.config.namespaces:
                continue
            seen[info.key] = info
        changed = False
        for key, workload in list(self.workloads.items()):
            info = seen.get(key)
            if info is None or info.uid != workload.pod.uid or info.role != workload.pod.role:
                await self._detach(key, "gone" if info is None else "replaced")
                changed = True
            elif info.restarts != workload.pod.restarts:
                self._restart(workload, info)
                changed = True
        for key, info in seen.items():
            if key in self.workloads:
                continue
            if len(self.workloads) >= self.config.max_workloads:
                if not self._over_capacity_logged:
                    log.warning("at most %d workloads; not attaching more", len(self.workloads))
                    self._over_capacity_logged = True
                break
            await self._attach(info)
            changed = True
        if changed:
            self.rules.prune({w.instance for w in self.workloads.values()})
            self.publish()
            for role in ROLES:
                count = sum(1 for w in self.workloads.values() if w.pod.role == role)
                self.metrics.workloads.labels(role).set(count)
            self.metrics.rules.set(len(self.rules))

    def _event(self, event: str, pod: PodInfo, **details: Any) -> None:
        self.events.append({"t": self.clock(), "event": event, "pod": pod.key, **details})

    def effective_profile(self, pod: PodInfo) -> AnyProfile:
        profile = self.config.profiles.for_role(pod.role)
        if pod.profile and pod.profile_error is None:
            try:
                profile = override(profile, pod.profile)
            except ProfileError as exc:
                log.warning("%s: ignoring its profile: %s", pod.key, exc)
        elif pod.profile_error:
            log.warning("%s: ignoring its profile: %s", pod.key, pod.profile_error)
        for rule in self.profile_rules:
            if rule.selector.matches(pod.namespace, pod.name, pod.job, pod.role):
                with contextlib.suppress(ProfileError):
                    profile = override(profile, rule.changes)
        return profile

    def _model(self, pod: PodInfo, now: float) -> tuple[Model, bool]:
        profile = self.effective_profile(pod)
        seed = pod.instance
        if isinstance(profile, EngineProfile):
            return EngineModel(profile, seed, now), False
        if isinstance(profile, VerifierProfile):
            return VerifierModel(profile, seed, now), False
        if isinstance(profile, ReferenceProfile):
            return ReferenceModel(profile, seed, now), False
        assert isinstance(profile, TrainerProfile)
        writes = self.sink is not None and self.sink.wants(pod.env, pod.completion_index)
        try:
            step = max(0, int(pod.env.get("RLJOB_RESUME_STEP", "0") or 0))
        except ValueError:
            step = 0
        return TrainerModel(profile, now, step=step, external_checkpoints=writes), writes

    async def _attach(self, pod: PodInfo) -> None:
        now = self.clock()
        model, writes = self._model(pod, now)
        listener = await listen(self._scrape_handler(pod.key, pod.uid))
        self.workloads[pod.key] = Workload(pod, listener, model, now, writes_checkpoints=writes)
        self.metrics.lifecycle.labels("attached").inc()
        self._event("attached", pod, port=listener.port, role=pod.role)
        log.info("attached %s %s on 127.0.0.1:%d", pod.role, pod.key, listener.port)

    def _restart(self, workload: Workload, pod: PodInfo) -> None:
        now = self.clock()
        if self.sink is not None:
            self.sink.forget(workload.instance)
        workload.model, workload.writes_checkpoints = self._model(pod, now)
        workload.pod, workload.started, workload.pending_write = pod, now, None
        self.metrics.lifecycle.labels("restarted").inc()
        self._event("restarted", pod, restarts=pod.restarts)
        log.info("restarted %s %s (restart %d)", pod.role, pod.key, pod.restarts)

    async def _detach(self, key: str, why: str) -> None:
        workload = self.workloads.pop(key)
        await workload.listener.close()
        if self.sink is not None:
            self.sink.forget(workload.instance)
        self.metrics.lifecycle.labels("detached").inc()
        self._event("detached", workload.pod, why=why)
        log.info("detached %s (%s)", key, why)

    def publish(self) -> None:
        targets = [w.target() for w in self.workloads.values()]
        write_json_atomic(self.config.targets_file, file_sd(targets))
        write_json_atomic(self.config.address_map_file, address_map(targets))

    # ---------------------------------------------------------------- models

    def faults_of(self, workload: Workload) -> faultlib.Active:
        pod = workload.pod
        return self.rules.resolve(
            instance=pod.instance,
            namespace=pod.namespace,
            pod=pod.name,
            job=pod.job,
            role=pod.role,
            started=workload.started,
        )

    def advance(self, workload: Workload, now: float | None = None) -> faultlib.Active:
        active = self.faults_of(workload)
        workload.model.advance(self.clock() if now is None else now, active)
        return active

    def advance_all(self) -> None:
        now = self.clock()
        for workload in self.workloads.values():
            self.advance(workload, now)

    def _checkpoints(self) -> None:
        if self.sink is None:
            return
        for workload in self.workloads.values():
            model = workload.model
            if not isinstance(model, TrainerModel) or not workload.writes_checkpoints:
                continue
            pending = workload.pending_write
            if pending is not None and pending.done():
                workload.pending_write = None
                try:
                    model.committed(pending.result())
                    self.metrics.checkpoints.labels("committed").inc()
                except Exception as exc:
                    self.metrics.checkpoints.labels("failed").inc()
                    log.warning("%s: checkpoint failed: %s", workload.pod.key, exc)
            if workload.pending_write is None and model.checkpoints_due and not model.hung:
                step = model.checkpoints_due.pop()
                model.checkpoints_due.clear()
                workload.pending_write = self.sink.submit(
                    workload.instance,
                    workload.pod.env,
                    step,
                    model.generation,
                    model.profile.shard_bytes,
                )

    def _scrape_handler(self, key: str, uid: str) -> Callable[[Request], Any]:
        async def handle(request: Request) -> Response:
            workload = self.workloads.get(key)
            if workload is None or workload.pod.uid != uid:
                return Response.text("gone\n", 503)
            if request.path != "/metrics":
                return Response.text("not found; try /metrics\n", 404)
            if request.method not in {"GET", "HEAD"}:
                return Response.text("method not allowed\n", 405)
            active = self.advance(workload)
            if active.unreachable:
                return Response.text("unreachable (injected)\n", 503)
            workload.scrapes += 1
            self.metrics.scrapes.labels(workload.pod.role).inc()
            return Response.text(workload.model.render(), content_type=CONTENT_TYPE)

        return handle

    # ---------------------------------------------------------------- control API

    def workload_json(self, workload: Workload) -> dict[str, Any]:
        pod = workload.pod
        active = self.faults_of(workload)
        rules = [
            rule.id
            for rule in self.rules.rules()
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
        }

    def _matching(self, selector: faultlib.Selector) -> list[Workload]:
        return [
            w
            for w in self.workloads.values()
            if selector.matches(w.pod.namespace, w.pod.name, w.pod.job, w.pod.role)
        ]

    async def handle_control(self, request: Request) -> Response:
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
                "workloads": len(self.workloads),
                "rules": len(self.rules),
                "polls_ok": self.polls_ok,
                "last_poll_error": self.last_poll_error,
            }
        )

    async def _workloads(self, request: Request) -> Response:
        self.advance_all()
        wanted = {k: request.arg(k) for k in ("namespace", "job", "role", "pod")}
        listed = [
            self.workload_json(w)
            for w in sorted(self.workloads.values(), key=lambda w: w.pod.key)
            if all(v is None or self._field(w, k) == v for k, v in wanted.items())
        ]
        return Response.json(listed)

    @staticmethod
    def _field(workload: Workload, name: str) -> str:
        pod = workload.pod
        return {"namespace": pod.namespace, "job": pod.job, "role": pod.role, "pod": pod.name}[name]

    async def _faults(self, _: Request) -> Response:
        return Response.json([rule.as_json() for rule in self.rules.rules()])

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
        self.advance_all()
        rule, replaced = self.rules.add(injection, self.clock(), {w.instance for w in matched})
        self.metrics.rules.set(len(self.rules))
        for workload in matched:
            self._event("injected", workload.pod, rule=rule.id, kind=kind)
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
        self.advance_all()
        removed = self.rules.clear(
            rule_id=args["id"],
            selector=selector,
            namespace=args["namespace"] if selector is None else None,
            kind=args["kind"],
        )
        self.metrics.rules.set(len(self.rules))
        if removed:
            log.info("cleared %s", [rule.id for rule in removed])
        return Response.json({"cleared": [rule.id for rule in removed]})

    async def _profiles(self, _: Request) -> Response:
        return Response.json([rule.as_json() for rule in self.profile_rules])

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
            override(self.config.profiles.for_role(role), changes)  # validates
        if len(self.profile_rules) >= MAX_PROFILE_RULES:
            raise ProfileError(f"at most {MAX_PROFILE_RULES} profile rules")
        self._profile_seq += 1
        self.profile_rules.append(ProfileRule(self._profile_seq, selector, changes))
        matched = self._rebase(selector)
        return Response.json({"seq": self._profile_seq, "matched": matched}, 201)

    async def _clear_profiles(self, _: Request) -> Response:
        cleared = [rule.seq for rule in self.profile_rules]
        self.profile_rules.clear()
        for workload in self.workloads.values():
            self._rebase_one(workload)
        return Response.json({"cleared": cleared})

    def _rebase(self, selector: faultlib.Selector) -> list[str]:
        matched = self._matching(selector)
        for workload in matched:
            self._rebase_one(workload)
        return [w.pod.key for w in matched]

    def _rebase_one(self, workload: Workload) -> None:
        self.advance(workload)
        profile = self.effective_profile(workload.pod)
        with contextlib.suppress(ValueError):
            workload.model.set_profile(profile)

    async def _targets(self, _: Request) -> Response:
        return Response.json(file_sd(w.target() for w in self.workloads.values()))

    async def _addresses(self, _: Request) -> Response:
        return Response.json(address_map(w.target() for w in self.workloads.values()))

    async def _events(self, _: Request) -> Response:
        return Response.json(list(self.events))

    async def _sync(self, _: Request) -> Response:
        ok = await self.sync()
        return Response.json(
            {"ok": ok, "workloads": len(self.workloads), "error": self.last_poll_error},
            200 if ok else 503,
        )

    async def _own_metrics(self, _: Request) -> Response:
        return Response(200, generate_latest(self.metrics.registry), CONTENT_TYPE)


def pod_lister(api: Any, namespaces: Sequence[str]) -> PodLister:
    """Lists Running operator-managed pods (from the API server's watch cache)."""
    query = (
        f"labelSelector={quote(SELECTOR)}"
        f"&fieldSelector={quote('status.phase=Running')}&resourceVersion=0"
    )
    paths = (
        [f"/api/v1/namespaces/{ns}/pods?{query}" for ns in namespaces]
        if namespaces
        else [f"/api/v1/pods?{query}"]
    )

    def list_pods() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for path in paths:
            items.extend(api.get(path).get("items", []))
        return items

    return list_pods


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m rljob.dev.sim", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--control-port", required=True, type=int)
    parser.add_argument("--targets-file", type=Path, help="default: <state-dir>/targets.json")
    parser.add_argument("--address-map", type=Path, help="default: <state-dir>/addresses.json")
    parser.add_argument("--poll-interval", type=float, default=0.5)
    parser.add_argument(
        "--namespace", action="append", default=[], help="only these namespaces (repeatable)"
    )
    parser.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="ROLE=JSON",
        help='default profile overrides, e.g. rollout={"throughput": 1000}',
    )
    parser.add_argument("--max-workloads", type=int, default=MAX_WORKLOADS)
    parser.add_argument(
        "--checkpoints",
        action="store_true",
        help="trainers write checkpoints through the SDK (store from this process's environment)",
    )
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def profiles_from_args(items: Sequence[str]) -> Profiles:
    profiles = Profiles()
    for item in items:
        role, sep, text = item.partition("=")
        if not sep or role not in ROLES:
            raise ProfileError(f"--profile wants ROLE=JSON with ROLE in {', '.join(ROLES)}")
        changes = json.loads(text)
        profile = override(profiles.for_role(role), changes)
        profiles = profiles.with_role(role, profile)
    return profiles


async def _amain(args: argparse.Namespace) -> int:
    from rljob.dev.kubeapi import KubeApi
    from rljob.dev.sim.kube import credentials_from_kubeconfig

    state_dir: Path = args.state_dir
    creds = credentials_from_kubeconfig(args.kubeconfig, state_dir / "credentials")
    api = KubeApi(creds, timeout=10.0)
    sink = None
    if args.checkpoints:
        from rljob.dev.sim.checkpoints import CheckpointSink

        sink = CheckpointSink()
    config = SimConfig(
        control_port=args.control_port,
        targets_file=args.targets_file or state_dir / "targets.json",
        address_map_file=args.address_map or state_dir / "addresses.json",
        poll_interval=args.poll_interval,
        namespaces=tuple(args.namespace),
        profiles=profiles_from_args(args.profile),
        max_workloads=args.max_workloads,
        checkpoints=args.checkpoints,
    )
    app = SimulatorApp(config, pod_lister(api, config.namespaces), sink=sink)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, app.stop)
    await app.start()
    await app.run()
    log.info("stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        args.state_dir.mkdir(parents=True, exist_ok=True)
        return asyncio.run(_amain(args))
    except (ProfileError, OSError, ValueError) as exc:
        log.error("%s", exc)
        return 2
