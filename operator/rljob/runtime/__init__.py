"""The running operator: per-job passes, per-job memory, the health loop and workers."""
