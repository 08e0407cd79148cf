"""Native checkpoints in the store: the objects nodes coordinate through, and restoring a version
into a framework's own layout before launch.

Under a version's prefix, beside the shards (the manifest lists only the shards):

    _rljob/ready.json             the driver's node saw the framework's completion sign of step N
    _rljob/parts/node-00003.json  node 3 uploaded its files of step N (their shard entries)

The manifest's metadata records the layout and the node count under "rljob.native". Node i
resumes the files it uploaded (its part), the whole version when the node count changed and
the layout reshards (DCP); the tracker file is written on every node, last.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rljob.checkpoint_protocol.layout import VersionId
from rljob.checkpoint_protocol.models import ShardEntry
from rljob.checkpoint_protocol.s3 import CheckpointStore, StoreEndpoint
from rljob.sdk.checkpoint.reader import CheckpointReader
from rljob.sdk.checkpoint.resume import ResumePoint, resolve_resume
from rljob.sdk.layouts import Layout, WorldSizeMismatch

log = logging.getLogger(__name__)

COORDINATION_DIR = "_rljob"
READY_NAME = f"{COORDINATION_DIR}/ready.json"
PARTS_DIR = f"{COORDINATION_DIR}/parts/"
METADATA_KEY = "rljob.native"
# The operator's launchers set these on every trainer node (rljob.reconcile.launchers).
ENV_NODES = "NNODES"
ENV_NODE_RANK = "NODE_RANK"


@dataclass(frozen=True)
class NodeIdentity:
    """This node's index in the trainer gang and the gang's size; node 0 is the driver's.
    `shared`: the checkpoint directory is one volume every node sees (a Ray-launched framework
    whose ranks move between nodes needs one), so node 0 mirrors and restores all of it alone."""

    rank: int = 0
    nodes: int = 1
    shared: bool = False

    def __post_init__(self) -> None:
        if self.nodes < 1 or not 0 <= self.rank < self.nodes:
            raise ValueError(f"node rank {self.rank} out of range for {self.nodes} node(s)")

    @property
    def driver(self) -> bool:
        return self.rank == 0

    @property
    def coordinated(self) -> bool:
        """Whether each node uploads and restores its own files (through parts in the store)."""
        return self.nodes > 1 and not self.shared

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, shared: bool = False
    ) -> NodeIdentity:
        env = os.environ if env is None else env
        return cls(int(env.get(ENV_NODE_RANK) or 0), int(env.get(ENV_NODES) or 1), shared)


def part_name(rank: int) -> str:
    return f"{PARTS_DIR}node-{rank:05d}.json"


def part_rank(relative: str) -> int | None:
    """The node rank of a part object's key relative to the version prefix, else None."""
    name = relative.removeprefix(PARTS_DIR)
    if name == relative or not name.startswith("node-") or not name.endswith(".json"):
        return None
    digits = name[len("node-") : -len(".json")]
    return int(digits) if digits.isdigit() else None


def encode_part(rank: int, entries: list[ShardEntry]) -> bytes:
    shards = [e.to_wire() for e in sorted(entries, key=lambda e: e.key)]
    return json.dumps({"node": rank, "shards": shards}).encode()


def decode_part(data: bytes) -> list[ShardEntry]:
    return [ShardEntry.from_wire(s) for s in json.loads(data)["shards"]]


def native_metadata(layout: Layout, nodes: int) -> dict[str, Any]:
    return {METADATA_KEY: {"layout": layout.name, "nodes": nodes}}


def saved_nodes(metadata: Mapping[str, Any]) -> int | None:
    native = metadata.get(METADATA_KEY)
    return int(native["nodes"]) if isinstance(native, dict) and "nodes" in native else None


def check_world(layout: Layout, version: VersionId, saved: int | None, current: int) -> None:
    """Refuses a resume on a different node count unless the layout reshards on load."""
    if saved is not None and saved != current and not layout.reshards:
        raise WorldSizeMismatch(layout.name, saved, current, version.name)


def _move_into_place(source: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    os.replace(source, target)


def materialise(
    layout: Layout,
    root: Path,
    resume: ResumePoint,
    node: NodeIdentity,
    *,
    endpoint: StoreEndpoint | None = None,
    store: CheckpointStore | None = None,
    workers: int = 4,
) -> list[str]:
    """Restores this node's files of the resume version under root in the layout's own form:
    step folder assembled aside and moved into place, the completion sign last. Raises
    WorldSizeMismatch before downloading anything when the node count changed and the layout
    does not reshard. Returns the keys restored."""
    store = store or CheckpointStore(resume.location, endpoint or StoreEndpoint.from_env())
    reader = CheckpointReader(resume.location, resume.version, store=store)
    manifest = reader.manifest()
    saved = saved_nodes(manifest.metadata)
    check_world(layout, resume.version, saved, node.nodes)
    keys = [s.key for s in manifest.shards]
    if saved is not None and saved == node.nodes and node.coordinated:
        data = store.get_bytes(resume.location.shard_key(resume.version, part_name(node.rank)))
        keys = [e.key for e in decode_part(data)] if data is not None else keys
    signs = set(layout.sign_keys(keys))
    folders = sorted({k.split("/", 1)[0] for k in keys})
    root.mkdir(parents=True, exist_ok=True)
    staging = root / f".rljob-download-{resume.version.name}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        reader.download(staging, shards=[k for k in keys if k not in signs], workers=workers)
        for folder in folders:
            assembled = staging / folder
            if not assembled.is_dir():
                continue
            # The layout's staging name (NeMo-RL's tmp_step_N) is what a crash here leaves.
            aside = root / layout.staging_name(folder)
            if aside.exists():
                shutil.rmtree(aside)
            os.replace(assembled, aside)
            _move_into_place(aside, root / folder)
        if signs:
            reader.download(root, shards=sorted(signs), workers=workers)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for folder in folders:
        layout.write_tracker(root, resume.version.step, folder)
    log.info("restored %s (%d files) into %s", resume.version.name, len(keys), root)
    return keys


def materialise_from_env(
    layout: Layout, root: Path, env: Mapping[str, str] | None = None, *, shared: bool = False
) -> ResumePoint | None:
    """Restores RLJOB_RESUME_URI's version into root; None on a fresh start (or, with a shared
    directory, on every node but 0: node 0 restores it all)."""
    env = os.environ if env is None else env
    node = NodeIdentity.from_env(env, shared=shared)
    resume = resolve_resume(env) if node.driver or not shared else None
    if resume is None:
        return None
    materialise(layout, root, resume, node, endpoint=StoreEndpoint.from_env(env))
    return resume


__all__ = [
    "METADATA_KEY",
    "PARTS_DIR",
    "READY_NAME",
    "NodeIdentity",
    "check_world",
    "decode_part",
    "encode_part",
    "materialise",
    "materialise_from_env",
    "native_metadata",
    "part_name",
    "part_rank",
    "saved_nodes",
]
