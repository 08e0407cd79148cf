"""The trainer's launchers: torchrun (the default, rendered as before the field existed), command
(NNODES/NODE_RANK only) and ray (head on index 0 then the driver, the others join and block,
every port explicit, readiness asked of the head, success when index 0 succeeds)."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.api import RESERVED_ENV_NAMES, InvalidRLJobError
from rljob.api.ray_ports import RAY_PORTS
from rljob.reconcile import DesiredChild
from rljob.reconcile.launchers import RAY_ENV_NAMES, RAY_READY_CHECK, RAY_SCRIPT_NAME
from tests.unit.reconcile.test_render import env_of, job_of, main_container, render
from tests.unit.reconcile.test_spec_hash import hashes
from tests.unit.reconcile.world import example_body, with_role

JOB = "grpo-demo"
DRIVER = ["python", "-m", "rljob.sdk.entrypoint", "--", "python", "driver.py"]


def trainer(launcher: str | None, **fields: Any) -> DesiredChild:
    extra = {"launcher": launcher} if launcher is not None else {}
    job = job_of(with_role(example_body(), "trainer", **extra, **fields))
    return render(job, attempt=2)[("Job", f"{JOB}-trainer-a2")]


def ray_trainer(**fields: Any) -> DesiredChild:
    return trainer("ray", command=DRIVER, **fields)


def test_explicit_torchrun_renders_and_hashes_like_no_launcher() -> None:
    assert trainer("torchrun").body == trainer(None).body
    explicit = with_role(example_body(), "trainer", launcher="torchrun")
    assert hashes(explicit) == hashes(example_body())


@pytest.mark.parametrize(
    ("launcher", "present", "absent"),
    [
        pytest.param(
            "torchrun",
            {"PET_NNODES", "PET_MASTER_ADDR", "NNODES", "NODE_RANK", "RLJOB_ATTEMPT"},
            {"RLJOB_RAY_GCS_PORT"},
            id="torchrun",
        ),
        pytest.param(
            "command",
            {"NNODES", "NODE_RANK", "RLJOB_ATTEMPT"},
            {"PET_NNODES", "PET_MASTER_ADDR", "RLJOB_RAY_GCS_PORT"},
            id="command",
        ),
        pytest.param(
            "ray",
            {"NNODES", "NODE_RANK", "RLJOB_ATTEMPT", *RAY_ENV_NAMES},
            {"PET_NNODES", "PET_MASTER_ADDR"},
            id="ray",
        ),
    ],
)
def test_environment_per_launcher(launcher: str, present: set[str], absent: set[str]) -> None:
    env = env_of(trainer(launcher, command=DRIVER))
    assert present <= env.keys()
    assert not absent & env.keys()


@pytest.mark.parametrize("launcher", ["torchrun", "command"], ids=str)
def test_non_ray_launchers_keep_the_command_and_the_job_shape(launcher: str) -> None:
    child = trainer(launcher, command=DRIVER, args=["--lr", "1e-5"])
    container = main_container(child)
    assert (container["command"], container["args"]) == (DRIVER, ["--lr", "1e-5"])
    assert "successPolicy" not in child.body["spec"]
    assert "readinessProbe" not in container


def test_ray_runs_the_start_script_with_the_driver_as_its_arguments() -> None:
    container = main_container(ray_trainer(args=["--lr", "1e-5"]))
    shell, flag, script, name = container["command"]
    assert (shell, flag, name) == ("sh", "-c", RAY_SCRIPT_NAME)
    assert container["args"] == [*DRIVER, "--lr", "1e-5"]
    assert 'exec "$@"' in script
    assert "--block" in script
    assert "--num-gpus=4" in script  # the demo's trainer gpus


def test_ray_renders_every_port_as_env_and_container_port() -> None:
    child = ray_trainer()
    env = env_of(child)
    declared = {port["name"]: port["containerPort"] for port in main_container(child)["ports"]}
    script = main_container(child)["command"][2]
    for variable, (port_name, port) in RAY_PORTS.items():
        assert env[variable] == str(port)
        assert declared[port_name] == port
        assert f'"${variable}"' in script
    assert int(env["RLJOB_RAY_MIN_WORKER_PORT"]) < int(env["RLJOB_RAY_MAX_WORKER_PORT"])
    assert len(set(declared.values())) == len(declared)


def test_ray_workers_join_the_first_index_by_its_stable_name() -> None:
    env = env_of(ray_trainer())
    assert env["RLJOB_RAY_HEAD_ADDRESS"] == f"{JOB}-trainer-a2-0.{JOB}-trainer.rl.svc"
    assert env["RLJOB_RAY_NODE_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_ray_readiness_asks_the_head_and_success_is_index_zeros() -> None:
    child = ray_trainer()
    probe = main_container(child)["readinessProbe"]
    assert probe["exec"]["command"] == ["python", "-c", RAY_READY_CHECK]
    compile(RAY_READY_CHECK, "ready-check", "exec")
    spec = child.body["spec"]
    assert spec["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    assert spec["completions"] == spec["parallelism"] == 2
    assert spec["podFailurePolicy"]["rules"][0]["action"] == "FailJob"


def test_ray_needs_a_command() -> None:
    with pytest.raises(InvalidRLJobError, match="launcher ray needs command"):
        job_of(with_role(example_body(), "trainer", launcher="ray"))


def test_launcher_changes_roll_only_the_trainer() -> None:
    before = hashes(example_body())
    after = hashes(with_role(example_body(), "trainer", launcher="command"))
    changed = {name for key, digest in after.items() if before[key] != digest for name in key[1:]}
    assert changed == {f"{JOB}-trainer-a1"}


def test_ray_variables_are_reserved() -> None:
    assert set(RAY_ENV_NAMES) <= set(RESERVED_ENV_NAMES)
