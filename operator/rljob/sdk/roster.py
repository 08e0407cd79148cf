"""The rollout engine roster for a driver: which engines to send to, which are draining, which
just joined and need weights. The operator publishes it in the job's own RLJob
(status.roles.rollout.engines[]); EngineRoster watches that object (standard library only) and
calls back on transitions:

    roster = EngineRoster(
        on_join=push_weights,        # a pod appeared: bring it to the current policy
        on_serving=add_to_group,     # it turned serving: send to it, add it to the weight group
        on_drain=drop_from_group,    # it is being replaced: send nothing new, drop it
        on_leave=forget,             # it is gone
    )
    roster.start()                   # a daemon thread; roster.serving() is always current

Within one update the callbacks fire in the order on_drain, on_leave, on_join, on_serving (by
pod name within each), so a group shrinks before it grows. A pod first seen already serving
gets on_join then on_serving; first seen draining, only on_drain. serving -> joining (lost
readiness) fires nothing: serving() simply stops listing it. A pod without an address yet gets
no callback until it has one; a pod whose address or `restarts` changed left and joined again
(a container restarted in place lost its communicator and its weights).

One watch thread at a time feeds the roster: refresh() refuses while it runs (a list taken
alongside the watch could be older than an event already applied, and resourceVersions are
opaque, so the two cannot be ordered), and a thread that outlives stop() (a callback still
running) has its later updates dropped. docs/weight-sync.md has the whole loop and the RBAC."""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rljob.sdk.kube_watch import (
    JSON,
    Endpoint,
    ObjectWatch,
    TokenSource,
    WatchError,
    in_cluster_file,
    in_cluster_server,
)

log = logging.getLogger(__name__)

JOINING, SERVING, DRAINING = "joining", "serving", "draining"
COLLECTION = "/apis/rljob.io/v1alpha1/namespaces/{namespace}/rljobs"
MAX_BACKOFF_SECONDS = 30.0
POLL_SECONDS = 1.0  # wait_until's refresh interval when no watch thread runs


@dataclass(frozen=True)
class Engine:
    """One rollout engine as the operator published it."""

    pod: str
    address: str  # pod IP; empty until the pod has one
    state: str  # joining | serving | draining
    generation: int | None  # policy generation it reported when its state last changed
    required_generation: int | None = None  # Gated: what it must report to turn Ready
    restarts: int = 0  # container restarts: a change is a leave and a join


EngineCallback = Callable[[Engine], object]
Snapshot = dict[str, Engine]
# Callback names in firing order within one update.
EVENTS = ("drain", "leave", "join", "serving")


def engines_of(job: Mapping[str, Any] | None) -> Snapshot:
    """The roster in an RLJob object (empty when the job or its roster is absent)."""
    rollout = (((job or {}).get("status") or {}).get("roles") or {}).get("rollout") or {}
    members = rollout.get("engines") or []
    return {
        member["pod"]: Engine(
            pod=member["pod"],
            address=member.get("address") or "",
            state=member.get("state") or JOINING,
            generation=member.get("generation"),
            required_generation=member.get("requiredGeneration"),
            restarts=member.get("restarts") or 0,
        )
        for member in members
    }


def transitions(
    before: Mapping[str, Engine], after: Mapping[str, Engine]
) -> list[tuple[str, Engine]]:
    """(event, engine) pairs, event in EVENTS order, from one roster to the next. An engine
    without an address yet is unreachable: callbacks see it once it has one. A new address or
    restart count is a new engine behind the same pod name: the old one leaves."""
    found: dict[str, list[Engine]] = {event: [] for event in EVENTS}
    for pod in sorted(before.keys() | after.keys()):
        old, new = _reachable(before.get(pod)), _reachable(after.get(pod))
        if old is not None and (new is None or _incarnation(new) != _incarnation(old)):
            found["leave"].append(old)
            old = None
        if new is None:
            continue
        if new.state == DRAINING:
            if old is None or old.state != DRAINING:
                found["drain"].append(new)
            continue
        if old is None:
            found["join"].append(new)
        if new.state == SERVING and (old is None or old.state != SERVING):
            found["serving"].append(new)
    return [(event, engine) for event in EVENTS for engine in found[event]]


