"""Plain torch.distributed.checkpoint (DCP) directories, one per save: `step-{N}/` (torchtitan's
name; `step_{N}` too) holding `__{rank}_{i}.distcp` files and `.metadata`, which the
coordinator writes last (to `.metadata.tmp`, then renamed). DCP reshards on load, so a version
saved by N nodes resumes on M.

Follows pytorch/pytorch torch/distributed/checkpoint/filesystem.py (FileSystemWriter.finish:
`.metadata` written after every rank's write results are gathered) and pytorch/torchtitan
torchtitan/components/checkpoint.py (the `step-{step}` folders)."""

from __future__ import annotations

import re
from pathlib import Path

from rljob.sdk.layouts.base import Layout

METADATA = ".metadata"


class DCPLayout(Layout):
    name = "dcp"
    upstream = "pytorch/pytorch torch/distributed/checkpoint/filesystem.py (finish)"
    folder = re.compile(r"^step[-_]([0-9]+)$")
    reshards = True

    def complete_steps(self, root: Path) -> list[int]:
        return sorted(s for s, p in self.step_dirs(root).items() if (p / METADATA).is_file())

    def sign_keys(self, keys: list[str]) -> list[str]:
        return [k for k in keys if k.rsplit("/", 1)[-1] == METADATA]
