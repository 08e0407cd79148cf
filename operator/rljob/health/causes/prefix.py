"""PrefixCacheCollapse: prefix-cache hits far below the engine's own baseline at a steady prompt
mix (docs/architecture.md section 7, issue 32).

Upstream reports the hit rate collapsing to zero on hybrid sliding-window models once the working
set passes a threshold far below the pool (vllm #48435) and on hybrid or speculative paths whose
first-block lookups miss (vllm #42948, #51771); the real core's `prefix-collapse` trace shows the
shape: hits stop exactly while queries go on, and KV pressure (preemptions) rises since the K
samples of a prompt no longer share its blocks.

A weight sync's prefix-cache reset is not a collapse: in vLLM 0.33.0 `allocate_slots` caches a
block's hash when it is allocated, so the samples of a prompt admitted together hit each other's
blocks whether or not the cache was reset; a reset costs only the shared template once (the real
core's `rl` trace reads 87.7 % with resets, 87.8 % without, bench/vllm_core/README.md).

Each engine is judged against itself: the window's hits over queries against the hit rate of its
own history (committed a window late, and never while a collapse or a new mix is being seen), and
only while the prompt mix is steady: the mean prompt length of finished requests and the
window's prefix query rate within their tolerances of the baseline's (the query rate also moves
when the batch or the samples per prompt change). A new mix held for two windows is learned
afresh. A window with too few queries (a sync RL step longer than the window) is extended back up
to `lookback_windows` windows.
"""

from __future__ import annotations

from dataclasses import dataclass

from rljob.api.durations import parse_duration
from rljob.api.spec import Health
from rljob.health.causes.cause import CauseDetector, SeriesState
from rljob.health.causes.engines import is_stale
from rljob.health.evaluation import (
    PREFIX_COLLAPSE,
    Evaluation,
    Evidence,
    finding,
    format_duration,
    healthy,
    insufficient,
)
from rljob.health.samples import (
    CumulativeRing,
    EngineSample,
    optional_delta,
    ring_capacity,
)
from rljob.vocabulary.enums import FailureReason

WINDOW_SECONDS = 300.0
LOOKBACK_WINDOWS = 4
# Prompt tokens looked up: a sync RL batch of 512 prompts of ~250 tokens is 128k.
MIN_QUERIES = 5000.0
MIN_BASELINE_HIT_RATE = 0.2
MAX_RATIO = 0.5
PROMPT_TOLERANCE = 1.5
# A sync RL step of length C puts one admission burst in a window W: the window's query rate is
# then C / W of the mean, so 3 tolerates steps up to 15 minutes at the 5-minute window.
QUERY_RATE_TOLERANCE = 3.0
# A new mix held this many windows is learned (shorter: one slow step's burst could pass for one).
RELEARN_WINDOWS = 2
# Ring columns.
_HITS, _QUERIES, _PREEMPTIONS, _FINISHED, _PROMPT = range(5)
_WIDTH = 5


@dataclass(frozen=True, slots=True)
class PrefixCollapseConfig:
    """When a fall of an engine's prefix-cache hit rate is a collapse."""

    interval: float = 30.0
    window: float = WINDOW_SECONDS
    lookback_windows: int = LOOKBACK_WINDOWS
    min_queries: float = MIN_QUERIES
    # An engine reusing less than this has too little reuse to lose.
    min_baseline_hit_rate: float = MIN_BASELINE_HIT_RATE
    # The window's hit rate at most this share of the baseline's is a collapse.
    max_ratio: float = MAX_RATIO
    prompt_tolerance: float = PROMPT_TOLERANCE
    query_rate_tolerance: float = QUERY_RATE_TOLERANCE
    relearn_windows: int = RELEARN_WINDOWS

    @property
    def lookback(self) -> float:
        return self.window * self.lookback_windows

    @classmethod
    def from_health(cls, health: Health) -> PrefixCollapseConfig:
        interval = parse_duration(health.interval)
        return cls(interval=interval, window=max(WINDOW_SECONDS, 4 * interval))


