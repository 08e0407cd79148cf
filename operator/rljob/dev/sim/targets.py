"""What the simulator publishes about its workloads (pure, plus one atomic write).

- Prometheus file_sd: `[{"targets": ["127.0.0.1:<port>"], "labels": {"namespace", "pod", "role",
  "job"}}]`, where `job` is the RLJob's name. Prometheus reserves `job` for the scrape job, so
  rljob.dev.prometheus relabels it to `rljob_job` and keeps its own `job`.
Each workload listens where the pod would serve on a cluster: its pod IP (kwok hands out a
range inside 127.0.0.0/8) and the role's metrics port, so direct scraping resolves it from the
pod object exactly as on a cluster.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class Target:
    namespace: str
    pod: str
    role: str
    job: str
    port: int
    host: str = HOST

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def _ordered(targets: Iterable[Target]) -> list[Target]:
    return sorted(targets, key=lambda t: (t.namespace, t.pod))


def file_sd(targets: Iterable[Target]) -> list[dict[str, Any]]:
    """One target group per pod, in a stable order."""
    return [
        {
            "targets": [t.address],
            "labels": {"namespace": t.namespace, "pod": t.pod, "role": t.role, "job": t.job},
        }
        for t in _ordered(targets)
    ]


def write_json_atomic(path: Path, data: Any) -> None:
    """Writes JSON to a temporary file beside `path` and renames it over `path`, so a reader
    (Prometheus' file watcher) never sees a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(data, out, indent=1, sort_keys=True)
            out.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
