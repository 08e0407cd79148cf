"""rljob.sdk.metrics: report_step sets the canaries it is given, leaves the others as they were,
rejects NaN and infinities into rljob_rl_rejected_values_total{name}, adds generated tokens to
their counter and names any keyword that is not a series."""

from __future__ import annotations

import math
from typing import Any

import pytest

from rljob.sdk.metrics import CANARIES, GAUGES, KEYWORDS, RLMetrics
from rljob.sdk.progress import ProgressExporter
from tests.unit.sdk.exposition import FakeClock, scrape

REJECTED = "rljob_rl_rejected_values_total"
TOKENS = "rljob_rl_generated_tokens_total"
# The names alerts and dashboards query, written out rather than derived from the module.
GAUGE_NAMES = {
    "rljob_rl_step",
    "rljob_rl_importance_ratio_mean",
    "rljob_rl_importance_ratio_tail",
    "rljob_rl_clip_fraction",
    "rljob_rl_kl",
    "rljob_rl_entropy",
    "rljob_rl_reward_train",
    "rljob_rl_reward_eval",
    "rljob_rl_response_length_mean",
    "rljob_rl_response_length_p90",
    "rljob_rl_grad_norm",
    "rljob_rl_loss",
}
EVERY_VALUE = {keyword: 0.5 for keyword in CANARIES} | {"generated_tokens": 4096}


