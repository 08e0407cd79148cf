"""Hostile inputs shared by the property tests, and the settings that keep them fast."""

from __future__ import annotations

import math
import unicodedata
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Modest example counts: these run with the unit tests, on two cores shared with other work.
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

HUGE_INT = 10**400  # a JSON integer no float holds
# Values a Prometheus answer may carry where a sample value or timestamp belongs.
GARBAGE_VALUES: tuple[Any, ...] = (
    "NaN",
    "+Inf",
    "-Inf",
    "abc",
    "",
    "1e999",
    "0x10",
    None,
    True,
    [],
    {},
    HUGE_INT,
    -HUGE_INT,
    math.nan,
)
garbage_value = st.sampled_from(GARBAGE_VALUES)

# Any Unicode text, control and format characters and lone surrogates included.
hostile_char = st.characters(codec=None, exclude_categories=())
hostile_text = st.one_of(
    st.text(hostile_char, max_size=300),
    st.text(st.sampled_from("\n\r\t\x00\x1b\u202e\u200b\x7f\ud800 aé中🙂[]{}\"'\\"), max_size=300),
    st.builds(
        lambda unit, count: unit * count,
        st.sampled_from(["x", "é", "🙂", "\x1b[2J"]),
        st.integers(1, 6000),
    ),
)

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([HUGE_INT, -HUGE_INT]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.sampled_from(["NaN", "+Inf", "success", "matrix", "vector", "namespace", "pod"]),
)
json_values = st.recursive(
    json_leaf,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(
                st.sampled_from(
                    ["status", "data", "resultType", "result", "metric", "values", "value"]
                ),
                st.text(max_size=6),
            ),
            children,
            max_size=4,
        ),
    ),
    max_leaves=20,
)


def printable(text: str) -> bool:
    """No control, format, surrogate or private-use character: safe on a terminal and in JSON
    as UTF-8."""
    return all(unicodedata.category(c) not in ("Cc", "Cf", "Cs", "Co") for c in text)
