"""The simulator process: one asyncio loop serving every simulated pod.

- A watcher lists the operator's pods (label app.kubernetes.io/managed-by=rljob-operator, phase
  Running) every `poll_interval` seconds and attaches a workload by role to each Running pod that
  is not terminating, on its own listener at 127.0.0.1:<kernel-picked port>. A pod that goes
  away, terminates or is replaced (new uid) detaches: its listener and open connections close. A
  container restart (restartCount up) keeps the port and starts a fresh model: counters from zero,
  faults that do not survive restarts gone.
- Each workload listens at its pod's IP (the bed's kwok hands out pod IPs inside 127.0.0.0/8)
  on the role's metrics port, as the pod would on a cluster.
- After each change it writes the Prometheus file_sd targets to a temporary file renamed into
  place.
- It lists the nodes too: a trainer rank whose node is not Ready is lost, its gang's other ranks
  hang in their next collective and abort after the NCCL watchdog (rljob.dev.sim.collectives).
- The control API on 127.0.0.1:<control-port> injects and clears faults, overrides profiles,
  lists workloads and serves the simulator's own /metrics.

Models advance lazily (on scrape, on a 1 s tick, and before every rule change), so each span of
time is integrated with the faults that were in force over it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rljob.dev.sim.app import SimulatorApp
from rljob.dev.sim.collectives import DEFAULT_WATCHDOG_SECONDS
from rljob.dev.sim.pods import SELECTOR, is_pattern
from rljob.dev.sim.profiles import ROLES, ProfileError, Profiles, override
from rljob.dev.sim.simulation import MAX_WORKLOADS, PodLister, SimConfig

log = logging.getLogger("rljob.dev.sim")


def pod_lister(api: Any, namespaces: Sequence[str]) -> PodLister:
    """Lists Running operator-managed pods (from the API server's watch cache) in these
    namespaces: names, or glob patterns such as "gw0-*" (the simulator imports nothing of the
    operator, so it keeps its own matching: no "!" exclusions)."""
    query = (
        f"labelSelector={quote(SELECTOR)}"
        f"&fieldSelector={quote('status.phase=Running')}&resourceVersion=0"
    )
    paths = (
        [f"/api/v1/namespaces/{ns}/pods?{query}" for ns in namespaces]
        if namespaces and not any(is_pattern(ns) for ns in namespaces)
        else [f"/api/v1/pods?{query}"]  # attachable_pods keeps the namespaces that match
    )

    def list_pods() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for path in paths:
            items.extend(api.get(path).get("items", []))
        return items

    return list_pods


def lost_node_lister(api: Any) -> Callable[[], set[str]]:
    """Lists the nodes whose Ready condition is not True (a silent kubelet: Unknown)."""

    def lost_nodes() -> set[str]:
        nodes = api.get("/api/v1/nodes?resourceVersion=0").get("items", [])
        return {node["metadata"]["name"] for node in nodes if not _ready(node)}

    return lost_nodes


def _ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m rljob.dev.sim", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--control-port", required=True, type=int)
    parser.add_argument("--targets-file", type=Path, help="default: <state-dir>/targets.json")
    parser.add_argument("--poll-interval", type=float, default=0.5)
    parser.add_argument(
        "--namespace", action="append", default=[], help="only these namespaces or patterns"
    )
    parser.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="ROLE=JSON",
        help='default profile overrides, e.g. rollout={"throughput": 1000}',
    )
    parser.add_argument("--max-workloads", type=int, default=MAX_WORKLOADS)
    parser.add_argument(
        "--nccl-watchdog-seconds",
        type=float,
        default=DEFAULT_WATCHDOG_SECONDS,
        help="how long a trainer gang with a rank lost hangs before its watchdog aborts it",
    )
    parser.add_argument(
        "--checkpoints",
        action="store_true",
        help="trainers write checkpoints through the SDK (store from this process's environment)",
    )
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def profiles_from_args(items: Sequence[str]) -> Profiles:
    profiles = Profiles()
    for item in items:
        role, sep, text = item.partition("=")
        if not sep or role not in ROLES:
            raise ProfileError(f"--profile wants ROLE=JSON with ROLE in {', '.join(ROLES)}")
        changes = json.loads(text)
        profile = override(profiles.for_role(role), changes)
        profiles = profiles.with_role(role, profile)
    return profiles


async def _amain(args: argparse.Namespace) -> int:
    from rljob.dev.kubeapi import KubeApi
    from rljob.dev.sim.driver_kube import KubeSlots, roster_factory, trainer_failer
    from rljob.dev.sim.drivers import Drivers
    from rljob.dev.sim.kube import credentials_from_kubeconfig

    state_dir: Path = args.state_dir
    creds = credentials_from_kubeconfig(args.kubeconfig, state_dir / "credentials")
    api = KubeApi(creds, timeout=10.0)
    sink = None
    if args.checkpoints:
        from rljob.dev.sim.checkpoints import CheckpointSink

        sink = CheckpointSink()
    config = SimConfig(
        control_port=args.control_port,
        targets_file=args.targets_file or state_dir / "targets.json",
        poll_interval=args.poll_interval,
        namespaces=tuple(args.namespace),
        profiles=profiles_from_args(args.profile),
        max_workloads=args.max_workloads,
        checkpoints=args.checkpoints,
        nccl_watchdog_seconds=args.nccl_watchdog_seconds,
        tensorboard_dir=state_dir / "tensorboard",
    )
    app = SimulatorApp(
        config,
        pod_lister(api, config.namespaces),
        sink=sink,
        lost_nodes=lost_node_lister(api),
        fail_rank=trainer_failer(api),
    )
    app.drivers = Drivers(app, roster_factory(api), trainer_failer(api), KubeSlots(api))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, app.stop)
    await app.start()
    await app.run()
    log.info("stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        args.state_dir.mkdir(parents=True, exist_ok=True)
        return asyncio.run(_amain(args))
    except (ProfileError, OSError, ValueError) as exc:
        log.error("%s", exc)
        return 2
