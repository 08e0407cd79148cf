"""The simulated pods: attaches a workload (listener and model) to each pod the lister returns,
restarts and detaches them as their pods change, advances the models with the faults in force,
serves their metrics pages, writes trainer checkpoints, and publishes the scrape targets. What
the control API and the rollout drivers act on; rljob.dev.sim.app adds the control listener and
the poll and tick loops."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rljob.dev.sim import faults as faultlib
from rljob.dev.sim.collectives import DEFAULT_WATCHDOG_SECONDS, Collectives
from rljob.dev.sim.coupling import couple
from rljob.dev.sim.exposition import CONTENT_TYPE
from rljob.dev.sim.gang import attach_gang
from rljob.dev.sim.httpserver import Request, Response, listen
from rljob.dev.sim.models import (
    EngineModel,
    Model,
    ReferenceModel,
    TrainerModel,
    VerifierModel,
)
from rljob.dev.sim.pods import PodInfo, attachable_pods, listen_address
from rljob.dev.sim.profiles import (
    ROLES,
    AnyProfile,
    EngineProfile,
    ProfileError,
    Profiles,
    ReferenceProfile,
    TrainerProfile,
    VerifierProfile,
    override,
)
from rljob.dev.sim.sim_metrics import SimMetrics
from rljob.dev.sim.targets import file_sd, write_json_atomic
from rljob.dev.sim.weights import LostRequests
from rljob.dev.sim.workload import Workload

if TYPE_CHECKING:
    from rljob.dev.sim.checkpoints import CheckpointSink
    from rljob.dev.sim.drivers import Drivers

log = logging.getLogger("rljob.dev.sim")

MAX_WORKLOADS = 5000
RESUME_STEP_ENV = "RLJOB_RESUME_STEP"  # the step the operator resumes an attempt from
EVENTS_KEPT = 200
PodLister = Callable[[], list[dict[str, Any]]]
NodeLister = Callable[[], set[str]]  # the nodes the API says are not Ready
RankFailer = Callable[[str, str], None]  # (namespace, pod): fails it as NCCL's watchdog does


@dataclass
class SimConfig:
    control_port: int
    targets_file: Path
    poll_interval: float = 0.5
    namespaces: tuple[str, ...] = ()
    profiles: Profiles = field(default_factory=Profiles)
    max_workloads: int = MAX_WORKLOADS
    checkpoints: bool = False
    nccl_watchdog_seconds: float = DEFAULT_WATCHDOG_SECONDS
    # Where framework trainers write their TensorBoard files (rljob.dev.sim.tensorboard); None:
    # a temporary directory, made when the first one attaches.
    tensorboard_dir: Path | None = None


@dataclass
class ProfileRule:
    """Profile changes the control API made for the pods its selector matches."""

    seq: int
    selector: faultlib.Selector
    changes: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "selector": self.selector.as_json(), "profile": self.changes}


def _engine_api(model: object, request: Request) -> Response:
    """An engine's own HTTP answers beside its page (its weight version; SGLang's update from
    disk), else a 404."""
    if not isinstance(model, EngineModel):
        return Response.text("not found; try /metrics\n", 404)
    if request.method == "POST":
        return _engine_post(model, request)
    answer = model.weight_version(request.path)
    if answer is None:
        return Response.text("not found; try /metrics\n", 404)
    return Response.json(answer)


def _engine_post(model: EngineModel, request: Request) -> Response:
    if request.path != "/update_weights_from_disk":
        return Response.text("not found\n", 404)
    try:
        body = request.json()
    except ValueError:
        body = None  # refused as SGLang refuses a body it cannot validate: a 400
    answer = model.update_weights_from_disk(body)
    if answer is None:
        return Response.text("not found\n", 404)
    status, content = answer
    return Response.json(content, status)


class Simulation:
    """The simulated pods without their control listener or loops: tests may drive it
    in-process with a fake pod lister and clock."""

    def __init__(
        self,
        config: SimConfig,
        list_pods: PodLister,
        *,
        clock: Callable[[], float] = time.time,
        sink: CheckpointSink | None = None,
        lost_nodes: NodeLister | None = None,
        fail_rank: RankFailer | None = None,
    ) -> None:
        self.config = config
        self.list_pods = list_pods
        self.list_lost_nodes = lost_nodes
        self.fail_rank = fail_rank
        self.collectives = Collectives(config.nccl_watchdog_seconds)
        self.clock = clock
        self.sink = sink
        self.rules = faultlib.RuleBook()
        self.profile_rules: list[ProfileRule] = []
        self.workloads: dict[str, Workload] = {}
        self.events: deque[dict[str, Any]] = deque(maxlen=EVENTS_KEPT)
        self.metrics = SimMetrics()
        self.lost = LostRequests()
        self.drivers: Drivers | None = None  # rollout drivers (sim.drivers), given API access
        self.polls_ok = 0
        self.last_poll_error: str | None = None
        self._over_capacity_logged = False
        self._sync_lock = asyncio.Lock()

    # ---------------------------------------------------------------- pods

    async def sync(self) -> bool:
        """One poll: lists pods and attaches, restarts and detaches workloads. False when the
        list call failed (workloads are then left as they are)."""
        async with self._sync_lock:
            try:
                pods = await asyncio.to_thread(self.list_pods)
                lost = await asyncio.to_thread(self.list_lost_nodes or set)
            except Exception as exc:
                self.metrics.polls.labels("error").inc()
                if self.last_poll_error is None:
                    log.warning("listing pods failed: %s", exc)
                self.last_poll_error = f"{type(exc).__name__}: {exc}"
                return False
            self.metrics.polls.labels("ok").inc()
            self.polls_ok += 1
            self.last_poll_error = None
            await self.apply_pods(pods, lost)
            return True

    async def apply_pods(
        self, pods: Sequence[Mapping[str, Any]], lost_nodes: Collection[str] = ()
    ) -> None:
        seen, stopping = attachable_pods(pods, self.config.namespaces)
        changed = False
        for key, workload in list(self.workloads.items()):
            info = seen.get(key)
            if info is None or info.uid != workload.pod.uid or info.role != workload.pod.role:
                why = "gone" if info is None else "replaced"
                await self._detach(key, why, stopped_at=stopping.get(workload.pod.uid))
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
        ranks = [w.pod for w in self.workloads.values()]
        for pod in self.collectives.observe(ranks, lost_nodes, self.clock()):
            self.event("rank-lost", pod, node=pod.node)  # its gang hangs in its next collective
        if changed:
            self.rules.prune({w.instance for w in self.workloads.values()})
            self.publish()
            for role in ROLES:
                count = sum(1 for w in self.workloads.values() if w.pod.role == role)
                self.metrics.workloads.labels(role).set(count)
            self.metrics.rules.set(len(self.rules))

    def event(self, event: str, pod: PodInfo, **details: Any) -> None:
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

    def _model(
        self, pod: PodInfo, now: float, stored_step: int | None = None
    ) -> tuple[Model, bool]:
        """The pod's model; a trainer starts at RLJOB_RESUME_STEP, else at `stored_step` (what
        `_stored_step` read), else at 0."""
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
            step = max(0, int(pod.env.get(RESUME_STEP_ENV) or stored_step or 0))
        except ValueError:
            step = 0
        if profile.tensorboard_keys:
            return self._framework_trainer(pod, profile, now, step), False
        trainer = TrainerModel(profile, now, step=step, external_checkpoints=writes, seed=seed)
        return trainer, writes

    def _framework_trainer(
        self, pod: PodInfo, profile: TrainerProfile, now: float, step: int
    ) -> TrainerModel:
        """A framework under the SDK's TensorBoard bridge, its files in a directory per run of
        the pod's containers."""
        from rljob.dev.sim.tensorboard import default_root, framework_trainer

        if self.config.tensorboard_dir is None:
            self.config.tensorboard_dir = default_root()
        directory = self.config.tensorboard_dir / pod.namespace / f"{pod.name}-{pod.restarts}"
        return framework_trainer(
            profile,
            now,
            rank=pod.completion_index,
            directory=directory,
            host=pod.name,
            clock=self.clock,
            step=step,
            seed=pod.instance,
        )

    def _gang_engine(self, profile: AnyProfile) -> EngineProfile:
        """The engines inside a trainer pod: the rollout profile, served as the trainer's
        profile says (engines_exporter)."""
        engine = self.config.profiles.rollout
        exporter = getattr(profile, "engines_exporter", "")
        return dataclasses.replace(engine, exporter=exporter) if exporter else engine

    async def _stored_step(self, pod: PodInfo) -> int | None:
        """A trainer resuming on its own (profile `resume_from_store`, no RLJOB_RESUME_STEP in
        its pod): the step of the newest checkpoint in its store location, read off the loop."""
        if self.sink is None or pod.role != "trainer" or pod.env.get(RESUME_STEP_ENV):
            return None
        profile = self.effective_profile(pod)
        if not getattr(profile, "resume_from_store", False):
            return None
        step = await asyncio.to_thread(self.sink.newest_step, pod.env)
        if step is not None:
            self.event("resumed-from-store", pod, step=step)
        return step

    async def _attach(self, pod: PodInfo) -> None:
        stored = await self._stored_step(pod)
        now = self.clock()
        host, port = listen_address(pod)
        try:
            listener = await listen(self._scrape_handler(pod.key, pod.uid), port, host=host)
        except OSError as exc:  # the IP's previous pod not detached yet: the next poll retries
            log.warning("cannot listen for %s on %s:%d: %s", pod.key, host, port, exc)
            return
        model, writes = self._model(pod, now, stored)
        workload = Workload(pod, listener, model, now, writes_checkpoints=writes)
        self.workloads[pod.key] = workload
        profile = self.effective_profile(pod)
        workload.gang = await attach_gang(
            pod,
            profile,
            self._gang_engine(profile),
            now,
            lambda: self._gang_scraped(pod.key, pod.uid),
        )
        self.metrics.lifecycle.labels("attached").inc()
        self.event("attached", pod, port=listener.port, role=pod.role, host=host)
        log.info("attached %s %s on %s:%d", pod.role, pod.key, host, listener.port)

    def _gang_scraped(self, key: str, uid: str) -> bool:
        workload = self.workloads.get(key)
        if workload is None or workload.pod.uid != uid:
            return False
        return not self.advance(workload).unreachable

    def _restart(self, workload: Workload, pod: PodInfo) -> None:
        now = self.clock()
        if self.sink is not None:
            self.sink.forget(workload.instance)
        self._abandon(workload, now)
        workload.model, workload.writes_checkpoints = self._model(pod, now)
        if workload.gang is not None:
            workload.gang.restart(pod, now)
        workload.pod, workload.started, workload.pending_write = pod, now, None
        self.metrics.lifecycle.labels("restarted").inc()
        self.event("restarted", pod, restarts=pod.restarts)
        log.info("restarted %s %s (restart %d)", pod.role, pod.key, pod.restarts)

    async def _detach(self, key: str, why: str, stopped_at: float | None = None) -> None:
        """`stopped_at`: when the pod's deletion was asked, if this poll saw it terminating; its
        engine's requests end then, not at this poll. A pod gone between polls (kwok removes it
        at once) ends at this poll."""
        workload = self.workloads.pop(key)
        now = self.clock()
        self._abandon(workload, now if stopped_at is None else min(now, stopped_at))
        await workload.listener.close()
        if workload.gang is not None:
            await workload.gang.close()
        if self.sink is not None:
            self.sink.forget(workload.instance)
        self.metrics.lifecycle.labels("detached").inc()
        self.event("detached", workload.pod, why=why)
        log.info("detached %s (%s)", key, why)

    def end_requests(self, key: str, at: float) -> None:
        """The engine of pod `key` (namespace/name) stopped at `at`, though the pod may still be
        attached until the next poll: the requests a driver had on it are lost."""
        workload = self.workloads.get(key)
        if workload is not None:
            self._abandon(workload, at)

    def _abandon(self, workload: Workload, now: float) -> None:
        """An engine process ends: the requests a driver still had on it are lost."""
        if not isinstance(workload.model, EngineModel):
            return
        pod = workload.pod
        lost = workload.model.weights.requests.abandon(now)
        self.lost.record(pod.namespace, pod.job, pod.name, lost)
        if lost:
            self.event("requests-lost", pod, lost=lost)

    def publish(self) -> None:
        targets = [t for w in self.workloads.values() for t in w.targets()]
        write_json_atomic(self.config.targets_file, file_sd(targets))

    # ---------------------------------------------------------------- models

    def faults_of(self, workload: Workload) -> faultlib.Active:
        pod = workload.pod
        injected = self.rules.resolve(
            instance=pod.instance,
            namespace=pod.namespace,
            pod=pod.name,
            job=pod.job,
            role=pod.role,
            started=workload.started,
        )
        return self.collectives.faults(pod, injected)

    async def _watchdogs(self) -> None:
        """Ranks left hung by a lost one past the NCCL timeout abort, as torch's watchdog does."""
        ranks = [w.pod for w in self.workloads.values()]
        for pod in self.collectives.expired(ranks, self.clock()):
            self.event("nccl-watchdog", pod)
            log.info("%s: NCCL watchdog: a rank of its gang was lost", pod.key)
            if self.fail_rank is not None:
                await asyncio.to_thread(self.fail_rank, pod.namespace, pod.name)

    def advance(self, workload: Workload, now: float | None = None) -> faultlib.Active:
        active = self.faults_of(workload)
        now = self.clock() if now is None else now
        couple(workload, self.workloads.values(), now)
        workload.model.advance(now, active)
        if workload.gang is not None:
            workload.gang.advance(now, active)
        return active

    def advance_all(self) -> None:
        now = self.clock()
        for workload in self.workloads.values():
            self.advance(workload, now)

    def _checkpoints(self) -> None:
        if self.sink is not None:
            self.sink.tick(self.workloads.values(), self.metrics)

    def _scrape_handler(self, key: str, uid: str) -> Callable[[Request], Any]:
        async def handle(request: Request) -> Response:
            workload = self.workloads.get(key)
            if workload is None or workload.pod.uid != uid:
                return Response.text("gone\n", 503)
            if request.method not in {"GET", "HEAD", "POST"} or (
                request.method == "POST" and request.path == "/metrics"
            ):
                return Response.text("method not allowed\n", 405)
            active = self.advance(workload)
            if active.unreachable:
                return Response.text("unreachable (injected)\n", 503)
            if request.path != "/metrics":
                return _engine_api(workload.model, request)
            workload.scrapes += 1
            self.metrics.scrapes.labels(workload.pod.role).inc()
            return Response.text(workload.model.render(), content_type=CONTENT_TYPE)

        return handle
