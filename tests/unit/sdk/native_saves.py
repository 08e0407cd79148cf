"""Saves as each framework writes them, from its source conventions (the upstream file each
builder follows is named on it): the files of step N on node K, then the completion sign the
driver's node writes last. Shared by the layout, mirror and round-trip tests."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

RANKS_PER_NODE = 2


def payload(name: str, step: int, size: int = 1536) -> bytes:
    """Distinct bytes per file and step (so a restore of the wrong step is caught)."""
    seed = hashlib.sha256(f"{name}@{step}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def _ranks(node: int) -> range:
    return range(node * RANKS_PER_NODE, (node + 1) * RANKS_PER_NODE)


def verl_files(step: int, node: int, nodes: int) -> dict[str, bytes]:
    # volcengine/verl verl/trainer/ppo/ray_trainer.py (_save_checkpoint) and
    # verl/utils/checkpoint/fsdp_checkpoint_manager.py (model/optim/extra_state per rank).
    world = nodes * RANKS_PER_NODE
    out: dict[str, bytes] = {}
    for rank in _ranks(node):
        for kind in ("model", "optim", "extra_state"):
            out[f"actor/{kind}_world_size_{world}_rank_{rank}.pt"] = b""
    if node == 0:
        out["actor/fsdp_config.json"] = b""
        out["actor/huggingface/config.json"] = b""
        out["data.pt"] = b""
    return out


def megatron_files(step: int, node: int, nodes: int) -> dict[str, bytes]:
    # NVIDIA/Megatron-LM megatron/training/checkpointing.py (get_checkpoint_name: mp_rank_XX).
    return {f"mp_rank_{rank:02d}/model_optim_rng.pt": b"" for rank in _ranks(node)}


def deepspeed_files(step: int, node: int, nodes: int) -> dict[str, bytes]:
    # deepspeedai/DeepSpeed deepspeed/runtime/engine.py (_get_ckpt_name, _get_zero_ckpt_name).
    out = {f"bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt": b"" for r in _ranks(node)}
    if node == 0:
        out["mp_rank_00_model_states.pt"] = b""
    return out


def nemo_files(step: int, node: int, nodes: int) -> dict[str, bytes]:
    # NVIDIA-NeMo/RL nemo_rl/utils/checkpoint.py (init_tmp_checkpoint: training_info.json,
    # config.yaml; policy/weights and policy/optimizer from the policy workers).
    out = {f"policy/weights/__{r}_0.distcp": b"" for r in _ranks(node)}
    out |= {f"policy/optimizer/__{r}_0.distcp": b"" for r in _ranks(node)}
    if node == 0:
        out |= {"training_info.json": b"", "config.yaml": b"", "policy/weights/.metadata": b""}
    return out


def dcp_files(step: int, node: int, nodes: int) -> dict[str, bytes]:
    # pytorch/pytorch torch/distributed/checkpoint/filesystem.py (`__{rank}_{i}.distcp`).
    return {f"__{rank}_0.distcp": b"" for rank in _ranks(node)}


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@dataclass(frozen=True)
class Save:
    """How one framework saves step N: folder names, per-node files, and the sign."""

    layout: str
    folder: Callable[[int], str]  # the complete step folder
    files: Callable[[int, int, int], dict[str, bytes]]
    tracker: str | None = None  # the tracker file in the root
    tracker_text: Callable[[int], str] = str
    writing_folder: Callable[[int], str] | None = None  # where files go before the sign
    sign_file: str | None = None  # a file in the step folder written last

    def write_files(self, root: Path, step: int, node: int = 0, nodes: int = 1) -> None:
        """Node's files of step, as the framework leaves them before its completion sign."""
        folder = (self.writing_folder or self.folder)(step)
        for name in self.files(step, node, nodes):
            _write(root / folder / name, payload(f"{folder}/{name}", step))

    def sign(self, root: Path, step: int) -> None:
        """The completion sign the driver's node writes once every rank saved."""
        if self.writing_folder is not None:
            os.rename(root / self.writing_folder(step), root / self.folder(step))
        if self.sign_file is not None:
            _write(root / self.folder(step) / self.sign_file, payload("metadata", step, 300))
        if self.tracker is not None:
            (root / self.tracker).write_text(self.tracker_text(step))

    def save(self, root: Path, step: int, node: int = 0, nodes: int = 1) -> None:
        self.write_files(root, step, node, nodes)
        if node == 0:
            self.sign(root, step)


TRACKER = "latest_checkpointed_iteration.txt"
SAVES = [
    Save("verl", lambda n: f"global_step_{n}", verl_files, TRACKER),
    Save("megatron", lambda n: f"iter_{n:07d}", megatron_files, TRACKER),
    Save(
        "deepspeed",
        lambda n: f"global_step{n}",
        deepspeed_files,
        "latest",
        tracker_text=lambda n: f"global_step{n}",
    ),
    Save("nemo-rl", lambda n: f"step_{n}", nemo_files, writing_folder=lambda n: f"tmp_step_{n}"),
    Save("dcp", lambda n: f"step-{n}", dcp_files, sign_file=".metadata"),
]
SAVE_IDS = [s.layout for s in SAVES]


def tree(root: Path) -> dict[str, bytes]:
    """Every file under root, by relative path (what a byte-for-byte comparison compares)."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
