"""NeMo-RL: a save is assembled in `tmp_step_{N}/` and renamed to `step_{N}/` once complete (no
tracker file: the newest `step_N` is the one resumed from). A `tmp_step_N` is never complete.

Follows NVIDIA-NeMo/RL nemo_rl/utils/checkpoint.py (CheckpointManager.init_tmp_checkpoint makes
`tmp_step_{step}`, finalize_checkpoint renames it to `step_{step}`;
get_latest_checkpoint_path picks the newest `step_*`). On a node other than the driver's the
rename may never happen: that node's files of step N are read from `tmp_step_N` and keyed as
`step_N`, the name they have once complete."""

from __future__ import annotations

import re
from pathlib import Path

from rljob.sdk.layouts.base import Layout


class NemoRLLayout(Layout):
    name = "nemo-rl"
    upstream = "NVIDIA-NeMo/RL nemo_rl/utils/checkpoint.py (init_tmp_checkpoint, finalize)"
    folder = re.compile(r"^(?:tmp_)?step_([0-9]+)$")
    done = re.compile(r"^step_([0-9]+)$")

    def step_dirs(self, root: Path) -> dict[int, Path]:
        found = super().step_dirs(root)
        # A finished step_N wins over a stale tmp_step_N of the same step.
        for step, path in found.items():
            done = root / f"step_{step}"
            if path != done and done.is_dir():
                found[step] = done
        return found

    def complete_steps(self, root: Path) -> list[int]:
        return sorted(s for s, p in self.step_dirs(root).items() if self.done.match(p.name))

    def key_prefix(self, step: int, folder: Path) -> str:
        return f"step_{step}"

    def staging_name(self, folder: str) -> str:
        return f"tmp_{folder}"
