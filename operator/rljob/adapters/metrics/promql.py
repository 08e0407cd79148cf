"""PromQL: the selectors the Prometheus source sends and the parsing of its answers.

A selector names the metric as a `__name__` matcher and the pods as two alternations
(namespaces and pod names, a cross product: the parser drops the pods not asked for). An answer
is a matrix (or a vector); its garbage (NaN and infinite values, non-numeric values, series
without pod or namespace labels, duplicated series, pods not asked for, series the signal's exact
matchers exclude) is dropped and tallied. As in PromQL, a matcher `label=""` selects series
without the label (Prometheus stores no empty label), so the answer is held to the same rule.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import cast

from rljob.adapters.metrics.base import (
    PodKey,
    Rejects,
    Selectors,
    SignalData,
    SourceError,
    finite,
    prometheus_error,
    reject_duplicate,
    shorten,
    wanted_pods,
)
from rljob.health.profiles import Labels, Point, Series, Signal

MAX_POINTS_PER_SERIES = 20_000
# Each round escapes every pod name of every query: a translation table, not a loop per char.
_REGEX_ESCAPES = str.maketrans({char: f"\\{char}" for char in "\\.+*?()|[]{}^$"})


# urlencode's quote_plus loops over every byte in Python, and a round's forms carry every pod
# name of every due job (tens of kilobytes each): here only the few unsafe characters are.
_FORM_UNSAFE = re.compile(r"[^A-Za-z0-9_.~-]")
_FORM_ESCAPES = {chr(c): "+" if c == 0x20 else f"%{c:02X}" for c in range(128)}


def form_body(form: Mapping[str, str]) -> str:
    """`form` as application/x-www-form-urlencoded, exactly as urllib.parse.urlencode."""
    return "&".join(f"{_form_quote(name)}={_form_quote(value)}" for name, value in form.items())


def _form_quote(text: str) -> str:
    if text.isascii():
        return _FORM_UNSAFE.sub(_form_escape, text)
    return urllib.parse.quote_plus(text)


def _form_escape(match: re.Match[str]) -> str:
    return _FORM_ESCAPES[match.group()]


def regex_escape(value: str) -> str:
    """`value` as a literal inside an RE2 regex (only RE2's metacharacters are escaped: RE2
    rejects escapes of letters, digits and spaces)."""
    return value.translate(_REGEX_ESCAPES)


def promql_string(value: str) -> str:
    """`value` as a double-quoted PromQL string literal."""
    escaped = (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    )
    return f'"{escaped}"'


def _alternation(values: Iterable[str]) -> str:
    return "|".join(regex_escape(value) for value in sorted(set(values)))


def series_selector(
    signal: Signal, selectors: Selectors, pod_label: str = "pod", namespace_label: str = "namespace"
) -> str:
    """`{__name__="m", namespace=~"a|b", pod=~"p|q", extra="v"}` for the pods of `selectors`
    (the name goes in as a matcher, so metric names that are PromQL keywords work too)."""
    namespaces = [namespace for namespace, pods in selectors.items() if pods]
    pods = [pod for namespace in namespaces for pod in selectors[namespace]]
    matchers = [
        f"__name__={promql_string(signal.metric)}",
        f"{namespace_label}=~{promql_string(_alternation(namespaces))}",
        f"{pod_label}=~{promql_string(_alternation(pods))}",
        *(f"{name}={promql_string(value)}" for name, value in signal.matchers),
    ]
    return "{" + ", ".join(matchers) + "}"


def range_selector(
    signal: Signal,
    selectors: Selectors,
    lookback: float,
    pod_label: str = "pod",
    namespace_label: str = "namespace",
) -> str:
    """The selector with a range of `lookback` seconds (whole milliseconds, at least 1 s)."""
    millis = max(1000, math.ceil(lookback * 1000))
    return f"{series_selector(signal, selectors, pod_label, namespace_label)}[{millis}ms]"


def parse_matrix(
    payload: object,
    selectors: Selectors,
    rejects: Rejects,
    pod_label: str = "pod",
    namespace_label: str = "namespace",
    *,
    signal: Signal | None = None,
) -> SignalData:
    """A Prometheus query answer (matrix, or vector) -> each requested pod's series (those
    `signal`'s matchers select, when given). Raises SourceError when the answer as a whole is
    not one."""
    if not isinstance(payload, dict):
        raise SourceError("answer is not a JSON object")
    if payload.get("status") != "success":
        raise SourceError(shorten(f"query failed{prometheus_error(payload)}"))
    data = payload.get("data")
    if not isinstance(data, dict):
        raise SourceError("answer has no data object")
    kind, result = data.get("resultType"), data.get("result")
    if kind not in ("matrix", "vector") or not isinstance(result, list):
        raise SourceError("answer is neither a matrix nor a vector")
    wanted = wanted_pods(selectors)
    raws: dict[tuple[PodKey, Labels], object] = {}
    conflicting: set[tuple[PodKey, Labels]] = set()
    dropped = {"__name__", pod_label, namespace_label}
    for item in result:
        metric = item.get("metric") if isinstance(item, dict) else None
        if not isinstance(metric, dict):
            rejects.add("malformed")
            continue
        namespace, pod = metric.get(namespace_label), metric.get(pod_label)
        if not isinstance(namespace, str) or not isinstance(pod, str):
            rejects.add("missing_labels")
            continue
        key = (namespace, pod)
        if key not in wanted:
            rejects.add("unrequested")
            continue
        labels = _labels(metric, dropped)
        if signal is not None and not signal.matches_series(labels):
            rejects.add("unmatched")
            continue
        raw = item.get("values") if kind == "matrix" else [item.get("value")]
        if (key, labels) in raws:
            reject_duplicate((key, labels), raw != raws[key, labels], conflicting, rejects)
            continue
        raws[key, labels] = raw
    found: SignalData = {}
    for (key, labels), raw in raws.items():
        points = () if (key, labels) in conflicting else _points(raw, rejects)
        if points:
            found.setdefault(key, []).append(Series(labels, points))
    return found


def _labels(metric: dict[str, object], dropped: set[str]) -> Labels:
    """The series' labels but `dropped`, sorted; labels whose value is not a string are left
    out. Every round reads thousands of series: the common all-strings case stays in C."""
    kept = [item for item in metric.items() if item[0] not in dropped]
    kept.sort()
    for _, value in kept:
        if type(value) is not str:
            return cast(Labels, tuple(item for item in kept if isinstance(item[1], str)))
    return cast(Labels, tuple(kept))


def _number(value: object) -> float | None:
    """A float from a JSON number or a Prometheus value string (maybe NaN or infinite), else
    None."""
    if isinstance(value, bool):
        return None
    if not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except (ValueError, OverflowError):  # "abc"; a JSON integer of 400 digits
        return None


def _pair(t: object, value: object) -> tuple[float | None, float | None]:
    """A point's time and value: Prometheus' own [float, "string"] directly, anything else
    through _number's checks."""
    if type(t) is float and type(value) is str:
        try:
            return t, float(value)
        except ValueError:
            return t, None
    return _number(t), _number(value)


def _points(raw: object, rejects: Rejects) -> tuple[Point, ...]:
    """[[t, "v"], ...] -> finite points ascending in time, one per timestamp, newest kept."""
    if not isinstance(raw, list):
        rejects.add("malformed")
        return ()
    points: dict[float, float] = {}
    for pair in raw:
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            rejects.add("malformed")
            continue
        t, value = _pair(pair[0], pair[1])
        if t is None or not math.isfinite(t):
            rejects.add("bad_timestamp")
            continue
        if value is None:
            rejects.add("non_numeric")
            continue
        if not finite(value, rejects):
            continue
        points[t] = value
    ordered = sorted(points.items())
    if len(ordered) > MAX_POINTS_PER_SERIES:
        rejects.add("too_many_points", len(ordered) - MAX_POINTS_PER_SERIES)
        ordered = ordered[-MAX_POINTS_PER_SERIES:]
    return tuple(ordered)
