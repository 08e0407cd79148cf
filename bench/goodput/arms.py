"""The three ways the goodput benchmark runs its simulated job, and the calibration run (pure:
manifests only).

- operator-defaults: an RLJob, its failure policy the built-in rules (times scaled with the
  world, world.World.failure_policy_timing).
- restart-everything: the same RLJob with user rules, tried before the built-ins, that restart
  the whole job whatever failed and why (RESTART_EVERYTHING_RULES: action RestartJob, the trainer
  gang from its newest checkpoint and every serving role rolled, as one journaled action), with
  a budget as large as the API allows (maxRestarts and noProgressRestarts MAX_RESTARTS_LIMIT),
  so that, as the JobSet, it restarts every time rather than failing the job.
- jobset: the same pods as a JobSet (sigs.k8s.io/jobset v0.12.0): the trainer one replicated Job
  of 4 indexed pods, each engine and each verifier a replicated Job of one pod; restartPolicy
  Never and backoffLimit 0 everywhere, so any failed pod fails its Job, and
  failurePolicy.maxRestarts (JobSet's documented policy: a failed Job recreates every Job of the
  JobSet) restarts everything. No operator: the trainer resumes on its own from the newest
  checkpoint in its store location (the simulator's `resume_from_store`).
- calibration: operator-defaults with no failure, for the healthy step time.

Each arm's pods run on a node pool of its own (GPU nodes of 8 GPUs, one pod a node, and a CPU
node for the verifiers), tainted for that arm only, so that a lost node hits one arm's pod.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bench.goodput.trace import Role
from bench.goodput.world import World
from rljob.api.failure_policy import MAX_RESTARTS_LIMIT
from rljob.dev.nodes import GPU_RESOURCE, NodeProfile, node_manifests
from rljob.dev.sim.pods import JOB_LABEL, MANAGED_BY, MANAGED_BY_LABEL, ROLE_LABEL
from rljob.vocabulary.enums import FailureAction, FailureReason, RoleName

JOB_NAME = "rl"
IMAGE = "registry.example.com/rl/sim:dev"  # kwok runs no image
POOL_LABEL = "rljob.io/goodput-pool"
KIND_LABEL = "rljob.io/goodput-kind"
GPUS_PER_NODE = 8
SPARE_GPU_NODES = 3  # for a rank or engine replaced while a lost node is gone
JOBSET_MAX_RESTARTS = 1000
# The ports the operator declares (rljob.api.declared_ports): vLLM's server port, the SDK's
# trainer and verifier metrics ports. The JobSet's pods declare the same.
ENGINE_PORT, TRAINER_METRICS_PORT, VERIFIER_METRICS_PORT = 8000, 9400, 9100
CHECKPOINT_ENV = ("RLJOB_CHECKPOINT_URI", "RLJOB_NAMESPACE", "RLJOB_NAME")


class Arm(StrEnum):
    CALIBRATION = "calibration"
    OPERATOR_DEFAULTS = "operator-defaults"
    RESTART_EVERYTHING = "restart-everything"
    JOBSET = "jobset"

    @property
    def namespace(self) -> str:
        return f"goodput-{self.value}"

    @property
    def is_jobset(self) -> bool:
        return self is Arm.JOBSET


FAILURE_ARMS = (Arm.OPERATOR_DEFAULTS, Arm.RESTART_EVERYTHING, Arm.JOBSET)
OPERATOR_ARMS = (Arm.CALIBRATION, Arm.OPERATOR_DEFAULTS, Arm.RESTART_EVERYTHING)

# Reasons no restart counts towards maxRestarts for, as the built-in "infrastructure" rule says.
_INFRASTRUCTURE = [FailureReason.PREEMPTED, FailureReason.EVICTED, FailureReason.NODE_LOST]
# Every reason a failure is classified by (RestartRequested is a ledger word, never a failure).
_EVERY_OTHER = [
    r for r in FailureReason if r not in {*_INFRASTRUCTURE, FailureReason.RESTART_REQUESTED}
]
_ROLES = [RoleName.TRAINER, RoleName.ROLLOUT, RoleName.REFERENCE, RoleName.VERIFIER]


def _rule(
    roles: list[RoleName], reasons: list[FailureReason], action: FailureAction, counts: bool
) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "roles": [r.value for r in roles],
        "onReasons": [r.value for r in reasons],
        "action": action.value,
    }
    if not counts:
        rule["countsTowardsMax"] = False
    return rule


RESTART_EVERYTHING_RULES: list[dict[str, Any]] = [
    _rule(_ROLES, _INFRASTRUCTURE, FailureAction.RESTART_JOB, False),
    _rule(_ROLES, _EVERY_OTHER, FailureAction.RESTART_JOB, True),
]


@dataclass(frozen=True)
class Pool:
    """An arm's nodes: `gpu` nodes of 8 GPUs and one CPU node."""

    arm: Arm
    gpu: int

    def names(self) -> list[str]:
        return [f"gp-{self.arm.value}-{i}" for i in range(self.gpu)] + [f"gp-{self.arm.value}-cpu"]

    def manifests(self) -> list[dict[str, Any]]:
        """The bed's node manifests (rljob.dev.nodes), named, labelled and tainted for the arm."""
        labels = {POOL_LABEL: self.arm.value}
        gpu = NodeProfile(self.arm.value, self.gpu, GPUS_PER_NODE, "96", "1Ti", 110, labels)
        cpu = dataclasses.replace(gpu, count=1, gpus=0)
        nodes = []
        for kind, profile in (("gpu", gpu), ("cpu", cpu)):
            for node in node_manifests(profile):
                index = node["metadata"]["name"].rsplit("-", 1)[1]
                name = f"gp-{self.arm.value}-{index if kind == 'gpu' else 'cpu'}"
                node["metadata"]["name"] = name
                node["metadata"]["labels"].update(
                    {"kubernetes.io/hostname": name, KIND_LABEL: kind}
                )
                taint = {"key": POOL_LABEL, "value": self.arm.value, "effect": "NoSchedule"}
                node["spec"] = {"taints": [taint]}
                nodes.append(node)
        return nodes


