"""Test-wide JAX settings. XLA_FLAGS must be set before jax is first imported: two fake CPU devices
let the sharding tests run on any machine; they change nothing for single-device code."""
import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=2").strip()
os.environ.setdefault("MPLBACKEND", "Agg")
# One thread for scipy's OpenBLAS, the LAPACK that jaxlib's CPU kernels call (it loads after this
# file; numpy's own copy is already loaded by a plugin). The suite runs one process per core
# anyway, and a worker once hung for good inside tests/test_dynamics.py's analysis: device_get
# waiting, every thread in futex_wait, no CPU use. That program runs several LAPACK
# eigendecompositions that XLA may schedule on two threads at once, and threaded OpenBLAS has
# a history of deadlocks when called concurrently. A mitigation of a likely cause, not a proof.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Most XLA optimisations off: compilation dominates this suite's small shapes on 2 CPU cores (as in
# Flax's examples/lm1b tests); semantics are unchanged. Inherited by the scripts tests start.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
