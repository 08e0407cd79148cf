"""Deadline helpers shared by every test: wait with a clear message, never a bare sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


# wait_for's default pacing: quick at first (most waits end within a second), then slower,
# so a wait of a detection window polls the API server a few times a second, not five.
FIRST_INTERVAL, INTERVAL_GROWTH, LONGEST_INTERVAL = 0.05, 1.5, 0.5


def wait_for(
    probe: Callable[[], T | None],
    timeout: float,
    message: str,
    interval: float | None = None,
) -> T:
    """Calls probe until it returns a truthy value and returns it; fails naming `message` and
    the last value or error seen when `timeout` seconds pass. Polls every `interval` seconds,
    or by default from FIRST_INTERVAL growing to LONGEST_INTERVAL."""
    deadline = time.monotonic() + timeout
    pause = FIRST_INTERVAL if interval is None else interval
    last: object = None
    while True:
        try:
            value = probe()
            if value:
                return value
            last = value
        except AssertionError:
            raise
        except Exception as exc:  # a probe failing is the normal not-yet case
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {message}; last: {last!r}"
            )
        time.sleep(pause)
        if interval is None:
            pause = min(pause * INTERVAL_GROWTH, LONGEST_INTERVAL)


def quiet_for(seconds: float) -> None:
    """Lets `seconds` pass (a window in which nothing may happen), through wait_for's deadline."""
    deadline = time.monotonic() + seconds
    wait_for(
        lambda: time.monotonic() >= deadline, seconds + 5, f"{seconds:.0f}s to pass", interval=1
    )


_DECIMAL_SUFFIXES = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def count_quantity(value: str) -> int:
    """A whole-number Kubernetes quantity such as '8' or '1k' (how the API canonicalises 1000)."""
    digits = value.rstrip("kMGT")
    return int(digits) * _DECIMAL_SUFFIXES[value[len(digits) :]]
