"""A framework's TensorBoard event files as the SDK's trainer series: the step and heartbeat (a
hung framework becomes TrainerStalled), seconds per phase where the framework times its steps,
and the RL canaries (rljob.sdk.metrics), through one key map per framework
(rljob.sdk.framework_keys).

    python -m rljob.sdk.entrypoint --tensorboard-dir DIR --tensorboard-keys verl -- <driver> ...

runs it in a thread of the entrypoint on the pod that writes the files (the ray launcher's
index 0, where the frameworks' drivers and slime's actors write; a layout where other pods
write names a shared volume as DIR). Every `interval` it reads what was appended to the event
files under DIR (rljob.sdk.event_file), newest record last:

- a new scalar is a sign of life: the heartbeat is set when it is read (at most one interval
  late); the step is the highest step seen on the framework's step axis;
- canary values are exported at that step, each keyword from the newest step that logged it;
- per-step timings add to rljob_trainer_phase_seconds_total; generated tokens, where a framework
  logs what they derive from, add to rljob_rl_generated_tokens_total;
- a weight sync's timing (the `syncing_weights` phase: verl's update_weights, OpenRLHF's
  broadcast, NeMo-RL's refit, slime's update_weights) is a new policy pushed to the engines:
  rljob_policy_generation is the step of the newest one (the frameworks sync once a step).

Files already there when the bridge starts (before the trainer) are a previous attempt's: the
frameworks' writers open a new file per process start, so they are never read; their steps may
be past the one this attempt resumed from. The phase gauge says `running` (the
files tell no phase as it happens).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from rljob.sdk.event_file import EventFile, Scalar
from rljob.sdk.framework_keys import KeyMap
from rljob.sdk.metrics import KEYWORDS, TOKENS_KEYWORD

if TYPE_CHECKING:
    from rljob.sdk.metrics import RLMetrics
    from rljob.sdk.progress import ProgressExporter

log = logging.getLogger("rljob.sdk.tensorboard_bridge")
DEFAULT_INTERVAL = 5.0
MIN_INTERVAL = 0.1
EVENT_FILE_MARK = "tfevents"
RUNNING_PHASE = "running"
# Steps whose derived-token inputs are kept while their other half may still be unread.
TOKEN_STEPS_KEPT = 8
SYNC_PHASE = "syncing_weights"
GAUGE_KEYWORDS = tuple(sorted(KEYWORDS - {TOKENS_KEYWORD}))


class TensorBoardBridge:
    """Follows DIR's event files into `progress` and `rl`; `poll` once, or `start` a thread."""

    def __init__(
        self,
        directory: Path,
        keys: KeyMap,
        progress: ProgressExporter,
        rl: RLMetrics,
    ) -> None:
        self.directory, self.keys = directory, keys
        self._progress, self._rl = progress, rl
        self._files: dict[Path, EventFile] = {}
        self._skipped_old = set(self._event_files())  # the previous attempt's
        self._lock = threading.Lock()  # one reader of the files at a time
        self.step: int | None = None
        self._latest: dict[str, tuple[int, float]] = {}  # tag -> (step, value), newest
        self._token_inputs: dict[int, dict[str, float]] = {}
        self._generation = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        progress.phase(RUNNING_PHASE)

    def poll(self) -> int:
        """Reads what was appended since the last poll; the number of scalars read."""
        with self._lock:
            return self._poll()

    def _poll(self) -> int:
        scalars = [s for f in self._follow() for s in f.read_new() if self.keys.wanted(s.tag)]
        if not scalars:
            return 0
        self._progress.heartbeat()
        for scalar in scalars:
            self._take(scalar)
        on_axis = [s.step for s in scalars if self.keys.on_step_axis(s.tag)]
        if on_axis and (self.step is None or max(on_axis) > self.step):
            self.step = max(on_axis)
            self._progress.step(self.step)
        self._report()
        return len(scalars)

    def start(self, interval: float = DEFAULT_INTERVAL) -> None:
        def run() -> None:
            while not self._stop.wait(max(interval, MIN_INTERVAL)):
                try:
                    self.poll()
                except Exception:  # the bridge must outlive one bad read: log and go on
                    log.exception("rljob: reading the TensorBoard files failed")

        self._thread = threading.Thread(target=run, name="rljob-tensorboard-bridge", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops the thread after one last read (the last step's values)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.poll()

    def _event_files(self) -> list[Path]:
        try:
            return sorted(p for p in self.directory.rglob(f"*{EVENT_FILE_MARK}*") if p.is_file())
        except OSError:
            return []

    def _follow(self) -> Iterable[EventFile]:
        for path in self._event_files():
            if path not in self._files and path not in self._skipped_old:
                self._files[path] = EventFile(path)
        return self._files.values()

    def _take(self, scalar: Scalar) -> None:
        phase = self.keys.phases.get(scalar.tag)
        if phase is not None:
            self._progress.add_phase_seconds(phase, scalar.value)
        if phase == SYNC_PHASE and scalar.step > self._generation:
            self._generation = scalar.step
            self._progress.policy_generation(scalar.step)
        newest = self._latest.get(scalar.tag)
        if newest is None or scalar.step >= newest[0]:
            self._latest[scalar.tag] = (scalar.step, scalar.value)
        if scalar.tag in self.keys.tokens_inputs:
            self._token_inputs.setdefault(scalar.step, {})[scalar.tag] = scalar.value

    def _report(self) -> None:
        values: dict[str, float | None] = {}
        for keyword in GAUGE_KEYWORDS:
            value = self._newest(keyword)
            if value is not None:
                values[keyword] = value
        tokens = self._tokens()
        if tokens:
            values[TOKENS_KEYWORD] = tokens
        if values and self.step is not None:
            self._rl.report_step(max(self.step, 0), **values)

    def _newest(self, keyword: str) -> float | None:
        """The keyword's value at the newest step any of its tags was logged."""
        steps = {step for step, _ in self._latest.values()}
        for step in sorted(steps, reverse=True):
            at_step = {tag: value for tag, (s, value) in self._latest.items() if s == step}
            value = self.keys.canary(keyword, at_step)
            if value is not None:
                return value
        return None

    def _tokens(self) -> float:
        """Generated tokens of every step whose inputs are all read now (each step once)."""
        derive = self.keys.tokens
        if derive is None:
            return 0.0
        total = 0.0
        for step in sorted(self._token_inputs):
            found = derive(self._token_inputs[step])
            if found is not None:
                total += max(found, 0.0)
                del self._token_inputs[step]
        for step in sorted(self._token_inputs)[:-TOKEN_STEPS_KEPT]:
            del self._token_inputs[step]
        return total


__all__ = ["DEFAULT_INTERVAL", "RUNNING_PHASE", "TensorBoardBridge"]
