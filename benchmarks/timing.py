"""Timing helper shared by the profilers (no flags here: importing it defines none)."""
from __future__ import annotations

import time


def median_time(fn, *args, repeats):
    """Median wall seconds of `repeats` calls of fn(*args), after one warm-up call."""
    import jax
    import numpy as np

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))
