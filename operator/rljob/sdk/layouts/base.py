"""What every native layout shares: step folders found by a name pattern, the files of a step as
shard keys relative to the checkpoint directory, and a completion sign (a tracker file or the
step folder's own sign). Pure file-system reads; no store I/O."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from rljob.checkpoint_protocol.errors import CheckpointError
from rljob.checkpoint_protocol.layout import check_shard_key


class WorldSizeMismatch(CheckpointError):  # noqa: N818
    """The resume version was saved by a different number of trainer nodes and its layout does
    not reshard on load. `reason` is what the operator reports as the condition's reason."""

    reason = "WorldSizeMismatch"

    def __init__(self, layout: str, saved: int, current: int, version: str) -> None:
        super().__init__(
            f"{version} was saved by {saved} trainer node(s) in the {layout} layout, whose shards "
            f"are tied to the world size; this attempt has {current}: resume with {saved} "
            "node(s) or start from scratch"
        )
        self.layout = layout
        self.saved = saved
        self.current = current


@dataclass(frozen=True)
class StepFile:
    """One file of a step: its shard key (relative to the checkpoint directory) and its path."""

    key: str
    path: Path


def write_atomic(path: Path, data: bytes) -> None:
    """Writes a small file as a framework's reader must see it: whole or not at all."""
    tmp = path.with_name(f".{path.name}.rljob-tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class Layout:
    """A framework's checkpoint directory: `root/<step folder>/...` plus a completion sign."""

    name: ClassVar[str]
    # The upstream file whose conventions the layout follows.
    upstream: ClassVar[str]
    # Step folder names: group 1 is the step.
    folder: ClassVar[re.Pattern[str]]
    # Loads at any world size (DCP): a version saved by N nodes may resume on M.
    reshards: ClassVar[bool] = False

    def step_dirs(self, root: Path) -> dict[int, Path]:
        """Every local step folder, complete or not."""
        found: dict[int, Path] = {}
        try:
            entries = list(os.scandir(root))
        except FileNotFoundError:
            return found
        for entry in entries:
            match = self.folder.match(entry.name)
            if match is not None and entry.is_dir(follow_symlinks=False):
                found[int(match[1])] = Path(entry.path)
        return found

    def complete_steps(self, root: Path) -> list[int]:
        """The steps whose save finished, by the framework's own sign; ascending."""
        raise NotImplementedError

    def key_prefix(self, step: int, folder: Path) -> str:
        """The step folder's name in shard keys (the name it has once complete)."""
        return folder.name

    def files(self, root: Path, step: int) -> list[StepFile]:
        """The files of step's local folder (none when it has no folder), keys sorted."""
        folder = self.step_dirs(root).get(step)
        if folder is None:
            return []
        prefix = self.key_prefix(step, folder)
        out: list[StepFile] = []
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames.sort()
            for filename in filenames:
                path = Path(dirpath) / filename
                if path.is_symlink() or not path.is_file():
                    continue
                relative = path.relative_to(folder).as_posix()
                out.append(StepFile(check_shard_key(f"{prefix}/{relative}"), path))
        return sorted(out, key=lambda f: f.key)

    def sign_keys(self, keys: list[str]) -> list[str]:
        """Keys restored last, after the step folder is in place (DCP's .metadata)."""
        return []

    def staging_name(self, folder: str) -> str:
        """Where a resumed step folder is assembled before it is moved into place."""
        return f".rljob-restore-{folder}"

    def write_tracker(self, root: Path, step: int, folder: str) -> None:
        """Writes the tracker file last, naming the restored step (no-op without one)."""


class TrackerLayout(Layout):
    """A step folder per save plus a tracker file in the root naming the newest complete save,
    written once the save finished: folders up to the tracker's step are complete, later ones
    are saves in progress (or abandoned by a crash)."""

    tracker: ClassVar[str]

    def tracked_step(self, root: Path) -> int | None:
        try:
            text = (root / self.tracker).read_text(encoding="utf-8").strip()
        except (FileNotFoundError, UnicodeDecodeError):
            return None
        match = self.folder.match(text) or re.fullmatch(r"([0-9]+)", text)
        return int(match[1]) if match is not None else None

    def complete_steps(self, root: Path) -> list[int]:
        tracked = self.tracked_step(root)
        if tracked is None:
            return []
        return sorted(s for s in self.step_dirs(root) if s <= tracked)

    def tracker_text(self, step: int, folder: str) -> str:
        return str(step)

    def write_tracker(self, root: Path, step: int, folder: str) -> None:
        write_atomic(root / self.tracker, self.tracker_text(step, folder).encode())
