"""The simulated trainer's step phases, seconds per phase, RL canaries and throughput regression,
with the SDK's names, labels and semantics (rljob.sdk.phase_time, rljob.sdk.metrics)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rljob.dev.sim.faults import Active
from rljob.dev.sim.models import TrainerModel
from rljob.dev.sim.profiles import ProfileError, TrainerProfile, override
from rljob.sdk.metrics import RLMetrics
from rljob.sdk.progress import ProgressExporter

T0 = 1_800_000_000.0
BASE = TrainerProfile(wait_for_rollouts=2, step_seconds=3, checkpoint_every=100)


Key = tuple[str | tuple[str, str], ...]


def families(page: str) -> dict[str, tuple[str, dict[Key, float]]]:
    """{family: (type, {(sample name, *sorted label pairs): value})}"""
    return {
        f.name: (f.type, {(s.name, *sorted(s.labels.items())): s.value for s in f.samples})
        for f in text_string_to_metric_families(page)
    }


def labels(key: Key) -> dict[str, str]:
    return dict(pair for pair in key[1:] if isinstance(pair, tuple))


def phase_seconds(trainer: TrainerModel) -> dict[str, float]:
    _, samples = families(trainer.render())["rljob_trainer_phase_seconds"]
    return {labels(key)["phase"]: value for key, value in samples.items()}


def phases_entered(profile: TrainerProfile, seconds: float) -> list[str]:
    trainer = TrainerModel(profile, T0)
    seen = [trainer.phase.name]
    for tenth in range(1, int(seconds * 10)):
        trainer.advance(T0 + tenth / 10)
        if trainer.phase.name != seen[-1]:
            seen.append(trainer.phase.name)
    return seen


W, T, G, S, E, C = (
    "waiting_for_rollouts",
    "training",
    "generating",
    "syncing_weights",
    "evaluating",
    "checkpointing",
)


@pytest.mark.parametrize(
    ("profile", "seconds", "expected"),
    [
        pytest.param(BASE, 11, [W, T, W, T, W], id="default-wait-then-train"),
        pytest.param(
            replace(BASE, checkpoint_every=2, checkpoint_seconds=1), 12, [W, T, W, T, C, W],
            id="checkpoint-every-2",
        ),
        pytest.param(
            replace(BASE, generate_seconds=1, sync_seconds=1), 13.5, [G, W, T, S, G, W, T, S],
            id="colocated-generate-and-sync",
        ),
        pytest.param(
            replace(BASE, eval_seconds=1, eval_every=2, checkpoint_every=2), 15,
            [W, T, W, T, E, C, W], id="evaluate-then-checkpoint",
        ),
    ],
)  # fmt: skip
def test_a_step_runs_the_profiles_phases_in_order(
    profile: TrainerProfile, seconds: float, expected: list[str]
) -> None:
    assert phases_entered(profile, seconds) == expected


def test_phase_seconds_accrue_as_the_sdks_counter_with_its_names_and_labels() -> None:
    profile = replace(BASE, generate_seconds=1, sync_seconds=0.5, eval_seconds=1, eval_every=2)
    trainer = TrainerModel(profile, T0)
    for second in range(1, 61):
        trainer.advance(T0 + second)
    seconds = phase_seconds(trainer)
    assert sum(seconds.values()) == pytest.approx(60)
    # 6.5 s a step, plus 1 s of eval every second step: 60 s = 4 x 14 s and 4 s into step 9
    assert seconds == pytest.approx({G: 9, W: 18, T: 25, S: 4, E: 4, C: 0}, abs=1e-6)

    # The SDK's exporter with the same phases entered: the same family, type and labels.
    clock = [0.0]
    sdk = CollectorRegistry()
    progress = ProgressExporter(registry=sdk, serve=False, clock=lambda: clock[0])
    for phase in (G, W, T, S, E, C):
        progress.phase(phase)
        clock[0] += 1
    sdk_type, sdk_samples = families(generate_latest(sdk).decode())["rljob_trainer_phase_seconds"]
    sim_type, sim_samples = families(trainer.render())["rljob_trainer_phase_seconds"]
    assert sim_type == sdk_type == "counter"
    assert set(sim_samples) == set(sdk_samples)


def test_a_hung_trainer_keeps_accruing_to_its_phase_as_the_sdks_clock_runs_on() -> None:
    trainer = TrainerModel(BASE, T0)
    trainer.advance(T0 + 3)  # training since T0 + 2
    for second in range(4, 64):
        trainer.advance(T0 + second, Active(hang_since=T0 + 3))
    assert trainer.step == 0 and phase_seconds(trainer)[T] == pytest.approx(61)


def test_evaluating_joins_the_phase_gauge_once_entered() -> None:
    trainer = TrainerModel(replace(BASE, eval_seconds=1, eval_every=1), T0)
    trainer.advance(T0 + 4)
    _, gauge = families(trainer.render())["rljob_trainer_phase"]
    assert E not in {labels(key)["phase"] for key in gauge}
    trainer.advance(T0 + 5.5)
    _, gauge = families(trainer.render())["rljob_trainer_phase"]
    assert {labels(key)["phase"]: v for key, v in gauge.items()}[E] == 1


def rewards(profile: TrainerProfile, seconds: int) -> list[tuple[float, float, float | None]]:
    """(seconds in, training reward, eval reward) at every scrape once reported."""
    trainer = TrainerModel(profile, T0, seed="s")
    seen = []
    for second in range(1, seconds + 1):
        trainer.advance(T0 + second)
        values = trainer.canaries.values
        if "rljob_rl_reward_train" in values:
            eval_reward = values.get("rljob_rl_reward_eval")
            seen.append((float(second), values["rljob_rl_reward_train"], eval_reward))
    return seen


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    num = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return num / sum((t - mean_t) ** 2 for t, _ in points) * 3600


# The E2E scale: a rise of 0.2 over two minutes.
FAST = replace(BASE, wait_for_rollouts=1, step_seconds=1, reward_slope_per_hour=6.0)


@pytest.mark.parametrize(
    ("profile", "eval_slope"),
    [
        pytest.param(FAST, 6.0, id="healthy-eval-rises-with-train"),
        pytest.param(replace(FAST, reward_hacking=True), 0.0, id="hacking-eval-stays-flat"),
        pytest.param(replace(FAST, reward_slope_per_hour=0.0), 0.0, id="flat-both"),
    ],
)
def test_training_and_eval_rewards_follow_the_scenario(
    profile: TrainerProfile, eval_slope: float
) -> None:
    seen = rewards(profile, 120)
    train = slope_per_hour([(t, r) for t, r, _ in seen])
    held = slope_per_hour([(t, e) for t, _, e in seen if e is not None])
    assert train == pytest.approx(profile.reward_slope_per_hour, abs=0.5)
    assert held == pytest.approx(eval_slope, abs=0.5)
    # Eval every 5 steps (2 s each), held between: a new value every 10 s.
    evals = [e for _, _, e in seen]
    changes = sum(1 for a, b in itertools.pairwise(evals) if a != b)
    assert 10 <= changes <= 13 and all(e is not None for e in evals)


def test_switching_hacking_on_at_run_time_bends_the_rewards_without_a_jump() -> None:
    trainer = TrainerModel(FAST, T0, seed="s")
    for second in range(1, 61):
        trainer.advance(T0 + second)
    before = dict(trainer.canaries.values)
    trainer.set_profile(replace(FAST, reward_hacking=True))
    for second in range(61, 181):
        trainer.advance(T0 + second)
    after = trainer.canaries.values
    # 2 minutes at 6 an hour: +0.2 for training, nothing for eval
    rise = after["rljob_rl_reward_train"] - before["rljob_rl_reward_train"]
    assert rise == pytest.approx(0.2, abs=0.02)
    assert after["rljob_rl_reward_eval"] == pytest.approx(before["rljob_rl_reward_eval"], abs=0.02)


def test_canaries_have_the_sdks_names_types_and_the_tokens_counter() -> None:
    trainer = TrainerModel(BASE, T0, seed="s")
    assert not any(
        name.startswith("rljob_rl_") and "tokens" not in name for name in families(trainer.render())
    )  # nothing reported yet: only the counter, at 0
    for second in range(1, 51):
        trainer.advance(T0 + second)
    sim = families(trainer.render())
    sdk = CollectorRegistry()
    RLMetrics(sdk).report_step(
        10, **{k: 1.0 for k in ("importance_ratio_mean", "importance_ratio_tail", "clip_fraction",
                                "kl", "entropy", "reward_train", "reward_eval",
                                "response_length_mean", "response_length_p90", "grad_norm",
                                "loss")}, generated_tokens=5
    )  # fmt: skip
    expected = {
        name: (kind, set(samples))
        for name, (kind, samples) in families(generate_latest(sdk).decode()).items()
        if samples  # the rejected-values counter has no child until a value is rejected
    }
    got = {name: (kind, set(samples)) for name, (kind, samples) in sim.items()}
    assert {name: got[name] for name in expected} == expected
    assert sim["rljob_rl_step"][1][("rljob_rl_step",)] == 10
    tokens = sim["rljob_rl_generated_tokens"][1][("rljob_rl_generated_tokens_total",)]
    assert tokens == 10 * BASE.tokens_per_step


def test_canaries_can_be_switched_off() -> None:
    trainer = TrainerModel(replace(BASE, canaries=False), T0)
    trainer.advance(T0 + 30)
    assert not any(name.startswith("rljob_rl_") for name in families(trainer.render()))


REGRESSING = replace(
    BASE,
    generate_seconds=2,
    wait_for_rollouts=1,
    step_seconds=1,
    regression=0.5,
    regression_delay=10,
    regression_seconds=20,
)


def generating_per_step(profile: TrainerProfile, seconds: int) -> list[tuple[int, float]]:
    """(step, seconds its generating phase took) for every step that ended."""
    trainer = TrainerModel(profile, T0)
    ends: list[tuple[int, float]] = []
    for tenth in range(1, seconds * 10):
        trainer.advance(T0 + tenth / 10)
        if trainer.step > len(ends):
            ends.append((trainer.step, phase_seconds(trainer)[G]))
    priors = [0.0, *(total for _, total in ends[:-1])]
    return [(step, total - prior) for (step, total), prior in zip(ends, priors, strict=True)]


def test_a_regression_after_a_sync_slows_generation_for_its_time() -> None:
    per_step = generating_per_step(REGRESSING, 60)
    # 4 s steps; the sync at 12 s is the first after 10 s: steps 4 to 7 (12 s to 32 s) generate
    # at half speed, 6 s steps; the 20 s are over at 32 s.
    assert [round(g, 1) for _, g in per_step[:7]] == [2, 2, 2, 4, 4, 4, 4]
    assert all(round(g, 1) == 2 for _, g in per_step[7:])


def test_a_regression_set_at_run_time_arms_from_then() -> None:
    trainer = TrainerModel(replace(REGRESSING, regression=0), T0)
    trainer.advance(T0 + 30)
    assert trainer.regression.slower(T0 + 30) == 1
    trainer.set_profile(replace(REGRESSING, regression_delay=0, regression_seconds=0))
    trainer.advance(T0 + 36)  # a sync at 32 s
    assert trainer.regression.started == pytest.approx(T0 + 32)
    assert trainer.regression.slower(T0 + 100) == 2  # until the profile changes
    trainer.set_profile(replace(REGRESSING, regression=0))
    assert trainer.regression.slower(T0 + 100) == 1


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param({"regression": 1}, "below 1", id="all-throughput-lost"),
        pytest.param({"eval_every": 0}, "eval_every", id="never-evaluating"),
        pytest.param({"reward_hacking": "yes"}, "true or false", id="switch-not-a-bool"),
    ],
)
def test_bad_trainer_profiles_are_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        override(TrainerProfile(), changes)
