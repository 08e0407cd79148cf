"""The `rljob` command line."""

from __future__ import annotations

import argparse
import functools
import sys
from importlib.metadata import entry_points
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from rljob.version import __version__

if TYPE_CHECKING:
    from rljob.adapters.metrics import SourceKey
    from rljob.reconcile.reach import Allowlist


# Subcommands other distributions add, by entry point: the bed's `dev` (rljob.dev.command). No
# product module imports the bed by name; without it, `rljob dev` only says how to get it.
COMMANDS_GROUP = "rljob.commands"
_NO_BED = "rljob dev needs the bed: pip install rljob-bed (or, in a checkout, tools/bootstrap.sh)"


def _add_registered_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    unusable: list[str] = []
    for entry in sorted(entry_points(group=COMMANDS_GROUP), key=lambda found: found.name):
        try:
            entry.load()(commands)
        except ImportError as exc:  # registered, but not importable here: `rljob run` still runs
            unusable.append(f"{entry.value}: {exc}")
    if "dev" not in commands.choices:
        missing = commands.add_parser("dev", help="local control plane (needs rljob-bed)")
        missing.add_argument("rest", nargs=argparse.REMAINDER)
        missing.set_defaults(handler=functools.partial(_no_bed, unusable))


def _no_bed(unusable: list[str], _: argparse.Namespace) -> int:
    print("\n".join([_NO_BED, *unusable]), file=sys.stderr)
    return 2


def _run(args: argparse.Namespace) -> int:
    from rljob.run import run_operator
    from rljob.runtime.runtime import RuntimeOptions

    options = RuntimeOptions(
        kubeconfig=args.kubeconfig,
        namespaces=tuple(args.namespace),
        resync_seconds=args.resync_seconds,
        lease_namespace=args.leader_election_namespace,
        default_source=_default_source(args),
        allowlist=_allowlist(args),
        kueue=args.kueue,
    )
    return run_operator(
        options,
        metrics_address=args.metrics_address,
        metrics_port=args.metrics_port,
        liveness_endpoint=f"http://{args.metrics_address}:{args.liveness_port}/healthz",
        log_level=args.log_level,
    )


def _default_source(args: argparse.Namespace) -> SourceKey | None:
    from rljob.adapters.metrics import SourceKey

    if args.direct_scrape:
        return SourceKey("direct", default=True)
    if not args.prometheus_url:
        return None
    return SourceKey(
        "prometheus",
        url=args.prometheus_url.rstrip("/"),
        headers=tuple(sorted(args.prometheus_header)),
        token_file=args.prometheus_token_file,
        pod_label=args.prometheus_pod_label,
        namespace_label=args.prometheus_namespace_label,
        default=True,
    )


def _allowlist(args: argparse.Namespace) -> Allowlist:
    from rljob.reconcile.reach import ANY_BUCKET, Allowlist

    return Allowlist(
        prometheus_urls=tuple(args.allow_prometheus_url),
        s3_endpoints=tuple(args.allow_s3_endpoint),
        s3_buckets=tuple(args.allow_s3_bucket or [ANY_BUCKET]),
    )


def _allowed_url(text: str) -> str:
    from rljob.reconcile.reach import ANY_PORT, normalized

    parts = urlsplit(text.removesuffix(ANY_PORT))
    if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not http(s)://host[:port][/path] or http(s)://host:*"
        )
    return normalized(text)


def _add_allowlist_flags(run: argparse.ArgumentParser) -> None:
    """Where jobs may aim the operator (its default source and S3 endpoint are always allowed)."""
    allow = run.add_argument_group("what jobs may name (repeatable; host:* allows any port)")
    for flag, what in (("prometheus-url", "Prometheus URL"), ("s3-endpoint", "S3 endpoint")):
        allow.add_argument(
            f"--allow-{flag}", action="append", type=_allowed_url, default=[], metavar="URL",
            help=f"a {what} jobs may name",
        )  # fmt: skip
    allow.add_argument(
        "--allow-s3-bucket",
        action="append",
        default=[],
        metavar="BUCKET",
        help="a bucket jobs may use (default: any, '*')",
    )


def _header(text: str) -> tuple[str, str]:
    name, colon, value = text.partition(":")
    if not colon or not name.strip() or any(c.isspace() for c in name.strip()):
        raise argparse.ArgumentTypeError(f"{text!r} is not 'Name: value'")
    return name.strip(), value.strip()


def _add_source_flags(run: argparse.ArgumentParser) -> None:
    """The default metrics source of jobs without spec.health.source."""
    source = run.add_argument_group("default metrics source (jobs without spec.health.source)")
    which = source.add_mutually_exclusive_group()
    which.add_argument("--prometheus-url", help="base URL of a Prometheus HTTP API")
    which.add_argument(
        "--direct-scrape",
        action="store_true",
        help="scrape each pod's metrics port at its pod IP (no Prometheus)",
    )
    source.add_argument(
        "--prometheus-token-file",
        help="file holding a bearer token for Prometheus, re-read every minute",
    )
    source.add_argument(
        "--prometheus-header",
        action="append",
        type=_header,
        default=[],
        metavar="'NAME: VALUE'",
        help="extra HTTP header of every query (repeatable)",
    )
    source.add_argument("--prometheus-pod-label", default="pod")
    source.add_argument("--prometheus-namespace-label", default="namespace")


def _crd(_: argparse.Namespace) -> int:
    from rljob.api import crd_yaml

    sys.stdout.write(crd_yaml())
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rljob", description=__doc__)
    parser.add_argument("--version", action="version", version=f"rljob {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the operator")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster credentials)")
    run.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="act only in this namespace (repeatable; default: all). A pattern such as team-* "
        "or !kube-* watches every namespace, as the cluster-wide install's rules allow, and acts "
        "in those that match",
    )
    run.add_argument("--metrics-address", default="0.0.0.0", help="bind address of /metrics")
    run.add_argument("--metrics-port", type=int, default=8080)
    run.add_argument("--liveness-port", type=int, default=8081)
    run.add_argument("--resync-seconds", type=float, default=300.0, help="periodic pass per job")
    run.add_argument("--log-level", default="INFO")
    run.add_argument(
        "--leader-election-namespace",
        help="hold a Lease there so that only one replica acts (default: off, one replica)",
    )
    run.add_argument(
        "--kueue",
        action="store_true",
        help="Kueue queues the cluster's work: a job labelled kueue.x-k8s.io/queue-name runs "
        "only once its Workload is admitted (Kueue configured with RLJob.v1alpha1.rljob.io "
        "under integrations.externalFrameworks; docs/kueue.md)",
    )
    _add_source_flags(run)
    _add_allowlist_flags(run)
    run.set_defaults(handler=_run)

    crd = commands.add_parser("crd", help="print the RLJob CustomResourceDefinition")
    crd.set_defaults(handler=_crd)

    commands.add_parser("checkpoints", help="ls|show|validate s3://... (see its --help)")

    _add_registered_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["checkpoints"]:  # its own parser, options included
        from rljob.checkpoints.s3 import cli

        return cli.main(argv[1:])
    args = _parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
