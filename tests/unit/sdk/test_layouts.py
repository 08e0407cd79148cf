"""Native layouts: which steps a framework signed complete (a half-written save never is), the
files of a step as shard keys, the tracker each framework writes, and the world-size rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from rljob.checkpoint_protocol.layout import VersionId
from rljob.sdk.layouts import LAYOUTS, WorldSizeMismatch, get_layout
from rljob.sdk.native import check_world, part_name, part_rank
from tests.unit.sdk.native_saves import SAVE_IDS, SAVES, Save, tree


@pytest.mark.parametrize("save", SAVES, ids=SAVE_IDS)
def test_a_signed_save_is_complete_with_every_file_keyed_under_its_folder(
    save: Save, tmp_path: Path
) -> None:
    save.save(tmp_path, 10)
    layout = get_layout(save.layout)
    assert layout.complete_steps(tmp_path) == [10]
    keys = [f.key for f in layout.files(tmp_path, 10)]
    on_disk = [k for k in tree(tmp_path) if k.startswith(f"{save.folder(10)}/")]
    assert keys == sorted(on_disk)
    assert layout.files(tmp_path, 11) == []


@pytest.mark.parametrize("save", SAVES, ids=SAVE_IDS)
def test_a_save_cut_short_before_its_sign_is_never_complete(save: Save, tmp_path: Path) -> None:
    layout = get_layout(save.layout)
    save.write_files(tmp_path, 10)
    assert layout.complete_steps(tmp_path) == []
    save.sign(tmp_path, 10)
    save.write_files(tmp_path, 20)  # the next save crashes before its sign
    assert layout.complete_steps(tmp_path) == [10]
    assert 20 in layout.step_dirs(tmp_path)


@pytest.mark.parametrize("save", [s for s in SAVES if s.tracker], ids=lambda s: s.layout)
def test_the_tracker_is_written_as_the_framework_writes_it(save: Save, tmp_path: Path) -> None:
    assert save.tracker is not None
    layout = get_layout(save.layout)
    layout.write_tracker(tmp_path, 42, save.folder(42))
    assert (tmp_path / save.tracker).read_text() == save.tracker_text(42)
    assert not [p for p in tmp_path.iterdir() if p.name != save.tracker]


@pytest.mark.parametrize(
    ("layout", "tracker", "text"),
    [
        ("megatron", "latest_checkpointed_iteration.txt", "release"),
        ("deepspeed", "latest", "my_custom_tag"),
        ("verl", "latest_checkpointed_iteration.txt", ""),
    ],
    ids=["megatron-release", "deepspeed-custom-tag", "verl-empty-tracker"],
)
def test_a_tracker_naming_no_step_completes_nothing(
    layout: str, tracker: str, text: str, tmp_path: Path
) -> None:
    save = SAVES[SAVE_IDS.index(layout)]
    save.write_files(tmp_path, 5)
    (tmp_path / tracker).write_text(text)
    assert get_layout(layout).complete_steps(tmp_path) == []


def test_nemo_rl_keys_a_nodes_unrenamed_tmp_folder_as_the_step_folder(tmp_path: Path) -> None:
    save = SAVES[SAVE_IDS.index("nemo-rl")]
    save.write_files(tmp_path, 7, node=1, nodes=2)
    layout = get_layout("nemo-rl")
    assert layout.complete_steps(tmp_path) == []
    keys = [f.key for f in layout.files(tmp_path, 7)]
    assert keys and all(k.startswith("step_7/") for k in keys)


def test_nemo_rl_prefers_the_finished_folder_over_a_stale_tmp_one(tmp_path: Path) -> None:
    save = SAVES[SAVE_IDS.index("nemo-rl")]
    save.save(tmp_path, 7)
    (tmp_path / "tmp_step_7").mkdir()
    layout = get_layout("nemo-rl")
    assert layout.step_dirs(tmp_path)[7] == tmp_path / "step_7"
    assert layout.complete_steps(tmp_path) == [7]


def test_a_missing_directory_has_no_steps(tmp_path: Path) -> None:
    for name in LAYOUTS:
        assert get_layout(name).complete_steps(tmp_path / "absent") == []


def test_an_unknown_layout_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="dcp, deepspeed, megatron, nemo-rl, openrlhf, verl"):
        get_layout("torchtune")


@pytest.mark.parametrize(
    ("layout", "saved", "current", "refused"),
    [
        ("verl", 2, 2, False),
        ("verl", 2, 3, True),
        ("megatron", 4, 1, True),
        ("deepspeed", 1, 2, True),
        ("nemo-rl", 2, 1, True),
        ("dcp", 2, 3, False),
        ("verl", None, 3, False),
    ],
    ids=[
        "verl-same-nodes",
        "verl-more-nodes",
        "megatron-fewer-nodes",
        "deepspeed-more-nodes",
        "nemo-rl-fewer-nodes",
        "dcp-reshards",
        "no-record",
    ],
)
def test_a_different_node_count_is_refused_unless_the_layout_reshards(
    layout: str, saved: int | None, current: int, refused: bool
) -> None:
    version = VersionId(100, 2)
    if not refused:
        check_world(get_layout(layout), version, saved, current)
        return
    with pytest.raises(WorldSizeMismatch) as caught:
        check_world(get_layout(layout), version, saved, current)
    assert caught.value.reason == "WorldSizeMismatch"
    assert f"saved by {saved} trainer node(s)" in str(caught.value)
    assert version.name in str(caught.value)


@pytest.mark.parametrize(
    ("relative", "rank"),
    [
        (part_name(3), 3),
        ("_rljob/parts/node-x.json", None),
        ("_rljob/ready.json", None),
        ("global_step_1/actor/x.pt", None),
    ],
    ids=["part", "bad-number", "ready-marker", "shard"],
)
def test_part_markers_are_told_from_shards(relative: str, rank: int | None) -> None:
    assert part_rank(relative) == rank
