"""DeepSpeed, and OpenRLHF which saves through it: `global_step{N}/` (mp_rank_XX_model_states.pt,
*_optim_states.pt) plus `latest`, a file holding the tag (the folder's name, no newline) written
by rank 0 once the save is committed.

Follows deepspeedai/DeepSpeed deepspeed/runtime/engine.py (DeepSpeedEngine.save_checkpoint:
tag defaults to `global_step{global_steps}`; `latest` is written after the checkpoint engine
commits the tag; load_checkpoint reads `latest` when no tag is given). OpenRLHF
(openrlhf/utils/deepspeed/deepspeed.py, save_ckpt) calls save_checkpoint with tag
`global_step{N}`. Only tags of that form name a step."""

from __future__ import annotations

import re

from rljob.sdk.layouts.base import TrackerLayout


class DeepSpeedLayout(TrackerLayout):
    name = "deepspeed"
    upstream = "deepspeedai/DeepSpeed deepspeed/runtime/engine.py (save_checkpoint)"
    folder = re.compile(r"^global_step([0-9]+)$")
    tracker = "latest"

    def tracker_text(self, step: int, folder: str) -> str:
        return folder
