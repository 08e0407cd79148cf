"""Shared by the SDK metrics tests: a clock the test moves, and a registry's exposition text read
back with prometheus_client's own parser (what a scrape would see)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]


@dataclass
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass(frozen=True)
class Scrape:
    """One exposition: each family's type, and each sample's value by name and labels."""

    types: dict[str, str]
    samples: dict[tuple[str, Labels], float]

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, tuple(sorted(labels.items()))))

    def names(self, prefix: str) -> set[str]:
        return {name for name, _ in self.samples if name.startswith(prefix)}

    def labelled(self, name: str, label: str) -> dict[str, float]:
        """The samples of `name` by the value of `label`."""
        return {dict(key)[label]: v for (n, key), v in self.samples.items() if n == name}


def scrape(registry: CollectorRegistry) -> Scrape:
    text = generate_latest(registry).decode()
    types, samples = {}, {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return Scrape(types, samples)
