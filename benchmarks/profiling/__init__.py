"""Profilers: where the time of the sweep, its metrics and the fused kernel goes (GPU tuning).

Each runs as a module from the repository root, `python -m benchmarks.profiling.NAME`, on the one
harness of `harness.py` (warm-up, then the median and minimum of --repeats timed calls; --json
writes the rows with their provenance). Retired profilers, with the commit where each can still be
read: docs/PERFORMANCE.md, "Retired profilers"."""
