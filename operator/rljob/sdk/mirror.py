"""Mirrors a framework's own completed saves into checkpoint versions, beside training.

    mirror = Mirror(get_layout("verl"), Path("/ckpt"), CheckpointWriter.from_env())
    mirror.start()             # a daemon thread: polls the directory, never blocks the caller
    ...                        # the framework saves global_step_N/, then its tracker file
    mirror.stop(final_pass_timeout=300)   # one last pass over completed steps, bounded

Each pass mirrors the newest step the framework signed complete (older complete steps it
skipped are superseded) into version (N, this attempt): every file is read once, hashed while
it uploads (CheckpointWriter.write_file), `workers` at a time. A half-written save is never
mirrored: only the layout's completion sign makes a step a candidate.

With several trainer nodes (NNODES, NODE_RANK) the sign exists only on the driver's node (0).
The driver writes `_rljob/ready.json` under the version, uploads its files and its part
marker, and commits once all nodes' parts are there (commit_timeout, else PartsMissing naming
the nodes). Every other node watches the store for ready markers of its attempt, uploads its
own files of that step without committing and writes its part marker (rljob.sdk.native).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rljob.checkpoint_protocol.errors import CheckpointError
from rljob.checkpoint_protocol.layout import ENV_CHECKPOINT_URI, KeyKind, VersionId
from rljob.checkpoint_protocol.models import ShardEntry
from rljob.sdk.checkpoint.writer import CheckpointWriter, PendingVersion
from rljob.sdk.layouts import Layout, StepFile, get_layout
from rljob.sdk.native import (
    PARTS_DIR,
    READY_NAME,
    NodeIdentity,
    decode_part,
    encode_part,
    materialise_from_env,
    native_metadata,
    part_name,
    part_rank,
)

log = logging.getLogger(__name__)

# Knobs of the mirror the entrypoint starts (seconds; a count for the workers).
ENV_INTERVAL = "RLJOB_MIRROR_INTERVAL"
ENV_WORKERS = "RLJOB_MIRROR_WORKERS"
ENV_COMMIT_TIMEOUT = "RLJOB_MIRROR_COMMIT_TIMEOUT"
ENV_FINAL_TIMEOUT = "RLJOB_MIRROR_FINAL_TIMEOUT"

# A step that failed this many passes (store down, folder deleted under us) is given up.
MAX_TRIES = 3


class PartsMissing(CheckpointError):  # noqa: N818
    """Not every node's part of a version reached the store in time: it stays uncommitted."""

    def __init__(self, version: VersionId, missing: list[int], nodes: int, waited: float) -> None:
        names = ", ".join(str(n) for n in missing)
        super().__init__(
            f"{version.name}: node(s) {names} of {nodes} did not upload their part within "
            f"{waited:.0f}s; the version is not committed"
        )
        self.version = version
        self.missing = missing


