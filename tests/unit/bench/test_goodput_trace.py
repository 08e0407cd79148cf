"""The goodput benchmark's failure trace (bench/goodput/trace.py): the cited totals, the scaling of
durations and rates, seeded determinism, the one-per-class smoke trace and the run's bounds."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from bench.goodput.trace import (
    BYTEROBUST_CUDA_ERROR_PERCENT,
    BYTEROBUST_JOB_HANG_PERCENT,
    LLAMA3_GPU_HOURS,
    LLAMA3_INTERRUPTIONS,
    LLAMA3_PLANNED,
    LLAMA3_TABLE5,
    LLAMA3_UNEXPECTED,
    Durations,
    FailureClass,
    FailureEvent,
    JobSize,
    LostTime,
    Role,
    Table5Row,
    expected_counts,
    extrapolate,
    failure_trace,
    table5_count,
)

REAL = Durations()
SIZE = JobSize()
# Failures 10,000x as often as cited, so that short runs hold enough of every class to test.
STRESSED = dataclasses.replace(REAL, gpu_mtbf_s=REAL.gpu_mtbf_s / 10_000)
LLAMA3_CLASSES = (FailureClass.GPU_HARDWARE, FailureClass.NCCL_TIMEOUT, FailureClass.NODE_LOST)


def test_llama3_interruptions_add_up() -> None:
    assert LLAMA3_PLANNED + LLAMA3_UNEXPECTED == LLAMA3_INTERRUPTIONS == 466
    assert LLAMA3_GPU_HOURS == 16_384 * 54 * 24 == 21_233_664
    assert sum(row.count for row in LLAMA3_TABLE5) == LLAMA3_UNEXPECTED
    assert len({row.category for row in LLAMA3_TABLE5}) == len(LLAMA3_TABLE5) == 18


@pytest.mark.parametrize(
    ("failure_class", "count"),
    [
        pytest.param(FailureClass.GPU_HARDWARE, 262, id="gpu_hardware-262"),
        pytest.param(FailureClass.NCCL_TIMEOUT, 49, id="nccl_timeout-49"),
        pytest.param(FailureClass.NODE_LOST, 46, id="node_lost-46"),
        pytest.param(None, 62, id="not-modelled-62"),
    ],
)
def test_table5_counts_by_class(failure_class: FailureClass | None, count: int) -> None:
    assert table5_count(failure_class) == count


@pytest.mark.parametrize("row", LLAMA3_TABLE5, ids=lambda row: row.category)
def test_table5_printed_percent_matches_its_count(row: Table5Row) -> None:
    """Every printed share is its count over 419, but Faulty GPU's (the table's erratum: 30.1 %
    printed, 148 / 419 = 35.3 %), which is why the counts are used."""
    share = 100 * row.count / LLAMA3_UNEXPECTED
    if row.category == "Faulty GPU":
        assert (row.printed_percent, round(share, 1)) == (30.1, 35.3)
    else:
        assert share == pytest.approx(row.printed_percent, abs=0.051)


def test_llama3_rates_add_up_to_the_cited_total() -> None:
    """The modelled classes and the unmodelled rest make 419 per 21,233,664 GPU-hours."""
    modelled = sum(c.rate_per_unit_hour for c in LLAMA3_CLASSES)
    rest = table5_count(None) / LLAMA3_GPU_HOURS
    total = LLAMA3_UNEXPECTED / LLAMA3_GPU_HOURS
    assert modelled + rest == pytest.approx(total, rel=1e-12)
    assert total == pytest.approx(1.9733e-5, rel=1e-4)


@pytest.mark.parametrize(
    ("failure_class", "rate"),
    [
        pytest.param(FailureClass.GPU_HARDWARE, 262 / 21_233_664, id="gpu_hardware"),
        pytest.param(FailureClass.NCCL_TIMEOUT, 49 / 21_233_664, id="nccl_timeout"),
        pytest.param(FailureClass.NODE_LOST, 46 / 21_233_664, id="node_lost"),
        pytest.param(FailureClass.HUNG_RANK, 262 / 21_233_664 * 9.9 / 36.1, id="hung_rank"),
        pytest.param(FailureClass.ENGINE_OOM, 1 / (168 * 8), id="engine_oom-assumed"),
        pytest.param(FailureClass.ENGINE_DRIFT, 1 / (168 * 8), id="engine_drift-assumed"),
        pytest.param(FailureClass.SLOW_VERIFIER, 1 / 168, id="slow_verifier-assumed"),
    ],
)
def test_rate_per_unit_hour(failure_class: FailureClass, rate: float) -> None:
    assert failure_class.rate_per_unit_hour == pytest.approx(rate, rel=1e-12)


def test_hung_rank_keeps_byterobusts_hang_to_cuda_error_ratio() -> None:
    ratio = FailureClass.HUNG_RANK.rate_per_unit_hour / FailureClass.GPU_HARDWARE.rate_per_unit_hour
    assert ratio == pytest.approx(BYTEROBUST_JOB_HANG_PERCENT / BYTEROBUST_CUDA_ERROR_PERCENT)


@pytest.mark.parametrize("failure_class", list(FailureClass), ids=str)
def test_every_class_is_sourced(failure_class: FailureClass) -> None:
    source = failure_class.source
    assert source.roles
    assert source.citation
    assert source.derivation.startswith("ASSUMPTION") == source.assumed


@pytest.mark.parametrize("name", [field.name for field in dataclasses.fields(Durations)], ids=str)
def test_scaled_divides_every_duration(name: str) -> None:
    assert getattr(REAL.scaled(60), name) == pytest.approx(getattr(REAL, name) / 60, rel=1e-12)


@pytest.mark.parametrize("factor", [0.0, -60.0, float("nan")], ids=["zero", "negative", "nan"])
def test_scaled_refuses_a_non_positive_factor(factor: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        REAL.scaled(factor)


@pytest.mark.parametrize("failure_class", list(FailureClass), ids=str)
def test_scaling_multiplies_every_rate(failure_class: FailureClass) -> None:
    real = failure_class.rate_per_unit_second(REAL)
    assert real == pytest.approx(failure_class.rate_per_unit_hour / 3600, rel=1e-12)
    assert failure_class.rate_per_unit_second(REAL.scaled(60)) == pytest.approx(60 * real)


def test_a_scaled_trace_holds_the_real_trace_faster() -> None:
    real = failure_trace(SIZE, STRESSED, hours=60, seed=7)
    scaled = failure_trace(SIZE, STRESSED.scaled(60), hours=1, seed=7)
    assert real
    assert [(e.failure_class, e.role, e.index) for e in scaled] == [
        (e.failure_class, e.role, e.index) for e in real
    ]
    assert [e.time_s for e in scaled] == pytest.approx([e.time_s / 60 for e in real])


@pytest.mark.parametrize(
    "one_per_class", [pytest.param(False, id="poisson"), pytest.param(True, id="one-per-class")]
)
def test_the_same_seed_gives_the_same_trace(one_per_class: bool) -> None:
    first = failure_trace(SIZE, STRESSED, hours=24, seed=3, one_per_class=one_per_class)
    again = failure_trace(SIZE, STRESSED, hours=24, seed=3, one_per_class=one_per_class)
    other = failure_trace(SIZE, STRESSED, hours=24, seed=4, one_per_class=one_per_class)
    assert first == again
    assert first != other


def test_one_class_does_not_shift_anothers_draws() -> None:
    """Each (class, role) stream has a generator of its own: more verifiers leave the trainer's
    and the engines' failures where they were."""
    fewer = failure_trace(SIZE, STRESSED, hours=24, seed=5)
    more = failure_trace(dataclasses.replace(SIZE, verifiers=16), STRESSED, hours=24, seed=5)

    def not_verifier(trace: list[FailureEvent]) -> list[FailureEvent]:
        return [e for e in trace if e.role is not Role.VERIFIER]

    assert not_verifier(fewer) == not_verifier(more)
    assert len(more) > len(fewer)


