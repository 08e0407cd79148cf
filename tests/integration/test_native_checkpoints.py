"""Native checkpoints through a real S3 server: each framework's save (built from its source
conventions, see tests/unit/sdk/native_saves.py; DCP by real torch) is mirrored into a version
and restored byte for byte in the framework's layout; several nodes restore their own files;
a different node count is refused; the entrypoint wires restore, mirror and last pass."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rljob.checkpoint_protocol.layout import CheckpointLocation, VersionId, resume_env
from rljob.sdk import CheckpointReader, CheckpointWriter
from rljob.sdk.layouts import WorldSizeMismatch, get_layout
from rljob.sdk.mirror import Mirror
from rljob.sdk.native import NodeIdentity, materialise_from_env
from tests.integration.s3_fixtures import (  # noqa: F401 - fixtures
    S3Bucket,
    s3_bucket_fixture,
    s3_server_fixture,
)
from tests.unit.sdk.native_saves import SAVE_IDS, SAVES, Save, tree
from tests.upstream.conftest import torch_venv  # noqa: F401 - fixture

pytestmark = pytest.mark.integration

ATTEMPT = 1
TOP = Path(__file__).resolve().parents[2]


def env_for(
    s3: S3Bucket, location: CheckpointLocation, node: int = 0, nodes: int = 1
) -> dict[str, str]:
    return {**s3.env(location, ATTEMPT), "NODE_RANK": str(node), "NNODES": str(nodes)}


def mirror_for(s3: S3Bucket, layout: str, root: Path, node: int = 0, nodes: int = 1) -> Mirror:
    location = s3.location()
    writer = CheckpointWriter.from_env(env_for(s3, location))
    identity = NodeIdentity(node, nodes)
    return Mirror(get_layout(layout), root, writer, node=identity, part_poll=0.05, workers=3)


def resume_into(
    s3: S3Bucket, layout: str, root: Path, step: int, node: int = 0, nodes: int = 1
) -> None:
    location = s3.location()
    env = {**env_for(s3, location, node, nodes), **resume_env(location, VersionId(step, ATTEMPT))}
    assert materialise_from_env(get_layout(layout), root, env) is not None


def saved_tree(save: Save, root: Path, step: int) -> dict[str, bytes]:
    """What a restore must give back: the step folder and the tracker, byte for byte."""
    keep = (f"{save.folder(step)}/", save.tracker or "\0")
    return {k: v for k, v in tree(root).items() if k.startswith(keep) or k == keep[1]}


@pytest.mark.parametrize("save", SAVES, ids=SAVE_IDS)
def test_a_mirrored_save_restores_byte_for_byte(
    save: Save, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    save.save(source, 10)
    save.write_files(source, 20)  # a save cut short: never mirrored
    mirror = mirror_for(s3_bucket, save.layout, source)
    assert mirror.run_once() == 10
    assert mirror.run_once() is None
    reader = CheckpointReader(s3_bucket.location(), VersionId(10, ATTEMPT), store=s3_bucket.store())
    assert reader.validate().valid
    assert [v.step for v in s3_bucket.store().list_versions()] == [10]
    resume_into(s3_bucket, save.layout, target, 10)
    assert tree(target) == saved_tree(save, source, 10)
    assert get_layout(save.layout).complete_steps(target) == [10]


@pytest.mark.parametrize(
    "save", [s for s in SAVES if s.layout in ("verl", "nemo-rl", "dcp")], ids=lambda s: s.layout
)
def test_two_nodes_each_restore_their_own_files(
    save: Save, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    roots = [tmp_path / "node0", tmp_path / "node1"]
    save.save(roots[0], 3, node=0, nodes=2)
    save.write_files(roots[1], 3, node=1, nodes=2)
    late = mirror_for(s3_bucket, save.layout, roots[1], 1, 2)
    driver = mirror_for(s3_bucket, save.layout, roots[0], 0, 2)
    driver.commit_timeout = 30.0
    driver.start()
    deadline = time.monotonic() + 30  # node 1 waits for the driver's ready marker
    while late.run_once() != 3:
        assert time.monotonic() < deadline, "node 1 was never asked for step 3"
        threading.Event().wait(0.05)
    assert driver.stop(final_pass_timeout=30.0)
    assert driver.errors == []
    for node, root in enumerate(roots):
        target = tmp_path / f"restored{node}"
        resume_into(s3_bucket, save.layout, target, 3, node, 2)
        restored = tree(target)
        original = {k.replace("tmp_step_", "step_"): v for k, v in tree(root).items()}
        if save.tracker:  # every node gets the tracker (Megatron reads it on every rank)
            assert restored.pop(save.tracker) == save.tracker_text(3).encode()
            original.pop(save.tracker, None)
        assert restored == original


@pytest.mark.parametrize(
    "save",
    [s for s in SAVES if s.layout in ("verl", "nemo-rl", "megatron")],
    ids=lambda s: s.layout,
)
def test_a_shared_directory_round_trips_through_node_zero_alone(
    save: Save, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    """Both nodes write into one volume (--checkpoint-shared): node 0 mirrors it whole, restores
    it whole; node 1 restores nothing; a resume on three nodes is refused."""
    shared, target = tmp_path / "shared", tmp_path / "restored"
    save.write_files(shared, 6, node=1, nodes=2)
    save.save(shared, 6, node=0, nodes=2)
    location = s3_bucket.location()
    writer = CheckpointWriter.from_env(env_for(s3_bucket, location))
    node = NodeIdentity(0, 2, shared=True)
    assert Mirror(get_layout(save.layout), shared, writer, node=node).run_once() == 6
    env = {**env_for(s3_bucket, location, 0, 2), **resume_env(location, VersionId(6, ATTEMPT))}
    layout = get_layout(save.layout)
    assert materialise_from_env(layout, target, env, shared=True) is not None
    assert tree(target) == saved_tree(save, shared, 6)
    other = {**env, "NODE_RANK": "1"}
    assert materialise_from_env(layout, tmp_path / "node1", other, shared=True) is None
    assert not (tmp_path / "node1").exists()
    with pytest.raises(WorldSizeMismatch, match="saved by 2 trainer node"):
        three = {**env, "NNODES": "3"}
        materialise_from_env(layout, tmp_path / "three", three, shared=True)


def test_a_different_node_count_is_refused_before_any_download(
    s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    save = SAVES[SAVE_IDS.index("megatron")]
    save.save(tmp_path / "source", 4)
    assert mirror_for(s3_bucket, "megatron", tmp_path / "source").run_once() == 4
    with pytest.raises(WorldSizeMismatch, match="saved by 1 trainer node"):
        resume_into(s3_bucket, "megatron", tmp_path / "target", 4, node=0, nodes=2)
    assert not (tmp_path / "target").exists() or tree(tmp_path / "target") == {}


DCP_SAVE = """
import sys, torch, torch.distributed.checkpoint as dcp
torch.manual_seed(int(sys.argv[2]))
state = {"w": torch.randn(64, 32), "b": torch.arange(16.0), "step": torch.tensor(int(sys.argv[2]))}
dcp.save(state, checkpoint_id=sys.argv[1])
"""
DCP_LOAD = """
import sys, torch, torch.distributed.checkpoint as dcp
torch.manual_seed(int(sys.argv[2]))
want = {"w": torch.randn(64, 32), "b": torch.arange(16.0), "step": torch.tensor(int(sys.argv[2]))}
got = {k: torch.zeros_like(v) for k, v in want.items()}
dcp.load(got, checkpoint_id=sys.argv[1])
assert all(torch.equal(got[k], want[k]) for k in want), "restored tensors differ"
print("loaded")
"""


def run_ok(argv: list[str], env: dict[str, str] | None = None) -> str:
    """Runs argv with the operator's sources on the path; its output, or a failure quoting it."""
    env = {**(os.environ if env is None else env), "PYTHONPATH": str(TOP / "operator")}
    done = subprocess.run(argv, check=False, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def run_torch(venv: Path, script: str, *args: str) -> str:
    return run_ok([str(venv / "bin" / "python"), "-c", script, *args])


def test_a_real_dcp_save_round_trips_and_loads(
    torch_venv: Path,  # noqa: F811
    s3_bucket: S3Bucket,
    tmp_path: Path,
) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    run_torch(torch_venv, DCP_SAVE, str(source / "step-30"), "30")
    layout = get_layout("dcp")
    assert layout.complete_steps(source) == [30]
    assert mirror_for(s3_bucket, "dcp", source).run_once() == 30
    resume_into(s3_bucket, "dcp", target, 30)
    assert tree(target) == tree(source)
    assert "loaded" in run_torch(torch_venv, DCP_LOAD, str(target / "step-30"), "30")


TRAINER = """
import os, pathlib, sys
root = pathlib.Path(sys.argv[1])
restored = sorted(p.name for p in root.glob("global_step_*"))
print("restored", restored, flush=True)
step = int(sys.argv[2])
folder = root / f"global_step_{step}" / "actor"
folder.mkdir(parents=True)
(folder / "model_world_size_1_rank_0.pt").write_bytes(os.urandom(4096))
(root / "latest_checkpointed_iteration.txt").write_text(str(step))
"""


def test_the_entrypoint_restores_mirrors_and_passes_once_more_on_exit(
    s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    location = s3_bucket.location()
    base = {**os.environ, **env_for(s3_bucket, location), "RLJOB_MIRROR_INTERVAL": "30"}
    base["RLJOB_TERMINATION_LOG"] = str(tmp_path / "termination-log")

    def entrypoint(root: Path, step: int, env: dict[str, str]) -> str:
        flags = ["--checkpoint-layout", "verl", "--checkpoint-dir", str(root), "--"]
        trainer = [sys.executable, "-c", TRAINER, str(root), str(step)]
        return run_ok([sys.executable, "-m", "rljob.sdk.entrypoint", *flags, *trainer], env)

    # With a 30 s interval, the trainer's save is mirrored by the first pass if it saw it, else
    # by the last pass on exit: either way before the entrypoint returns.
    assert "restored []" in entrypoint(tmp_path / "first", 5, base)
    assert [v.step for v in s3_bucket.store().list_versions()] == [5]
    resumed = {**base, **resume_env(location, VersionId(5, ATTEMPT))}
    assert "restored ['global_step_5']" in entrypoint(tmp_path / "second", 6, resumed)
    assert [v.step for v in s3_bucket.store().list_versions()] == [5, 6]
