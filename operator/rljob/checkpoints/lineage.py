"""Lineage, the fence between trainer attempts (pure).

A version (s, k) is eligible for resume, and counts for retention, when k is the current attempt,
or k is older and s <= the step that every later attempt j (k < j <= current) resumed from. The
step comes from attempt j's marker; a missing marker, or an attempt that started from scratch,
fences off every older attempt.

With resume steps that never decrease (the normal case: each attempt resumes from the newest
version) this is the rule docs/architecture.md section 9 states, "s <= the step attempt k+1 resumed
from", because the minimum over later attempts is then attempt k+1's. It differs only after a
rollback (a user's `resume: <version>`, a fallback past a broken version, or `resume: None`): then
versions an older attempt wrote after the rollback point are no longer eligible, so a later restart
cannot silently undo the rollback.

A zombie of a superseded attempt can still write, but whatever it writes after the attempt that
superseded it resumed is never eligible.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rljob.checkpoint_protocol.layout import VersionId
from rljob.checkpoint_protocol.models import AttemptMarker

_FENCED = -1  # fence value under which no step is eligible


@dataclass(frozen=True)
class Lineage:
    """The current attempt and, per attempt that has a marker, the step it resumed from
    (None: from scratch)."""

    current_attempt: int
    resumed_from: Mapping[int, int | None] = field(default_factory=dict)

    @classmethod
    def from_markers(
        cls, markers: Iterable[AttemptMarker], current_attempt: int | None = None
    ) -> Lineage:
        """From the attempt markers; current_attempt defaults to the highest marker."""
        resumed = {m.attempt: m.resumed_from_step for m in markers}
        if current_attempt is None:
            if not resumed:
                raise ValueError("no markers and no current attempt")
            current_attempt = max(resumed)
        return cls(current_attempt, resumed)

    def fence(self, attempt: int) -> int | None:
        """Highest eligible step of attempt: None for the current one (unbounded), -1 when none
        of its versions is eligible."""
        if attempt == self.current_attempt:
            return None
        if attempt > self.current_attempt or attempt < 0:
            return _FENCED
        return self._fences[attempt]

    @functools.cached_property
    def _fences(self) -> list[int]:
        """fence(k) for every k < current, in one backward pass over the markers."""
        fences = [_FENCED] * max(self.current_attempt, 0)
        running: int | None = None  # min resume step of the attempts after k; None: none yet
        for later in range(self.current_attempt, 0, -1):
            step = self.resumed_from.get(later)
            if step is None or running == _FENCED:
                running = _FENCED  # missing marker or a scratch start fences everything older
            else:
                running = step if running is None else min(running, step)
            fences[later - 1] = running
        return fences

    def eligible(self, version: VersionId) -> bool:
        return self.why_ineligible(version) is None

    def why_ineligible(self, version: VersionId) -> str | None:
        """None when eligible, else a one-line reason."""
        k = version.attempt
        if k == self.current_attempt:
            return None
        if k > self.current_attempt:
            return f"written by attempt {k}, newer than the current attempt {self.current_attempt}"
        fence = self.fence(k)
        if fence is not None and version.step <= fence:
            return None
        blocker = self._blocker(k)
        if blocker is None:
            return f"attempt {k} was superseded before step {version.step}"
        later, step = blocker
        if step is None and later not in self.resumed_from:
            return f"attempt {k} was superseded and attempt {later} has no marker"
        if step is None:
            return f"attempt {k} was superseded: attempt {later} started from scratch"
        return (
            f"attempt {k} was superseded: attempt {later} resumed from step {step} < {version.step}"
        )

    def _blocker(self, attempt: int) -> tuple[int, int | None] | None:
        """The later attempt whose marker sets attempt's fence (missing/scratch first)."""
        best: tuple[int, int | None] | None = None
        for later in range(attempt + 1, self.current_attempt + 1):
            step = self.resumed_from.get(later)
            if step is None:
                return later, None
            if best is None or (best[1] is not None and step < best[1]):
                best = (later, step)
        return best


def next_attempt(marker_attempts: Iterable[int], version_attempts: Iterable[int] = ()) -> int:
    """The attempt number after every attempt seen under the job's prefix (1 when none): a new
    RLJob of an old name continues numbering, so its versions never collide with the old ones'."""
    highest = max([*marker_attempts, *version_attempts], default=0)
    return highest + 1