@pytest.mark.parametrize("seed", [0, 1, 2, 41], ids=lambda seed: f"seed-{seed}")
def test_one_per_class_gives_each_class_once(seed: int) -> None:
    trace = failure_trace(SIZE, REAL, hours=2, seed=seed, one_per_class=True)
    assert Counter(e.failure_class for e in trace) == dict.fromkeys(FailureClass, 1)
    assert [e.time_s for e in trace] == sorted(e.time_s for e in trace)
    slot = 2 * 3600 / len(FailureClass)
    assert [e.time_s for e in trace] == pytest.approx([(i + 0.5) * slot for i in range(7)])


def test_one_per_class_refuses_a_job_a_class_cannot_hit() -> None:
    with pytest.raises(ValueError, match="slow_verifier"):
        failure_trace(
            dataclasses.replace(SIZE, verifiers=0), REAL, hours=1, seed=0, one_per_class=True
        )


@pytest.mark.parametrize(
    ("durations", "hours", "seed"),
    [
        pytest.param(REAL, 168.0, 0, id="real-week"),
        pytest.param(STRESSED, 24.0, 1, id="stressed-day"),
        pytest.param(STRESSED.scaled(60), 0.5, 2, id="stressed-scaled-half-hour"),
        pytest.param(STRESSED, 0.25, 3, id="stressed-quarter-hour"),
    ],
)
def test_arrivals_stay_within_the_run_on_the_roles_hit(
    durations: Durations, hours: float, seed: int
) -> None:
    trace = failure_trace(SIZE, durations, hours=hours, seed=seed)
    assert [e.time_s for e in trace] == sorted(e.time_s for e in trace)
    for event in trace:
        assert 0 < event.time_s < hours * 3600
        assert event.role in event.failure_class.roles
        assert 0 <= event.index < SIZE.instances(event.role)


