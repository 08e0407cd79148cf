"""The four framework examples (examples/frameworks/*.yaml) proven on the bed: each job as
shipped but for what the bed needs (no shared volume or store, health at second scale), the
simulator standing in for its GPU processes (rljob.dev.sim.tensorboard: the framework appends
its steps to TensorBoard event files in its own tags, rank 0's page is the real SDK
TensorBoardBridge reading them; the engines inside the gang serve the plugin's pages, or
SGLang's for slime), health read by direct scraping as the chart's default install does.

All four jobs run at once in one namespace and go through the phases together (a module
fixture: each phase waits once, not once per framework); each framework's test then reads:
1. HealthSignalsAvailable naming exactly the detectors that have data (EXPECTED);
2. RewardHackingSuspected once the files log a rising training reward over a flat eval reward
   (the profile's reward_hacking, set through the simulator's control API), none before;
3. TrainerStalled within one stall timeout plus one interval of the files' last step (the
   simulator's `hang` fault: no step finishes, nothing is appended), the delay printed."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from rljob.dev.sim.launcher import Simulator
from rljob.dev.sim.profiles import TENSORBOARD_FRAMEWORKS
from rljob.dev.sim.tensorboard import FRAMEWORK_TAGS
from rljob.sdk.framework_keys import KEY_MAPS
from tests.helpers import wait_for
from tests.integration.conftest import Cluster, Operator, create_namespace, delete_namespace
from tests.integration.rljobs import (
    apply_rljob,
    condition,
    example,
    get_rljob,
    second_scale_health,
    wait_condition,
)

# One worker holds the four jobs the tests share.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("framework_signals")]

FRAMEWORKS = ("verl", "openrlhf", "nemo-rl", "slime")
STALL_TIMEOUT, INTERVAL = 8.0, 1.0  # spec.health.trainerStall.timeout, spec.health.interval
HACKING_WINDOW = 20.0  # spec.health.canaries.rewardHacking.window
# What the bed adds to the detection: the journal's status write after the finding and this
# test's polling (measured: 0 to 0.3 s).
STALL_SLACK = 3.0
# A step of about 3 s (rollouts 1 s, training 1 s, a weight sync 0.5 s, a checkpoint every 5
# steps 0.5 s), each an evaluation; rewards rise 36 an hour, the eval reward with them until
# reward_hacking.
TRAINER = {
    "wait_for_rollouts": 1.0,
    "step_seconds": 1.0,
    "sync_seconds": 0.5,
    "checkpoint_seconds": 0.5,
    "eval_every": 1,
    "reward_slope_per_hour": 36.0,
}
ENGINES = ("engine_stall", "kv_drift", "kv_fragmentation", "kv_leak", "prefix_collapse")
TRAINER_SIGNALS = ("reward_hacking", "trainer_stall")  # the bridge's heartbeat and rewards
# Observed: the detectors that judged in a health round, per framework. throughput_regression
# judges where the files give the generated tokens (verl, OpenRLHF) and the bridge sees weight
# syncs (rljob_policy_generation); NeMo-RL and slime log no token count, so it has no data
# there (docs/frameworks.md). No container restarts: no detector of them here.
EXPECTED: dict[str, tuple[str, ...]] = {
    "verl": tuple(sorted((*ENGINES, *TRAINER_SIGNALS, "throughput_regression"))),
    "openrlhf": tuple(sorted((*ENGINES, *TRAINER_SIGNALS, "throughput_regression"))),
    "nemo-rl": tuple(sorted(ENGINES + TRAINER_SIGNALS)),
    "slime": tuple(sorted(ENGINES + TRAINER_SIGNALS)),
}


def _flag(command: list[str], name: str) -> str:
    return next(arg.split("=", 1)[1] for arg in command if arg.startswith(f"{name}="))


def _sim_profile(trainer: dict[str, Any]) -> dict[str, Any]:
    """The simulated framework as the example runs it: its key map (the entrypoint's
    --tensorboard-keys), one engine per plugin page (slime: one 8-GPU SGLang engine a node)."""
    engines = trainer["engines"]
    return {
        **TRAINER,
        "tensorboard_keys": _flag(trainer["command"], "--tensorboard-keys"),
        "colocated_engines": engines.get("pages", 1),
        "engines_exporter": engines["engine"],
    }


def _bed_job(framework: str) -> dict[str, Any]:
    """The example on the bed: no shared volume or store (kwok pods mount nothing, the bed's
    store has no such bucket), health every second with second-scale bounds."""
    body = copy.deepcopy(example(f"frameworks/{framework}"))
    spec = body["spec"]
    trainer = spec["roles"]["trainer"]
    for key in ("volumes", "volumeMounts"):
        trainer.pop(key, None)
    env = [e for e in trainer.get("env", []) if "value" in e]
    trainer["env"] = [
        *env,
        {"name": "RLJOB_SIM_PROFILE", "value": json.dumps(_sim_profile(trainer))},
    ]
    spec.pop("checkpoint", None)
    spec["health"] = second_scale_health(
        {"direct": {}},
        trainerStall={"timeout": f"{STALL_TIMEOUT:.0f}s", "startupGrace": "5s"},
        canaries={
            "rewardHacking": {"window": f"{HACKING_WINDOW:.0f}s"},
            "throughputRegression": {"before": "20s", "after": "10s"},
        },
    )
    spec["health"]["interval"] = f"{INTERVAL:.0f}s"
    spec["failurePolicy"] = {"backoff": {"initial": "1s", "max": "2s"}}
    return body


def _name(framework: str) -> str:
    return str(example(f"frameworks/{framework}")["metadata"]["name"])


@pytest.fixture(scope="module")
def jobs_namespace(cluster: Cluster) -> Iterator[str]:
    """The namespace of the four jobs, for the module."""
    name = create_namespace(cluster, "framework-signals")
    yield name
    delete_namespace(cluster, name)


@pytest.fixture(scope="module")
def running(
    cluster: Cluster, operator_session: Operator, simulator: Simulator, jobs_namespace: str
) -> str:
    """The four examples applied at once, each Ready."""
    for framework in FRAMEWORKS:
        apply_rljob(cluster, jobs_namespace, _bed_job(framework))
    for framework in FRAMEWORKS:
        wait_condition(cluster, jobs_namespace, _name(framework), "Ready", timeout=120)
    return jobs_namespace


def _detectors(cluster: Cluster, namespace: str, name: str) -> tuple[str, ...] | None:
    message = condition(get_rljob(cluster, namespace, name), "HealthSignalsAvailable").get(
        "message", ""
    )
    _, found, listed = str(message).partition("; detectors with data: ")
    return tuple(listed.split(", ")) if found else None


def _reported(cluster: Cluster, namespace: str, name: str, reason: str) -> list[str]:
    path = f"/api/v1/namespaces/{namespace}/events?fieldSelector=reason%3D{reason}"
    items = cluster.api.get(path)["items"]
    return [e["message"] for e in items if e["involvedObject"]["name"] == name]


def _rank0(simulator: Simulator, namespace: str, name: str) -> dict[str, Any] | None:
    ranks = simulator.client().workloads(namespace=namespace, job=name, role="trainer")
    return next((w for w in ranks if "tensorboard" in w["state"]), None)


def _stalled(cluster: Cluster, namespace: str, name: str) -> bool:
    restarts = get_rljob(cluster, namespace, name)["status"].get("restarts", {})
    return "TrainerStalled" in (restarts.get("byReason") or {})


def test_the_simulated_frameworks_log_only_tags_their_key_maps_read() -> None:
    """The simulator's tag tables against the SDK's key maps (no bed needed): every canary tag
    gives its keyword, every timing tag a phase, for each framework the profiles accept."""
    assert set(TENSORBOARD_FRAMEWORKS) == set(KEY_MAPS) == set(FRAMEWORK_TAGS)
    for framework, tags in FRAMEWORK_TAGS.items():
        keys = KEY_MAPS[framework]
        for keyword, tag in tags.canaries.items():
            assert keys.canary(keyword, {tag: 1.0}) == 1.0, (framework, keyword, tag)
        assert set(tags.timings) <= set(keys.phases), framework


HACKING = "RewardHackingSuspected"


@dataclass
class Seen:
    """What one framework's job showed through each phase."""

    detectors: tuple[str, ...] = ()
    bridge: dict[str, Any] | None = None  # rank 0's bridge as the simulator shows it
    hacking_before: list[str] = field(default_factory=list)
    hacked: list[str] = field(default_factory=list)
    heartbeats: list[float] = field(default_factory=list)
    stalled_at: float | None = None


