"""Hatch build hook of the sub-projects under operator/ (sdk, kubectl, bed): their sources live in
the one tree operator/rljob, outside their own folders. A regular wheel force-includes the
folders the hook's `include` table names; an editable one includes nothing, its .pth
(dev-mode-dirs) puts operator/ on sys.path, so an edit shows without a reinstall (hatch's static
force-include would copy the files into site-packages, where they shadow the tree). Build the
sub-projects' wheels straight from the tree (`uv build --wheel`): their sdists hold no sources."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class SharedTreeHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        root = Path(self.root)
        for source, target in self.config["include"].items():
            build_data["force_include"][str((root / source).resolve())] = target
