"""Prometheus text exposition (format 0.0.4), written as prometheus_client writes it: counters
as `<name>_total` with a `<name>_created` gauge, histograms as `_bucket`/`_count`/`_sum`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def labels_text(pairs: Iterable[tuple[str, str]]) -> str:
    """`{a="x",b="y"}` in the given order, or an empty string without labels."""
    inner = ",".join(f'{name}="{escape_label(value)}"' for name, value in pairs)
    return f"{{{inner}}}" if inner else ""


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def format_bound(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def _merge(labels: str, extra: str) -> str:
    """Appends `extra` (`k="v"`) to a rendered label set."""
    if not labels:
        return f"{{{extra}}}"
    return f"{labels[:-1]},{extra}}}"


class Page:
    """Builds one metrics page. `labels` arguments are pre-rendered label sets (labels_text)."""

    def __init__(self) -> None:
        self._lines: list[str] = []

    def _header(self, name: str, kind: str, help_text: str) -> None:
        self._lines.append(f"# HELP {name} {help_text}")
        self._lines.append(f"# TYPE {name} {kind}")

    def gauge(
        self, name: str, help_text: str, samples: Sequence[tuple[str, float]] | float
    ) -> None:
        """A gauge family; samples are (labels, value) pairs, or one unlabelled value."""
        self._header(name, "gauge", help_text)
        pairs = [("", samples)] if isinstance(samples, int | float) else samples
        self._lines.extend(f"{name}{labels} {format_value(value)}" for labels, value in pairs)

    def counter(
        self,
        name: str,
        help_text: str,
        samples: Sequence[tuple[str, float]] | float,
        created: float | None,
    ) -> None:
        """`name` without the `_total` suffix, as the client library is given it; samples are
        (labels, value) pairs, or one unlabelled value. `created` None: no `_created` series
        (prometheus_client's multiprocess collector, as SGLang runs it, writes none)."""
        pairs = [("", samples)] if isinstance(samples, int | float) else samples
        self._header(f"{name}_total", "counter", help_text)
        self._lines.extend(f"{name}_total{labels} {format_value(v)}" for labels, v in pairs)
        if created is None:
            return
        self._header(f"{name}_created", "gauge", help_text)
        self._lines.extend(f"{name}_created{labels} {format_value(created)}" for labels, _ in pairs)

    def histogram(
        self,
        name: str,
        help_text: str,
        *,
        labels: str,
        buckets: Sequence[tuple[float, float]],
        total: float,
        created: float | None,
    ) -> None:
        """buckets: (upper bound, cumulative count), ending with +Inf. `created` None: no
        `_created` series, as with counters."""
        self._header(name, "histogram", help_text)
        for bound, count in buckets:
            bucket_labels = _merge(labels, f'le="{format_bound(bound)}"')
            self._lines.append(f"{name}_bucket{bucket_labels} {format_value(count)}")
        self._lines.append(f"{name}_count{labels} {format_value(buckets[-1][1])}")
        self._lines.append(f"{name}_sum{labels} {format_value(total)}")
        if created is None:
            return
        self._header(f"{name}_created", "gauge", help_text)
        self._lines.append(f"{name}_created{labels} {format_value(created)}")

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"
