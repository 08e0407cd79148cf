"""Per-job memory: everything the operator keeps about one RLJob between passes, in ONE object
per uid (as kopf keeps one memory per resource), dropped with its per-job gauges when the RLJob
is deleted or is missing from a re-list. State that must survive an operator restart is in the
RLJob's status, never here: losing this costs at most a repeated read or a repeated report."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from rljob.api.diagnosis import Bottleneck
from rljob.health.evaluation import Evaluation
from rljob.health.termination import CrashRepeatTracker
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.events import REPORT_REPEAT_SECONDS
from rljob.reconcile.expectations import EXPECTATION_SECONDS, Recent
from rljob.reconcile.observed import ObservedPod
from rljob.reconcile.progress import ProgressReading, StepSample

JobKey = tuple[str, str]  # (namespace, name)


@dataclass
class JobMemory:
    """What one RLJob's passes remember. Pending findings and crashes are consumed only after
    the pass that acted on them wrote its journal: a 409 loses nothing."""

    key: JobKey
    findings: list[Evaluation] = field(default_factory=list)
    crashes: list[tuple[ObservedPod, Evaluation]] = field(default_factory=list)
    crash_tracker: CrashRepeatTracker = field(default_factory=CrashRepeatTracker)
    progress: ProgressReading | None = None
    saved_step: int | None = None  # the trainer's checkpoint-step metric
    diagnosis: Bottleneck | None = None  # the last diagnosis a health round woke the job for
    engine_readings: tuple[EngineReading, ...] = ()  # the rollout engines' latest, by pod name
    listed_step: int | None = None  # the saved step the store was last listed for
    step_window: list[StepSample] = field(default_factory=list)
    steps_seen: tuple[StepSample, ...] = ()  # the trainer's last distinct steps, first read when
    reported: Recent = field(default_factory=lambda: Recent(REPORT_REPEAT_SECONDS))
    deletes_issued: Recent = field(default_factory=lambda: Recent(EXPECTATION_SECONDS))
    events_posted: Recent = field(default_factory=lambda: Recent(EXPECTATION_SECONDS))
    written: bytes | None = None  # patch_digest of the last status patch this process wrote
    phase: str | None = None  # for the jobs-by-phase gauge
    retention_problem: str = ""  # the last retention apply's failure, for the next journal
    taken: set[tuple[str, str]] = field(default_factory=set)  # (kind, name) held by another


class Memories:
    """JobMemory by uid. `on_forget(key)` removes what lives outside (per-job gauges, the
    health loop's state) so that nothing of a deleted RLJob remains in the process."""

    def __init__(self, on_forget: Callable[[JobKey, JobMemory], None]) -> None:
        self._by_uid: dict[str, JobMemory] = {}
        # key -> its uids, oldest first: a health round looks every job up by key, and a scan
        # of every memory per lookup made each round quadratic in the jobs
        self._uids_by_key: dict[JobKey, dict[str, None]] = {}
        self._on_forget = on_forget

    def __len__(self) -> int:
        return len(self._by_uid)

    def __contains__(self, uid: object) -> bool:
        return uid in self._by_uid

    def of(self, uid: str, key: JobKey) -> JobMemory:
        memory = self._by_uid.get(uid)
        if memory is None or memory.key != key:
            if memory is not None:
                self._unindex(uid, memory.key)
            memory = self._by_uid[uid] = JobMemory(key)
            self._uids_by_key.setdefault(key, {})[uid] = None
        return memory

    def by_key(self, key: JobKey) -> JobMemory | None:
        """The memory of the oldest uid known under this key (a re-created job's predecessor
        until it is forgotten)."""
        uids = self._uids_by_key.get(key)
        return self._by_uid[next(iter(uids))] if uids else None

    def forget(self, uid: str) -> None:
        memory = self._by_uid.pop(uid, None)
        if memory is not None:
            self._unindex(uid, memory.key)
            with contextlib.suppress(Exception):
                self._on_forget(memory.key, memory)

    def _unindex(self, uid: str, key: JobKey) -> None:
        uids = self._uids_by_key.get(key, {})
        uids.pop(uid, None)
        if not uids:
            self._uids_by_key.pop(key, None)

    def retain(self, uids: Iterable[str]) -> list[str]:
        """After a re-list: forget every uid the list no longer has (a watch gap sends no
        DELETED). Returns the forgotten uids."""
        keep = set(uids)
        gone = [uid for uid in self._by_uid if uid not in keep]
        for uid in gone:
            self.forget(uid)
        return gone


def patch_digest(patch: dict[str, Any]) -> bytes:
    """What a pass remembers of the status patch it wrote, to write the same one once: a
    patch is the whole status, several kilobytes of objects a job between passes."""
    text = json.dumps(patch, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16).digest()