@dataclass(frozen=True, slots=True)
class Totals:
    """Prefix hits and queries, preemptions and finished requests with their prompt tokens, over
    `seconds`."""

    seconds: float = 0.0
    hits: float = 0.0
    queries: float = 0.0
    preemptions: float = 0.0
    finished: float = 0.0
    prompt: float = 0.0

    def __add__(self, other: Totals) -> Totals:
        return Totals(
            self.seconds + other.seconds,
            self.hits + other.hits,
            self.queries + other.queries,
            self.preemptions + other.preemptions,
            self.finished + other.finished,
            self.prompt + other.prompt,
        )

    @property
    def hit_rate(self) -> float:
        return min(1.0, self.hits / self.queries) if self.queries > 0 else 0.0

    @property
    def query_rate(self) -> float:
        return self.queries / self.seconds if self.seconds > 0 else 0.0

    @property
    def prompt_length(self) -> float | None:
        return self.prompt / self.finished if self.finished > 0 else None


def totals(ring: CumulativeRing, start: float, end: float) -> Totals:
    before, after = ring.at(start), ring.at(end)
    changes = [b - a for a, b in zip(before, after, strict=True)]
    return Totals(
        seconds=max(0.0, end - start),
        hits=changes[_HITS],
        queries=changes[_QUERIES],
        preemptions=changes[_PREEMPTIONS],
        finished=changes[_FINISHED],
        prompt=changes[_PROMPT],
    )


class _PrefixState(SeriesState):
    __slots__ = ("baseline", "committed_until", "finished_known", "mix_off_since", "ring")

    def __init__(self, config: PrefixCollapseConfig) -> None:
        super().__init__(config.interval)
        self.ring = CumulativeRing(ring_capacity(config.lookback, config.interval), _WIDTH)
        self.baseline = Totals()
        self.committed_until: float | None = None  # the baseline holds history up to here
        self.mix_off_since: float | None = None
        self.finished_known = False

    def add(self, sample: EngineSample) -> None:
        accepted = self.accept(sample)
        if accepted is None:
            return
        previous, current, interval = accepted
        if interval is None or previous is None:
            return
        finished = optional_delta(previous.finished_requests_total, current.finished_requests_total)
        prompt = optional_delta(
            previous.finished_prompt_tokens_total, current.finished_prompt_tokens_total
        )
        self.finished_known = finished is not None and prompt is not None
        amounts = (
            interval.prefix_hits or 0.0,
            interval.prefix_queries or 0.0,
            interval.preemptions or 0.0,
            finished or 0.0,
            prompt or 0.0,
        )
        self.ring.append(interval.start, interval.end, amounts)


class PrefixCollapseDetector(CauseDetector[_PrefixState, PrefixCollapseConfig]):
    """Prefix-hit collapse for the engines of one role of one job."""

    detector = PREFIX_COLLAPSE

    def __init__(self, config: PrefixCollapseConfig) -> None:
        super().__init__(config, _PrefixState)

    def _judge(self, target: str, state: _PrefixState, now: float) -> Evaluation:
        last, span = state.series.last, state.ring.span()
        if last is None or span is None or is_stale(last.t, now, self.config.interval):
            return self.no_recent_metrics(target)
        if last.prefix_hits_total is None or last.prefix_queries_total is None:
            return insufficient(PREFIX_COLLAPSE, target, f"{target}: no prefix-cache counters")
        oldest, end = span[0], last.t
        window = self._window(state.ring, oldest, end)
        if window.queries < self.config.min_queries:
            self._commit(state, oldest, end)
            return insufficient(
                PREFIX_COLLAPSE,
                target,
                f"{target}: {window.queries:.0f} prompt tokens looked up in the last "
                f"{format_duration(window.seconds)}, too few to judge its prefix hits",
            )
        return self._judge_window(target, state, window, oldest, end)

    def _judge_window(
        self, target: str, state: _PrefixState, window: Totals, oldest: float, end: float
    ) -> Evaluation:
        config, baseline = self.config, state.baseline
        if baseline.queries < 2 * config.min_queries or baseline.seconds < config.window:
            self._commit(state, oldest, end)
            return healthy(PREFIX_COLLAPSE, target, f"{target}: learning its prefix hit rate")
        evidence = _evidence(window, baseline, state.finished_known)
        changed = _mix_change(window, baseline, config, state.finished_known)
        if changed:
            self._mix_changed(state, end)
            return healthy(
                PREFIX_COLLAPSE, target, f"{target}: prompt mix changed ({changed})", evidence
            )
        state.mix_off_since = None
        ratio = window.hit_rate / baseline.hit_rate if baseline.hit_rate > 0 else 1.0
        evidence["ratio"] = ratio
        if baseline.hit_rate >= config.min_baseline_hit_rate and ratio <= config.max_ratio:
            self._skip(state, end)
            return finding(
                PREFIX_COLLAPSE,
                target,
                FailureReason.PREFIX_CACHE_COLLAPSE,
                _collapse_message(target, window, baseline, state.finished_known),
                evidence,
            )
        self._commit(state, oldest, end)
        message = (
            f"{target} prefix hit rate {window.hit_rate:.1%} over "
            f"{format_duration(window.seconds)}, its baseline {baseline.hit_rate:.1%}"
        )
        return healthy(PREFIX_COLLAPSE, target, message, evidence)

    def _window(self, ring: CumulativeRing, oldest: float, end: float) -> Totals:
        """The last window, extended back a window at a time (up to the lookback) until it holds
        enough queries: a sync RL step can be longer than the window."""
        config, length = self.config, self.config.window
        window = totals(ring, max(oldest, end - length), end)
        while window.queries < config.min_queries and length < config.lookback:
            if end - length <= oldest:
                break
            length += config.window
            window = totals(ring, max(oldest, end - length), end)
        return window

    def _commit(self, state: _PrefixState, oldest: float, end: float) -> None:
        """Adds the history older than the window to the baseline."""
        until = end - self.config.window
        start = max(oldest, state.committed_until if state.committed_until is not None else oldest)
        if until > start:
            state.baseline = state.baseline + totals(state.ring, start, until)
            state.committed_until = until

    def _skip(self, state: _PrefixState, end: float) -> None:
        """Leaves the history older than the window out of the baseline."""
        until = end - self.config.window
        if state.committed_until is None or until > state.committed_until:
            state.committed_until = until

    def _mix_changed(self, state: _PrefixState, end: float) -> None:
        """Not judged under a new mix; held for `relearn_windows`, it becomes the baseline."""
        self._skip(state, end)
        if state.mix_off_since is None:
            state.mix_off_since = end
        if end - state.mix_off_since >= self.config.relearn_windows * self.config.window:
            state.baseline, state.mix_off_since = Totals(), None
            state.committed_until = end - self.config.window


