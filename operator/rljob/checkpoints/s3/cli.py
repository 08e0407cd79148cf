"""`rljob checkpoints ls|show|validate s3://...`: inspect a job's checkpoints.

    rljob checkpoints ls s3://bucket/prefix/<namespace>/<job>
    rljob checkpoints show s3://bucket/prefix/<namespace>/<job>/v000000001200-a000003
    rljob checkpoints validate s3://bucket/prefix/<namespace>/<job>[/<version>] [--all]

The store is reached as the SDK does: --endpoint/--region/--addressing-style, else
RLJOB_S3_ENDPOINT (or AWS_ENDPOINT_URL_S3), RLJOB_S3_REGION (or AWS_REGION), and credentials
from boto3's default chain. Exit codes: 0 fine, 1 invalid or nothing valid, 2 store or usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from rljob.checkpoint_protocol.errors import CheckpointError
from rljob.checkpoint_protocol.layout import CheckpointLocation, VersionId
from rljob.checkpoint_protocol.s3.transport import StoreEndpoint
from rljob.checkpoint_protocol.validity import Validity, VersionObjects
from rljob.checkpoints.lineage import Lineage
from rljob.checkpoints.s3.store import OperatorStore

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_ERROR = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rljob checkpoints", description="Inspect a job's versioned checkpoints in S3."
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--endpoint", help="S3-compatible endpoint URL (default: AWS S3)")
    common.add_argument("--region", help="bucket region")
    common.add_argument(
        "--addressing-style", choices=("auto", "virtual", "path"), help="bucket addressing"
    )
    common.add_argument("--json", action="store_true", help="machine-readable output")
    commands = parser.add_subparsers(dest="command", required=True)
    ls = commands.add_parser(
        "ls", parents=[common], help="list versions: state, lineage, size, age"
    )
    ls.add_argument("uri", help="s3://bucket/prefix/<namespace>/<job>")
    ls.add_argument("--attempt", type=int, help="current attempt (default: the highest marker)")
    show = commands.add_parser("show", parents=[common], help="print a version's manifest")
    show.add_argument("uri", help="s3://bucket/prefix/<namespace>/<job>/<version>")
    validate = commands.add_parser(
        "validate",
        parents=[common],
        help="validate one version, or find the version a restart would resume from",
    )
    validate.add_argument("uri", help="a job URI, or a version URI")
    validate.add_argument("--attempt", type=int, help="current attempt (default: highest marker)")
    validate.add_argument(
        "--all", action="store_true", help="validate every committed version of the job"
    )
    return parser


def main(argv: list[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "ls":
            return _ls(args, out)
        if args.command == "show":
            return _show(args, out)
        return _validate(args, out)
    except (CheckpointError, ValueError) as exc:
        err.write(f"rljob checkpoints {args.command}: {exc}\n")
        return EXIT_ERROR


def _store(location: CheckpointLocation, args: argparse.Namespace) -> OperatorStore:
    endpoint = StoreEndpoint.from_env()
    endpoint = StoreEndpoint(
        url=args.endpoint or endpoint.url,
        region=args.region or endpoint.region,
        addressing_style=args.addressing_style
        or ("path" if args.endpoint else endpoint.addressing_style),
    )
    return OperatorStore(location, endpoint)


def _job_or_version(uri: str) -> tuple[CheckpointLocation, VersionId | None]:
    last = uri.rstrip("/").rsplit("/", 1)[-1]
    if last.startswith("v") and "-a" in last:
        return CheckpointLocation.from_version_uri(uri)
    return CheckpointLocation.from_job_uri(uri), None


def _lineage(store: OperatorStore, attempt: int | None) -> Lineage | None:
    markers = store.read_markers()
    if attempt is None and not markers:
        return None
    return Lineage.from_markers(markers.values(), attempt)


def _state(objects: VersionObjects, lineage: Lineage | None) -> str:
    if not objects.complete:
        return "incomplete"
    if lineage is not None and not lineage.eligible(objects.version):
        return "not-in-lineage"
    return "committed"


def _age(when: datetime | None, now: datetime) -> str:
    if when is None:
        return "-"
    seconds = int((now - when).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{size}B"


def _ls(args: argparse.Namespace, out: TextIO) -> int:
    location = CheckpointLocation.from_job_uri(args.uri)
    store = _store(location, args)
    lineage = _lineage(store, args.attempt)
    pointer = store.read_pointer()
    versions = store.list_versions()
    now = datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    for version, objects in sorted(versions.items(), reverse=True):
        why = None if lineage is None else lineage.why_ineligible(version)
        rows.append(
            {
                "version": version.name,
                "step": version.step,
                "attempt": version.attempt,
                "state": _state(objects, lineage),
                "objects": len(objects.objects),
                "size": sum(o.size for o in objects.objects.values()),
                "modified": objects.newest_modified,
                "note": why or "",
            }
        )
    pointer_name = None if pointer is None else pointer[0].version
    if args.json:
        doc = {
            "uri": location.uri,
            "pointer": pointer_name,
            "currentAttempt": None if lineage is None else lineage.current_attempt,
            "attempts": {} if lineage is None else dict(lineage.resumed_from),
            "versions": [
                {**r, "modified": r["modified"].isoformat() if r["modified"] else None}
                for r in rows
            ],
        }
        out.write(json.dumps(doc, indent=2) + "\n")
        return EXIT_OK
    current = "none" if lineage is None else str(lineage.current_attempt)
    out.write(f"{location.uri}  pointer: {pointer_name or '-'}  current attempt: {current}\n")
    out.write(f"{'VERSION':<24}{'STATE':<16}{'OBJECTS':>8}{'SIZE':>11}{'AGE':>7}  NOTE\n")
    for r in rows:
        out.write(
            f"{r['version']:<24}{r['state']:<16}{r['objects']:>8}{_size(r['size']):>11}"
            f"{_age(r['modified'], now):>7}  {r['note']}\n"
        )
    return EXIT_OK


def _show(args: argparse.Namespace, out: TextIO) -> int:
    location, version = CheckpointLocation.from_version_uri(args.uri)
    store = _store(location, args)
    verdict = store.validate(version)
    if verdict.manifest is None:
        out.write(f"{version.name}: {verdict.reason}\n")
        return EXIT_INVALID
    if args.json:
        shown = verdict.manifest.to_wire(keep_none=True)  # every field, as before
        out.write(json.dumps(shown, indent=2, ensure_ascii=False) + "\n")
        return EXIT_OK if verdict.valid else EXIT_INVALID
    m = verdict.manifest
    out.write(f"version:           {version.name}\n")
    out.write(f"job:               {m.namespace}/{m.job} (uid {m.job_uid or '-'})\n")
    out.write(f"step / attempt:    {m.step} / {m.attempt}\n")
    out.write(
        f"policy generation: {m.policy_generation if m.policy_generation is not None else '-'}\n"
    )
    out.write(f"created:           {m.created_at.isoformat()}\n")
    out.write(f"state:             {'valid' if verdict.valid else verdict.reason}\n")
    out.write(f"shards:            {len(m.shards)}, {_size(m.total_size)}\n")
    for shard in m.shards:
        out.write(f"  {shard.key}  {shard.size}  sha256:{shard.sha256}\n")
    for key, value in sorted(m.metadata.items()):
        out.write(f"metadata.{key}: {json.dumps(value)}\n")
    return EXIT_OK if verdict.valid else EXIT_INVALID


def _validate(args: argparse.Namespace, out: TextIO) -> int:
    location, version = _job_or_version(args.uri)
    store = _store(location, args)
    if version is not None:
        verdict = store.validate(version)
        _report([verdict], out, args.json)
        return EXIT_OK if verdict.valid else EXIT_INVALID
    lineage = _lineage(store, args.attempt)
    if args.all:
        versions = store.list_versions()
        verdicts = [
            store.validate(v, objs)
            for v, objs in sorted(versions.items(), reverse=True)
            if objs.complete
        ]
        _report(verdicts, out, args.json)
        return EXIT_OK if all(v.valid for v in verdicts) else EXIT_INVALID
    if lineage is None:
        lineage = Lineage(_highest_attempt(store), {})
    discovery = store.discover(lineage)
    selection = discovery.selection
    if args.json:
        doc = {
            "resumeFrom": None if selection.version is None else selection.version.name,
            "skipped": [{"version": v.version.name, "reason": v.reason} for v in selection.skipped],
            "pointer": None if discovery.pointer is None else discovery.pointer.name,
            "pointerNote": discovery.pointer_note,
            "requests": discovery.requests,
        }
        out.write(json.dumps(doc, indent=2) + "\n")
    else:
        if discovery.pointer_note:
            out.write(f"note: {discovery.pointer_note}\n")
        out.write(selection.message() + "\n")
    return EXIT_OK if selection.chosen is not None else EXIT_INVALID


def _highest_attempt(store: OperatorStore) -> int:
    """Without markers (the SDK used without the operator): every attempt counts as current."""
    attempts = [v.attempt for v in store.list_versions()]
    return max(attempts, default=0)


def _report(verdicts: Sequence[Validity], out: TextIO, as_json: bool) -> None:
    if as_json:
        doc = [
            {
                "version": v.version.name,
                "valid": v.valid,
                "problem": None if v.problem is None else str(v.problem),
                "reason": v.reason,
            }
            for v in verdicts
        ]
        out.write(json.dumps(doc, indent=2) + "\n")
        return
    for verdict in verdicts:
        out.write(verdict.describe() + "\n")
