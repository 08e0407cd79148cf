"""Native checkpoint layouts: how each RL framework lays out its own saves in a local directory,
how it signs a save complete, and how a resumed step is put back where it expects it.

    layout = get_layout("verl")
    layout.complete_steps(Path("/ckpt"))   # [10, 20]: a half-written save is never listed
    layout.files(Path("/ckpt"), 20)        # StepFile(key="global_step_20/actor/...", path=...)

rljob.sdk.mirror mirrors completed steps into versions; rljob.sdk.native restores one."""

from __future__ import annotations

from rljob.sdk.layouts.base import Layout, StepFile, TrackerLayout, WorldSizeMismatch
from rljob.sdk.layouts.dcp import DCPLayout
from rljob.sdk.layouts.deepspeed import DeepSpeedLayout
from rljob.sdk.layouts.megatron import MegatronLayout
from rljob.sdk.layouts.nemo_rl import NemoRLLayout
from rljob.sdk.layouts.verl import VerlLayout

LAYOUTS: dict[str, type[Layout]] = {
    "verl": VerlLayout,
    "nemo-rl": NemoRLLayout,
    "megatron": MegatronLayout,
    "deepspeed": DeepSpeedLayout,
    # OpenRLHF saves through DeepSpeed's save_checkpoint.
    "openrlhf": DeepSpeedLayout,
    "dcp": DCPLayout,
}


def get_layout(name: str) -> Layout:
    """The layout of that name; ValueError naming the known ones otherwise."""
    try:
        return LAYOUTS[name]()
    except KeyError:
        raise ValueError(
            f"unknown checkpoint layout {name!r}: one of {', '.join(sorted(LAYOUTS))}"
        ) from None


__all__ = [
    "LAYOUTS",
    "DCPLayout",
    "DeepSpeedLayout",
    "Layout",
    "MegatronLayout",
    "NemoRLLayout",
    "StepFile",
    "TrackerLayout",
    "VerlLayout",
    "WorldSizeMismatch",
    "get_layout",
]
