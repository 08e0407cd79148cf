"""The unit tier's order: the model explorations first.

They are the tier's longest tests by far (minutes each, the rest seconds), and the tier runs on
every core beside the upstream tier. Collected last (tests/unit/model sorts late), one started
only when most of the short tests were done and set the tier's end alone; started first, it
runs while the other worker takes the short ones."""

from __future__ import annotations

import pytest

LONG_FIRST = "tests/unit/model/"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(LONG_FIRST))
