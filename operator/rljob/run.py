"""`rljob run`: start the operator (kopf) with logging, metrics and a liveness endpoint."""

from __future__ import annotations

import os

import kopf

from rljob.observability import configure_logging, serve_metrics
from rljob.runtime.allocator import hold_mmap_threshold, limit_malloc_arenas
from rljob.runtime.garbage_collection import (
    count_collection_seconds,
    freeze_imports_and_relax_collection,
)
from rljob.runtime.runtime import RuntimeOptions


def run_operator(
    options: RuntimeOptions,
    *,
    metrics_address: str,
    metrics_port: int,
    liveness_endpoint: str,
    log_level: str,
) -> int:
    limit_malloc_arenas()  # before any thread starts: each would open an arena
    hold_mmap_threshold()
    configure_logging(log_level)
    if options.kubeconfig:
        os.environ["KUBECONFIG"] = options.kubeconfig  # read by kopf's kubeconfig login
    serve_metrics(metrics_port, metrics_address)
    import rljob.handlers

    if options.kueue:
        import rljob.kueue_handlers  # noqa: F401 - Workloads and ResourceFlavors too

    freeze_imports_and_relax_collection()
    count_collection_seconds()
    kopf.run(
        standalone=True,
        # Patterns watch every namespace and the handlers keep those that match.
        clusterwide=options.clusterwide,
        namespaces=[] if options.clusterwide else list(options.namespaces),
        liveness_endpoint=liveness_endpoint,
        memo=kopf.Memo(options=options),
    )
    return 0
