"""Health reports are throttled per (reason, target): the first at once, repeats only after the
repeat interval, other reasons and targets independently."""

from __future__ import annotations

import pytest

from rljob.reconcile.events import REPORT_REPEAT_SECONDS
from rljob.reconcile.expectations import Recent

DRIFT, STALL = "KVCacheDrift", "EngineStalled"
POD_A, POD_B = "rollout-a", "rollout-b"


@pytest.mark.parametrize(
    ("said", "then", "admitted"),
    [
        pytest.param([], (DRIFT, POD_A, 0.0), True, id="first-report-is-said-at-once"),
        pytest.param([(DRIFT, POD_A, 0.0)], (DRIFT, POD_A, 1.0), False, id="next-round-is-quiet"),
        pytest.param(
            [(DRIFT, POD_A, 0.0)],
            (DRIFT, POD_A, REPORT_REPEAT_SECONDS - 1),
            False,
            id="quiet-until-the-interval-ends",
        ),
        pytest.param(
            [(DRIFT, POD_A, 0.0)],
            (DRIFT, POD_A, REPORT_REPEAT_SECONDS),
            True,
            id="a-standing-finding-is-said-again",
        ),
        pytest.param([(DRIFT, POD_A, 0.0)], (DRIFT, POD_B, 1.0), True, id="another-pod"),
        pytest.param([(DRIFT, POD_A, 0.0)], (STALL, POD_A, 1.0), True, id="another-reason"),
        pytest.param(
            [(DRIFT, POD_A, 0.0), (DRIFT, POD_A, 5.0)],
            (DRIFT, POD_A, REPORT_REPEAT_SECONDS + 1),
            True,
            id="a-refused-report-does-not-extend-the-wait",
        ),
    ],
)
def test_report_throttle(
    said: list[tuple[str, str, float]], then: tuple[str, str, float], admitted: bool
) -> None:
    reported = Recent(REPORT_REPEAT_SECONDS)  # what the operator keeps of its health reports
    for reason, target, at in said:
        reported.admit(f"{reason}/{target}", at)
    reason, target, at = then
    assert reported.admit(f"{reason}/{target}", at) is admitted
