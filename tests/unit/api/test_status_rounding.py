"""Floats in status are written at a precision a person reads (rljob.api.rounding), and writing
one read back changes nothing."""

from __future__ import annotations

import math

import pytest

from rljob.api.rounding import round_decimals, round_significant

SIGNIFICANT = [
    pytest.param(0.6428571428571429, 4, None, 0.6429, id="fraction"),
    pytest.param(0.000123456789, 4, None, 0.0001235, id="tiny-keeps-its-digits"),
    pytest.param(0.000123456789, 4, 4, 0.0001, id="tiny-capped-at-4-decimals"),
    pytest.param(467579.65558206546, 4, None, 467580.0, id="whole-part-kept"),
    pytest.param(31.333333333333332, 4, 4, 31.33, id="mean-count"),
    pytest.param(9.99951, 4, None, 10.0, id="rounds-up-a-magnitude"),
    pytest.param(0.0, 4, None, 0.0, id="zero"),
    pytest.param(-2.718281828, 4, None, -2.718, id="negative"),
]


@pytest.mark.parametrize(("value", "digits", "max_decimals", "expected"), SIGNIFICANT)
def test_round_significant(
    value: float, digits: int, max_decimals: int | None, expected: float
) -> None:
    rounded = round_significant(value, digits, max_decimals)

    assert rounded == expected
    assert round_significant(rounded, digits, max_decimals) == rounded  # no change when rewritten


DECIMALS = [
    pytest.param(41.28571428571429, 3, 41.286, id="seconds-to-the-millisecond"),
    pytest.param(18234.567891234, 1, 18234.6, id="tokens-per-second"),
    pytest.param(0.99996, 3, 1.0, id="share-up-to-one"),
]


@pytest.mark.parametrize(("value", "decimals", "expected"), DECIMALS)
def test_round_decimals(value: float, decimals: int, expected: float) -> None:
    rounded = round_decimals(value, decimals)

    assert rounded == expected
    assert round_decimals(rounded, decimals) == rounded


@pytest.mark.parametrize("value", [math.inf, -math.inf], ids=["inf", "-inf"])
def test_infinities_are_left_as_they_are(value: float) -> None:
    assert round_decimals(value, 1) == value
    assert round_significant(value, 4) == value
