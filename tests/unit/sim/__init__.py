"""Unit tests of the simulated workloads (rljob.dev.sim)."""
