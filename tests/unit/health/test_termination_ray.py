"""Ray's own failures as a Ray driver (launcher ray, index 0) prints them, read through the
entrypoint wrapper's evidence: an actor that died, a node that died, Ray's memory monitor
killing a worker, and a Ray task error wrapping a CUDA or NCCL error (that error's reason wins).
Messages follow ray 2.60.0 (python/ray/exceptions.py, src/ray/gcs/gcs_actor_manager.cc,
src/ray/raylet/node_manager.cc, python/ray/scripts/scripts.py); tests/upstream/
test_ray_launcher.py checks the node death against a real Ray cluster."""

from __future__ import annotations

import pytest

from rljob.health import ContainerTermination, classify_termination
from rljob.reconcile.policy.rules import Failure, match_rule
from rljob.sdk.evidence import Evidence
from rljob.vocabulary.enums import FailureAction, FailureReason, RoleName

R = FailureReason
TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/app/driver.py", line 31, in <module>',
    "    ray.get([worker.step.remote() for worker in workers])",
]
ACTOR_CONTEXT = [
    "\tclass_name: Trainer",
    "\tactor_id: 5d1e3c0a7e4b0c0b7c1f4a6a01000000",
    "\tpid: 4242",
    "\tip: 10.0.0.12",
]
NODE_DIED = [
    *TRACEBACK,
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
    *ACTOR_CONTEXT,
    "The actor died because its node has died. Node Id: 8a1b2c3d4e5f",
    "\tthe actor's node was terminated unexpectedly: health check failed",
]
WORKER_DIED = [
    *TRACEBACK,
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
    *ACTOR_CONTEXT,
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR "
    "Worker exit detail: Worker unexpectedly exits with a connection error code 2.",
]
# What ray 2.60.0 raised first in the driver when the worker node was killed (real run).
ACTOR_UNAVAILABLE = [
    *TRACEBACK,
    "ray.exceptions.ActorUnavailableError: The actor ddc6a3ed115a4dbaf75de19401000000 is "
    "unavailable: The actor is temporarily unavailable: RpcError: RPC error: failed to "
    "connect to all addresses; last error: UNKNOWN: ipv4:192.0.2.2:57877: Failed to connect "
    "to remote host: Connection refused rpc_code: 14. The task may or may not have been "
    "executed on the actor.",
]
MEMORY_MONITOR = [
    "(raylet) [2026-11-24 07:40:01] 1 worker(s) were killed due to the node running low on "
    "memory. Memory on the node (IP: 10.0.0.12, ID: 8a1b2c) was 30.10GB used / 32.00GB "
    "limit (0.95)",
    *TRACEBACK,
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
    *ACTOR_CONTEXT,
    "The actor is dead because its worker process has died. Worker exit type: "
    "USER_ERROR Worker exit detail: Task was killed due to the node running low on memory.",
]
CUDA_IN_TASK = [
    "(Trainer pid=4242, ip=10.0.0.12) [rank1]: RuntimeError: CUDA error: an illegal memory "
    "access was encountered",
    *TRACEBACK,
    "ray.exceptions.RayTaskError(RuntimeError): ray::Trainer.step() (pid=4242, ip=10.0.0.12, "
    "actor_id=5d1e3c0a7e4b, repr=<Trainer object>)",
    '  File "/app/trainer.py", line 77, in step',
    "    loss.backward()",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
]
NCCL_IN_TASK = [
    *TRACEBACK,
    "ray.exceptions.RayTaskError(DistBackendError): ray::Trainer.step() (pid=4243, ip=10.0.0.13)",
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled "
    "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.30.7",
]
WORKER_POD_LOG = [
    "Some Ray subprocesses exited unexpectedly:",
    "  raylet [exit code=1]",
    "Remaining processes will be killed.",
]


@pytest.mark.parametrize(
    ("lines", "reason", "shows"),
    [
        pytest.param(NODE_DIED, R.RAY_NODE_DIED, "its node has died", id="node-died"),
        pytest.param(WORKER_DIED, R.RAY_ACTOR_DIED, "ActorDiedError", id="actor-died"),
        pytest.param(
            ACTOR_UNAVAILABLE, R.RAY_ACTOR_DIED, "ActorUnavailableError", id="actor-unavailable"
        ),
        pytest.param(
            MEMORY_MONITOR, R.RAY_OUT_OF_MEMORY, "running low on memory", id="memory-monitor"
        ),
        pytest.param(CUDA_IN_TASK, R.CUDA_ERROR, "illegal memory access", id="task-error-cuda"),
        pytest.param(
            NCCL_IN_TASK, R.NCCL_NETWORK_ERROR, "unhandled system error", id="task-error-nccl"
        ),
        pytest.param(
            WORKER_POD_LOG, R.RAY_NODE_DIED, "subprocesses exited", id="worker-pod-ray-start"
        ),
    ],
)
def test_ray_failures_through_the_wrapper(lines: list[str], reason: R, shows: str) -> None:
    evidence = Evidence()
    for line in lines:
        evidence.feed(line + "\n")
    for message in (evidence.summary(1), "\n".join(lines)):  # wrapper summary, raw log tail
        classified = classify_termination(ContainerTermination(1, "Error", message, "trainer"))
        assert classified is not None
        assert classified.reason == reason
        assert classified.primary
        assert shows in classified.message


@pytest.mark.parametrize(
    "reason", [R.RAY_ACTOR_DIED, R.RAY_NODE_DIED, R.RAY_OUT_OF_MEMORY], ids=str
)
def test_ray_failures_restart_the_gang_by_default(reason: R) -> None:
    name, rule = match_rule(Failure(reason, RoleName.TRAINER, "p-0", exit_code=1), [])
    assert (name, rule.action) == ("built-in:trainer-failures", FailureAction.RESTART_TRAINER_GANG)
