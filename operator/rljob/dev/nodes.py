"""Simulated GPU nodes per profile: realistic for the demo, huge for tests and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class NodeProfile:
    """How many simulated nodes to create and what each one offers."""

    name: str
    count: int
    gpus: int
    cpu: str
    memory: str
    pods: int
    labels: dict[str, str] = field(default_factory=dict)


PROFILES: dict[str, NodeProfile] = {
    "demo": NodeProfile(
        name="demo",
        count=4,
        gpus=8,
        cpu="96",
        memory="1Ti",
        pods=110,
        labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"},
    ),
    # Large fake capacity so concurrent tests and benchmarks never starve each other.
    "test": NodeProfile(
        name="test",
        count=4,
        gpus=1000,
        cpu="10000",
        memory="100Ti",
        pods=5000,
        labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    ),
}
# Benchmarks: the test nodes with room for 500 jobs of 9 GPUs; the control plane's flags differ
# (see controlplane.py).
PROFILES["bench"] = replace(PROFILES["test"], name="bench", gpus=10_000)


def node_manifests(profile: NodeProfile) -> list[dict[str, Any]]:
    """Node objects (with status capacity) that kwok will run."""
    capacity = {
        "cpu": profile.cpu,
        "memory": profile.memory,
        "pods": str(profile.pods),
        GPU_RESOURCE: str(profile.gpus),
    }
    nodes = []
    for index in range(profile.count):
        name = f"gpu-node-{index}"
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {"kwok.x-k8s.io/node": "fake"},
                    "labels": {
                        "type": "kwok",
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        **profile.labels,
                    },
                },
                "status": {"capacity": capacity, "allocatable": capacity},
            }
        )
    return nodes
