"""Selection: the newest eligible valid version, falling back with reasons."""

from __future__ import annotations

import pytest

from rljob.checkpoint_protocol.layout import VersionId
from rljob.checkpoint_protocol.validity import Problem, Validity, check_version
from rljob.checkpoints.lineage import Lineage
from rljob.checkpoints.selection import checkpoint_ref, select_version

from ._build import LOC, NOW, manifest, objects, v

SECOND = Lineage(2, {1: None, 2: 100})


def verdicts(broken: dict[VersionId, str]) -> dict[VersionId, Validity]:
    """Verdicts for a small history where `broken` versions have the named defect."""
    out: dict[VersionId, Validity] = {}
    for version in (v(80, 1), v(90, 1), v(100, 1), v(150, 1), v(110, 2), v(120, 2)):
        kind = broken.get(version, "ok")
        data: bytes | None = manifest(version).to_json()
        listing = objects(version)
        if kind == "incomplete":
            listing = objects(version, with_manifest=False)
            data = None
        elif kind == "corrupt":
            data = b"not json"
        elif kind == "missing":
            listing = objects(version, sizes={})
        elif kind == "truncated":
            listing = objects(version, sizes={"model/rank0.pt": 2})
        out[version] = check_version(version, listing, data, checked_at=NOW)
    return out


@pytest.mark.parametrize(
    ("broken", "chosen", "message"),
    [
        pytest.param(
            {}, v(120, 2), "newest valid checkpoint is v000000000120-a000002", id="newest"
        ),
        pytest.param(
            {v(120, 2): "corrupt"},
            v(110, 2),
            "v000000000120-a000002: corrupt manifest: ",
            id="corrupt-manifest",
        ),
        pytest.param(
            {v(120, 2): "missing"},
            v(110, 2),
            "v000000000120-a000002: missing shard model/rank0.pt; fell back to "
            "v000000000110-a000002",
            id="missing-shard",
        ),
        pytest.param(
            {v(120, 2): "truncated"},
            v(110, 2),
            "v000000000120-a000002: truncated shard model/rank0.pt: size 2 != 7; fell back to "
            "v000000000110-a000002",
            id="truncated-shard",
        ),
        pytest.param(
            {v(120, 2): "incomplete"},
            v(110, 2),
            "v000000000120-a000002: incomplete: no manifest; fell back to v000000000110-a000002",
            id="crash-before-manifest",
        ),
        pytest.param(
            {v(120, 2): "incomplete", v(110, 2): "missing", v(100, 1): "truncated"},
            v(90, 1),
            "v000000000120-a000002: incomplete: no manifest; v000000000110-a000002: missing "
            "shard model/rank0.pt; v000000000100-a000001: truncated shard model/rank0.pt: size "
            "2 != 7; fell back to v000000000090-a000001",
            id="chain-of-fallbacks-into-older-attempt",
        ),
        pytest.param(
            {
                v(120, 2): "corrupt",
                v(110, 2): "corrupt",
                v(100, 1): "corrupt",
                v(90, 1): "corrupt",
                v(80, 1): "corrupt",
            },
            None,
            "no valid checkpoint: v000000000120-a000002: corrupt manifest",
            id="nothing-valid",
        ),
    ],
)
def test_select(broken: dict[VersionId, str], chosen: VersionId | None, message: str) -> None:
    table = verdicts(broken)
    checked: list[VersionId] = []

    def validate(version: VersionId) -> Validity:
        checked.append(version)
        return table[version]

    selection = select_version(table, SECOND, validate)
    assert selection.version == chosen
    assert selection.message().startswith(message)
    assert selection.fell_back is bool(broken)
    # the zombie's v150-a1 is never even looked at; validation stops at the first valid one
    assert v(150, 1) not in checked
    if chosen is not None:
        assert checked[-1] == chosen and all(table[c].problem for c in checked[:-1])


def test_incomplete_is_not_broken() -> None:
    table = verdicts({v(120, 2): "incomplete", v(110, 2): "missing"})
    selection = select_version(table, SECOND, table.__getitem__)
    assert [s.problem for s in selection.skipped] == [Problem.INCOMPLETE, Problem.MISSING_SHARD]
    assert [s.problem for s in selection.broken] == [Problem.MISSING_SHARD]


def test_no_candidates() -> None:
    selection = select_version([], SECOND, lambda _: pytest.fail("no validation expected"))
    assert selection.chosen is None and selection.message() == "no checkpoint yet"


def test_max_checks_bounds_validation() -> None:
    table = verdicts({v(120, 2): "corrupt", v(110, 2): "corrupt"})
    selection = select_version(table, SECOND, table.__getitem__, max_checks=1)
    assert selection.chosen is None and len(selection.skipped) == 1


def test_checkpoint_ref() -> None:
    verdict = verdicts({})[v(120, 2)]
    ref = checkpoint_ref(LOC, verdict)
    assert ref.version == "v000000000120-a000002"
    assert (ref.step, ref.attempt) == (120, 2)
    assert ref.uri == "s3://bucket/ckpt/rl/grpo/v000000000120-a000002/"
    assert ref.saved_at == NOW and ref.validated_at == NOW
