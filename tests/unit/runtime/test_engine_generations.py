"""Where the health loop reads each rollout engine's own weight version (generationFrom engine):
the pod's IP and the port its Services forward (metrics.port, else the engine's default), the
engine's paths; nothing for a job that does not opt in or a pod without an IP."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from rljob.api import RLJob, parse_rljob
from rljob.runtime.engine_generations import Endpoints, endpoints

SGLANG_PATHS = ("/model_info", "/get_weight_version")


@dataclass(frozen=True)
class Pod:
    name: str
    ip: str


def job(**rollout: Any) -> RLJob:
    return parse_rljob({
        "apiVersion": "rljob.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": "j", "namespace": "rl"},
        "spec": {"image": "img", "roles": {"rollout": {"weightSync": "Gated", **rollout},
                                           "trainer": {"nodes": 1}}},
    })  # fmt: skip


PODS = [Pod("a", "10.1.2.3"), Pod("b", "fd00::7"), Pod("c", ""), Pod("d", "not-an-ip")]


@pytest.mark.parametrize(
    ("spec", "found"),
    [
        pytest.param({"engine": "sglang", "generationFrom": "engine"},
                     Endpoints({"a": "http://10.1.2.3:30000", "b": "http://[fd00::7]:30000"},
                               SGLANG_PATHS), id="sglang"),
        pytest.param({"generationFrom": "engine"},
                     Endpoints({"a": "http://10.1.2.3:8000", "b": "http://[fd00::7]:8000"},
                               ("/weight_info",)), id="vllm"),
        pytest.param({"generationFrom": "engine", "metrics": {"port": 8080}},
                     Endpoints({"a": "http://10.1.2.3:8080", "b": "http://[fd00::7]:8080"},
                               ("/weight_info",)), id="vllm-on-its-own-port"),
        pytest.param({"engine": "sglang"}, None, id="generation-from-metrics"),
    ],
)  # fmt: skip
def test_endpoints(spec: dict[str, Any], found: Endpoints | None) -> None:
    assert endpoints(job(**spec), PODS) == found
