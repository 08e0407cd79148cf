"""Rendering: names, labels, selectors, injected environment, GPUs, /dev/shm, podTemplate
overrides and the trainer's Indexed Job."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.api import RLJob, parse_rljob
from rljob.checkpoint_protocol.layout import DefaultStore
from rljob.reconcile import DesiredChild, RenderContext, render_children, trainer_job_name
from tests.unit.reconcile.world import NAMESPACE, example_body, example_job, with_role

JOB = "grpo-demo"
MANAGED = {"app.kubernetes.io/managed-by": "rljob-operator"}


def render(job: RLJob | None = None, **ctx: Any) -> dict[tuple[str, str], DesiredChild]:
    job = job or example_job()
    ctx.setdefault("attempt", 1)
    context = RenderContext(name=job.metadata.name, namespace=NAMESPACE, uid="job-uid", **ctx)
    return {(child.kind, child.name): child for child in render_children(job, context)}


def pod_spec(child: DesiredChild) -> dict[str, Any]:
    return child.body["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def main_container(child: DesiredChild) -> dict[str, Any]:
    return pod_spec(child)["containers"][0]  # type: ignore[no-any-return]


def env_of(child: DesiredChild) -> dict[str, Any]:
    return {
        variable["name"]: variable.get("value", variable.get("valueFrom"))
        for variable in main_container(child)["env"]
    }


def job_of(body: dict[str, Any]) -> RLJob:
    return parse_rljob(body)


def test_children_of_the_demo_job() -> None:
    assert list(render()) == [
        ("Service", f"{JOB}-rollout"),
        ("Service", f"{JOB}-rollout-headless"),
        ("Deployment", f"{JOB}-rollout"),
        ("Service", f"{JOB}-trainer"),
        ("Job", f"{JOB}-trainer-a1"),
        ("Service", f"{JOB}-reference"),
        ("Deployment", f"{JOB}-reference"),
        ("Service", f"{JOB}-verifier"),
        ("Deployment", f"{JOB}-verifier"),
    ]


def test_optional_roles_are_left_out() -> None:
    children = render(example_job("rljob-minimal"))
    assert {child.role for child in children.values()} == {"rollout", "trainer"}


def colocated(**engines: Any) -> RLJob:
    """The demo's engines inside a Ray-launched trainer gang: no rollout role."""
    body = with_role(example_body(), "trainer", launcher="ray", command=["driver"], engines=engines)
    del body["spec"]["roles"]["rollout"]
    return job_of(body)


def test_a_job_without_rollout_has_no_rollout_children_nor_addresses() -> None:
    children = render(colocated())
    assert "rollout" not in {child.role for child in children.values()}
    trainer = env_of(children[("Job", f"{JOB}-trainer-a1")])
    assert not [name for name in trainer if name.startswith("RLJOB_ROLLOUT")]


@pytest.mark.parametrize(
    ("engines", "ports"),
    [
        pytest.param({}, {"ray-metrics": 8080}, id="through-ray-the-metrics-export-port"),
        pytest.param(
            {"exporter": "engine", "port": 8100},
            {"ray-metrics": 8080, "engine-metrics": 8100},
            id="own-port-declared",
        ),
        pytest.param({"port": 8080}, {"ray-metrics": 8080}, id="a-port-declared-once"),
    ],
)
def test_gang_engines_metrics_port_is_declared_on_the_trainer(
    engines: dict[str, Any], ports: dict[str, int]
) -> None:
    container = main_container(render(colocated(**engines))[("Job", f"{JOB}-trainer-a1")])
    declared = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert {name: declared.get(name) for name in ports} == ports
    assert len(declared) == len(set(declared.values()))


