"""Values of several series of one metric in one pod at one time, grouped by engine."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable

from rljob.health.profiles.signals import TIME_EPSILON, Point, Series


class SeriesLookup:
    """Values of several series of one metric at a time: each series' latest point at or
    before t (no older than `staleness`), maximum within a group, one value per group.

    The common case, one series whose timestamps are the token counter's (one scrape), is a
    dictionary lookup."""

    __slots__ = ("_exact", "_groups", "_indexed", "_staleness")

    def __init__(self, series: Iterable[Series], group_label: str | None, staleness: float) -> None:
        groups: dict[str, list[tuple[Point, ...]]] = {}
        for one in series:
            if one.points:
                group = (one.label(group_label) or "") if group_label else ""
                groups.setdefault(group, []).append(one.points)
        self._groups = groups
        self._staleness = staleness
        self._indexed: list[list[tuple[list[float], list[float]]]] | None = None
        self._exact: dict[float, float] | None = None
        if len(groups) == 1:
            (members,) = groups.values()
            if len(members) == 1:
                self._exact = dict(members[0])

    def __bool__(self) -> bool:
        return bool(self._groups)

    def values_at(self, t: float) -> list[float]:
        """One value per group that has one at t."""
        if self._exact is not None:
            exact = self._exact.get(t)
            if exact is not None:
                return [exact]
        found = []
        for members in self._by_time():
            best: float | None = None
            for times, values in members:
                index = bisect_right(times, t + TIME_EPSILON) - 1
                if index < 0 or t - times[index] > self._staleness:
                    continue
                value = values[index]
                best = value if best is None else max(best, value)
            if best is not None:
                found.append(best)
        return found

    def _by_time(self) -> list[list[tuple[list[float], list[float]]]]:
        """Each group's series as (times, values) for bisection, built on the first inexact
        lookup only: most lookups are exact."""
        if self._indexed is None:
            self._indexed = [
                [([t for t, _ in points], [v for _, v in points]) for points in members]
                for members in self._groups.values()
            ]
        return self._indexed

    def reduce(self, t: float, how: Callable[[list[float]], float]) -> float | None:
        if self._exact is not None:
            exact = self._exact.get(t)
            if exact is not None:
                return exact  # sum, max and mean of one value
        values = self.values_at(t)
        return how(values) if values else None
