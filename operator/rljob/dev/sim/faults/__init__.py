"""Fault injection (pure): requests validated into rules (injection), and the rules in force
resolved per workload instance (rules).

A rule is (selector, fault, survive_restart). A selector names one pod, or a job's pods of one
role (or of every role). Per kind, the newest rule matching an instance applies, so a pod-level
`sleep {on: false}` after a job-level `sleep` wakes just that engine; a new rule of the same kind
and selector replaces the old one.

An instance is one run of a pod's container (pod uid and restart count): a restarted engine is a
new instance. A rule that does not survive restarts applies only to the instances it matched when
it was injected; one that does also applies to instances started later (its time then starts at
the instance's start). By default `sleep`, `pause` and `load` survive restarts (they are the
driver's and the load's doing), while `drift`, `stall`, `hang`, `latency`, `errors`,
`memory_growth` and `unreachable` do not (they are the process's own trouble, gone with a fresh
process).
"""

from __future__ import annotations

from rljob.dev.sim.faults.injection import (
    KINDS,
    ROLE_KINDS,
    SURVIVES_RESTART_BY_DEFAULT,
    Fault,
    FaultError,
    Injection,
    Selector,
    parse_fault,
    parse_injection,
    parse_selector,
)
from rljob.dev.sim.faults.rules import MAX_RULES, NO_FAULTS, Active, Rule, RuleBook, resolve

__all__ = [
    "KINDS",
    "MAX_RULES",
    "NO_FAULTS",
    "ROLE_KINDS",
    "SURVIVES_RESTART_BY_DEFAULT",
    "Active",
    "Fault",
    "FaultError",
    "Injection",
    "Rule",
    "RuleBook",
    "Selector",
    "parse_fault",
    "parse_injection",
    "parse_selector",
    "resolve",
]