def test_every_child_is_labelled_annotated_and_owned() -> None:
    for child in render().values():
        metadata = child.body["metadata"]
        assert metadata["namespace"] == NAMESPACE
        assert (
            metadata["labels"].items()
            >= {
                **MANAGED,
                "rljob.io/job": JOB,
                "rljob.io/role": child.role,
            }.items()
        )
        assert metadata["annotations"] == {"rljob.io/spec-hash": child.spec_hash}
        assert metadata["ownerReferences"] == [
            {
                "apiVersion": "rljob.io/v1alpha1",
                "kind": "RLJob",
                "name": JOB,
                "uid": "job-uid",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert child.body["apiVersion"] == child.api_version
        assert child.body["kind"] == child.kind


def test_selectors_use_only_job_and_role() -> None:
    for child in render().values():
        selector = (
            child.body["spec"]["selector"]
            if child.kind == "Service"
            else child.body["spec"].get("selector", {}).get("matchLabels")
        )
        if child.kind == "Job":
            assert selector is None  # the Job controller's own selector
            continue
        assert selector == {"rljob.io/job": JOB, "rljob.io/role": child.role}


def test_attempt_label_and_env_only_on_the_trainer() -> None:
    for child in render(attempt=3).values():
        if child.kind == "Service":
            assert "rljob.io/attempt" not in child.body["metadata"]["labels"]
            continue
        template_labels = child.body["spec"]["template"]["metadata"]["labels"]
        on_trainer = child.kind == "Job"
        assert ("rljob.io/attempt" in child.body["metadata"]["labels"]) == on_trainer
        assert ("rljob.io/attempt" in template_labels) == on_trainer
        assert ("RLJOB_ATTEMPT" in env_of(child)) == on_trainer
        assert template_labels.items() >= {**MANAGED, "rljob.io/role": child.role}.items()
    trainer = render(attempt=3)[("Job", f"{JOB}-trainer-a3")]
    assert trainer.body["metadata"]["labels"]["rljob.io/attempt"] == "3"
    assert env_of(trainer)["RLJOB_ATTEMPT"] == "3"


def test_trainer_job_shape() -> None:
    trainer = render(attempt=2)[("Job", trainer_job_name(JOB, 2))]
    spec = trainer.body["spec"]
    assert trainer.name == "grpo-demo-trainer-a2"
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 2
    assert spec["backoffLimit"] == 0
    assert spec["podFailurePolicy"] == {
        "rules": [{"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}}]
    }
    assert pod_spec(trainer)["restartPolicy"] == "Never"
    assert pod_spec(trainer)["subdomain"] == f"{JOB}-trainer"
    assert "hostname" not in pod_spec(trainer)
    assert main_container(trainer)["terminationMessagePolicy"] == "FallbackToLogsOnError"


OPERATOR_STORE = DefaultStore("http://s3.platform.svc:9000", "eu-west-1")


@pytest.mark.parametrize(
    ("checkpoint", "default_store", "endpoint", "region"),
    [
        pytest.param({}, OPERATOR_STORE, "http://s3.platform.svc:9000", "eu-west-1",
                     id="no-endpoint-gets-the-operators-store"),
        pytest.param({"region": "us-east-2"}, OPERATOR_STORE, "http://s3.platform.svc:9000",
                     "us-east-2", id="own-region-kept-with-the-operators-endpoint"),
        pytest.param({"endpoint": "http://minio.team.svc:9000"}, OPERATOR_STORE,
                     "http://minio.team.svc:9000", None, id="own-endpoint-wins"),
        pytest.param({}, DefaultStore(), None, None, id="no-default-means-aws"),
    ],
)  # fmt: skip
def test_trainers_write_to_the_store_the_operator_reads(
    checkpoint: dict[str, str],
    default_store: DefaultStore,
    endpoint: str | None,
    region: str | None,
) -> None:
    body = example_body()
    body["spec"]["checkpoint"].update(checkpoint)
    trainer = render(job_of(body), default_store=default_store)[("Job", trainer_job_name(JOB, 1))]
    env = env_of(trainer)
    assert (env.get("RLJOB_S3_ENDPOINT"), env.get("RLJOB_S3_REGION")) == (endpoint, region)
    assert env["RLJOB_CHECKPOINT_URI"] == "s3://rljob-demo/checkpoints"


def test_trainer_headless_service() -> None:
    service = render()[("Service", f"{JOB}-trainer")].body["spec"]
    assert service["clusterIP"] == "None"
    assert service["publishNotReadyAddresses"] is True
    assert service["selector"] == {"rljob.io/job": JOB, "rljob.io/role": "trainer"}


def test_rollout_headless_service() -> None:
    children = render()
    headless = children[("Service", f"{JOB}-rollout-headless")].body["spec"]
    plain = children[("Service", f"{JOB}-rollout")].body["spec"]
    assert headless["clusterIP"] == "None"
    assert "clusterIP" not in plain
    assert headless["selector"] == plain["selector"]


COMPLETION_INDEX = {
    "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
}


def test_trainer_environment() -> None:
    env = env_of(render(attempt=4, trainer_master_port=23456)[("Job", f"{JOB}-trainer-a4")])
    assert env["PET_NNODES"] == env["NNODES"] == "2"
    assert env["PET_NODE_RANK"] == env["NODE_RANK"] == COMPLETION_INDEX
    assert env["PET_NPROC_PER_NODE"] == "4"
    assert env["PET_MASTER_ADDR"] == f"{JOB}-trainer-a4-0.{JOB}-trainer.{NAMESPACE}.svc"
    assert env["PET_MASTER_PORT"] == "23456"
    assert env["NCCL_DEBUG"] == "WARN"  # the user's own
    assert "RANK" not in env
    assert "WORLD_SIZE" not in env


@pytest.mark.parametrize(
    ("gpus", "nproc"),
    [
        pytest.param(0, "1", id="cpu-only"),
        pytest.param(1, "1", id="one-gpu"),
        pytest.param(8, "8", id="eight-gpus"),
    ],
)
def test_nproc_per_node_is_gpus_but_at_least_one(gpus: int, nproc: str) -> None:
    job = job_of(with_role(example_body(), "trainer", gpus=gpus))
    assert env_of(render(job)[("Job", f"{JOB}-trainer-a1")])["PET_NPROC_PER_NODE"] == nproc


@pytest.mark.parametrize(
    ("kind", "name", "role", "others"),
    [
        pytest.param(
            "Deployment", "rollout", "rollout", ["TRAINER", "REFERENCE", "VERIFIER"], id="rollout"
        ),
        pytest.param(
            "Job",
            "trainer-a1",
            "trainer",
            ["ROLLOUT", "ROLLOUT_HEADLESS", "REFERENCE", "VERIFIER"],
            id="trainer",
        ),
        pytest.param(
            "Deployment",
            "reference",
            "reference",
            ["ROLLOUT", "ROLLOUT_HEADLESS", "TRAINER"],
            id="reference",
        ),
        pytest.param(
            "Deployment",
            "verifier",
            "verifier",
            ["ROLLOUT", "ROLLOUT_HEADLESS", "TRAINER"],
            id="verifier",
        ),
    ],
)
def test_every_pod_knows_its_job_and_the_other_roles(
    kind: str, name: str, role: str, others: list[str]
) -> None:
    env = env_of(render()[(kind, f"{JOB}-{name}")])
    assert env["RLJOB_NAME"] == JOB
    assert env["RLJOB_NAMESPACE"] == NAMESPACE
    assert env["RLJOB_ROLE"] == role
    services = {key for key in env if key.endswith("_SERVICE")}
    assert services >= {f"RLJOB_{other}_SERVICE" for other in others}
    assert f"RLJOB_{role.upper()}_SERVICE" not in services
    suffix = {"ROLLOUT_HEADLESS": "rollout-headless"}
    for other in others:
        expected = f"{JOB}-{suffix.get(other, other.lower())}.{NAMESPACE}.svc"
        assert env[f"RLJOB_{other}_SERVICE"] == expected


def test_service_addresses_of_absent_roles_are_not_injected() -> None:
    env = env_of(render(example_job("rljob-minimal"))[("Deployment", "grpo-minimal-rollout")])
    assert "RLJOB_VERIFIER_SERVICE" not in env
    assert "RLJOB_REFERENCE_SERVICE" not in env


def test_resume_env_goes_to_the_trainer_and_policy_env_to_the_engines() -> None:
    resume = {"RLJOB_RESUME_URI": "s3://b/p/v1", "RLJOB_RESUME_STEP": "100"}
    policy = {"RLJOB_POLICY_URI": "s3://b/p/v1", "RLJOB_POLICY_GENERATION": "7"}
    children = render(resume_env=resume, policy_env=policy)
    trainer = env_of(children[("Job", f"{JOB}-trainer-a1")])
    rollout = env_of(children[("Deployment", f"{JOB}-rollout")])
    verifier = env_of(children[("Deployment", f"{JOB}-verifier")])
    assert trainer.items() >= resume.items()
    assert "RLJOB_POLICY_GENERATION" not in trainer
    assert rollout.items() >= policy.items()
    assert "RLJOB_RESUME_URI" not in rollout
    assert "RLJOB_POLICY_URI" not in verifier


def test_user_env_may_refer_to_operator_variables_declared_before_it() -> None:
    # Setting an operator variable is refused at admission (tests/unit/api); using one is not.
    body = with_role(example_body(), "trainer", env=[{"name": "MINE", "value": "$(RLJOB_NAME)"}])
    env = main_container(render(job_of(body))[("Job", f"{JOB}-trainer-a1")])["env"]
    names = [variable["name"] for variable in env]
    assert {"name": "PET_NNODES", "value": "2"} in env
    assert names.index("MINE") > names.index("RLJOB_NAME")


def test_gpus_are_limited_and_requested_with_the_resource_name() -> None:
    body = with_role(
        example_body(),
        "rollout",
        gpus=2,
        gpuResourceName="amd.com/gpu",
        resources={"limits": {"cpu": "8", "memory": "64Gi"}, "requests": {"cpu": "4"}},
    )
    resources = main_container(render(job_of(body))[("Deployment", f"{JOB}-rollout")])["resources"]
    assert resources == {
        "limits": {"cpu": "8", "memory": "64Gi", "amd.com/gpu": 2},
        "requests": {"cpu": "4", "amd.com/gpu": 2},
    }


def test_cpu_only_role_has_no_gpu_resources() -> None:
    verifier = main_container(render()[("Deployment", f"{JOB}-verifier")])
    assert verifier["resources"] == {
        "limits": {"cpu": "4", "memory": "8Gi"},
        "requests": {"cpu": "2", "memory": "4Gi"},
    }


SHM = {"name": "dshm", "emptyDir": {"medium": "Memory"}}
SHM_MOUNT = {"name": "dshm", "mountPath": "/dev/shm"}


@pytest.mark.parametrize(
    ("fields", "expect_shm"),
    [
        pytest.param({"gpus": 1}, True, id="gpu-pod-gets-shm"),
        pytest.param({"gpus": 0}, False, id="cpu-pod-gets-none"),
        pytest.param(
            {
                "gpus": 1,
                "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}],
                "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
            },
            False,
            id="user-mount-at-dev-shm",
        ),
        pytest.param(
            {"gpus": 1, "volumes": [{"name": "dshm", "hostPath": {"path": "/dev/shm"}}]},
            False,
            id="user-volume-named-dshm",
        ),
        pytest.param(
            {
                "gpus": 1,
                "podTemplate": {
                    "spec": {
                        "containers": [
                            {
                                "name": "rollout",
                                "volumeMounts": [{"name": "x", "mountPath": "/dev/shm"}],
                            }
                        ]
                    }
                },
            },
            False,
            id="pod-template-mount-at-dev-shm",
        ),
    ],
)
def test_dev_shm_on_gpu_pods_unless_the_user_has_one(
    fields: dict[str, Any], expect_shm: bool
) -> None:
    rollout = render(job_of(with_role(example_body(), "rollout", **fields)))[
        ("Deployment", f"{JOB}-rollout")
    ]
    assert (SHM in pod_spec(rollout).get("volumes", [])) == expect_shm
    assert (SHM_MOUNT in main_container(rollout).get("volumeMounts", [])) == expect_shm


def test_every_role_field_is_passed_through() -> None:
    fields = {
        "image": "registry.example.com/vllm:0.11",
        "command": ["python", "-m", "vllm.entrypoints.openai.api_server"],
        "args": ["--model", "m"],
        "env": [
            {"name": "A", "value": "1"},
            {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ],
        "nodeSelector": {"pool": "gpu"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "rl-high",
        "schedulerName": "volcano",
        "serviceAccountName": "rollout-sa",
        "imagePullSecrets": [{"name": "pull"}],
        "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models"}}],
        "volumeMounts": [{"name": "models", "mountPath": "/models", "readOnly": True}],
        "terminationGracePeriodSeconds": 45,
        "metrics": {"port": 9000},
    }
    rollout = render(job_of(with_role(example_body(), "rollout", **fields)))[
        ("Deployment", f"{JOB}-rollout")
    ]
    spec, container = pod_spec(rollout), main_container(rollout)
    assert container["image"] == fields["image"]
    assert container["command"] == fields["command"]
    assert container["args"] == fields["args"]
    assert container["env"][-2:] == fields["env"]
    assert spec["nodeSelector"] == fields["nodeSelector"]
    assert spec["tolerations"] == fields["tolerations"]
    assert spec["priorityClassName"] == "rl-high"
    assert spec["schedulerName"] == "volcano"
    assert spec["serviceAccountName"] == "rollout-sa"
    assert spec["imagePullSecrets"] == [{"name": "pull"}]
    assert spec["volumes"][0] == fields["volumes"][0]  # type: ignore[index]
    assert container["volumeMounts"][0] == fields["volumeMounts"][0]  # type: ignore[index]
    assert spec["terminationGracePeriodSeconds"] == 45
    assert {"name": "metrics", "containerPort": 9000, "protocol": "TCP"} in container["ports"]


def test_image_falls_back_to_spec_image() -> None:
    children = render(job_of(with_role(example_body(), "verifier", image="verifier:2")))
    assert main_container(children[("Deployment", f"{JOB}-verifier")])["image"] == "verifier:2"
    default = "registry.example.com/rl/grpo:1.4"
    assert main_container(children[("Deployment", f"{JOB}-rollout")])["image"] == default
    assert main_container(children[("Job", f"{JOB}-trainer-a1")])["image"] == default


def test_deployment_strategy_and_replicas() -> None:
    spec = render()[("Deployment", f"{JOB}-rollout")].body["spec"]
    assert spec["replicas"] == 4
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }
    assert spec["progressDeadlineSeconds"] == 3600


@pytest.mark.parametrize(
    ("engine", "metrics", "startup_port", "timeout"),
    [
        pytest.param("vllm", None, 8000, 5, id="vllm-default-port"),
        # SGLang serves on 30000 by default; its /health may take 20 s (one-token generation).
        pytest.param("sglang", None, 30000, 25, id="sglang-default-port"),
        pytest.param("sglang", {"port": 31000}, 31000, 25, id="sglang-metrics-port"),
        pytest.param("custom", {"port": 9100}, None, 5, id="custom-no-startup-probe"),
    ],
)
def test_engine_probes(
    engine: str, metrics: dict[str, int] | None, startup_port: int | None, timeout: int
) -> None:
    fields: dict[str, Any] = {"engine": engine, "metrics": metrics}
    if engine == "custom":
        fields["metricNames"] = {
            "generationTokensTotal": "gen_total",
            "requestsRunning": "running",
            "requestsWaiting": "waiting",
        }
    body = with_role(example_body(), "rollout", **fields)
    container = main_container(render(job_of(body))[("Deployment", f"{JOB}-rollout")])
    assert "livenessProbe" not in container
    if startup_port is None:
        assert "startupProbe" not in container
        assert container["readinessProbe"]["tcpSocket"] == {"port": 9100}
        return
    health = {"path": "/health", "port": startup_port}
    assert container["startupProbe"]["httpGet"] == health
    assert container["ports"][0]["containerPort"] == startup_port
    for probe in ("startupProbe", "readinessProbe"):
        assert container[probe]["timeoutSeconds"] == timeout
        assert container[probe]["periodSeconds"] >= timeout
    assert (
        container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"]
        >= 3600
    )
    assert container["readinessProbe"]["httpGet"] == health


def test_no_liveness_probe_anywhere() -> None:
    for child in render().values():
        if child.kind != "Service":
            assert "livenessProbe" not in main_container(child)


def test_suspended_job_renders_zero_replicas_and_no_trainer_job() -> None:
    children = render(example_job(suspend=True))
    assert ("Job", f"{JOB}-trainer-a1") not in children
    assert ("Service", f"{JOB}-trainer") in children
    for child in children.values():
        if child.kind == "Deployment":
            assert child.body["spec"]["replicas"] == 0


def test_finished_job_renders_zero_replicas_and_no_trainer_job() -> None:
    children = render(finished=True)
    assert not [child for child in children.values() if child.kind == "Job"]
    assert {c.body["spec"]["replicas"] for c in children.values() if c.kind == "Deployment"} == {0}


def test_avoided_nodes_are_a_preferred_term_never_a_required_one() -> None:
    pool = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}
    own = {"weight": 5, "preference": pool}
    body = with_role(
        example_body(),
        "trainer",
        podTemplate={
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [pool]
                        },
                        "preferredDuringSchedulingIgnoredDuringExecution": [own],
                    }
                }
            }
        },
    )
    trainer = render(job_of(body), avoid_nodes=("gpu-7", "gpu-3"))[("Job", f"{JOB}-trainer-a1")]
    node_affinity = pod_spec(trainer)["affinity"]["nodeAffinity"]
    # The user's required terms are theirs: a suspect node never becomes unschedulable.
    assert node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [pool]
    }
    # One value per field requirement: the API rejects NotIn with several values on a field.
    avoid = {
        "weight": 100,
        "preference": {
            "matchFields": [
                {"key": "metadata.name", "operator": "NotIn", "values": ["gpu-3"]},
                {"key": "metadata.name", "operator": "NotIn", "values": ["gpu-7"]},
            ]
        },
    }
    assert node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] == [own, avoid]
    rollout = render(job_of(body), avoid_nodes=("gpu-7",))[("Deployment", f"{JOB}-rollout")]
    assert "affinity" not in pod_spec(rollout)
    plain = render(job_of(example_body()), avoid_nodes=())[("Job", f"{JOB}-trainer-a1")]
    assert "affinity" not in pod_spec(plain)