class Mirror:
    """Watches one checkpoint directory and mirrors each newly completed step."""

    def __init__(
        self,
        layout: Layout,
        root: Path,
        writer: CheckpointWriter,
        *,
        node: NodeIdentity | None = None,
        workers: int = 4,
        interval: float = 5.0,
        commit_timeout: float = 600.0,
        part_poll: float = 1.0,
        after_step: int | None = None,
    ) -> None:
        self.layout = layout
        self.root = Path(root)
        self.writer = writer
        self.node = node or NodeIdentity()
        self.workers = max(1, workers)
        self.interval = interval
        self.commit_timeout = commit_timeout
        self.part_poll = part_poll
        # Steps up to this one are never mirrored (the step this attempt resumed from).
        self.last_step = -1 if after_step is None else after_step
        self.mirrored: list[VersionId] = []
        self.errors: list[BaseException] = []
        self._tries: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- one pass ------------------------------------------------------------------------------

    def run_once(self) -> int | None:
        """One pass: the step mirrored (committed, or this node's part uploaded), else None.
        Raises what the mirroring of that step raised."""
        with self._lock:
            step = self._candidate()
            if step is None:
                return None
            try:
                version = self._mirror_driver(step) if self.node.driver else self._mirror_node(step)
            except BaseException:
                self._tries[step] = self._tries.get(step, 0) + 1
                if self._tries[step] >= MAX_TRIES:
                    log.error("giving up mirroring step %d after %d tries", step, MAX_TRIES)
                    self.last_step = max(self.last_step, step)
                raise
            self.last_step = step
            self.mirrored.append(version)
            return step

    def _candidate(self) -> int | None:
        if self.node.driver:
            steps = [s for s in self.layout.complete_steps(self.root) if s > self.last_step]
            return max(steps, default=None)
        return self._requested_step()

    def _requested_step(self) -> int | None:
        """The newest step after last_step whose ready marker this attempt's driver wrote."""
        location = self.writer.location
        start = location.start_after_step(self.last_step + 1) if self.last_step >= 0 else None
        steps = [
            parsed.version.step
            for obj in self.writer.store.list_objects(location.versions_prefix, start_after=start)
            if (parsed := location.parse_key(obj.key)).kind is KeyKind.VERSION_OBJECT
            and parsed.version is not None
            and parsed.version.attempt == self.writer.attempt
            and parsed.relative == READY_NAME
            and parsed.version.step > self.last_step
        ]
        return max(steps, default=None)

    def _upload(self, pending: PendingVersion, files: list[StepFile]) -> list[ShardEntry]:
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(lambda f: pending.write_file(f.key, f.path), files))

    def _put(self, pending: PendingVersion, relative: str, data: bytes) -> None:
        location = self.writer.location
        self.writer.store.put_bytes(
            location.shard_key(pending.version, relative), data, content_type="application/json"
        )

    def _pending(self, step: int) -> PendingVersion:
        metadata = native_metadata(self.layout, self.node.nodes)
        return self.writer.version(step, metadata=metadata, commit=False)

    def _mirror_node(self, step: int) -> VersionId:
        pending = self._pending(step)
        entries = self._upload(pending, self.layout.files(self.root, step))
        self._put(pending, part_name(self.node.rank), encode_part(self.node.rank, entries))
        log.info("node %d: uploaded %d files of step %d", self.node.rank, len(entries), step)
        return pending.version

    def _mirror_driver(self, step: int) -> VersionId:
        pending = self._pending(step)
        nodes = self.node.nodes
        if self.node.coordinated:
            ready = {"step": step, "nodes": nodes, "layout": self.layout.name}
            self._put(pending, READY_NAME, json.dumps(ready).encode())
        files = self.layout.files(self.root, step)
        entries = self._upload(pending, files)
        if self.node.coordinated:
            self._put(pending, part_name(0), encode_part(0, entries))
            for rank, shards in self.wait_for_parts(pending.version).items():
                if rank != 0:
                    pending.add_entries(shards)
        pending.commit()
        log.info("mirrored step %d (%d files) as %s", step, len(pending.entries), pending.uri)
        return pending.version

    def wait_for_parts(self, version: VersionId) -> dict[int, list[ShardEntry]]:
        """Every node's part of version, polled until all `nodes` are there; PartsMissing
        naming the missing nodes after commit_timeout."""
        location, store = self.writer.location, self.writer.store
        prefix = location.version_prefix(version)
        started = time.monotonic()
        deadline = started + self.commit_timeout
        while True:
            keys = {
                rank: obj.key
                for obj in store.list_objects(prefix + PARTS_DIR)
                if (rank := part_rank(obj.key[len(prefix) :])) is not None
            }
            missing = [r for r in range(self.node.nodes) if r not in keys]
            if not missing:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PartsMissing(version, missing, self.node.nodes, time.monotonic() - started)
            # An Event nobody sets: a wait with a deadline that stop() does not cut short.
            threading.Event().wait(min(self.part_poll, remaining))
        parts: dict[int, list[ShardEntry]] = {}
        for rank, key in keys.items():
            data = store.get_bytes(key)
            if data is None:
                raise CheckpointError(f"{version.name}: part of node {rank} vanished")
            parts[rank] = decode_part(data)
        return parts

    # -- beside training -----------------------------------------------------------------------

    def _safe_pass(self) -> None:
        try:
            self.run_once()
        except Exception as exc:  # the loop survives; the error is kept and logged
            log.warning("checkpoint mirror pass failed: %s", exc)
            self.errors.append(exc)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._safe_pass()
            self._stop.wait(self.interval)

    def start(self) -> None:
        """Starts mirroring in a daemon thread; returns at once."""
        if self._thread is not None:
            raise RuntimeError("the mirror is already running")
        self._thread = threading.Thread(target=self._loop, name="rljob-mirror", daemon=True)
        self._thread.start()

    def stop(self, *, final_pass_timeout: float | None = 300.0) -> bool:
        """Stops the loop and, unless final_pass_timeout is None, runs passes until no newer
        completed step is left, within that many seconds. True when it finished in time."""
        self._stop.set()
        deadline = time.monotonic() + (final_pass_timeout or 0.0)
        if self._thread is not None:
            self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
            if self._thread.is_alive():
                return False
        if final_pass_timeout is None:
            return True
        done = threading.Event()

        def drain() -> None:
            try:
                while self.run_once() is not None:
                    pass
            except Exception as exc:
                log.warning("checkpoint mirror's last pass failed: %s", exc)
                self.errors.append(exc)
            finally:
                done.set()

        threading.Thread(target=drain, name="rljob-mirror-last", daemon=True).start()
        return done.wait(max(0.0, deadline - time.monotonic()))


def final_pass_timeout(env: Mapping[str, str] | None = None) -> float:
    env = os.environ if env is None else env
    return float(env.get(ENV_FINAL_TIMEOUT) or 300.0)


def launch(
    layout_name: str, root: Path, env: Mapping[str, str] | None = None, *, shared: bool = False
) -> Mirror | None:
    """What the entrypoint does before starting the trainer: restores the resume version into
    root in the layout's form (WorldSizeMismatch when the node count changed and the layout does
    not reshard), then starts a mirror beside it. None when no checkpoint URI is configured
    (nothing to mirror into), or on nodes other than 0 of a `shared` directory (node 0 does
    both for all)."""
    env = os.environ if env is None else env
    layout = get_layout(layout_name)
    node = NodeIdentity.from_env(env, shared=shared)
    resume = materialise_from_env(layout, root, env, shared=shared)
    if not env.get(ENV_CHECKPOINT_URI):
        log.warning("%s is not set: %s saves are not mirrored", ENV_CHECKPOINT_URI, layout.name)
        return None
    if shared and not node.driver:
        return None
    mirror = Mirror(
        layout,
        root,
        CheckpointWriter.from_env(env),
        node=node,
        workers=int(env.get(ENV_WORKERS) or 4),
        interval=float(env.get(ENV_INTERVAL) or 5.0),
        commit_timeout=float(env.get(ENV_COMMIT_TIMEOUT) or 600.0),
        after_step=resume.step if resume is not None else None,
    )
    mirror.start()
    return mirror
