"""A small FSDP2 model and AdamW trained with gloo on CPU, checkpointed with
torch.distributed.checkpoint (DCP) into one rljob.sdk version per save; run by real torchrun
(2 nodes x 2 processes) in tests/upstream/test_dcp_checkpoints.py and test_sigterm_save.py.

DCP_MODE=train     trains, saves SAVE_STEP as one committed version, writes each rank's state
                   to DCP_OUT/ref-rank<R>.pt (the reference a resume must equal).
DCP_MODE=resume    resolves RLJOB_RESUME_* (the operator's choice), each node downloads the
                   version, DCP loads it into a differently seeded model; each rank writes
                   DCP_OUT/result-rank<R>.json comparing every tensor with torch.equal.
DCP_MODE=sigterm   commits SAVE_STEP, writes DCP_OUT/ready-rank<R>, trains until SIGTERM, then
                   begins a last save that torchrun's SIGKILL cuts off before the commit.

Every node saves into its own folder (DCP_NODE_DIR, as a pod's local disk): DCP's
FileSystemWriter writes each rank's `__<rank>_<n>.distcp` where that rank runs and the
coordinator's `.metadata` on node 0 (torch 2.15.0, torch/distributed/checkpoint/filesystem.py).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from rljob.sdk import CheckpointWriter, ShardEntry, resolve_resume
from rljob.sdk.checkpoint import MIN_PART_SIZE, MiB

SAVE_STEP = 3
STOP = threading.Event()


def build(seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)
    )
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    data = torch.Generator().manual_seed(1000 * step + dist.get_rank())
    batch = torch.randn(8, 16, generator=data)
    model(batch).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    model_sd, optim_sd = get_state_dict(model, optimizer)
    return {"model": model_sd, "optim": optim_sd}


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf path -> value; a DTensor is this rank's local shard."""
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}/{key}"))
        return out
    if isinstance(tree, list | tuple):
        return flatten(dict(enumerate(tree)), prefix)
    if isinstance(tree, DTensor):
        return {prefix: tree.to_local().detach().clone()}
    if isinstance(tree, torch.Tensor):
        return {prefix: tree.detach().clone()}
    return {prefix: tree}


def mismatches(now: dict[str, Any], reference: dict[str, Any]) -> list[str]:
    """Paths whose value differs: tensors bitwise (torch.equal, same dtype), the rest by ==."""
    bad = sorted(set(now) ^ set(reference))
    for path in sorted(set(now) & set(reference)):
        a, b = now[path], reference[path]
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            if a.dtype != b.dtype or not torch.equal(a, b):
                bad.append(path)
        elif a != b:
            bad.append(path)
    return bad


def node_folder(step: int) -> Path:
    return Path(os.environ["DCP_NODE_DIR"]) / f"step{step}"


def upload_node_files(version: Any, folder: Path) -> None:
    """A node's first process uploads every file DCP wrote on this node (each node its own)."""
    if int(os.environ["LOCAL_RANK"]) == 0:
        for path in sorted(folder.iterdir()):
            version.write_file(f"dcp/{path.name}", path)


def save(writer: CheckpointWriter, snapshot: dict[str, Any], step: int) -> None:
    """DCP to the node's folder, each node uploads its files, rank 0 commits them all."""
    folder = node_folder(step)
    dcp.save(snapshot, checkpoint_id=folder)
    with writer.version(step, commit=False) as version:
        upload_node_files(version, folder)
    commit(writer, step, version.entries)


