"""Reading an operator's /metrics in the demo and the tests."""

from __future__ import annotations

import math
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


def metric_values(url: str, name: str, *matchers: str) -> list[float]:
    """Values of the samples of `name` whose line contains every matcher (e.g. 'reason="X"')."""
    return [
        float(line.rsplit(" ", 1)[1])
        for line in _lines(url)
        if line.startswith((f"{name}{{", f"{name} ")) and all(m in line for m in matchers)
    ]


def metric_values_by(url: str, name: str, label: str) -> dict[str, float]:
    """The samples of `name` summed by the value of `label`, in the order the page lists them."""
    page = "\n".join(line for line in _lines(url) if line.startswith(f"{name}{{")) + "\n"
    by_value: dict[str, float] = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            value = sample.labels.get(label, "")
            by_value[value] = by_value.get(value, 0.0) + sample.value
    return by_value


def _lines(url: str) -> list[str]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        page: bytes = resp.read()
    return page.decode().splitlines()


@dataclass(frozen=True)
class HistogramReading:
    """One histogram's cumulative bucket counts (upper bound -> count) and sum, as read."""

    buckets: dict[float, float]
    total: float

    def __sub__(self, other: HistogramReading) -> HistogramReading:
        buckets = {le: n - other.buckets.get(le, 0.0) for le, n in self.buckets.items()}
        return HistogramReading(buckets, self.total - other.total)

    @property
    def count(self) -> float:
        return self.buckets.get(math.inf, 0.0)

    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan

    def worst(self) -> float:
        """The upper bound of the bucket that holds the largest observation (nan: none)."""
        return min((le for le, n in self.buckets.items() if n >= self.count > 0), default=math.nan)

    def over(self, bound: float) -> float:
        """Observations above `bound` (one of the bucket bounds)."""
        return self.count - self.buckets.get(bound, 0.0)


def histogram_reading(url: str, name: str, *matchers: str) -> HistogramReading:
    """The histogram `name`, summed over the series whose line contains every matcher."""
    buckets: dict[float, float] = {}
    total = 0.0
    for line in _lines(url):
        bucket = line.startswith(f"{name}_bucket{{")
        if not (bucket or line.startswith((f"{name}_sum{{", f"{name}_sum "))):
            continue
        if not all(m in line for m in matchers):
            continue
        value = float(line.rsplit(" ", 1)[1])
        if bucket:
            le = float(line.split('le="', 1)[1].split('"', 1)[0])
            buckets[le] = buckets.get(le, 0.0) + value
        else:
            total += value
    return HistogramReading(buckets, total)
