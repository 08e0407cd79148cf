"""A tiny gloo training loop that injects one fault on one rank (FAULT, FAULT_RANK), run by
real torchrun in tests/upstream/test_faults.py. Its main is decorated with torch's `record`,
so a worker's Python exception lands in TORCHELASTIC_ERROR_FILE (torch 2.15.0,
torch/distributed/elastic/multiprocessing/errors/__init__.py: "record")."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

# Steps every rank completes before the fault: the log shows a working job first.
HEALTHY_STEPS = 3


def inject(fault: str) -> None:
    """The fault, on the chosen rank only; each one is how a real trainer dies."""
    if fault == "hang":  # never joins the next collective: its peers' gloo timeout fires
        time.sleep(3600)
    elif fault == "raise":
        raise RuntimeError("loss is NaN at step 3: injected fault")
    elif fault == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault == "segfault":
        ctypes.string_at(0)
    elif fault == "exit93":  # NVRx's "do not requeue", as docs/writing-an-rljob.md advises
        # sys.exit after destroy_process_group races: the peer sees the closed connection,
        # fails first, and torchrun SIGTERMs this rank mid-teardown, so 93 is never recorded.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(93)
    elif fault == "memoryerror":
        raise MemoryError("injected: cannot allocate the rollout buffer")


@record
def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("GLOO_TIMEOUT_SECONDS", "3")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    weights = torch.ones(4)
    for step in range(HEALTHY_STEPS):
        dist.all_reduce(weights)
        print(f"rank {rank} step {step} sum {float(weights.sum()):.0f}", flush=True)
    if rank == int(os.environ.get("FAULT_RANK", "-1")):
        inject(os.environ.get("FAULT", "none"))
    # The peers wait here for the faulty rank; gloo gives up after the timeout.
    dist.all_reduce(weights)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