def pool_for(arm: Arm, world: World) -> Pool:
    pods = world.size.trainer_nodes + world.size.rollout_engines
    return Pool(arm, pods + SPARE_GPU_NODES)


def placement(arm: Arm, kind: str) -> dict[str, Any]:
    """nodeSelector and tolerations that put a pod on the arm's pool."""
    toleration = {"key": POOL_LABEL, "operator": "Equal", "value": arm.value}
    toleration["effect"] = "NoSchedule"
    return {"nodeSelector": {POOL_LABEL: arm.value, KIND_LABEL: kind}, "tolerations": [toleration]}


def _env(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def rljob(arm: Arm, world: World, prometheus_url: str, checkpoint_uri: str) -> dict[str, Any]:
    """The RLJob of an operator arm."""
    size = world.size
    gpu, cpu = placement(arm, "gpu"), placement(arm, "cpu")
    policy: dict[str, Any] = world.failure_policy_timing()
    if arm is Arm.RESTART_EVERYTHING:
        policy["rules"] = RESTART_EVERYTHING_RULES
        policy["maxRestarts"] = policy["noProgressRestarts"] = MAX_RESTARTS_LIMIT
    return {
        "apiVersion": "rljob.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": JOB_NAME, "namespace": arm.namespace},
        "spec": {
            "image": IMAGE,
            "roles": {
                "rollout": {
                    "engine": "vllm",
                    "replicas": size.rollout_engines,
                    "gpus": size.gpus_per_engine,
                    "env": _env(world.profile_env(Role.ROLLOUT)),
                    **gpu,
                },
                "trainer": {
                    "nodes": size.trainer_nodes,
                    "gpus": size.gpus_per_trainer_node,
                    "env": _env(world.profile_env(Role.TRAINER)),
                    **gpu,
                },
                "verifier": {
                    "replicas": size.verifiers,
                    "env": _env(world.profile_env(Role.VERIFIER)),
                    **cpu,
                },
            },
            "checkpoint": {"uri": checkpoint_uri, "addressingStyle": "path", "resume": "Latest"},
            "health": world.health_spec(prometheus_url),
            "failurePolicy": policy,
        },
    }


