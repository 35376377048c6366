r"""Compilation of the sweep's seed draws with and without JAX's threefry GPU kernel (issue 14).

  python -m benchmarks.init_compile

Compiles `studies.sweep.grid.init_seeds` for the main job's default config twice in one process,
with `jax_threefry_gpu_kernel_lowering` off and on (the scripts turn it on: anisotropy_jax/cli.py),
prints each compilation's seconds, and checks that the two draw bit-identical weights, z and u.
"""
from __future__ import annotations

import time

from absl import app


def main(argv):
    del argv
    import jax
    import numpy as np

    from anisotropy_jax import config, inputs
    from anisotropy_jax.studies.sweep import grid
    from experiments.configs import bias_sweep

    (_, cfg), = config.sweep_configs_from_mapping(bias_sweep.get_config())
    keys = inputs.seed_keys(cfg.seed, cfg.num_seeds)
    draws = []
    for lowering in (False, True):
        jax.config.update("jax_threefry_gpu_kernel_lowering", lowering)
        grid._init_seeds_jit.cache_clear()
        fn = grid._init_seeds_jit(jax.default_backend())
        start = time.perf_counter()
        compiled = fn.lower(keys, cfg.block, cfg.batch_size, cfg.seq_len).compile()
        seconds = time.perf_counter() - start
        draws.append(jax.tree.leaves(jax.device_get(compiled(keys))))
        print(f"{jax.devices()[0].device_kind}: threefry GPU kernel lowering {lowering!s:5s}: "
              f"init_seeds compiled in {seconds:.2f} s")
    same = all(np.array_equal(a, b) for a, b in zip(*draws))
    print(f"bit-identical draws: {same}")


if __name__ == "__main__":
    app.run(main)
