"""The trainer pods' history from a watch, to prove two attempts' pods never exist at once."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rljob.dev.binaries import bin_dir
from tests.integration.conftest import Cluster

ATTEMPT_LABEL = "rljob.io/attempt"


class PodHistory:
    """Follows `kubectl get pods --watch` of one namespace's trainer pods; every event updates
    the live set, and a moment with pods of two attempts is recorded as an overlap."""

    def __init__(self) -> None:
        self.live: dict[str, str] = {}  # pod name -> attempt
        self.attempts_seen: set[str] = set()
        self.overlaps: list[dict[str, str]] = []
        self.events = 0
        self._decoder = json.JSONDecoder()

    def feed(self, event: dict[str, Any]) -> None:
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        name, attempt = meta.get("name", ""), (meta.get("labels") or {}).get(ATTEMPT_LABEL, "")
        if event.get("type") == "DELETED":
            self.live.pop(name, None)
        elif name and attempt:
            self.live[name] = attempt
            self.attempts_seen.add(attempt)
        self.events += 1
        if len(set(self.live.values())) > 1:
            self.overlaps.append(dict(self.live))

    def follow(self, stream: Any) -> None:
        buffer = ""
        for chunk in iter(lambda: stream.read1(65536).decode(), ""):
            buffer += chunk
            while buffer.strip():
                try:
                    event, end = self._decoder.raw_decode(buffer.lstrip())
                except ValueError:
                    break  # an incomplete object: wait for more
                buffer = buffer.lstrip()[end:]
                self.feed(event)


@contextmanager
def trainer_pod_history(cluster: Cluster, namespace: str) -> Iterator[PodHistory]:
    """Watches the namespace's trainer pods for the duration of the block."""
    history = PodHistory()
    process = subprocess.Popen(
        [
            str(bin_dir() / "kubectl"),
            f"--kubeconfig={cluster.run.kubeconfig}",
            "get",
            "pods",
            "-n",
            namespace,
            "-l",
            "rljob.io/role=trainer",
            "--watch",
            "--output-watch-events",
            "-o",
            "json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    reader = threading.Thread(target=history.follow, args=(process.stdout,), daemon=True)
    reader.start()
    try:
        yield history
    finally:
        process.terminate()
        process.wait(timeout=10)
        reader.join(timeout=10)
