"""Reading an operator's /metrics in the demo and the tests."""

from __future__ import annotations

import urllib.request


def metric_values(url: str, name: str, *matchers: str) -> list[float]:
    """Values of the samples of `name` whose line contains every matcher (e.g. 'reason="X"')."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        lines = resp.read().decode().splitlines()
    return [
        float(line.rsplit(" ", 1)[1])
        for line in lines
        if line.startswith((f"{name}{{", f"{name} ")) and all(m in line for m in matchers)
    ]