def _ratio_outside(value: float | None, reference: float | None, tolerance: float) -> bool:
    if value is None or reference is None or reference <= 0:
        return False
    ratio = value / reference
    return not 1 / tolerance <= ratio <= tolerance


def _mix_change(
    window: Totals,
    baseline: Totals,
    config: PrefixCollapseConfig,
    finished_known: bool,
) -> str:
    """Why the prompt mix is not the baseline's, or "" when it is steady."""
    prompt = window.prompt_length if finished_known else None
    if _ratio_outside(prompt, baseline.prompt_length, config.prompt_tolerance):
        return f"prompts of {prompt:.0f} tokens against {baseline.prompt_length:.0f}"
    if _ratio_outside(window.query_rate, baseline.query_rate, config.query_rate_tolerance):
        return (
            f"{window.query_rate:.0f} prompt tokens/s looked up against {baseline.query_rate:.0f}"
        )
    return ""


def _evidence(window: Totals, baseline: Totals, finished_known: bool) -> Evidence:
    evidence: Evidence = {
        "hit_rate": window.hit_rate,
        "baseline_hit_rate": baseline.hit_rate,
        "queries": window.queries,
        "window_seconds": window.seconds,
        "query_rate": window.query_rate,
        "baseline_query_rate": baseline.query_rate,
        "preemptions": window.preemptions,
    }
    prompt, reference = window.prompt_length, baseline.prompt_length
    if finished_known and prompt is not None and reference is not None:
        evidence["prompt_tokens_per_request"] = prompt
        evidence["baseline_prompt_tokens_per_request"] = reference
    return evidence


def _collapse_message(target: str, window: Totals, baseline: Totals, finished_known: bool) -> str:
    prompt, reference = window.prompt_length, baseline.prompt_length
    lengths = (
        f", prompts of {prompt:.0f} tokens against {reference:.0f}"
        if finished_known and prompt is not None and reference is not None
        else ""
    )
    return (
        f"{target} prefix-cache collapse: hit rate {window.hit_rate:.1%} over the last "
        f"{format_duration(window.seconds)} against its own {baseline.hit_rate:.1%} at a steady "
        f"prompt mix ({window.query_rate:.0f} prompt tokens/s looked up against "
        f"{baseline.query_rate:.0f}{lengths}), {window.preemptions:.0f} preemptions: the cache "
        "stopped reusing the blocks its requests share (as on hybrid sliding-window models, vllm "
        "#48435)"
    )
