"""A framework's logging as the frameworks do it: torch.utils.tensorboard.SummaryWriter.add_scalar
for each tag of each step, flushed per step (verl's _TensorboardAdapter, OpenRLHF's
TensorboardLogger, NeMo-RL's TensorboardLogger and slime's _TensorboardAdapter all call
add_scalar per key). Run under the torch venv by tests/upstream/test_tensorboard_writer.py:

    tb_framework.py DIR STEPS_JSON DONE_FILE

STEPS_JSON: [[step, {tag: value}], ...]. After the last step it keeps its file open and writes
nothing (a hung trainer) until DONE_FILE exists, then exits 0."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from torch.utils.tensorboard import SummaryWriter


def main(directory: str, steps: str, done: str) -> None:
    writer = SummaryWriter(log_dir=directory)
    for step, values in json.loads(steps):
        for tag, value in values.items():
            writer.add_scalar(tag, value, step)
        writer.flush()
    print("logged", flush=True)
    deadline = time.monotonic() + 300
    while not Path(done).exists() and time.monotonic() < deadline:
        time.sleep(0.1)  # the hung trainer: alive, logging nothing
    writer.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
