"""Test-wide JAX settings. XLA_FLAGS must be set before jax is first imported: two fake CPU devices
let the sharding tests run on any machine; they change nothing for single-device code."""
import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=2").strip()
os.environ.setdefault("MPLBACKEND", "Agg")

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