def _pod_template(
    arm: Arm,
    role: Role,
    env: dict[str, str],
    port: tuple[str, int],
    gpus: int,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": role.value,
        "image": IMAGE,
        "env": _env(env),
        "ports": [{"name": port[0], "containerPort": port[1], "protocol": "TCP"}],
    }
    if gpus:
        container["resources"] = {"limits": {GPU_RESOURCE: str(gpus)}}
    labels = {MANAGED_BY_LABEL: MANAGED_BY, JOB_LABEL: JOB_NAME, ROLE_LABEL: role.value}
    return {
        "metadata": {"labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "containers": [container],
            **placement(arm, "gpu" if gpus else "cpu"),
        },
    }


def _replicated(name: str, replicas: int, parallelism: int, pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "parallelism": parallelism,
                "completions": parallelism,
                "backoffLimit": 0,  # one failed pod fails its Job, and the JobSet restarts
                "template": pod,
            }
        },
    }


def jobset(world: World, checkpoint_uri: str) -> dict[str, Any]:
    """The same job as a JobSet: the simulator serves its pods as it serves an RLJob's (the
    labels it selects by, the ports the operator would declare, the same profiles), and its
    trainer writes checkpoints where RLJOB_CHECKPOINT_URI, RLJOB_NAMESPACE and RLJOB_NAME say."""
    arm, size = Arm.JOBSET, world.size
    trainer_env = {
        **world.profile_env(Role.TRAINER, resume_from_store=True),
        **dict(zip(CHECKPOINT_ENV, (checkpoint_uri, arm.namespace, JOB_NAME), strict=True)),
    }
    trainer = _pod_template(
        arm,
        Role.TRAINER,
        trainer_env,
        ("metrics", TRAINER_METRICS_PORT),
        size.gpus_per_trainer_node,
    )
    engine = _pod_template(
        arm,
        Role.ROLLOUT,
        world.profile_env(Role.ROLLOUT),
        ("http", ENGINE_PORT),
        size.gpus_per_engine,
    )
    verifier = _pod_template(
        arm, Role.VERIFIER, world.profile_env(Role.VERIFIER), ("metrics", VERIFIER_METRICS_PORT), 0
    )
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": JOB_NAME, "namespace": arm.namespace},
        "spec": {
            "failurePolicy": {"maxRestarts": JOBSET_MAX_RESTARTS},
            "replicatedJobs": [
                _replicated("trainer", 1, size.trainer_nodes, trainer),
                _replicated("rollout", size.rollout_engines, 1, engine),
                _replicated("verifier", size.verifiers, 1, verifier),
            ],
        },
    }


def restart_everything_yaml() -> str:
    """The restart-everything rules as they appear in the RLJob (GOODPUT.md)."""
    lines = []
    for rule in RESTART_EVERYTHING_RULES:
        reasons = rule["onReasons"]
        shown = ", ".join(reasons) if len(reasons) <= 3 else f"every other reason ({len(reasons)})"
        counts = "" if rule.get("countsTowardsMax", True) else ", countsTowardsMax: false"
        lines.append(
            f"- roles: [{', '.join(rule['roles'])}], onReasons: [{shown}], "
            f"action: {rule['action']}{counts}"
        )
    return "\n".join(lines)


__all__ = [
    "FAILURE_ARMS",
    "JOB_NAME",
    "OPERATOR_ARMS",
    "RESTART_EVERYTHING_RULES",
    "Arm",
    "Pool",
    "jobset",
    "placement",
    "pool_for",
    "restart_everything_yaml",
    "rljob",
]
