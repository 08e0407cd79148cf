"""Floats in status at a precision a person reads (`kubectl describe` shows them as written).

Each family rounds when a model is dumped, so the values the operator computes (detector state,
metrics) keep their precision in memory and only what is written is rounded. Rounding is
idempotent: a value read back and written again is unchanged, so status_patch, which compares
dumps, sees no change. A computed value compared with a read-back one must allow for the
rounding: engine_health's 1 % is far above DetectorValue's 0.05 %, and progress readings are
rounded to TokensPerSecond's decimal before they are compared."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated

from pydantic import Field, PlainSerializer

SECONDS_DECIMALS = 3  # milliseconds
SHARE_DECIMALS = 3  # a tenth of a percent
TOKENS_PER_SECOND_DECIMALS = 1
AMOUNT_DIGITS = 4  # significant digits of mean counts and rates
AMOUNT_MAX_DECIMALS = 4
DETECTOR_VALUE_DIGITS = 4


def round_decimals(value: float, decimals: int) -> float:
    """`value` to `decimals` places; NaN and infinities as they are."""
    return round(value, decimals) if math.isfinite(value) else value


def round_significant(value: float, digits: int, max_decimals: int | None = None) -> float:
    """`value` to `digits` significant digits, never rounding its whole part away (12345.6 is
    12346.0, not 12350.0), and to at most `max_decimals` places when given."""
    if value == 0 or not math.isfinite(value):
        return value
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    if max_decimals is not None:
        decimals = min(decimals, max_decimals)
    return round(value, decimals)


def _to_decimals(decimals: int) -> Callable[[float], float]:
    return lambda value: round_decimals(value, decimals)


def _to_significant(digits: int, max_decimals: int | None = None) -> Callable[[float], float]:
    return lambda value: round_significant(value, digits, max_decimals)


_seconds = _to_decimals(SECONDS_DECIMALS)
_share = _to_decimals(SHARE_DECIMALS)
_tokens_per_second = _to_decimals(TOKENS_PER_SECOND_DECIMALS)
_amount = _to_significant(AMOUNT_DIGITS, AMOUNT_MAX_DECIMALS)
_detector_value = _to_significant(DETECTOR_VALUE_DIGITS)

# A duration in seconds, to the millisecond.
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False), PlainSerializer(_seconds)]
# A fraction from 0 to 1, to a tenth of a percent.
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False), PlainSerializer(_share)]
# Generated tokens per second, to one decimal (what progress readings already round to);
# infinities allowed as progress always allowed them (JSON writes them as null).
TokensPerSecond = Annotated[float, Field(ge=0), PlainSerializer(_tokens_per_second)]
# A mean count or rate (requests in flight, queued, failed per second): 4 significant digits,
# at most 4 decimals.
Amount = Annotated[float, Field(ge=0, allow_inf_nan=False), PlainSerializer(_amount)]
# A number a detector keeps to restore itself: 4 significant digits (0.05 % at most, well within
# the 1 % that makes a write) with no cap on decimals, since some are tiny and must stay above
# zero (seconds per token, preemptions per second).
DetectorValue = Annotated[float, Field(allow_inf_nan=False), PlainSerializer(_detector_value)]
