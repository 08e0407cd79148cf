"""How bench.diagnosis judges a run: what a scenario expects when (`Scenario.expected`; None:
not judged), each evaluation against it, a scenario's seeds as one cell, and the table.

Per seed: whether the last evaluation names the right role; the share of judged evaluations
naming it, counted from the first answer that is not Unknown (from the first evaluation when
Unknown is right), so the transition after a mid-run change counts against it; the time to a
confident answer, from the moment the last expected role starts (0, or the change) to the first
evaluation from which every later one is right (none if the last is wrong). Where the truth is
known, the last evaluation's recommended concurrency and the curve's peak (observed or
extrapolated) against it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bench.diagnosis_job import INTERVAL, WINDOW, Garbage, Job
from rljob.api.diagnosis import Bottleneck
from rljob.vocabulary.enums import BottleneckRole

Role = BottleneckRole
MINUTE = 60.0


@dataclass(frozen=True)
class Truth:
    recommended: float
    peak: float  # the lowest concurrency within 5% of the highest throughput


@dataclass(frozen=True)
class Scenario:
    name: str
    build: Callable[[str, float], Job]  # (seed, hours) -> the job
    expected: tuple[tuple[float, Role | None], ...]  # (from, role): the last one from <= t
    truth: Truth | None = None
    garbage: Garbage = field(default_factory=Garbage)

    def role_at(self, t: float) -> Role | None:
        role = None
        for start, expected in self.expected:
            if t >= start:
                role = expected
        return role

    @property
    def since(self) -> float:
        return self.expected[-1][0]


@dataclass(frozen=True)
class Verdict:
    """One evaluation, as much of it as the bench judges."""

    t: float
    role: Role
    recommended: int | None
    knee: float | None  # the curve's peak (observed or extrapolated), else its knee


def verdict(t: float, found: Bottleneck) -> Verdict:
    curve = found.curve
    knee = None
    if curve is not None:
        # A curve still climbing that the monitor could not extrapolate has no peak estimate.
        knee = curve.peak if curve.peak is not None or curve.beyond else curve.knee
    return Verdict(t, found.role, found.recommended_concurrency, knee)


@dataclass(frozen=True)
class Judged:
    """One seed's evaluations against the scenario."""

    last_role: Role | None
    right_at_end: bool
    share_right: float | None  # judged evaluations right, from the first answer on
    confident_after: float | None  # seconds from `since` to the answer that stays right
    recommended: int | None
    knee: float | None


def judge(scenario: Scenario, verdicts: Sequence[Verdict]) -> Judged:
    if not verdicts:
        return Judged(None, False, None, None, None, None)
    last = verdicts[-1]
    right_at_end = last.role == scenario.role_at(last.t)
    unknown_right = scenario.expected[-1][1] is Role.UNKNOWN
    first = next(
        (i for i, v in enumerate(verdicts) if unknown_right or v.role is not Role.UNKNOWN),
        len(verdicts),
    )
    judged = [v for v in verdicts[first:] if scenario.role_at(v.t) is not None]
    right = [v for v in judged if v.role == scenario.role_at(v.t)]
    share = len(right) / len(judged) if judged else None
    return Judged(
        last.role,
        right_at_end,
        share,
        _confident_after(scenario, verdicts) if right_at_end else None,
        last.recommended,
        last.knee,
    )


def _confident_after(scenario: Scenario, verdicts: Sequence[Verdict]) -> float | None:
    since = scenario.since
    settled = None
    for verdict in reversed(verdicts):
        if verdict.t < since or verdict.role != scenario.role_at(verdict.t):
            break
        settled = verdict
    return settled.t - since if settled is not None else None


@dataclass(frozen=True)
class Cell:
    """One scenario over every seed."""

    seeds: int
    right_at_end: int
    shares: tuple[float, ...]
    confident: tuple[float, ...]  # seconds, the seeds right at the end
    wrong_roles: tuple[str, ...]  # the last role of each seed that ended wrong
    recommendation_errors: tuple[float, ...]  # relative, signed
    knee_errors: tuple[float, ...]
    recommended: tuple[int, ...]