def commit(writer: CheckpointWriter, step: int, mine: list[ShardEntry]) -> None:
    gathered: list[list[ShardEntry] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    if dist.get_rank() == 0:
        with writer.version(step, policy_generation=step) as version:
            for entries in gathered:
                version.add_entries(entries or [])
    dist.barrier()


class SlowStream:
    """A shard still being produced: 6 MiB at once (one multipart part goes up), then a
    trickle; the SIGKILL lands while it is being read."""

    def __init__(self) -> None:
        self.sent = 0

    def read(self, size: int = -1, /) -> bytes:
        if self.sent >= 6 * MiB:
            threading.Event().wait(1.0)  # the slow producer this workload simulates
        chunk = min(MiB, size if size >= 0 else MiB)
        self.sent += chunk
        return b"\0" * chunk


def last_save(writer: CheckpointWriter, model: nn.Module, optimizer: Any, step: int) -> None:
    """The best-effort save on SIGTERM: DCP and this node's uploads finish, the last rank's
    large shard does not, so rank 0 never gets every entry and never commits."""
    folder = node_folder(step)
    dcp.save(state(model, optimizer), checkpoint_id=folder)
    with writer.version(step, commit=False) as version:
        upload_node_files(version, folder)
        Path(os.environ["DCP_OUT"], f"uploaded-rank{dist.get_rank()}").touch()
        if dist.get_rank() == dist.get_world_size() - 1:
            version.write_stream("dcp/optimizer-extra.bin", SlowStream())
    commit(writer, step, version.entries)


def run_train(writer: CheckpointWriter, out: Path) -> None:
    model, optimizer = build(seed=0)
    for step in range(1, SAVE_STEP + 1):
        train_step(model, optimizer, step)
    snapshot = state(model, optimizer)
    save(writer, snapshot, SAVE_STEP)
    torch.save(flatten(snapshot), out / f"ref-rank{dist.get_rank()}.pt")


def run_resume(out: Path) -> None:
    resume = resolve_resume()
    if resume is None:
        raise SystemExit("RLJOB_RESUME_URI is not set")
    model, optimizer = build(seed=12345)
    reference = torch.load(out / f"ref-rank{dist.get_rank()}.pt", weights_only=False)
    before = mismatches(flatten(state(model, optimizer)), reference)
    local = Path(os.environ["DCP_NODE_DIR"]) / "resume"
    if int(os.environ["LOCAL_RANK"]) == 0:  # each node downloads the whole version once
        resume.reader().download(local)
    dist.barrier()
    loaded = state(model, optimizer)
    dcp.load(loaded, checkpoint_id=local / "dcp")
    set_state_dict(
        model, optimizer, model_state_dict=loaded["model"], optim_state_dict=loaded["optim"]
    )
    now = flatten(state(model, optimizer))
    result = {
        "rank": dist.get_rank(),
        "step": resume.step,
        "version": resume.version.name,
        "compared": len(reference),
        "tensors": sum(isinstance(v, torch.Tensor) for v in reference.values()),
        "differed_before_load": len(before),
        "mismatches": mismatches(now, reference),
    }
    (out / f"result-rank{dist.get_rank()}.json").write_text(json.dumps(result))


def run_until_sigterm(writer: CheckpointWriter, out: Path) -> None:
    signal.signal(signal.SIGTERM, lambda *_: STOP.set())
    model, optimizer = build(seed=0)
    step = 0
    stop = torch.zeros(1)
    while stop.item() == 0:
        step += 1
        train_step(model, optimizer, step)
        if step == SAVE_STEP:
            save(writer, state(model, optimizer), step)
            (out / f"ready-rank{dist.get_rank()}").touch()
        if step > SAVE_STEP:  # the last save is a new step, never the committed one again
            # Every rank stops at the same step: a rank seeing SIGTERM first tells the others.
            stop = torch.tensor([1.0 if STOP.wait(0.05) else 0.0])
            dist.all_reduce(stop, op=dist.ReduceOp.MAX)
    last_save(writer, model, optimizer, step)


def main() -> int:
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    out = Path(os.environ["DCP_OUT"])
    writer = CheckpointWriter.from_env(multipart_threshold=MIN_PART_SIZE, part_size=MIN_PART_SIZE)
    mode = os.environ["DCP_MODE"]
    if mode == "train":
        run_train(writer, out)
    elif mode == "resume":
        run_resume(out)
    else:
        run_until_sigterm(writer, out)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
