"""Values of several series of one metric in one pod at one time, grouped by engine."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable

from rljob.health.profiles.signals import TIME_EPSILON, Series


class SeriesLookup:
    """Values of several series of one metric at a time: each series' latest point at or
    before t (no older than `staleness`), maximum within a group, one value per group.

    The common case, one series whose timestamps are the token counter's (one scrape), is a
    dictionary lookup."""

    __slots__ = ("_exact", "_groups", "_staleness")

    def __init__(self, series: Iterable[Series], group_label: str | None, staleness: float) -> None:
        groups: dict[str, list[tuple[list[float], list[float]]]] = {}
        for one in series:
            if not one.points:
                continue
            group = (one.label(group_label) or "") if group_label else ""
            times = [t for t, _ in one.points]
            values = [v for _, v in one.points]
            groups.setdefault(group, []).append((times, values))
        self._groups = groups
        self._staleness = staleness
        self._exact: dict[float, float] | None = None
        if len(groups) == 1:
            (members,) = groups.values()
            if len(members) == 1:
                times, values = members[0]
                self._exact = dict(zip(times, values, strict=True))

    def __bool__(self) -> bool:
        return bool(self._groups)

    def values_at(self, t: float) -> list[float]:
        """One value per group that has one at t."""
        if self._exact is not None:
            exact = self._exact.get(t)
            if exact is not None:
                return [exact]
        found = []
        for members in self._groups.values():
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

    def reduce(self, t: float, how: Callable[[list[float]], float]) -> float | None:
        if self._exact is not None:
            exact = self._exact.get(t)
            if exact is not None:
                return exact  # sum, max and mean of one value
        values = self.values_at(t)
        return how(values) if values else None
