"""What the simulator publishes: the file_sd JSON shape, the address map, atomic writes."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from rljob.dev.sim.targets import Target, file_sd, write_json_atomic

TARGETS = [
    Target("ns-b", "job1-rollout-x", "rollout", "job1", 40001),
    Target("ns-a", "job1-trainer-a1-0-q", "trainer", "job1", 40002),
]


def test_file_sd_is_one_group_per_pod_with_its_labels() -> None:
    assert file_sd(TARGETS) == [
        {
            "targets": ["127.0.0.1:40002"],
            "labels": {
                "namespace": "ns-a",
                "pod": "job1-trainer-a1-0-q",
                "role": "trainer",
                "job": "job1",
            },
        },
        {
            "targets": ["127.0.0.1:40001"],
            "labels": {
                "namespace": "ns-b",
                "pod": "job1-rollout-x",
                "role": "rollout",
                "job": "job1",
            },
        },
    ]
    assert file_sd([]) == []


def test_a_target_at_its_pod_ip_is_scraped_there() -> None:
    at_pod_ip = Target("ns", "r", "rollout", "job1", 8000, "127.64.0.5")
    assert file_sd([at_pod_ip])[0]["targets"] == ["127.64.0.5:8000"]


def test_atomic_write_leaves_only_the_complete_file(tmp_path: Path) -> None:
    path = tmp_path / "targets" / "workloads.json"
    write_json_atomic(path, file_sd(TARGETS))
    assert json.loads(path.read_text()) == file_sd(TARGETS)
    assert os.listdir(path.parent) == ["workloads.json"]
    assert path.stat().st_mode & 0o777 == 0o644


def test_readers_never_see_a_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "workloads.json"
    many = [Target("ns", f"pod-{i}", "rollout", "job", 30000 + i) for i in range(500)]
    write_json_atomic(path, [])
    stop = threading.Event()
    seen: list[int] = []

    def read() -> None:
        while not stop.is_set():
            seen.append(len(json.loads(path.read_text())))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for count in (500, 0, 250, 500, 1) * 10:
            write_json_atomic(path, file_sd(many[:count]))
    finally:
        stop.set()
        reader.join()
    assert set(seen) <= {0, 1, 250, 500}
