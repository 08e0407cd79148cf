"""Names a leftover holds: when an object this RLJob does not own (reconcile/ownership.py) holds
a name the job is about to create a child under (its role's Deployment or Services, its current
attempt's trainer Job), or a leftover's pods of a role still carry the role's labels (they would
match its Services' selector), that role or attempt takes the fallback name (reconcile/names.py),
recorded in status.renamed, and a Warning says so once. Nothing is adopted, nothing deleted: the
leftover is the user's to remove.
"""

from __future__ import annotations

from collections.abc import Collection

from rljob.api import RLJob, RoleName
from rljob.api.status import MAX_RENAMED
from rljob.reconcile.events import EventSpec
from rljob.reconcile.names import ROLE_ORDER, ChildNames, child_names, trainer_scope
from rljob.reconcile.observed import Observed

NAME_TAKEN = "ChildNameTaken"
Taken = tuple[str, str]  # (kind, name) held by an object not this job's


def with_renamed(
    job: RLJob, observed: Observed, leftovers: Observed, taken: Collection[Taken] = ()
) -> tuple[RLJob, list[EventSpec]]:
    """The job with the scopes that must take the fallback name added to status.renamed, and
    the Warnings that say why (one per scope, in the pass that renames it)."""
    names = child_names(job)
    held = {(c.kind, c.name): c.owner_uid for c in leftovers.children}
    held.update((kind_name, "") for kind_name in taken if kind_name not in held)
    # Pods going away leave the Services' endpoints; those that run on would be selected.
    foreign_roles = {p.role for p in leftovers.pods if not p.terminal and not p.deleting}
    added: list[str] = []
    events: list[EventSpec] = []
    for scope, needed in _needed(job, names, observed):
        holders = [(kind, name) for kind, name in needed if (kind, name) in held]
        if scope in names.renamed or not (holders or _pods_left(scope, foreign_roles)):
            continue
        added.append(scope)
        events.append(_said(job, scope, holders, held))
    if not added:
        return job, []
    renamed = _bounded([*job.status.renamed, *added])
    status = job.status.model_copy(update={"renamed": renamed})
    return job.model_copy(update={"status": status}), events


def _needed(job: RLJob, names: ChildNames, observed: Observed) -> list[tuple[str, list[Taken]]]:
    """(scope, the (kind, name) it is about to create) for each role and the current attempt
    that has none of its children yet: a running role keeps its names."""
    owned = {(c.kind, c.role) for c in observed.children}
    needed: list[tuple[str, list[Taken]]] = []
    for role in ROLE_ORDER:
        if getattr(job.spec.roles, role.value) is None:
            continue
        kinds = [("Service", names.role(role))]
        if role == RoleName.ROLLOUT:
            kinds.append(("Service", names.rollout_headless()))
        if role != RoleName.TRAINER:
            kinds.append(("Deployment", names.role(role)))
        if not any((kind, role.value) in owned for kind, _ in kinds):
            needed.append((role.value, kinds))
    attempt = job.status.attempt or 1
    if not any(c.kind == "Job" and c.attempt == attempt for c in observed.children):
        needed.append((trainer_scope(attempt), [("Job", names.trainer_job(attempt))]))
    return needed


def _pods_left(scope: str, foreign_roles: set[str]) -> bool:
    """A leftover's pods of this role still run: its Services would select them."""
    return scope in foreign_roles and scope != RoleName.TRAINER.value


def _said(job: RLJob, scope: str, holders: list[Taken], held: dict[Taken, str]) -> EventSpec:
    fallback = ChildNames(job.metadata.name, job.metadata.uid or "", frozenset({scope}))
    if holders:
        what = "; ".join(
            f"{kind} {name} is held by {_owner(held[k])}" for k in holders for kind, name in [k]
        )
    else:
        what = f"pods of a deleted {job.metadata.name} still run with role {scope}'s labels"
    new = (
        fallback.trainer_job(int(scope.rsplit("-a", 1)[1]))
        if scope.startswith("trainer-a")
        else fallback.role(RoleName(scope))
    )
    message = (
        f"{what}: {scope} uses the fallback name {new} (status.renamed); the operator neither "
        "adopts nor deletes what it does not own: remove the leftover when it is not needed"
    )
    return EventSpec("Warning", NAME_TAKEN, message)


def _owner(uid: str) -> str:
    return f"an object another owner controls (uid {uid})" if uid else "an object no RLJob owns"


def _bounded(renamed: list[str]) -> list[str]:
    """Role scopes first, then the newest trainer attempts, at most MAX_RENAMED."""
    roles = [s for s in renamed if not s.startswith("trainer-a")]
    attempts = [s for s in renamed if s.startswith("trainer-a")]
    return [*roles, *attempts[-(MAX_RENAMED - len(roles)) :]]
