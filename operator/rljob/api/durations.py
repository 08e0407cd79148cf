"""Durations in Go's time.ParseDuration grammar, as the API server's CEL `duration()` reads them."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import Field

from rljob.api.rules import CelCheck, CrossFieldRule, value_at

# A strict subset of Go's grammar (no sign, no bare "0", no "µs", digits on both sides of a dot),
# so every value the schema admits is one CEL's duration() parses. [0-9], never \d: RE2 and
# Python agree on it, and \d in Python also matches non-ASCII digits.
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"
DURATION_MAX_LENGTH = 32

_NANOSECONDS_PER_UNIT = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_COMPONENT = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]+)")
_MAX_NANOSECONDS = 2**63 - 1


def parse_duration(text: str) -> float:
    """Parses a Go duration ("1h30m", "500ms", "-1.5s", "0") into seconds; raises ValueError
    on anything time.ParseDuration rejects, including values beyond its int64 nanoseconds."""
    return duration_nanoseconds(text) / 1e9


def duration_nanoseconds(text: str) -> int:
    """parse_duration in whole nanoseconds, exact: compare durations with this, as CEL does
    (seconds as floats round away the nanoseconds of durations above ~104 days)."""
    body, sign = _split_sign(text)
    if body == "0":
        return 0
    if not body:
        raise ValueError(f"invalid duration {text!r}")
    nanoseconds = _sum_components(body, text)
    if nanoseconds > _MAX_NANOSECONDS:
        raise ValueError(f"invalid duration {text!r}: out of range")
    return sign * nanoseconds


def _split_sign(text: str) -> tuple[str, int]:
    if text[:1] in ("-", "+"):
        return text[1:], -1 if text[0] == "-" else 1
    return text, 1


def _sum_components(body: str, text: str) -> int:
    total = 0
    position = 0
    while position < len(body):
        match = _COMPONENT.match(body, position)
        if match is None or not (match[1] or match[2]) or match[3] not in _NANOSECONDS_PER_UNIT:
            raise ValueError(f"invalid duration {text!r}")
        total += _component_nanoseconds(match[1], match[2] or "", _NANOSECONDS_PER_UNIT[match[3]])
        position = match.end()
    return total


def _component_nanoseconds(whole: str, fraction: str, unit: int) -> int:
    # Go truncates the fractional part of each component to whole nanoseconds.
    fractional = int(fraction) * unit // 10 ** len(fraction) if fraction else 0
    return int(whole or "0") * unit + fractional


def _is_at_least_one_second(value: str) -> bool:
    return parse_duration(value) >= 1.0


def _in_range(value: str) -> bool:
    try:
        duration_nanoseconds(value)
    except ValueError:
        return False
    return True


# The pattern admits values too large for Go's int64 nanoseconds ("99999999999h"): CEL's
# duration() fails on them, so the API server rejects them as the model does.
Duration = Annotated[
    str,
    Field(pattern=DURATION_PATTERN, max_length=DURATION_MAX_LENGTH),
    CelCheck(
        cel="duration(self) >= duration('0s')",
        message="must be at most 2562047h47m16.854775807s (Go's int64 nanoseconds)",
        holds=_in_range,
    ),
]
"""A duration such as "30s", "1h30m" or "500ms" (Go syntax; units ns, us, ms, s, m, h; no "d")."""

DurationAtLeastOneSecond = Annotated[
    Duration,
    CelCheck(
        cel="duration(self) >= duration('1s')",
        message="must be at least 1s",
        holds=_is_at_least_one_second,
    ),
]
"""A Duration of at least one second, for intervals that would otherwise busy-loop."""


def durations_in_order(shorter: str, longer: str, *, field: str, message: str) -> CrossFieldRule:
    """A rule that the duration at `shorter` does not exceed the one at `longer` (dotted
    camelCase paths under the rule's object). It holds while either is unset: the API server
    also checks a default {} against the rule, before nested defaults fill it in."""
    present = [f"has(self.{prefix})" for prefix in dict.fromkeys(_prefixes(shorter, longer))]
    cel = " || ".join(
        [*(f"!{test}" for test in present), f"duration(self.{shorter}) <= duration(self.{longer})"]
    )

    def holds(model: Any) -> bool:
        low, high = value_at(model, shorter.split(".")), value_at(model, longer.split("."))
        return (
            low is None or high is None or duration_nanoseconds(low) <= duration_nanoseconds(high)
        )

    return CrossFieldRule(cel=cel, message=message, field=field, holds=holds)


def _prefixes(*paths: str) -> list[str]:
    """Each path's leading parts, shortest first: "a.b" gives "a", "a.b"."""
    prefixes = []
    for path in paths:
        parts = path.split(".")
        prefixes += [".".join(parts[: end + 1]) for end in range(len(parts))]
    return prefixes
