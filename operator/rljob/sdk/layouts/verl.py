"""verl: `global_step_{N}/` (actor/, critic/, data.pt) plus `latest_checkpointed_iteration.txt`
holding N, written after the step folder is complete.

Follows volcengine/verl verl/trainer/ppo/ray_trainer.py (RayPPOTrainer._save_checkpoint: the
folder `global_step_{global_steps}`, then the tracker "for atomic usage", `str(global_steps)`)
and verl/utils/checkpoint/checkpoint_manager.py (get_checkpoint_tracker_filename,
find_latest_ckpt_path, which resumes from the folder the tracker names)."""

from __future__ import annotations

import re

from rljob.sdk.layouts.base import TrackerLayout


class VerlLayout(TrackerLayout):
    name = "verl"
    upstream = "volcengine/verl verl/trainer/ppo/ray_trainer.py (_save_checkpoint)"
    folder = re.compile(r"^global_step_([0-9]+)$")
    tracker = "latest_checkpointed_iteration.txt"
