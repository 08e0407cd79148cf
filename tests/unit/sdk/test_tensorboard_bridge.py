"""rljob.sdk.tensorboard_bridge with each framework's key map: a step's tags as the framework logs
them become the SDK's step, heartbeat, canaries, phase seconds and generated tokens; files of the
previous attempt are not read; a framework that logs nothing new leaves the heartbeat alone."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from rljob.sdk.event_file import encode_record
from rljob.sdk.framework_keys import KEY_MAPS, NEMO_RL, OPENRLHF, SLIME, VERL, KeyMap
from rljob.sdk.metrics import RLMetrics
from rljob.sdk.progress import ProgressExporter
from rljob.sdk.tensorboard_bridge import TensorBoardBridge
from tests.unit.sdk.event_records import append, event, file_version


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels or None)


def _bridge(tmp_path: Path, keys: KeyMap) -> tuple[TensorBoardBridge, CollectorRegistry]:
    registry = CollectorRegistry()
    progress = ProgressExporter(registry=registry, serve=False)
    bridge = TensorBoardBridge(tmp_path, keys, progress, RLMetrics(registry))
    return bridge, registry


# One step of each framework, its tags as the framework logs them (framework_keys cites each),
# and what the SDK's series read after it.
STEPS = [
    pytest.param(
        VERL,
        {
            "critic/score/mean": 0.6, "val-core/gsm8k/reward/mean@1": 0.4,
            "val-core/math/acc/mean@4": 0.2, "actor/kl_loss": 0.01, "actor/pg_clipfrac": 0.1,
            "actor/entropy": 1.5, "actor/pg_loss": -0.2, "actor/grad_norm": 3.0,
            "response_length/mean": 512.0, "timing_s/gen": 40.0, "timing_s/update_actor": 20.0,
            "timing_s/update_weights": 2.0, "timing_per_token_ms/gen": 0.5,
        },
        {"reward_train": 0.6, "reward_eval": 0.3, "kl": 0.01, "clip_fraction": 0.1,
         "entropy": 1.5, "loss": -0.2, "grad_norm": 3.0, "response_length_mean": 512.0},
        {"generating": 40.0, "training": 20.0, "syncing_weights": 2.0},
        80_000.0,
        id="verl",
    ),
    pytest.param(
        OPENRLHF,
        {
            "train/reward": 0.7, "eval/eval_gsm8k_pass1": 0.5, "eval/eval_gsm8k_pass4": 0.9,
            "train/kl": 0.02, "train/ppo_clip_ratio": 0.05, "train/policy_loss": 0.1,
            "train/actor_grad_norm": 1.0, "train/response_length": 300.0,
            "train/rollout/num_samples": 64.0, "train/rollout/response_length_mean": 250.0,
            "train/timing/generation": 30.0, "train/timing/ppo_train": 10.0,
            "train/timing/broadcast": 1.0,
        },
        {"reward_train": 0.7, "reward_eval": 0.5, "kl": 0.02, "clip_fraction": 0.05,
         "loss": 0.1, "grad_norm": 1.0, "response_length_mean": 300.0},
        {"generating": 30.0, "training": 10.0, "syncing_weights": 1.0},
        16_000.0,
        id="openrlhf",
    ),
    pytest.param(
        NEMO_RL,
        {
            "train/reward": 0.8, "validation/accuracy": 0.45, "train/kl_penalty": 0.03,
            "train/probs_ratio": 1.01, "train/approx_entropy": 0.9, "train/loss": 0.05,
            "train/grad_norm": 0.7, "train/mean_gen_tokens_per_sample": 700.0,
            "timing/train/generation": 50.0, "timing/train/policy_training": 25.0,
            "timing/train/prepare_for_generation/transfer_and_update_weights": 3.0,
        },
        {"reward_train": 0.8, "reward_eval": 0.45, "kl": 0.03, "importance_ratio_mean": 1.01,
         "entropy": 0.9, "loss": 0.05, "grad_norm": 0.7, "response_length_mean": 700.0},
        {"generating": 50.0, "training": 25.0, "syncing_weights": 3.0},
        None,
        id="nemo-rl",
    ),
    pytest.param(
        SLIME,
        {
            "rollout/raw_reward": 0.65, "rollout/rewards": 0.0, "eval/aime": 0.3,
            "eval/aime-truncated_ratio": 0.9, "eval/aime-pass@8": 0.8, "train/kl_loss": 0.04,
            "train/pg_clipfrac": 0.2, "train/ois": 1.02, "train/entropy_loss": 0.8,
            "train/loss": 0.3, "train/grad_norm": 0.5, "rollout/response_len/mean": 900.0,
            "perf/rollout_time": 60.0, "perf/actor_train_time": 30.0,
            "perf/update_weights_time": 4.0,
        },
        {"reward_train": 0.65, "reward_eval": 0.3, "kl": 0.04, "clip_fraction": 0.2,
         "importance_ratio_mean": 1.02, "entropy": 0.8, "loss": 0.3, "grad_norm": 0.5,
         "response_length_mean": 900.0},
        {"generating": 60.0, "training": 30.0, "syncing_weights": 4.0},
        None,
        id="slime",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("keys", "logged", "canaries", "phases", "tokens"), STEPS)
def test_a_frameworks_step_becomes_the_sdks_series(
    tmp_path: Path,
    keys: KeyMap,
    logged: dict[str, float],
    canaries: dict[str, float],
    phases: dict[str, float],
    tokens: float | None,
) -> None:
    bridge, registry = _bridge(tmp_path, keys)
    append(tmp_path / "events.out.tfevents.1.host", file_version(), event(12, logged))

    assert bridge.poll() > 0

    assert _sample(registry, "rljob_trainer_step") == 12
    assert _sample(registry, "rljob_trainer_heartbeat_timestamp_seconds") is not None
    exported = {
        keyword: _sample(registry, f"rljob_rl_{keyword}")
        for keyword in (*canaries, "importance_ratio_mean", "clip_fraction", "response_length_p90")
    }
    assert {k: v for k, v in exported.items() if v is not None} == pytest.approx(canaries)
    for phase, seconds in phases.items():
        assert _sample(registry, "rljob_trainer_phase_seconds_total", phase=phase) == seconds
    assert _sample(registry, "rljob_rl_generated_tokens_total") == (tokens or 0.0)


def test_a_weight_syncs_step_is_the_policy_generation(tmp_path: Path) -> None:
    bridge, registry = _bridge(tmp_path, VERL)
    path = tmp_path / "events.out.tfevents.1.host"
    append(path, event(3, {"timing_s/update_weights": 1.0}), event(4, {"timing_s/gen": 2.0}))
    bridge.poll()
    assert _sample(registry, "rljob_policy_generation") == 3
    append(path, event(2, {"timing_s/update_weights": 1.0}))  # an older step: no going back
    bridge.poll()
    assert _sample(registry, "rljob_policy_generation") == 3


def test_the_heartbeat_moves_only_when_the_framework_logs(tmp_path: Path) -> None:
    bridge, registry = _bridge(tmp_path, VERL)
    path = tmp_path / "run" / "events.out.tfevents.1.host"
    path.parent.mkdir()
    append(path, event(1, {"critic/score/mean": 0.1}))
    bridge.poll()
    beat = _sample(registry, "rljob_trainer_heartbeat_timestamp_seconds")

    assert bridge.poll() == 0
    assert _sample(registry, "rljob_trainer_heartbeat_timestamp_seconds") == beat
    append(path, event(2, {"timing_s/gen": 1.0}))
    assert bridge.poll() == 1
    assert _sample(registry, "rljob_trainer_step") == 2


def test_an_eval_logged_earlier_keeps_its_value_and_train_axis_tags_do_not_move_the_step(
    tmp_path: Path,
) -> None:
    bridge, registry = _bridge(tmp_path, SLIME)
    path = tmp_path / "events.out.tfevents.1.host"
    append(path, event(4, {"eval/aime": 0.25, "rollout/raw_reward": 0.5}))
    append(path, event(5, {"rollout/raw_reward": 0.6}), event(40, {"train/grad_norm": 2.0}))
    bridge.poll()

    assert _sample(registry, "rljob_trainer_step") == 5  # train/step = rollout_id * steps + id
    assert _sample(registry, "rljob_rl_reward_eval") == 0.25
    assert _sample(registry, "rljob_rl_reward_train") == pytest.approx(0.6)  # a float32
    assert _sample(registry, "rljob_rl_step") == 5


def test_the_previous_attempts_files_are_not_read(tmp_path: Path) -> None:
    old = tmp_path / "events.out.tfevents.0.host"
    append(old, event(90, {"critic/score/mean": 0.9}))
    bridge, registry = _bridge(tmp_path, VERL)  # started before the trainer: the file is old
    append(old, event(91, {"critic/score/mean": 0.9}))

    assert bridge.poll() == 0
    assert _sample(registry, "rljob_trainer_step") == 0  # the gauge as it starts
    append(tmp_path / "events.out.tfevents.1.host", event(101, {"critic/score/mean": 0.5}))
    assert bridge.poll() == 1
    assert _sample(registry, "rljob_trainer_step") == 101


def test_a_malformed_record_is_skipped_and_the_thread_outlives_a_failing_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bridge, registry = _bridge(tmp_path, VERL)
    path = tmp_path / "events.out.tfevents.1.host"
    # A checksummed record whose step is a 200-byte varint.
    path.write_bytes(encode_record(b"\x10" + b"\xff" * 200 + b"\x01"))
    append(path, event(3, {"critic/score/mean": 0.5}))
    assert bridge.poll() == 1
    assert _sample(registry, "rljob_trainer_step") == 3

    failures = iter([OSError("stale NFS handle")])

    polled = threading.Event()

    def flaky() -> int:
        polled.set()
        error = next(failures, None)
        if error is not None:
            raise error
        return 0

    monkeypatch.setattr(bridge, "_poll", flaky)
    bridge.start(interval=0.01)
    assert polled.wait(5)
    polled.clear()
    assert polled.wait(5), "the thread polls again after a failed read"
    bridge.stop()


def test_derived_tokens_count_each_step_once_even_when_its_halves_arrive_apart(
    tmp_path: Path,
) -> None:
    bridge, registry = _bridge(tmp_path, OPENRLHF)
    path = tmp_path / "events.out.tfevents.1.host"
    append(path, event(1, {"train/rollout/num_samples": 10.0}))
    bridge.poll()
    assert _sample(registry, "rljob_rl_generated_tokens_total") == 0.0
    append(path, event(1, {"train/rollout/response_length_mean": 5.0}))
    bridge.poll()
    append(path, event(2, {"train/reward": 0.1}))
    bridge.poll()
    assert _sample(registry, "rljob_rl_generated_tokens_total") == 50.0


def test_every_framework_has_a_key_map_with_its_revision() -> None:
    assert set(KEY_MAPS) == {"verl", "openrlhf", "nemo-rl", "slime"}
    assert all(keys.revision for keys in KEY_MAPS.values())
