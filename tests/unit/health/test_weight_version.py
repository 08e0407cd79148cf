"""An engine's own weight version (generationFrom engine): the paths read per engine, and the
policy generation an answer says; "default", garbage and anything not a whole number say none.
Also how a generation read over HTTP joins the pod's reading without dating a value newer than
it is."""

from __future__ import annotations

import pytest

from rljob.health.monitor_engines import (
    MAX_GENERATION,
    RUNNING_GONE_SECONDS,
    EngineGauges,
    with_generation,
)
from rljob.health.weight_version import parse_weight_version, weight_version_paths
from rljob.vocabulary.enums import Engine

GONE = 100.0 - RUNNING_GONE_SECONDS - 1


@pytest.mark.parametrize(
    ("engine", "paths"),
    [
        pytest.param(Engine.SGLANG, ("/model_info", "/get_weight_version"), id="sglang"),
        pytest.param(Engine.VLLM, ("/weight_info",), id="vllm"),
        pytest.param(Engine.CUSTOM, (), id="custom-has-none"),
    ],
)
def test_paths_per_engine(engine: Engine, paths: tuple[str, ...]) -> None:
    assert weight_version_paths(engine) == paths


@pytest.mark.parametrize(
    ("body", "generation"),
    [
        pytest.param({"weight_version": "7"}, 7, id="a-string-of-digits"),
        pytest.param({"weight_version": "0"}, 0, id="zero"),
        pytest.param({"weight_version": 12}, 12, id="an-integer"),
        pytest.param({"weight_version": "007"}, 7, id="leading-zeros"),
        pytest.param({"model_path": "/m", "weight_version": "3", "is_generation": True}, 3,
                     id="sglang-model-info"),
        pytest.param({"weight_version": "default"}, None, id="default"),
        pytest.param({}, None, id="missing"),
        pytest.param({"weight_version": None}, None, id="null"),
        pytest.param({"weight_version": -1}, None, id="negative"),
        pytest.param({"weight_version": "-1"}, None, id="a-negative-string"),
        pytest.param({"weight_version": 1.5}, None, id="fractional"),
        pytest.param({"weight_version": 2.0}, None, id="a-float"),
        pytest.param({"weight_version": "2.0"}, None, id="a-float-string"),
        pytest.param({"weight_version": " 2"}, None, id="a-padded-string"),
        pytest.param({"weight_version": "+2"}, None, id="a-signed-string"),
        pytest.param({"weight_version": "\u0662"}, None, id="a-non-ascii-digit"),
        pytest.param({"weight_version": True}, None, id="a-bool"),
        pytest.param({"weight_version": MAX_GENERATION + 1}, None, id="too-big-for-a-gauge"),
        pytest.param({"weight_version": ["1"]}, None, id="a-list"),
        pytest.param(["weight_version", "1"], None, id="not-an-object"),
        pytest.param("1", None, id="a-bare-string"),
    ],
)  # fmt: skip
def test_parse_weight_version(body: object, generation: int | None) -> None:
    assert parse_weight_version(body) == generation


@pytest.mark.parametrize(
    ("known", "expected"),
    [
        pytest.param(None, EngineGauges(100.0, None, 5), id="no-reading-yet"),
        pytest.param(EngineGauges(98.0, 2.0, None), EngineGauges(98.0, 2.0, 5),
                     id="a-running-count-keeps-its-own-time"),
        pytest.param(EngineGauges(60.0, 0.0, None), EngineGauges(60.0, 0.0, 5),
                     id="even-a-prometheus-sample-a-scrape-or-two-old"),
        pytest.param(EngineGauges(100.0, 0.0, 4), EngineGauges(100.0, 0.0, 5),
                     id="read-at-the-same-time"),
        pytest.param(EngineGauges(98.0, None, None), EngineGauges(100.0, None, 5),
                     id="no-running-count:-the-read's-time"),
        pytest.param(EngineGauges(GONE, 3.0, 4), EngineGauges(100.0, None, 5),
                     id="a-running-count-prometheus-would-call-stale-is-dropped"),
        pytest.param(EngineGauges(101.0, 1.0, None), EngineGauges(101.0, 1.0, 5),
                     id="a-newer-reading-without-a-generation-gets-it"),
        pytest.param(EngineGauges(101.0, 1.0, 6), EngineGauges(101.0, 1.0, 6),
                     id="a-newer-reading-with-a-generation-stays"),
    ],
)  # fmt: skip
def test_with_generation(known: EngineGauges | None, expected: EngineGauges) -> None:
    assert with_generation(known, 100.0, 5) == expected
