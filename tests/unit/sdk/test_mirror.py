"""The mirror against an in-memory store: each newly completed save becomes one version, a
half-written save none, the resumed step is not mirrored again, and with several nodes the
driver commits only once every node's part is in (else an error naming the missing nodes)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from rljob.checkpoint_protocol.errors import PreconditionFailed
from rljob.checkpoint_protocol.layout import CheckpointLocation, VersionId
from rljob.checkpoint_protocol.models import Manifest
from rljob.checkpoint_protocol.s3 import CheckpointStore
from rljob.checkpoint_protocol.validity import ListedObject
from rljob.sdk.checkpoint import CheckpointWriter
from rljob.sdk.layouts import get_layout
from rljob.sdk.mirror import Mirror, PartsMissing
from rljob.sdk.native import METADATA_KEY, READY_NAME, NodeIdentity, part_name
from tests.unit.sdk.native_saves import SAVE_IDS, SAVES, Save, tree

LOCATION = CheckpointLocation("ckpt", "root", "rl", "grpo")
ATTEMPT = 2


class MemoryStore:
    """The store calls the writer and the mirror make, kept in a dict (thread-safe enough)."""

    bucket = "ckpt"

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.lock = threading.Lock()

    def put_bytes(self, key: str, data: bytes, *, if_none_match: bool = False, **_: Any) -> None:
        with self.lock:
            if if_none_match and key in self.objects:
                raise PreconditionFailed(key)
            self.objects[key] = data

    def get_bytes(self, key: str) -> bytes | None:
        return self.objects.get(key)

    def list_objects(self, prefix: str, start_after: str | None = None) -> list[ListedObject]:
        after = start_after or ""
        with self.lock:
            listed = [(k, len(v)) for k, v in self.objects.items() if k.startswith(prefix)]
        return [ListedObject(k, size) for k, size in sorted(listed) if k > after]

    def write_pointer(self, version: VersionId) -> bool:
        return True

    def manifest(self, step: int) -> Manifest | None:
        data = self.objects.get(LOCATION.manifest_key(VersionId(step, ATTEMPT)))
        return None if data is None else Manifest.parse(data)


def mirror_for(
    store: MemoryStore, save: Save, root: Path, node: int = 0, nodes: int = 1, **kw: Any
) -> Mirror:
    writer = CheckpointWriter(
        LOCATION, ATTEMPT, store=cast(CheckpointStore, store), check_newer_attempt=False
    )
    options: dict[str, Any] = {"interval": 0.05, "part_poll": 0.02, **kw}
    return Mirror(get_layout(save.layout), root, writer, node=NodeIdentity(node, nodes), **options)


def wait_until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        threading.Event().wait(0.02)


@pytest.mark.parametrize("save", SAVES, ids=SAVE_IDS)
def test_a_completed_save_becomes_one_version_and_a_cut_one_none(
    save: Save, tmp_path: Path
) -> None:
    store = MemoryStore()
    mirror = mirror_for(store, save, tmp_path)
    save.write_files(tmp_path, 10)  # the framework is still saving
    assert mirror.run_once() is None
    assert store.objects == {}
    save.sign(tmp_path, 10)
    assert mirror.run_once() == 10
    manifest = store.manifest(10)
    assert manifest is not None
    files = {k: v for k, v in tree(tmp_path).items() if "/" in k}
    assert {s.key: s.size for s in manifest.shards} == {k: len(v) for k, v in files.items()}
    assert manifest.metadata[METADATA_KEY] == {"layout": save.layout, "nodes": 1}
    save.write_files(tmp_path, 20)  # crash mid-save: nothing more is mirrored
    assert mirror.run_once() is None
    assert store.manifest(20) is None


def test_only_the_newest_completed_step_after_the_resumed_one_is_mirrored(tmp_path: Path) -> None:
    save = SAVES[SAVE_IDS.index("verl")]
    store = MemoryStore()
    for step in (10, 20, 30):
        save.save(tmp_path, step)
    mirror = mirror_for(store, save, tmp_path, after_step=30)
    assert mirror.run_once() is None
    save.save(tmp_path, 40)
    save.save(tmp_path, 50)
    assert mirror.run_once() == 50
    assert mirror.run_once() is None
    assert [v.step for v in mirror.mirrored] == [50]


def test_the_mirror_runs_beside_the_caller_and_drains_on_stop(tmp_path: Path) -> None:
    save = SAVES[SAVE_IDS.index("megatron")]
    store = MemoryStore()
    mirror = mirror_for(store, save, tmp_path)
    mirror.start()
    save.save(tmp_path, 1)
    wait_until(lambda: store.manifest(1) is not None)
    save.save(tmp_path, 2)
    assert mirror.stop(final_pass_timeout=10.0)
    assert store.manifest(2) is not None
    assert mirror.errors == []


@pytest.mark.parametrize("save", SAVES, ids=SAVE_IDS)
def test_with_a_late_node_the_driver_commits_only_once_its_part_arrives(
    save: Save, tmp_path: Path
) -> None:
    store = MemoryStore()
    roots = [tmp_path / "node0", tmp_path / "node1"]
    driver = mirror_for(store, save, roots[0], 0, 2, commit_timeout=20.0)
    late = mirror_for(store, save, roots[1], 1, 2)
    save.save(roots[0], 5, node=0, nodes=2)
    save.write_files(roots[1], 5, node=1, nodes=2)  # node 1 has no sign of its own
    assert late.run_once() is None  # nothing asked for yet
    committed: list[int | None] = []
    thread = threading.Thread(target=lambda: committed.append(driver.run_once()))
    thread.start()
    ready = LOCATION.shard_key(VersionId(5, ATTEMPT), READY_NAME)
    part0 = LOCATION.shard_key(VersionId(5, ATTEMPT), part_name(0))
    wait_until(lambda: ready in store.objects and part0 in store.objects)
    assert store.manifest(5) is None  # waiting for node 1
    assert late.run_once() == 5
    thread.join(timeout=20)
    assert committed == [5]
    manifest = store.manifest(5)
    assert manifest is not None
    # NeMo-RL's node 1 never renames its tmp_step_5: its files are keyed as step_5's.
    expected = {
        k.replace("tmp_step_", "step_"): len(v)
        for root in roots
        for k, v in tree(root).items()
        if "/" in k
    }
    assert {s.key: s.size for s in manifest.shards} == expected
    assert manifest.metadata[METADATA_KEY]["nodes"] == 2
    assert json.loads(store.objects[ready])["step"] == 5


def test_a_node_that_never_arrives_times_out_naming_it(tmp_path: Path) -> None:
    save = SAVES[SAVE_IDS.index("deepspeed")]
    store = MemoryStore()
    driver = mirror_for(store, save, tmp_path, 0, 3, commit_timeout=0.3)
    save.save(tmp_path, 8, node=0, nodes=3)
    with pytest.raises(PartsMissing, match=r"node\(s\) 1, 2 of 3 did not upload") as caught:
        driver.run_once()
    assert caught.value.missing == [1, 2]
    assert store.manifest(8) is None


@pytest.mark.parametrize("save", SAVES, ids=SAVE_IDS)
def test_a_shared_directory_is_mirrored_whole_by_node_zero_alone(
    save: Save, tmp_path: Path
) -> None:
    """One volume every node writes into (a Ray-launched framework): node 0 uploads every
    node's files and commits at once, with no ready marker or parts to wait for; the version
    still records the gang's two nodes, so a resume on another count is refused."""
    store = MemoryStore()
    writer = CheckpointWriter(
        LOCATION, ATTEMPT, store=cast(CheckpointStore, store), check_newer_attempt=False
    )
    node = NodeIdentity(0, 2, shared=True)
    driver = Mirror(get_layout(save.layout), tmp_path, writer, node=node, interval=0.05)
    save.write_files(tmp_path, 5, node=1, nodes=2)
    save.save(tmp_path, 5, node=0, nodes=2)

    assert driver.run_once() == 5

    manifest = store.manifest(5)
    assert manifest is not None
    files = {k: len(v) for k, v in tree(tmp_path).items() if "/" in k}
    assert {s.key: s.size for s in manifest.shards} == files
    assert manifest.metadata[METADATA_KEY]["nodes"] == 2
    assert not [key for key in store.objects if "/parts/" in key or key.endswith(READY_NAME)]
