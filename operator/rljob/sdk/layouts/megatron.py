"""Megatron-LM: `iter_{N:07d}/` (mp_rank_XX/... or a torch_dist folder) plus
`latest_checkpointed_iteration.txt` holding N, written by rank 0 after every rank saved.

Follows NVIDIA/Megatron-LM megatron/training/checkpointing.py (get_checkpoint_name:
`iter_{:07d}`; get_checkpoint_tracker_filename; save_checkpoint writes the tracker after the
barrier that ends the save; read_metadata reads it on every rank, so every node gets it on
resume). A tracker saying `release` names no step and is ignored."""

from __future__ import annotations

import re

from rljob.sdk.layouts.base import TrackerLayout


class MegatronLayout(TrackerLayout):
    name = "megatron"
    upstream = "NVIDIA/Megatron-LM megatron/training/checkpointing.py (save_checkpoint)"
    folder = re.compile(r"^iter_([0-9]{7,})$")
    tracker = "latest_checkpointed_iteration.txt"