@pytest.mark.parametrize(
    ("size", "units", "instances"),
    [
        pytest.param(JobSize(), (32, 32, 4), (4, 4, 4), id="default-4x8-4x8-4"),
        pytest.param(
            JobSize(trainer_nodes=2, rollout_engines=6, gpus_per_engine=4, verifiers=1),
            (16, 24, 1),
            (2, 6, 1),
            id="2x8-6x4-1",
        ),
    ],
)
def test_job_size(size: JobSize, units: tuple[int, ...], instances: tuple[int, ...]) -> None:
    roles = (Role.TRAINER, Role.ROLLOUT, Role.VERIFIER)
    assert tuple(size.units(role) for role in roles) == units
    assert tuple(size.instances(role) for role in roles) == instances


def test_counts_follow_their_expectation() -> None:
    """Over a long stressed run every class's count is within 5 standard deviations of its
    Poisson mean (rate x units x run)."""
    durations = dataclasses.replace(REAL, gpu_mtbf_s=REAL.gpu_mtbf_s / 200)
    hours = 2_000.0
    expected = expected_counts(SIZE, durations, hours)
    counts = Counter(e.failure_class for e in failure_trace(SIZE, durations, hours, seed=11))
    for failure_class, mean in expected.items():
        assert mean > 25, failure_class
        assert abs(counts[failure_class] - mean) < 5 * mean**0.5, failure_class


@pytest.mark.parametrize(
    ("lost", "factor", "real"),
    [
        pytest.param(LostTime(total_s=12.0), 60, 720.0, id="all-scaled"),
        pytest.param(LostTime(total_s=3.0, fixed_s=3.0), 60, 3.0, id="all-fixed"),
        pytest.param(LostTime(total_s=12.0, fixed_s=2.0), 60, 602.0, id="control-loop-fixed"),
        pytest.param(LostTime(total_s=12.0, fixed_s=2.0), 1, 12.0, id="factor-one-unchanged"),
    ],
)
def test_extrapolate(lost: LostTime, factor: float, real: float) -> None:
    measured = {FailureClass.ENGINE_OOM: lost}
    assert extrapolate(measured, factor) == {FailureClass.ENGINE_OOM: pytest.approx(real)}


@pytest.mark.parametrize(
    ("total_s", "fixed_s"),
    [pytest.param(1.0, 2.0, id="fixed-over-total"), pytest.param(1.0, -0.5, id="negative-fixed")],
)
def test_lost_time_refuses_an_impossible_split(total_s: float, fixed_s: float) -> None:
    with pytest.raises(ValueError, match="fixed_s"):
        LostTime(total_s=total_s, fixed_s=fixed_s)
