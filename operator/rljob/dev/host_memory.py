"""Host memory of a simulated rollout engine's processes, shared by the bed's simulated engines
(rljob.dev.sim.models.engine, served as the SDK plugin's gauge) and the physical engines of the
benchmarks (rljob.dev.physics): modelled, not measured. Standard library only (the simulator
process imports it).

- `base_bytes`: an 8B model server's resident host memory once warm (the Python processes,
  torch and CUDA libraries, the CUDA context, pinned staging buffers, the tokenizer): an
  assumption, 40 GiB. vllm #44175's engine started at 6 GiB with one small model; a TP-8 server
  holds a process per GPU.
- `offloaded_bytes`: what sleep level 1 copies to host while asleep (vllm 0.33.0
  sleep_mode_backend.py suspend offloads the `weights` tag; cumem.py sleep pins a CPU copy):
  Llama-3.1-8B's 16.06 GB of BF16 weights, as bench/vllm_core's HostMemory.
- `per_running_bytes`: host state per running sequence (request state, detokenizer, outputs)
  and the allocator arenas a busier batch leaves: an assumption, 2 MiB, so a full batch swings
  the reading by hundreds of MiB to a few GiB.
- `noise_bytes`: the spread of a reading above that (allocator high-water marks): 32 MiB.
- The fault: `gib_per_hour` from its start, never given back while the process lives (vllm
  #44175, #50150, SGLang #6914 grow for hours; a restart gives it back).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

GIB = float(1 << 30)
MIB = float(1 << 20)
HOUR = 3600.0
# Llama-3.1-8B-Instruct in BF16 (its model card: 8.03 B parameters).
WEIGHT_BYTES = 16_060_000_000.0
PROCESS_TREE_METRIC = "rljob_engine_process_tree_resident_bytes"
PROCESS_TREE_HELP = (
    "Resident memory of this engine process and all its descendants (summed RSS), in bytes."
)


@dataclass(frozen=True, slots=True)
class HostMemory:
    base_bytes: float = 40 * GIB
    offloaded_bytes: float = WEIGHT_BYTES
    per_running_bytes: float = 2 * MIB
    noise_bytes: float = 32 * MIB

    def reading(
        self, rng: random.Random, *, sleep_level: int, running: float, grown: float
    ) -> float:
        """One reading: the base, the weights while asleep at level 1, the batch's state, what
        a leak has grown, and a non-negative draw of noise."""
        offloaded = self.offloaded_bytes if sleep_level == 1 else 0.0
        noise = abs(rng.gauss(0.0, self.noise_bytes)) if self.noise_bytes > 0 else 0.0
        return self.base_bytes + offloaded + self.per_running_bytes * running + grown + noise


def grown(gib_per_hour: float, since: float | None, t: float) -> float:
    """Bytes a leak of `gib_per_hour` has kept from `since` (None: no leak) to `t`."""
    if since is None or gib_per_hour <= 0 or t <= since:
        return 0.0
    return gib_per_hour * GIB * (t - since) / HOUR
