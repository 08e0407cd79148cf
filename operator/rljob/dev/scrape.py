"""Reading an operator's /metrics in the demo and the tests."""

from __future__ import annotations

import urllib.request

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