def _reachable(engine: Engine | None) -> Engine | None:
    return engine if engine is not None and engine.address else None


def _incarnation(engine: Engine) -> tuple[str, int]:
    """What identifies one engine process behind a pod name."""
    return engine.address, engine.restarts


class _Run:
    """One start()..stop() of the watch: its own stop event and connection, so a thread that
    outlives its stop() can neither be woken by a later start() nor close that run's watch."""

    def __init__(self, roster: EngineRoster) -> None:
        self.stopping = threading.Event()
        self.watch = roster._new_watch(cancelled=self.stopping)
        self.thread = threading.Thread(
            target=roster._run, args=(self,), name="rljob-engine-roster", daemon=True
        )

    def stop(self) -> None:
        self.stopping.set()
        self.watch.close()


class EngineRoster:
    """Watches the job's own RLJob and keeps its rollout roster; see the module docstring.

    name/namespace default to RLJOB_NAME/RLJOB_NAMESPACE (every job pod has them). The API
    server, token and CA default to the pod's ServiceAccount. `token` is the token itself (a
    str), a callable returning one, or a pathlib.Path of a file re-read on every connect."""

    def __init__(
        self,
        name: str | None = None,
        namespace: str | None = None,
        *,
        on_join: EngineCallback | None = None,
        on_serving: EngineCallback | None = None,
        on_drain: EngineCallback | None = None,
        on_leave: EngineCallback | None = None,
        api_server: str | None = None,
        token: TokenSource = None,
        ca_file: str | Path | None = None,
        verify: bool = True,
        timeout: float = 30.0,
    ) -> None:
        self.name = _required(name or os.environ.get("RLJOB_NAME"), "name", "RLJOB_NAME")
        self.namespace = _required(
            namespace or os.environ.get("RLJOB_NAMESPACE") or _in_cluster_namespace(),
            "namespace",
            "RLJOB_NAMESPACE",
        )
        server = _required(
            api_server or in_cluster_server(), "api_server", "KUBERNETES_SERVICE_HOST"
        )
        endpoint = Endpoint(
            server=server,
            token=token if token is not None else in_cluster_file("token"),
            ca_file=ca_file if ca_file is not None else in_cluster_file("ca.crt"),
            verify=verify,
            timeout=timeout,
        )
        self._callbacks: dict[str, EngineCallback | None] = {
            "drain": on_drain,
            "leave": on_leave,
            "join": on_join,
            "serving": on_serving,
        }
        self.endpoint = endpoint
        self._lister = self._new_watch()  # refresh()'s own connection, never a run's
        self._changed = threading.Condition()
        self._snapshot: Snapshot = {}
        self._updating = threading.RLock()  # one update (and its callbacks) at a time
        self._lifecycle = threading.Lock()  # start() and stop() one at a time
        self._current: _Run | None = None

    # --- what a driver reads -------------------------------------------------------------

    def engines(self) -> Snapshot:
        """pod name -> Engine, a copy of the latest roster."""
        with self._changed:
            return dict(self._snapshot)

    def serving(self) -> list[Engine]:
        """The engines to send requests to, by pod name."""
        return [e for _, e in sorted(self.engines().items()) if e.state == SERVING]

    def wait_until(self, predicate: Callable[[Snapshot], bool], timeout: float) -> bool:
        """Blocks until predicate(engines()) holds (True) or timeout seconds pass (False).
        Without start(), it refresh()es every second itself."""
        deadline = time.monotonic() + timeout
        while True:
            if not self._watching():
                self._poll_quietly()
            with self._changed:
                if predicate(dict(self._snapshot)):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, POLL_SECONDS))

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> EngineRoster:
        """Watches in a daemon thread (callbacks run there) until stop(). A thread left over
        from an earlier stop() (a callback still running) may finish that callback, but its
        later updates are dropped: only this run's thread feeds the roster."""
        with self._lifecycle:
            if self._watching():
                return self
            self._current = _Run(self)
            self._current.thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Ends the watch at once; waits up to timeout seconds for a running callback."""
        with self._lifecycle:
            run, self._current = self._current, None
        if run is None:
            return
        run.stop()
        if run.thread is threading.current_thread():
            return  # stop() from a callback: the thread ends once the callback returns
        run.thread.join(timeout)
        if run.thread.is_alive():
            log.warning(
                "roster watch thread still in a callback after %.1fs; its later updates "
                "are dropped",
                timeout,
            )

    def refresh(self) -> Snapshot:
        """One synchronous list (callbacks run in the caller's thread); for drivers without
        threads. Raises RuntimeError between start() and stop(): the watch thread keeps the
        roster, and a list read alongside it could be older than an event it applied. Raises
        OSError or WatchError when the API server cannot be read."""
        if not self._refresh_unless_watching():
            raise RuntimeError(
                "EngineRoster.refresh() while the watch thread runs: read engines() or "
                "serving(), or wait_until(); refresh() is for a roster that was not start()ed"
            )
        return self.engines()

    def __enter__(self) -> EngineRoster:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # --- the watch -----------------------------------------------------------------------

    def _new_watch(self, cancelled: threading.Event | None = None) -> ObjectWatch:
        return ObjectWatch(
            self.endpoint,
            COLLECTION.format(namespace=self.namespace),
            f"metadata.name={self.name}",
            cancelled=cancelled,
        )

    def _watching(self) -> bool:
        """A run is current (started, not stopped) and its thread alive."""
        run = self._current
        return run is not None and run.thread.is_alive()

    def _refresh_unless_watching(self) -> bool:
        """Lists and applies unless a watch thread runs (False). The list happens under the
        update lock and the check is repeated after it: a start() during the list wins."""
        with self._updating:
            if self._watching():
                return False
            items, _ = self._lister.list()
            if self._watching():
                return False
            self._apply(items[0] if items else None)
        return True

    def _run(self, run: _Run) -> None:
        backoff = 0.5
        while not run.stopping.is_set():
            try:
                items, version = run.watch.list()
                self._apply(items[0] if items else None, run)
                backoff = 0.5
                self._follow(run, version)
            except Exception as exc:  # the watch must outlive any error: back off, re-list
                if run.stopping.is_set():
                    return
                if isinstance(exc, WatchError) and exc.code == 410:
                    log.info("roster watch expired (410 Gone); listing again")
                    continue
                log.warning("roster watch of %s/%s failed: %s", self.namespace, self.name, exc)
                run.stopping.wait(backoff * random.uniform(0.8, 1.2))
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    def _follow(self, run: _Run, version: str) -> None:
        """Follows watch streams from version until an error (raised) or stop()."""
        while not run.stopping.is_set():
            for kind, obj in run.watch.watch(version):
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if kind in ("ADDED", "MODIFIED"):
                    self._apply(obj, run)
                elif kind == "DELETED":
                    self._apply(None, run)

    def _poll_quietly(self) -> None:
        try:
            self._refresh_unless_watching()
        except Exception as exc:  # wait_until keeps waiting through a failed read
            log.warning("roster refresh of %s/%s failed: %s", self.namespace, self.name, exc)

    def _apply(self, job: JSON | None, run: _Run | None = None) -> None:
        """Makes job's roster the current one and fires its transitions; an update from a
        stopped run (a thread that outlived stop()) is dropped."""
        with self._updating:
            if run is not None and run.stopping.is_set():
                return
            after = engines_of(job)
            with self._changed:
                before, self._snapshot = self._snapshot, after
                self._changed.notify_all()
            for event, engine in transitions(before, after):
                self._fire(event, engine)

    def _fire(self, event: str, engine: Engine) -> None:
        callback = self._callbacks[event]
        if callback is None:
            return
        try:
            callback(engine)
        except Exception:  # a driver's bug must not stop the roster
            log.exception("roster on_%s callback failed for %s", event, engine.pod)


def _required(value: str | None, what: str, env: str) -> str:
    if not value:
        raise ValueError(f"EngineRoster needs {what}: pass it or run in a pod with {env} set")
    return value


def _in_cluster_namespace() -> str | None:
    path = in_cluster_file("namespace")
    return path.read_text().strip() if path else None
