"""examples/frameworks/slime-disaggregated.yaml: SGLang engines as the rollout role with slot
Services, behind the gate on their own weight version, started at version 0 with their metrics
on; slime handed every slot's address once and told to update them from disk, keeping the
directories a replacement engine is loaded from (docs/weight-sync.md#engine-slots)."""

from __future__ import annotations

from rljob.api import Engine, GenerationFrom, WeightSync, parse_rljob
from rljob.reconcile import RenderContext, render_children
from tests.unit.reconcile.world import example_body

NAME = "slime-disagg"


def test_the_engines_are_slotted_gated_sglang() -> None:
    rollout = parse_rljob(example_body("frameworks/slime-disaggregated")).spec.roles.rollout
    assert rollout is not None
    chosen = (rollout.engine, rollout.weight_sync, rollout.generation_from, rollout.slot_services)
    assert chosen == (Engine.SGLANG, WeightSync.GATED, GenerationFrom.ENGINE, True)
    assert {"--enable-metrics", "--weight-version=0", "--port=30000"} <= set(rollout.args or [])


def test_slime_gets_every_slot_once_and_updates_them_from_disk() -> None:
    job = parse_rljob(example_body("frameworks/slime-disaggregated"))
    context = RenderContext(name=NAME, namespace="rl", uid="u", attempt=1)
    children = {(c.kind, c.name): c for c in render_children(job, context)}
    slots = [f"{NAME}-rollout-{k}" for k in range(4)]
    assert all(("Service", slot) in children for slot in slots)
    trainer = children[("Job", f"{NAME}-trainer-a1")].body["spec"]["template"]["spec"]
    container = trainer["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["RLJOB_ROLLOUT_SLOT_ADDRESSES"].split() == [f"{s}.rl.svc:30000" for s in slots]
    script = " ".join(container["args"])
    assert "--rollout-external-engine-addrs $RLJOB_ROLLOUT_SLOT_ADDRESSES" in script
    trainer_args = job.spec.roles.trainer.args or []
    assert {"--update-weight-transport=disk", "--update-weight-disk-keep-files"} <= set(
        trainer_args
    )
