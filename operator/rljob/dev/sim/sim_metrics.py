"""The simulator's own metrics: workloads attached, pages served, pod polls, fault rules and
checkpoint writes, on its control port's /metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, ProcessCollector


class SimMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        self.workloads = Gauge(
            "rljob_sim_workloads", "Attached simulated workloads.", ["role"], registry=r
        )
        self.scrapes = Counter("rljob_sim_scrapes", "Metrics pages served.", ["role"], registry=r)
        self.polls = Counter("rljob_sim_kube_polls", "Pod list calls.", ["outcome"], registry=r)
        self.lifecycle = Counter(
            "rljob_sim_workload_events",
            "Workloads attached, detached and restarted.",
            ["event"],
            registry=r,
        )
        self.rules = Gauge("rljob_sim_fault_rules", "Fault rules in force.", registry=r)
        self.checkpoints = Counter(
            "rljob_sim_checkpoints", "Checkpoint writes.", ["outcome"], registry=r
        )
