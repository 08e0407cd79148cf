"""The `rljob` command line."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from rljob.version import __version__

if TYPE_CHECKING:
    from rljob.adapters.metrics import SourceKey
    from rljob.reconcile.reach import Allowlist


# `rljob dev ...` runs the bed, a distribution of its own that no image installs.
_NO_BED = "rljob dev needs the bed: pip install rljob-bed (or, in a checkout, tools/bootstrap.sh)"


def _dev(args: argparse.Namespace) -> int:
    try:
        from rljob.dev.controlplane import ControlPlaneError
    except ModuleNotFoundError as exc:
        if exc.name not in {"rljob.dev", "rljob.dev.controlplane"}:
            raise  # the bed is there but something it imports is not
        print(_NO_BED, file=sys.stderr)
        return 2

    try:
        return _dev_command(args)
    except ControlPlaneError as exc:  # a component that did not come up, a run folder in use
        print(f"rljob dev {args.dev_command}: {exc}", file=sys.stderr)
        return 1


def _dev_command(args: argparse.Namespace) -> int:
    from rljob.dev import launcher

    # Absolute: the components' command lines name it, which is how `up` sees a live bed.
    run_dir = Path(args.run_dir).absolute() if args.run_dir else launcher.default_run_dir()
    if args.dev_command == "up":
        return _dev_up(args, run_dir)
    if args.dev_command == "demo":
        from rljob.dev.demo import run_demo

        return run_demo(run_dir, once=args.once)
    if args.dev_command == "down":
        return launcher.down(run_dir)
    if args.dev_command == "status":
        return launcher.status(run_dir)
    print(launcher.env_lines(run_dir))
    return 0


def _dev_up(args: argparse.Namespace, run_dir: Path) -> int:
    from rljob.dev import launcher

    if args.namespace and not args.all:
        print("rljob dev up: --namespace scopes the services of --all", file=sys.stderr)
        return 2
    whole_bed, namespaces = bool(args.all), tuple(args.namespace)
    if args.foreground_child:  # the detached launcher itself
        return launcher.up(
            run_dir, args.profile, fresh=False, whole_bed=whole_bed, namespaces=namespaces
        )
    if args.detach or whole_bed:  # --all always detaches: `rljob dev demo` is the foreground bed
        return launcher.up_detached(
            run_dir, args.profile, whole_bed=whole_bed, namespaces=namespaces
        )
    return launcher.up(run_dir, args.profile)


_NAMESPACE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _namespace_name(text: str) -> str:
    if not _NAMESPACE_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a namespace name")
    return text


def _add_dev_up(dev_commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    up = dev_commands.add_parser(
        "up",
        help="start the control plane (foreground; Ctrl-C stops it), or with --all the whole bed",
    )
    up.add_argument("--profile", choices=["demo", "test"], default="demo")
    up.add_argument("--detach", action="store_true", help="return once ready")
    up.add_argument(
        "--all",
        action="store_true",
        help="the whole bed, detached: the control plane, S3, the simulator (checkpoints on that "
        "S3), Prometheus and the operator; returns once every one is ready",
    )
    up.add_argument(
        "--namespace",
        action="append",
        default=[],
        type=_namespace_name,
        help="with --all: the operator and the simulator act only in this namespace "
        "(repeatable; default: every namespace, as in the demo)",
    )
    up.add_argument("--foreground-child", action="store_true", help=argparse.SUPPRESS)


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
    _add_source_flags(run)
    _add_allowlist_flags(run)
    run.set_defaults(handler=_run)

    crd = commands.add_parser("crd", help="print the RLJob CustomResourceDefinition")
    crd.set_defaults(handler=_crd)

    commands.add_parser("checkpoints", help="ls|show|validate s3://... (see its --help)")

    dev = commands.add_parser("dev", help="local control plane with simulated GPU nodes")
    dev_commands = dev.add_subparsers(dest="dev_command", required=True)
    _add_dev_up(dev_commands)
    demo = dev_commands.add_parser("demo", help="control plane + operator + the demo RLJob")
    demo.add_argument("--once", action="store_true", help="exit once the job is Ready")
    for name, text in (
        ("down", "stop everything `up` started"),
        ("status", "each component's state, pid, address and log"),
        ("env", "print exports for kubectl and the plugin"),
    ):
        dev_commands.add_parser(name, help=text)
    for sub in dev_commands.choices.values():
        sub.add_argument(
            "--run-dir",
            help="run folder (default: run/dev in $RLJOB_CACHE_DIR, else in "
            "$XDG_CACHE_HOME/rljob-operator, else in ~/.cache/rljob-operator)",
        )
    dev.set_defaults(handler=_dev)
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
