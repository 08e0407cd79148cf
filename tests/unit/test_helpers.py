"""The deadline helper every test waits with: it returns the first truthy value, fails naming
what it waited for, and paces its probes."""

from __future__ import annotations

import itertools

import pytest

from tests.helpers import wait_for


def test_the_first_truthy_value_is_returned() -> None:
    values = iter([None, 0, "", "done"])
    assert wait_for(lambda: next(values), 5, "a value") == "done"


def test_timing_out_names_what_it_waited_for_and_the_last_error() -> None:
    def probe() -> None:
        raise ConnectionError("refused")

    with pytest.raises(AssertionError, match=r"waiting for the server; last: ConnectionError"):
        wait_for(probe, 0.1, "the server")


@pytest.mark.parametrize(
    ("interval", "most_probes"),
    [
        # 0.05, 0.075, 0.11, 0.17, 0.25, 0.38, 0.5: seven pauses cover 1.5 s.
        pytest.param(None, 8, id="default-pacing-slows-down"),
        pytest.param(0.5, 4, id="a-fixed-interval"),
    ],
)
def test_probes_are_paced(interval: float | None, most_probes: int) -> None:
    calls = itertools.count(1)
    with pytest.raises(AssertionError):
        wait_for(lambda: next(calls) and None, 1.5, "never", interval=interval)
    # A loaded machine probes less often, never more: the bound is an upper one.
    assert next(calls) - 1 <= most_probes