def test_pod_template_overrides_merge_last() -> None:
    body = with_role(
        example_body(),
        "rollout",
        podTemplate={
            "metadata": {
                "annotations": {"sidecar.istio.io/inject": "false"},
                "labels": {"team": "rl"},
            },
            "spec": {
                "hostIPC": True,
                "containers": [
                    {
                        "name": "rollout",
                        "readinessProbe": None,
                        "securityContext": {"privileged": True},
                    },
                    {"name": "log-shipper", "image": "fluent-bit:3"},
                ],
                "enableServiceLinks": True,
            },
        },
    )
    rollout = render(job_of(body))[("Deployment", f"{JOB}-rollout")]
    template = rollout.body["spec"]["template"]
    spec = template["spec"]
    assert template["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    assert template["metadata"]["labels"]["team"] == "rl"
    assert template["metadata"]["labels"]["rljob.io/role"] == "rollout"  # selectors rely on it
    assert spec["hostIPC"] is True
    assert spec["enableServiceLinks"] is True
    assert [c["name"] for c in spec["containers"]] == ["rollout", "log-shipper"]
    main = spec["containers"][0]
    assert "readinessProbe" not in main
    assert main["securityContext"] == {"privileged": True}
    assert main["startupProbe"]["httpGet"]["path"] == "/health"
    assert main["image"] == "registry.example.com/rl/grpo:1.4"


def test_rendering_is_deterministic_and_shares_no_objects() -> None:
    first, second = render(), render()
    assert [c.body for c in first.values()] == [c.body for c in second.values()]
    trainer = first[("Job", f"{JOB}-trainer-a1")]
    env = main_container(trainer)["env"]
    ranks = [v["valueFrom"] for v in env if v["name"] in ("PET_NODE_RANK", "NODE_RANK")]
    assert ranks[0] == ranks[1]
    assert ranks[0] is not ranks[1]


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        pytest.param(
            None,
            {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            id="safe-defaults",
        ),
        pytest.param({}, {}, id="empty-opts-out"),
        pytest.param({"runAsUser": 0}, {"runAsUser": 0}, id="users-own-replaces-them"),
    ],
)
def test_the_main_container_gets_safe_security_defaults_a_user_can_override(
    override: dict[str, Any] | None, expected: dict[str, Any]
) -> None:
    body = example_body()
    if override is not None:
        container = {"name": "trainer", "securityContext": override}
        body = with_role(body, "trainer", podTemplate={"spec": {"containers": [container]}})
    trainer = render(job_of(body))[("Job", trainer_job_name(JOB, 1))]
    (main,) = trainer.body["spec"]["template"]["spec"]["containers"]
    assert main["securityContext"] == expected


