"""Causes of an engine's degradation named from its own metrics page (issue 32): leaked KV
capacity (KVCacheLeak) and a prefix-cache collapse at a steady prompt mix (PrefixCacheCollapse);
and from its host memory, a steady growth (EngineMemoryGrowth). A frozen or stale page is named
by the engine-stall detector (rljob.health.stall). Pure."""

from rljob.health.causes.leak import KVLeakConfig, KVLeakDetector
from rljob.health.causes.memory import MemoryGrowthConfig, MemoryGrowthDetector
from rljob.health.causes.prefix import PrefixCollapseConfig, PrefixCollapseDetector

__all__ = [
    "KVLeakConfig",
    "KVLeakDetector",
    "MemoryGrowthConfig",
    "MemoryGrowthDetector",
    "PrefixCollapseConfig",
    "PrefixCollapseDetector",
]