def cell(scenario: Scenario, results: Sequence[Judged]) -> Cell:
    truth = scenario.truth
    recommended = tuple(r.recommended for r in results if r.recommended is not None)
    knees = tuple(r.knee for r in results if r.knee is not None)
    return Cell(
        seeds=len(results),
        right_at_end=sum(r.right_at_end for r in results),
        shares=tuple(r.share_right for r in results if r.share_right is not None),
        confident=tuple(r.confident_after for r in results if r.confident_after is not None),
        wrong_roles=tuple(
            r.last_role.value if r.last_role else "none" for r in results if not r.right_at_end
        ),
        recommendation_errors=_errors(recommended, truth.recommended) if truth else (),
        knee_errors=_errors(knees, truth.peak) if truth else (),
        recommended=recommended,
    )


def _errors(values: Sequence[float], truth: float) -> tuple[float, ...]:
    return tuple((value - truth) / truth for value in values)


def _expected_text(scenario: Scenario) -> str:
    return " -> ".join(role.value for _, role in scenario.expected if role is not None)


def _minutes(seconds: Sequence[float]) -> str:
    if not seconds:
        return "-"
    median, worst = statistics.median(seconds) / MINUTE, max(seconds) / MINUTE
    return f"{median:.1f} / {worst:.1f} min"


def _share(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.mean(values):.0%} (min {min(values):.0%})"


def _relative(errors: Sequence[float]) -> str:
    if not errors:
        return "-"
    worst = max(errors, key=abs)
    return f"{statistics.median(abs(e) for e in errors):.1%} / {worst:+.1%}"


def _recommended(scenario: Scenario, c: Cell) -> str:
    if scenario.truth is None:
        return "-"
    found = f"{statistics.median(c.recommended):.0f}" if c.recommended else "none"
    return f"{found} vs {scenario.truth.recommended:.1f}"


def _wrong(c: Cell) -> str:
    return ", ".join(sorted(set(c.wrong_roles)))


def _right(c: Cell) -> str:
    wrong = f" (else {_wrong(c)})" if c.wrong_roles else ""
    return f"{c.right_at_end}/{c.seeds}{wrong}"


def cell_text(scenario: Scenario, c: Cell) -> str:
    return (
        f"right {_right(c)}, share {_share(c.shares)}, confident after {_minutes(c.confident)}, "
        f"recommended {_recommended(scenario, c)} (error {_relative(c.recommendation_errors)}), "
        f"peak error {_relative(c.knee_errors)}"
    )


COLUMNS = (
    "scenario",
    "right role",
    "right at the end",
    "share right after the first answer: mean (min)",
    "time to a confident answer: median / worst",
    "recommended (median) vs truth",
    "recommendation error: median / worst",
    "peak error: median / worst",
)


def table(
    rows: Sequence[tuple[Scenario, Cell]], seeds: int, hours: float, interval: float = INTERVAL
) -> str:
    defaults = " (the spec's defaults)" if interval == INTERVAL else ""
    lines = [
        f"Seeds 0..{seeds - 1}, {hours:g} h of simulated job per seed, a scrape round and an "
        f"evaluation every {interval:g} s, window {WINDOW / MINUTE:.0f} min{defaults}; a "
        "mid-run change at half the run. Errors are relative to the truth (signed for the "
        "worst).",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for scenario, c in rows:
        values = (
            scenario.name,
            _expected_text(scenario),
            _right(c),
            _share(c.shares),
            _minutes(c.confident),
            _recommended(scenario, c),
            _relative(c.recommendation_errors),
            _relative(c.knee_errors),
        )
        lines.append("| " + " | ".join(values) + " |")
    return "\n".join(lines)


def summary(rows: Sequence[tuple[Scenario, Cell]]) -> str:
    """'24 of 26 scenario-seeds right at the end; wrong: <scenario> (<role>), ...'."""
    seeds = sum(c.seeds for _, c in rows)
    right = sum(c.right_at_end for _, c in rows)
    wrong = [
        f"{s.name} ({', '.join(sorted(set(c.wrong_roles)))})" for s, c in rows if c.wrong_roles
    ]
    return f"{right} of {seeds} scenario-seeds right at the end" + (
        f"; wrong: {'; '.join(wrong)}" if wrong else ""
    )