@pytest.mark.parametrize(
    ("kind", "child", "metrics", "port"),
    [
        pytest.param("Job", f"{JOB}-trainer-a1", None, 9400, id="trainer-sdk-default"),
        pytest.param("Deployment", f"{JOB}-verifier", None, 9100, id="verifier-sdk-default"),
        pytest.param("Job", f"{JOB}-trainer-a1", {"port": 9500}, 9500, id="trainer-declared"),
    ],
)
def test_the_sdk_roles_declare_their_metrics_port_for_direct_scraping(
    kind: str, child: str, metrics: dict[str, Any] | None, port: int
) -> None:
    """Where rljob.sdk serves /metrics (the progress exporter 9400, the verifier helper 9100)
    unless the role says otherwise: the chart's default direct scraping reads that port."""
    body = example_body()
    role = "trainer" if kind == "Job" else "verifier"
    if metrics is not None:
        body["spec"]["roles"][role]["metrics"] = metrics
    container = main_container(render(parse_rljob(body))[(kind, child)])
    declared = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert declared["metrics"] == port


USER_GATE = {"conditionType": "example.com/warm-cache"}
POLICY_GATE = {"conditionType": "rljob.io/policy-current"}


@pytest.mark.parametrize(
    ("weight_sync", "user_gates", "expected"),
    [
        pytest.param(None, None, None, id="default-ungated-has-none"),
        pytest.param("Ungated", None, None, id="ungated-has-none"),
        pytest.param("Gated", None, [POLICY_GATE], id="gated-adds-policy-current"),
        pytest.param("Ungated", [USER_GATE], [USER_GATE], id="ungated-keeps-the-users-own"),
        pytest.param("Gated", [USER_GATE], [USER_GATE, POLICY_GATE], id="gated-adds-after-users"),
        pytest.param("Gated", [], [POLICY_GATE], id="gated-over-an-empty-list"),
    ],
)
def test_gated_rollout_pods_wait_for_the_policy_current_gate(
    weight_sync: str | None, user_gates: list[dict[str, str]] | None, expected: Any
) -> None:
    fields: dict[str, Any] = {}
    if weight_sync is not None:
        fields["weightSync"] = weight_sync
    if user_gates is not None:
        fields["podTemplate"] = {"spec": {"readinessGates": user_gates}}
    rollout = render(job_of(with_role(example_body(), "rollout", **fields)))
    assert pod_spec(rollout[("Deployment", f"{JOB}-rollout")]).get("readinessGates") == expected