class Scalar:
    """Stands for a 0-d tensor or a numpy scalar: a number only through __float__."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __float__(self) -> float:
        return self.value


def test_every_series_has_its_exact_name_and_type() -> None:
    metrics = RLMetrics()
    metrics.report_step(7, **EVERY_VALUE)
    parsed = scrape(metrics.registry)
    assert parsed.names("rljob_rl_") - {TOKENS, "rljob_rl_generated_tokens_created"} == GAUGE_NAMES
    assert {parsed.types[name] for name in GAUGE_NAMES} == {"gauge"}
    assert parsed.types["rljob_rl_generated_tokens"] == "counter"
    assert parsed.value(TOKENS) == 4096.0
    assert parsed.value("rljob_rl_step") == 7.0
    assert {*CANARIES, "generated_tokens"} == KEYWORDS
    assert set(GAUGES) == GAUGE_NAMES


# Two steps reported one after the other, then what the second leaves exported.
SEQUENCES = [
    pytest.param({"kl": 0.1}, {"kl": 0.2}, {"kl": 0.2}, id="a-value-replaces-the-last"),
    pytest.param({"kl": 0.1}, {"kl": None}, {"kl": 0.1}, id="none-leaves-it-untouched"),
    pytest.param({"kl": 0.1}, {"loss": 2.0}, {"kl": 0.1, "loss": 2.0}, id="left-out-is-untouched"),
    pytest.param(
        {"reward_train": 0.3},
        {"reward_train": 0.4, "reward_eval": 0.35},
        {"reward_train": 0.4, "reward_eval": 0.35},
        id="eval-reward-on-an-eval-step",
    ),
    pytest.param({}, {"reward_train": 0.4}, {"reward_train": 0.4}, id="never-reported-absent"),
    pytest.param({"grad_norm": 1.5}, {"grad_norm": math.nan}, {"grad_norm": 1.5}, id="nan-kept"),
    pytest.param({"entropy": 0.9}, {"entropy": Scalar(0.7)}, {"entropy": 0.7}, id="tensor-like"),
]


@pytest.mark.parametrize(("first", "second", "exported"), SEQUENCES)
def test_each_step_sets_what_it_is_given_and_leaves_the_rest(
    first: dict[str, Any], second: dict[str, Any], exported: dict[str, float]
) -> None:
    metrics = RLMetrics()
    metrics.report_step(1, **first)
    metrics.report_step(2, **second)
    parsed = scrape(metrics.registry)
    canaries = {
        name.removeprefix("rljob_rl_"): value
        for (name, _), value in parsed.samples.items()
        if name.removeprefix("rljob_rl_") in CANARIES
    }
    assert canaries == exported
    assert parsed.value("rljob_rl_step") == 2.0


@pytest.mark.parametrize(
    ("values", "rejected"),
    [
        pytest.param({"kl": math.nan}, ("kl",), id="nan"),
        pytest.param({"loss": math.inf}, ("loss",), id="inf"),
        pytest.param({"grad_norm": -math.inf}, ("grad_norm",), id="minus-inf"),
        pytest.param({"kl": Scalar(math.nan)}, ("kl",), id="nan-tensor"),
        pytest.param({"generated_tokens": -5}, ("generated_tokens",), id="negative-tokens"),
        pytest.param({"generated_tokens": math.inf}, ("generated_tokens",), id="inf-tokens"),
        pytest.param({"loss": math.nan, "kl": 0.01}, ("loss",), id="one-of-two"),
        pytest.param({"reward_train": -1.0, "generated_tokens": 0}, (), id="finite-accepted"),
    ],
)
def test_non_finite_values_are_counted_and_not_exported(
    values: dict[str, Any], rejected: tuple[str, ...]
) -> None:
    metrics = RLMetrics()
    assert metrics.report_step(3, **values) == rejected
    parsed = scrape(metrics.registry)
    assert parsed.labelled(REJECTED, "name") == dict.fromkeys(rejected, 1.0)
    for keyword in values:
        exported = parsed.value(f"rljob_rl_{keyword}")
        assert (exported is None) == (keyword in rejected or keyword == "generated_tokens")
    tokens = 0.0 if "generated_tokens" in rejected else float(values.get("generated_tokens", 0))
    assert parsed.value(TOKENS) == tokens


def test_rejections_add_up_per_name() -> None:
    metrics = RLMetrics()
    for step in range(3):
        metrics.report_step(step, kl=math.nan, loss=math.nan if step else 1.0)
    assert scrape(metrics.registry).labelled(REJECTED, "name") == {"kl": 3.0, "loss": 2.0}


def test_generated_tokens_add_up_across_steps() -> None:
    metrics = RLMetrics()
    for step, tokens in enumerate([1000, None, 2500, -1, 500]):
        metrics.report_step(step, generated_tokens=tokens)
    assert scrape(metrics.registry).value(TOKENS) == 4000.0


@pytest.mark.parametrize(
    ("values", "named"),
    [
        pytest.param({"kll": 0.1}, "'kll'", id="a-typo"),
        pytest.param({"kl": 0.1, "reward": 1.0}, "'reward'", id="beside-a-known-one"),
        pytest.param({"generated_token": 10}, "'generated_token'", id="a-near-miss"),
    ],
)
def test_an_unknown_keyword_raises_naming_it_and_exports_nothing(
    values: dict[str, Any], named: str
) -> None:
    metrics = RLMetrics()
    with pytest.raises(TypeError, match=named):
        metrics.report_step(1, **values)
    assert scrape(metrics.registry).names("rljob_rl_") & GAUGE_NAMES == set()


@pytest.mark.parametrize(
    ("step", "values", "error"),
    [
        pytest.param(1, {"kl": "0.1"}, TypeError, id="a-string-value"),
        pytest.param(1, {"kl": 0.1, "loss": [1.0]}, TypeError, id="a-list-value"),
        pytest.param(-1, {"kl": 0.1}, ValueError, id="a-negative-step"),
        pytest.param(1.5, {"kl": 0.1}, TypeError, id="a-fractional-step"),
    ],
)
def test_a_call_that_cannot_be_read_changes_nothing(
    step: Any, values: dict[str, Any], error: type[Exception]
) -> None:
    metrics = RLMetrics()
    with pytest.raises(error):
        metrics.report_step(step, **values)
    assert scrape(metrics.registry).names("rljob_rl_") & GAUGE_NAMES == set()


def test_the_canaries_share_the_progress_exporters_registry() -> None:
    progress = ProgressExporter(serve=False, clock=FakeClock())
    RLMetrics(progress.registry).report_step(3, kl=0.02)
    parsed = scrape(progress.registry)
    assert parsed.value("rljob_rl_kl") == 0.02
    assert parsed.value("rljob_trainer_phase", phase="starting") == 1.0
