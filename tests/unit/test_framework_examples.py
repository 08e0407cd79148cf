"""The framework examples (examples/frameworks/*.yaml) render what docs/frameworks.md says: no
rollout role, the trainer's headless Service and one Indexed Job of `nodes` pods started by the
ray launcher, whose driver is the SDK entrypoint in the framework's checkpoint layout over a
directory on a shared volume, the directory the framework saves to and resumes from, with the
engines' metrics port declared and the store and resume version in the environment."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rljob.api import EngineExporter, Launcher, RLJob, parse_rljob
from rljob.checkpoint_protocol.layout import CheckpointLocation, VersionId, resume_env
from rljob.reconcile import DesiredChild
from rljob.reconcile.launchers import RAY_SCRIPT_NAME, ray_start_script
from rljob.sdk.entrypoint import SHARED_FLAG, _flags
from rljob.sdk.framework_keys import KEY_MAPS
from rljob.sdk.layouts import LAYOUTS
from tests.unit.reconcile.test_render import env_of, main_container, pod_spec, render
from tests.unit.reconcile.world import NAMESPACE, REPO, example_body

DOC = REPO / "docs" / "frameworks.md"
ENTRYPOINT = ["python", "-m", "rljob.sdk.entrypoint"]


@dataclass(frozen=True)
class Framework:
    """What the doc says of one example: its layout and directory, the framework's command after
    the entrypoint's `--`, the framework's arguments saying where it saves and that it resumes
    ({dir} is the entrypoint's directory), its node and GPU arguments ({nodes}, {gpus} from the
    trainer role), and where the gang's engines' metrics are read."""

    example: str
    layout: str
    checkpoint_dir: str
    launch: tuple[str, ...]
    saves_and_resumes: tuple[str, ...]
    topology: tuple[str, ...]
    engines: tuple[str, EngineExporter, int]
    # The bridge's directory, and the framework's arguments and env that make it write its
    # TensorBoard files there ({tb}: the directory).
    tensorboard_dir: str = ""
    tensorboard_args: tuple[str, ...] = ()
    tensorboard_env: tuple[tuple[str, str], ...] = ()

    def job(self) -> RLJob:
        return parse_rljob(example_body(f"frameworks/{self.example}"))


FRAMEWORKS = [
    pytest.param(
        Framework(
            example="verl",
            layout="verl",
            checkpoint_dir="/shared/checkpoints/verl-grpo",
            launch=("python3", "-m", "verl.trainer.main_ppo"),
            saves_and_resumes=("trainer.default_local_dir={dir}", "trainer.resume_mode=auto"),
            topology=("trainer.nnodes={nodes}", "trainer.n_gpus_per_node={gpus}"),
            engines=("vllm", EngineExporter.PLUGIN, 9410),
            tensorboard_dir="/shared/tensorboard/verl-grpo",
            tensorboard_args=('trainer.logger=["console","tensorboard"]',),
            tensorboard_env=(("TENSORBOARD_DIR", "{tb}"),),
        ),
        id="verl",
    ),
    pytest.param(
        Framework(
            example="openrlhf",
            layout="openrlhf",
            # DeepSpeed's own directory: OpenRLHF saves the actor into <--ckpt.path>/_actor.
            checkpoint_dir="/shared/checkpoints/openrlhf-grpo/_actor",
            launch=("python3", "-m", "openrlhf.cli.train_ppo_ray"),
            saves_and_resumes=(
                "--ckpt.path=/shared/checkpoints/openrlhf-grpo",
                "--ckpt.load_enable",
            ),
            topology=("--actor.num_nodes={nodes}", "--actor.num_gpus_per_node={gpus}"),
            engines=("vllm", EngineExporter.PLUGIN, 9410),
            tensorboard_dir="/shared/tensorboard/openrlhf-grpo",
            tensorboard_args=("--logger.tensorboard_dir={tb}",),
        ),
        id="openrlhf",
    ),
    pytest.param(
        Framework(
            example="nemo-rl",
            layout="nemo-rl",
            checkpoint_dir="/shared/checkpoints/nemo-rl-grpo",
            launch=("uv", "run", "examples/run_grpo.py"),
            # NeMo-RL resumes from the highest step_N of its checkpoint_dir whenever it saves.
            saves_and_resumes=("checkpointing.checkpoint_dir={dir}", "checkpointing.enabled=true"),
            topology=("cluster.num_nodes={nodes}", "cluster.gpus_per_node={gpus}"),
            engines=("vllm", EngineExporter.PLUGIN, 9410),
            # TensorboardLogger writes under logger.log_dir (exp_NNN/tensorboard).
            tensorboard_dir="/shared/logs/nemo-rl-grpo",
            tensorboard_args=("logger.log_dir={tb}", "logger.tensorboard_enabled=true"),
        ),
        id="nemo-rl",
    ),
    pytest.param(
        Framework(
            example="slime",
            layout="megatron",
            checkpoint_dir="/shared/checkpoints/slime-grpo",
            launch=("python3", "/root/slime/train.py"),
            saves_and_resumes=("--save={dir}", "--load={dir}"),
            topology=("--actor-num-nodes={nodes}", "--actor-num-gpus-per-node={gpus}"),
            # slime's first SGLang engine of a node takes the first free port from 15000.
            engines=("sglang", EngineExporter.ENGINE, 15000),
            tensorboard_dir="/shared/tensorboard/slime-grpo",
            tensorboard_args=("--use-tensorboard",),
            tensorboard_env=(("TENSORBOARD_DIR", "{tb}"),),
        ),
        id="slime",
    ),
]


def trainer_job(job: RLJob, **ctx: Any) -> DesiredChild:
    children = render(job, **ctx)
    attempt = ctx.get("attempt", 1)
    return children[("Job", f"{job.metadata.name}-trainer-a{attempt}")]


def driver(job: RLJob) -> tuple[dict[str, str], list[str]]:
    """The entrypoint's flags and the framework's command, as the SDK parses them."""
    args = main_container(trainer_job(job))["args"]
    head = len(ENTRYPOINT)
    assert args[:head] == ENTRYPOINT
    parsed = _flags(args[head:])
    assert parsed is not None, f"the entrypoint refuses {args[head:]}"
    return parsed


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_engines_run_in_the_ray_gang_without_a_rollout_role(framework: Framework) -> None:
    trainer = framework.job().spec.roles.trainer
    assert framework.job().spec.roles.rollout is None
    assert trainer.launcher == Launcher.RAY
    assert trainer.engines is not None
    engine, exporter, port = framework.engines
    assert (trainer.engines.engine.value, trainer.engines.exporter) == (engine, exporter)
    assert trainer.engines.metrics_port == port


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_children_are_the_trainer_service_and_one_job(framework: Framework) -> None:
    job = framework.job()
    name = job.metadata.name
    assert list(render(job)) == [("Service", f"{name}-trainer"), ("Job", f"{name}-trainer-a1")]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_job_starts_ray_and_runs_the_entrypoint_as_driver(framework: Framework) -> None:
    job = framework.job()
    trainer = job.spec.roles.trainer
    child = trainer_job(job)
    spec = child.body["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == trainer.nodes
    assert spec["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    command = main_container(child)["command"]
    assert command == ["sh", "-c", ray_start_script(trainer.gpus), RAY_SCRIPT_NAME]
    flags, launched = driver(job)
    assert flags == {
        "--checkpoint-layout": framework.layout,
        "--checkpoint-dir": framework.checkpoint_dir,
        SHARED_FLAG: "",
        "--tensorboard-dir": framework.tensorboard_dir,
        "--tensorboard-keys": framework.example,
    }
    assert framework.example in KEY_MAPS
    assert framework.layout in LAYOUTS
    assert tuple(launched[: len(framework.launch)]) == framework.launch


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_framework_saves_and_resumes_where_the_entrypoint_restores(
    framework: Framework,
) -> None:
    job = framework.job()
    trainer = job.spec.roles.trainer
    _, launched = driver(job)
    values = {"dir": framework.checkpoint_dir, "nodes": trainer.nodes, "gpus": trainer.gpus}
    expected = [arg.format(**values) for arg in (*framework.saves_and_resumes, *framework.topology)]
    assert set(expected) <= set(launched), sorted(set(expected) - set(launched))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_framework_writes_tensorboard_files_where_the_bridge_reads(
    framework: Framework,
) -> None:
    job = framework.job()
    child = trainer_job(job)
    _, launched = driver(job)
    tb = framework.tensorboard_dir
    assert {arg.format(tb=tb) for arg in framework.tensorboard_args} <= set(launched)
    assert (
        env_of(child).items() >= {k: v.format(tb=tb) for k, v in framework.tensorboard_env}.items()
    )
    mounts = [m["mountPath"] for m in main_container(child)["volumeMounts"]]
    assert any(Path(tb).is_relative_to(mount) for mount in mounts)  # writers on any node


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_plugin_engines_get_their_page_ports(framework: Framework) -> None:
    job = framework.job()
    engines = job.spec.roles.trainer.engines
    assert engines is not None
    env = env_of(trainer_job(job))
    if engines.exporter == EngineExporter.PLUGIN:
        assert env["RLJOB_ENGINE_METRICS_PORT"] == str(engines.metrics_port)
        assert env["RLJOB_ENGINE_METRICS_PAGES"] == str(engines.pages)
    else:
        assert "RLJOB_ENGINE_METRICS_PORT" not in env


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_checkpoint_directory_is_on_a_shared_volume(framework: Framework) -> None:
    child = trainer_job(framework.job())
    volumes = {volume["name"]: volume for volume in pod_spec(child)["volumes"]}
    (mount,) = [
        mount
        for mount in main_container(child)["volumeMounts"]
        if Path(framework.checkpoint_dir).is_relative_to(mount["mountPath"])
    ]
    assert "persistentVolumeClaim" in volumes[mount["name"]]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_driver_gets_the_store_and_the_version_to_restore(framework: Framework) -> None:
    job = framework.job()
    assert job.spec.checkpoint is not None
    location = CheckpointLocation.from_uri(job.spec.checkpoint.uri, NAMESPACE, job.metadata.name)
    resume = resume_env(location, VersionId(step=20, attempt=1))
    env = env_of(trainer_job(job, attempt=2, resume_env=resume))
    assert env.items() >= {**resume, "RLJOB_CHECKPOINT_URI": job.spec.checkpoint.uri}.items()
    # The gang's size, recorded in each version: a resume on another node count is refused.
    assert env["NNODES"] == str(job.spec.roles.trainer.nodes)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_engines_metrics_port_is_declared(framework: Framework) -> None:
    ports = main_container(trainer_job(framework.job()))["ports"]
    assert framework.engines[2] in {port["containerPort"] for port in ports}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_doc_links_the_example_and_names_its_layout_and_command(framework: Framework) -> None:
    text = DOC.read_text()
    assert f"(../examples/frameworks/{framework.example}.yaml)" in text
    assert f"--checkpoint-layout={framework.layout}" in text
    assert " ".join(framework.launch) in text