def test_only_the_rollout_role_is_gated() -> None:
    children = render(job_of(with_role(example_body(), "rollout", weightSync="Gated")))
    gated = {
        child.name
        for child in children.values()
        if child.kind in ("Deployment", "Job") and "readinessGates" in pod_spec(child)
    }
    assert gated == {f"{JOB}-rollout"}


def test_slot_services_select_the_slot_holder() -> None:
    """slotServices: one ClusterIP Service per slot selecting the role's pods holding that slot,
    and every other role told the slots' addresses in the order slime takes them."""
    body = with_role(
        example_body(),
        "rollout",
        engine="sglang",
        weightSync="Gated",
        generationFrom="engine",
        slotServices=True,
        replicas=2,
    )
    children = render(job_of(body))
    plain = children[("Service", f"{JOB}-rollout")].body["spec"]
    slots = [children[("Service", f"{JOB}-rollout-{k}")].body["spec"] for k in range(2)]
    assert ("Service", f"{JOB}-rollout-2") not in children
    for k, spec in enumerate(slots):
        assert spec["selector"] == {**plain["selector"], f"rljob.io/slot-{k}": "held"}
        assert "clusterIP" not in spec and spec["ports"] == plain["ports"]
    port = plain["ports"][0]["port"]
    addresses = " ".join(f"{JOB}-rollout-{k}.{NAMESPACE}.svc:{port}" for k in range(2))
    assert (
        env_of(children[("Job", f"{JOB}-trainer-a1")])["RLJOB_ROLLOUT_SLOT_ADDRESSES"] == addresses
    )


def test_no_slot_services_by_default() -> None:
    children = render()
    assert not [
        name for kind, name in children if name.startswith(f"{JOB}-rollout-") and name[-1].isdigit()
    ]
    assert "RLJOB_ROLLOUT_SLOT_ADDRESSES" not in env_of(children[("Job", f"{JOB}-trainer-a1")])
