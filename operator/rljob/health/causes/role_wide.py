"""A cause every engine of a role has at once: one finding that names them all, so the operator
restarts the role in turn (one engine at a time, each back before the next goes) rather than
every engine at once; it also says the cause is the role's (a version, a config), not a pod's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from rljob.health.evaluation import ENGINES_EVIDENCE, Evaluation


def role_wide(evaluations: Sequence[Evaluation], engines: Sequence[str]) -> list[Evaluation]:
    """One detector's evaluations of a group's `engines` (in the order the in-turn restart takes
    them: longest-running first): when two or more engines are watched and each has a finding of
    one reason, a single finding on the first that names them all, in that order, in
    ENGINES_EVIDENCE, the others said to be in it; else the evaluations as they are."""
    findings = [e for e in evaluations if e.is_finding]
    reasons = {e.reason for e in findings}
    found = {e.target for e in findings}
    order = [engine for engine in engines if engine in found]
    if len(engines) < 2 or len(reasons) != 1 or found != set(engines):
        return list(evaluations)
    first = next(e for e in findings if e.target == order[0])
    message = (
        f"every engine of the role ({len(order)}) has it: restart {', '.join(order)} in turn; "
        f"{first.message}"
    )
    whole = replace(
        first, message=message, evidence={**first.evidence, ENGINES_EVIDENCE: " ".join(order)}
    )
    others = [
        replace(e, outcome="healthy", reason=None, message=f"{e.message}; in the role-wide finding")
        for e in evaluations
        if e is not first
    ]
    return [whole, *others]
