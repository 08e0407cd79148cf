"""A replica acts only while the Lease it observed is its own and freshly renewed: the
election library also refreshes its observed time when it sees another holder."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from rljob.adapters.leadership import RENEW_DEADLINE_SECONDS, Leadership


@pytest.mark.parametrize(
    ("holder", "age", "acting"),
    [
        pytest.param("me", 1.0, True, id="own-fresh-lease"),
        pytest.param("me", RENEW_DEADLINE_SECONDS + 1.0, False, id="own-lease-not-renewed"),
        pytest.param("other", 1.0, False, id="another-holder-just-observed"),
        pytest.param(None, 1.0, False, id="no-record"),
    ],
)
def test_acting_needs_an_own_freshly_renewed_lease(
    holder: str | None, age: float, acting: bool
) -> None:
    leadership = Leadership.__new__(Leadership)
    leadership.enabled, leadership.identity = True, "me"
    leadership._elected = asyncio.Event()
    leadership._elected.set()
    record = None if holder is None else SimpleNamespace(holder_identity=holder)
    observed_ms = (time.time() - age) * 1000
    leadership._election = SimpleNamespace(  # type: ignore[assignment]
        observed_record=record, observed_time_milliseconds=observed_ms
    )
    assert leadership.acting() is acting
