"""A gang that fits: a job's serving pods wait for its trainer's ranks to be placed, pure.

GPU nodes come whole (8 GPUs), a trainer rank asks for a whole node, and serving pods ask for
one GPU or none. The default scheduler scores small pods onto the emptiest node
(NodeResourcesFit's LeastAllocated, and the default PodTopologySpread of pods behind a Service),
so a job's four 1-GPU engines land one per node and no node keeps the 8 GPUs its trainer rank
needs: the job never starts while most of its GPUs are free. So whenever the job starts from no
serving pod (its first start, a resume after a suspension or a Kueue eviction), its serving
Deployments stay at zero replicas until every rank of the current attempt's trainer is bound to
a node; the small pods then fill what the ranks left. Serving pods already running are never
held back (a gang restart keeps its engines): the Deployments' replicas are the state, so an
operator restart decides the same (docs/architecture.md, "A gang that fits")."""

from __future__ import annotations

from rljob.api import RLJob
from rljob.reconcile.lifecycle import trainer_pods
from rljob.reconcile.observed import Observed


def serving_held(job: RLJob, observed: Observed, attempt: int) -> bool:
    """True while the job's serving roles must wait for its trainer's ranks to be placed."""
    if any(c.kind == "Deployment" and c.replicas > 0 and not c.deleting for c in observed.children):
        return False
    return placed_ranks(observed, attempt) < job.spec.roles.trainer.nodes


def placed_ranks(observed: Observed, attempt: int) -> int:
    """Ranks of the attempt's trainer bound to a node and not going away."""
    return sum(1 for pod in trainer_pods(observed, attempt) if pod.node and not pod.terminal)
