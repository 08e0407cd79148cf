"""`rljob dev ...`: the bed's subcommand of the `rljob` command. rljob-bed registers `add_command`
under the `rljob.commands` entry points, and rljob.cli adds whatever is registered there, so no
product module imports the bed and a host without it has no `rljob dev`."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def _dev(args: argparse.Namespace) -> int:
    from rljob.dev.controlplane import ControlPlaneError

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
