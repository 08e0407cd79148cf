"""The TensorBoard bridge against the real writer the four frameworks log with (torch's
SummaryWriter over tensorboard 2.21.0, from the torch venv): the SDK entrypoint wraps a process
that logs a framework's tags step by step, and its page (RLJOB_METRICS_PORT) carries the step,
the canaries and the phase seconds the key map promises; when the process stops logging but
lives on (a hung trainer) the heartbeat stops moving. The reader alone takes the real file cut
at every length (a partly flushed write) without an error or a made-up scalar."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rljob.dev.processes import free_ports
from rljob.sdk.event_file import EventFile
from rljob.sdk.framework_keys import KEY_MAPS, KeyMap
from tests.helpers import quiet_for, wait_for
from tests.upstream.conftest import TOP

WRITER = TOP / "tests" / "upstream" / "workloads" / "tb_framework.py"
INTERVAL = 0.5
# Three steps of each framework's tags (framework_keys cites each); the canaries at the end.
FRAMEWORK_STEPS: dict[str, tuple[dict[str, float], dict[str, float]]] = {
    "verl": (
        {"critic/score/mean": 0.5, "val-core/gsm8k/reward/mean@1": 0.4, "actor/pg_clipfrac": 0.1,
         "actor/grad_norm": 2.0, "timing_s/gen": 4.0, "timing_s/update_actor": 2.0},
        {"reward_train": 0.5, "reward_eval": 0.4, "clip_fraction": 0.1, "grad_norm": 2.0},
    ),
    "openrlhf": (
        {"train/reward": 0.6, "eval/eval_math_pass1": 0.3, "train/ppo_clip_ratio": 0.2,
         "train/kl": 0.01, "train/timing/generation": 4.0, "train/timing/ppo_train": 2.0},
        {"reward_train": 0.6, "reward_eval": 0.3, "clip_fraction": 0.2, "kl": 0.01},
    ),
    "nemo-rl": (
        {"train/reward": 0.7, "validation/accuracy": 0.2, "train/probs_ratio": 1.1,
         "train/kl_penalty": 0.02, "timing/train/generation": 4.0,
         "timing/train/policy_training": 2.0},
        {"reward_train": 0.7, "reward_eval": 0.2, "importance_ratio_mean": 1.1, "kl": 0.02},
    ),
    "slime": (
        {"rollout/raw_reward": 0.8, "eval/aime": 0.1, "train/pg_clipfrac": 0.3,
         "train/grad_norm": 1.0, "perf/rollout_time": 4.0, "perf/actor_train_time": 2.0},
        {"reward_train": 0.8, "reward_eval": 0.1, "clip_fraction": 0.3, "grad_norm": 1.0},
    ),
}  # fmt: skip
STEPS = 3


Page = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _page(port: int) -> Page:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture
def torch_python(torch_venv: Path) -> str:
    return str(torch_venv / "bin" / "python")


def _wrapped(
    python: str, keys: KeyMap, directory: Path, done: Path, port: int
) -> subprocess.Popen[str]:
    tags, _ = FRAMEWORK_STEPS[keys.framework]
    steps = [[step, tags] for step in range(1, STEPS + 1)]
    env = {
        **os.environ,
        "PYTHONPATH": str(TOP / "operator"),
        "RLJOB_METRICS_PORT": str(port),
        "RLJOB_TENSORBOARD_INTERVAL": str(INTERVAL),
        "RLJOB_TERMINATION_LOG": str(directory.parent / "termination-log"),
    }
    command = [
        python, "-m", "rljob.sdk.entrypoint",
        f"--tensorboard-dir={directory}", f"--tensorboard-keys={keys.framework}",
        "--", python, str(WRITER), str(directory / "run"), json.dumps(steps), str(done),
    ]  # fmt: skip
    return subprocess.Popen(command, env=env, text=True)


@pytest.fixture
def stopper() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


@pytest.mark.parametrize("framework", sorted(FRAMEWORK_STEPS))
def test_the_real_writers_files_become_the_sdks_series_and_a_hang_stops_the_heartbeat(
    tmp_path: Path, torch_python: str, stopper: list[subprocess.Popen[str]], framework: str
) -> None:
    keys = KEY_MAPS[framework]
    directory, done, (port,) = tmp_path / "tb", tmp_path / "done", free_ports(1)
    directory.mkdir()
    process = _wrapped(torch_python, keys, directory, done, port)
    stopper.append(process)

    def at_last_step() -> Page | None:
        page = _page(port)
        return page if page.get(("rljob_trainer_step", ())) == STEPS else None

    page = wait_for(at_last_step, 120, f"{framework}'s step {STEPS} on the bridge's page")
    _, canaries = FRAMEWORK_STEPS[framework]
    for keyword, value in canaries.items():
        assert page[(f"rljob_rl_{keyword}", ())] == pytest.approx(value, rel=1e-6), keyword
    generating = page[("rljob_trainer_phase_seconds_total", (("phase", "generating"),))]
    training = page[("rljob_trainer_phase_seconds_total", (("phase", "training"),))]
    assert (generating, training) == (4.0 * STEPS, 2.0 * STEPS)
    beat = page[("rljob_trainer_heartbeat_timestamp_seconds", ())]

    quiet_for(4 * INTERVAL)  # the writer lives on and logs nothing: a hung trainer
    assert _page(port)[("rljob_trainer_heartbeat_timestamp_seconds", ())] == beat

    done.touch()
    assert process.wait(timeout=60) == 0


def test_a_real_file_cut_anywhere_reads_as_its_whole_records(
    tmp_path: Path, torch_python: str
) -> None:
    tags, _ = FRAMEWORK_STEPS["verl"]
    done = tmp_path / "done"
    done.touch()  # write and exit
    steps = json.dumps([[1, tags], [2, tags]])
    subprocess.run(
        [torch_python, str(WRITER), str(tmp_path / "tb"), steps, str(done)],
        check=True,
        timeout=120,
    )
    (written,) = (tmp_path / "tb").glob("events.out.tfevents.*")
    whole = written.read_bytes()
    expected = EventFile(written).read_new()
    assert len(expected) == 2 * len(tags)

    cut = tmp_path / "cut" / written.name
    cut.parent.mkdir()
    for length in range(0, len(whole) + 1, 7):
        cut.write_bytes(whole[:length])
        follower = EventFile(cut)
        partial = follower.read_new()
        assert partial == expected[: len(partial)]
        cut.write_bytes(whole)
        assert partial + follower.read_new() == expected
        assert follower.broken is None and follower.skipped == 0
