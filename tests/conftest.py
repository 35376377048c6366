"""Test-wide JAX settings. XLA_FLAGS must be set before jax is first imported: two fake CPU devices
let the sharding tests run on any machine; they change nothing for single-device code."""
import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=2").strip()
os.environ.setdefault("MPLBACKEND", "Agg")
# Most XLA optimisations off: compilation dominates this suite's small shapes on 2 CPU cores (as in
# Flax's examples/lm1b tests); semantics are unchanged. Inherited by the scripts tests start.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
