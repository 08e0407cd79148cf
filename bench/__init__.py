"""Benchmarks of the RLJob operator (issue #8, docs/architecture.md section 12): figures and ratios
written to bench/RESULTS.md, never pass/fail. Run `python -m bench` (or `bash bench/run.sh`),
`--smoke` for the short CI mode."""
