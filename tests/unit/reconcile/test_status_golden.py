"""What `kubectl describe rljob` shows of a status: the operator's own dump (dump_status) as
YAML, compared with golden files under tests/unit/golden/status/. Each shows no empty list or
object (describe would print a bare key) and no float with more than 4 decimals, except the
detector state kept for a restarted operator (status.health.engines[].values), which keeps 4
significant digits."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from rljob.api.rounding import DETECTOR_VALUE_DIGITS, round_significant
from rljob.api.status import RLJobStatus
from rljob.reconcile.plan import dump_status
from tests.unit.golden_files import assert_matches_golden
from tests.unit.reconcile.status_examples import restarted, running, suspended

MAX_DECIMALS = 4
DETECTOR_VALUES = re.compile(r"^health\.engines\[\d+\]\.values\.")

STATUSES = [
    pytest.param(running, "status/running.yaml", id="healthy-running-job"),
    pytest.param(restarted, "status/restarted.yaml", id="after-restarts-with-a-suspect-node"),
    pytest.param(suspended, "status/suspended.yaml", id="suspended-by-the-policy"),
]


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every value in the dump with its path (a.b[0].c), collections included."""
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from leaves(item, f"{path}[{index}]")


def decimals(number: float) -> int:
    text = repr(number)
    return len(text.split(".")[1]) if "." in text and "e" not in text else 99


def unreadable_floats(dumped: dict[str, Any]) -> list[str]:
    found = []
    for path, value in leaves(dumped):
        if not isinstance(value, float) or not math.isfinite(value):
            continue
        if DETECTOR_VALUES.match(path):
            if value != round_significant(value, DETECTOR_VALUE_DIGITS):
                found.append(f"{path}: {value!r}")
        elif decimals(value) > MAX_DECIMALS:
            found.append(f"{path}: {value!r}")
    return found


def describe_view(status: RLJobStatus) -> str:
    return yaml.safe_dump(dump_status(status), sort_keys=False, width=100)


@pytest.mark.parametrize(("build", "golden"), STATUSES)
def test_status_dump_matches_its_golden_file(build: Callable[[], RLJobStatus], golden: str) -> None:
    assert_matches_golden(golden, describe_view(build()))


@pytest.mark.parametrize(("build", "golden"), STATUSES)
def test_status_dump_reads_well(build: Callable[[], RLJobStatus], golden: str) -> None:
    dumped = dump_status(build())

    assert [path for path, value in leaves(dumped) if value in ([], {})] == []
    assert unreadable_floats(dumped) == []


@pytest.mark.parametrize(("build", "golden"), STATUSES)
def test_the_roles_restarts_add_up_to_the_total(
    build: Callable[[], RLJobStatus], golden: str
) -> None:
    dumped = dump_status(build())

    roles = dumped["roles"].values()
    assert sum(role["restarts"] for role in roles) == dumped["restarts"]["total"]