def _all(probe: Callable[[str], bool], timeout: float, what: str, interval: float = 1.0) -> None:
    """Waits until `probe(framework)` holds for every framework (each probed until it does)."""
    pending = set(FRAMEWORKS)

    def done() -> bool:
        pending.difference_update({f for f in sorted(pending) if probe(f)})
        return not pending

    wait_for(done, timeout, f"{what} for {sorted(pending)}", interval=interval)


@pytest.fixture(scope="module")
def phases(cluster: Cluster, simulator: Simulator, running: str) -> tuple[dict[str, Seen], float]:
    """The four jobs through the phases together (each phase's wait is one, not four): every
    detector with data; reward hacking in the files; then a hang. Returns what each showed and
    when the hang was injected."""
    namespace, client = running, simulator.client()
    seen = {framework: Seen() for framework in FRAMEWORKS}

    def judging(framework: str) -> bool:
        found = _detectors(cluster, namespace, _name(framework)) or ()
        seen[framework].detectors = found
        rank0 = _rank0(simulator, namespace, _name(framework))
        seen[framework].bridge = rank0["state"]["tensorboard"] if rank0 is not None else None
        return set(EXPECTED[framework]) <= set(found)

    _all(judging, 120, "the detectors with data")
    for framework in FRAMEWORKS:
        name = _name(framework)
        seen[framework].hacking_before = _reported(
            cluster, namespace, name, "RewardHackingSuspected"
        )
        client.set_profile({"reward_hacking": True}, namespace=namespace, job=name, role="trainer")

    def hacked(framework: str) -> bool:
        found = _reported(cluster, namespace, _name(framework), HACKING)
        seen[framework].hacked = found
        return bool(found)

    _all(hacked, 3 * HACKING_WINDOW + 30, "RewardHackingSuspected")
    for framework in FRAMEWORKS:
        client.inject("hang", namespace=namespace, job=_name(framework), role="trainer")
    hung = time.time()

    def stalled(framework: str) -> bool:
        name, record = _name(framework), seen[framework]
        found = _rank0(simulator, namespace, name)
        if found is not None and found["state"]["tensorboard"]["heartbeat"]:
            record.heartbeats.append(found["state"]["tensorboard"]["heartbeat"])
        if _stalled(cluster, namespace, name):
            record.stalled_at = time.time()
            return True
        return False

    _all(stalled, STALL_TIMEOUT + 30, "TrainerStalled", interval=0.2)
    return seen, hung


@pytest.mark.parametrize(
    "framework",
    [pytest.param(f, id=f"{f}:{'+'.join(EXPECTED[f])}") for f in FRAMEWORKS],
)
def test_a_framework_example_feeds_the_detectors_through_its_tensorboard_files(
    phases: tuple[dict[str, Seen], float], framework: str
) -> None:
    by_framework, hung = phases
    seen = by_framework[framework]
    print(f"\n{framework}: detectors with data: {', '.join(seen.detectors)}")
    assert seen.detectors == EXPECTED[framework]
    assert seen.bridge is not None, "rank 0 runs the bridge"
    print(f"{framework}: {seen.bridge}")
    assert seen.hacking_before == [], "no RewardHackingSuspected before the pattern"
    print(f"{framework}: {seen.hacked[0]}")
    assert seen.stalled_at is not None and seen.heartbeats
    since_beat, since_hang = seen.stalled_at - max(seen.heartbeats), seen.stalled_at - hung
    print(
        f"{framework}: TrainerStalled {since_beat:.1f}s after the last heartbeat, "
        f"{since_hang:.1f}s after the hang"
    )
    assert since_beat <= STALL_TIMEOUT + INTERVAL + STALL_SLACK
