"""Lost nodes in the model (machine.py), read from the cluster's truth, never from what the
operator believed:

- a-lost-trainer-rank-leads-to-a-new-attempt: once a rank of the current attempt has sat on a
  lost node (its Node gone, or not answering for the job's nodeLostTimeout) for that timeout plus
  the failure policy's longest backoff (a rank on a Node deleted outright counts once it shows
  it: not Ready, or terminating, as PodGC leaves it), at most ACTING_PASSES passes of the leader
  on caught-up watches that wrote without a fault begin with that attempt still current while
  the job runs;
- a-pod-is-force-deleted-only-where-nothing-runs-it: the operator deletes a pod with grace 0
  only when its Node is gone, or does not answer and carries node.kubernetes.io/out-of-service
  (a kubelet cut off by a partition may still run the rank);
- `fenced(pod)`: an old attempt's pod terminating on a node that was lost, which the next attempt
  does not wait for (one-trainer-attempt-at-a-time leaves it out: the newer attempt's marker
  fences it from the checkpoint store).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Mapping
from typing import Any

from rljob.api import parse_duration
from rljob.vocabulary.labels import ATTEMPT_LABEL, ROLE_LABEL
from tests.unit.model.cluster import Cluster, Write

KIND = "RLJob"
LOST_RANK = "a-lost-trainer-rank-leads-to-a-new-attempt"
FORCE_DELETE = "a-pod-is-force-deleted-only-where-nothing-runs-it"
CHECKS = frozenset({LOST_RANK, FORCE_DELETE})
ACTING_PASSES = 3  # the pass that journals the gang restart, and two for a 409 and a lag


def _faulted(write: Write) -> bool:
    failed = write.code >= 500 or (write.verb == "patch_status" and write.code >= 400)
    return write.actor.startswith("operator") and failed


class NodeChecks:
    """Observes one RLJob's trainer ranks and the nodes under them."""

    def __init__(self, cluster: Cluster, name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.recorded: dict[str, list[str]] = {check: [] for check in CHECKS}
        self.lost_ever: set[str] = set()  # nodes that were lost at some step
        self.unacted: Counter[str] = Counter()  # "<uid>/a<attempt>" -> passes begun with it lost
        cluster.pod_delete_observers.append(self._pod_deleted)

    def faults(self, check: str) -> list[str]:
        found = list(self.recorded[check])
        if check == LOST_RANK:
            found += [
                f"trainer attempt {key} kept a rank on a lost node through {count} passes"
                for key, count in self.unacted.items()
                if count >= ACTING_PASSES
            ]
        return found

    def fenced(self, pod: Mapping[str, Any]) -> bool:
        """An old attempt's pod terminating on a node that was lost: not waited for."""
        self._note_lost()
        node = pod["spec"].get("nodeName")
        return bool(pod["metadata"].get("deletionTimestamp")) and node in self.lost_ever

    # -- the pass --------------------------------------------------------------------------------

    def before_pass(self, *, leading: bool) -> tuple[str | None, int]:
        """(the attempt whose rank has been lost past its bound, if the leader's watches are
        caught up; where the write log stands)."""
        self._note_lost()
        start = len(self.cluster.log)
        if not leading or self.cluster.index.lagging():
            return None, start
        return self._overdue(), start

    def after_pass(self, before: tuple[str | None, int]) -> None:
        overdue, start = before
        if overdue is None:
            self.unacted.clear()
            return
        if not any(_faulted(w) for w in self.cluster.log[start:]):
            self.unacted[overdue] += 1

    # -- the truth -------------------------------------------------------------------------------

    def _job(self) -> Mapping[str, Any] | None:
        job = self.cluster.peek(KIND, self.name)
        return None if job is None or job["metadata"].get("deletionTimestamp") else job

    def _lost_since(self, node: str | None) -> dt.datetime | None:
        if node is None:
            return None
        if node in self.cluster.gone_nodes:
            return self.cluster.gone_nodes[node]
        if self.cluster.nodes.get(node, True):
            return None
        return self.cluster.node_since.get(node)

    def _timeout(self, job: Mapping[str, Any] | None, key: str, default: str) -> dt.timedelta:
        policy = (job or {}).get("spec", {}).get("failurePolicy") or {}
        value = (policy.get("backoff") or {}).get("max") if key == "backoff" else policy.get(key)
        return dt.timedelta(seconds=parse_duration(value or default))

    def _note_lost(self) -> None:
        timeout = self._timeout(self._job(), "nodeLostTimeout", "1m")
        now = self.cluster.clock.now
        for node in [*self.cluster.nodes, *self.cluster.gone_nodes]:
            since = self._lost_since(node)
            if since is not None and (node in self.cluster.gone_nodes or now - since >= timeout):
                self.lost_ever.add(node)

    def _overdue(self) -> str | None:
        """ "<uid>/a<attempt>" when the running job's current attempt has a rank on a node lost
        for longer than nodeLostTimeout plus the longest backoff."""
        job = self._job()
        status = (job or {}).get("status") or {}
        if job is None or status.get("phase") in ("Failed", "Succeeded"):
            return None
        if job["spec"].get("suspend") or status.get("suspension"):
            return None
        attempt = str(status.get("attempt") or 1)
        bound = self._timeout(job, "nodeLostTimeout", "1m") + self._timeout(job, "backoff", "30m")
        for pod in self.cluster.view("Pod"):
            labels = pod["metadata"].get("labels") or {}
            if labels.get(ROLE_LABEL) != "trainer" or labels.get(ATTEMPT_LABEL) != attempt:
                continue
            if not self.cluster.controlled_by(pod, job["metadata"]["uid"]):
                continue  # a deleted namesake's leftover
            if pod["status"]["phase"] in ("Succeeded", "Failed"):
                continue
            node = pod["spec"].get("nodeName")
            if node in self.cluster.gone_nodes and _unmarked(pod):
                continue  # no sign on the pod yet: PodGC's force delete is the operator's cue
            since = self._lost_since(node)
            if since is not None and self.cluster.clock.now - since >= bound:
                return f"{job['metadata']['uid']}/a{attempt}"
        return None

    def _pod_deleted(self, actor: str, pod: Mapping[str, Any]) -> None:
        grace = (self.cluster.log[-1].detail or {}).get("grace")
        if not actor.startswith("operator") or grace != 0:
            return
        node = pod["spec"].get("nodeName")
        released = node in self.cluster.gone_nodes or (
            node in self.cluster.out_of_service and not self.cluster.nodes.get(node, True)
        )
        if node and not released:
            self.recorded[FORCE_DELETE].append(
                f"{actor} force-deleted {pod['metadata']['name']} on {node}, which may run it "
                f"(Ready {self.cluster.nodes.get(node)}, out of service: "
                f"{node in self.cluster.out_of_service})"
            )


def _unmarked(pod: Mapping[str, Any]) -> bool:
    """Still Ready and not terminating: a Node deleted outright leaves its pods so until PodGC
    force-deletes them (after its quarantine); the operator reads the node of a rank only once
    the rank shows a sign (rljob.reconcile.nodes.nodes_to_read)."""
    conditions = pod["status"].get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    return ready and not pod["metadata"].get("deletionTimestamp")
