"""A trainer gang's collectives as NCCL runs them: every rank takes part in each step's
collectives, so when one rank's node stops answering (its machine dead, or cut off by a
partition) the ranks left block in their next collective, their training loop and heartbeat
frozen, and after the NCCL watchdog's timeout (torch's default 600 s, scaled down here) each
aborts with the watchdog's message (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp,
`ProcessGroupNCCL::Watchdog`). A rank is lost when the API says its node is not Ready: the bed
stops a node's kubelet heartbeat (label sim.rljob.io/heartbeat-stopped) and the node lifecycle
controller marks it so. The lost rank itself is unreachable from then on; no simulated process
answers for it. Pure state: the app feeds it the pods and the lost nodes and acts on its answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from rljob.dev.sim.faults import Active
from rljob.dev.sim.pods import PodInfo

GangKey = tuple[str, str, int | None]  # (namespace, job, attempt)
TRAINER = "trainer"
DEFAULT_WATCHDOG_SECONDS = 60.0  # torch's 600 s NCCL timeout, scaled down for the bed


def gang_of(pod: PodInfo) -> GangKey:
    return (pod.namespace, pod.job, pod.attempt)


@dataclass
class Collectives:
    """The trainer gangs hung by a lost rank, and the ranks their watchdog already aborted."""

    watchdog_seconds: float = DEFAULT_WATCHDOG_SECONDS
    hung: dict[GangKey, float] = field(default_factory=dict)  # gang -> when a rank was lost
    lost: set[str] = field(default_factory=set)  # pod uids of ranks on lost nodes
    aborted: set[str] = field(default_factory=set)  # pod uids the watchdog failed

    def observe(
        self, ranks: Iterable[PodInfo], lost_nodes: Collection[str], now: float
    ) -> list[PodInfo]:
        """Ranks on lost nodes hang their gang from now (the first time one is seen); gangs with
        no rank left attached are forgotten. Returns the ranks newly seen lost."""
        trainers = [pod for pod in ranks if pod.role == TRAINER]
        newly = [p for p in trainers if p.node in lost_nodes and p.uid not in self.lost]
        for pod in newly:
            self.lost.add(pod.uid)
            self.hung.setdefault(gang_of(pod), now)
        live = {gang_of(pod) for pod in trainers}
        self.hung = {gang: since for gang, since in self.hung.items() if gang in live}
        uids = {pod.uid for pod in trainers}
        self.lost &= uids
        self.aborted &= uids
        return newly

    def faults(self, pod: PodInfo, active: Active) -> Active:
        """A rank's faults with its gang's: a lost rank unreachable, the others hung since the
        loss (an earlier injected hang stands)."""
        if pod.role != TRAINER:
            return active
        if pod.uid in self.lost:
            return dataclasses.replace(active, unreachable=True)
        since = self.hung.get(gang_of(pod))
        if since is None:
            return active
        hang = since if active.hang_since is None else min(since, active.hang_since)
        return dataclasses.replace(active, hang_since=hang)

    def expired(self, ranks: Iterable[PodInfo], now: float) -> list[PodInfo]:
        """The ranks left of gangs hung for the watchdog's timeout, each once: their watchdog
        aborts them now."""
        due = [
            pod
            for pod in ranks
            if pod.role == TRAINER
            and pod.uid not in self.lost
            and pod.uid not in self.aborted
            and (since := self.hung.get(gang_of(pod))) is not None
            and now - since >= self.watchdog_seconds
        ]
        self.aborted |= {pod.uid for pod in due}
        return due
