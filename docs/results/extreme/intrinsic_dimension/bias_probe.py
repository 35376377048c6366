"""Can TwoNN / GRIDE see Godey's common-bias anisotropy? A quick probe for
docs/SCIENCE.md, "Extreme tokens, sinks and intrinsic dimension".

x_i = z_i + s·u for N = 2000 Gaussian tokens z_i ~ N(0, I_768), one unit direction u shared by
every token, s ∈ {0, 1, 4, 16, 64, 256}, 3 seeds, float32 (the models' dtype). Reported per s:
the average cosine of the raw tokens (what anisotropy measures), TwoNN (Facco et al.'s fit,
fraction 0.9) and GRIDE at (n1, n2) = (1, 2) and (8, 16), each on the raw tokens and on the unit
vectors x_i/‖x_i‖ (the cloud the cosine sees). Seed 0 is repeated in float64 to show what float32
rounding does. Run from the repository root (about two minutes on 2 CPU cores):

    .venv/bin/python docs/results/extreme/intrinsic_dimension/bias_probe.py \
        --json docs/results/extreme/intrinsic_dimension/bias_probe.json \
        > docs/results/extreme/intrinsic_dimension/bias_probe.txt

It prints the table; every row goes to a JSON file only where --json names one (nothing is
written into the repository unless asked).
"""
import argparse
import json
import pathlib
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax import metrics

N, DIM, SEEDS = 2000, 768, (0, 1, 2)
BIAS_NORMS = (0.0, 1.0, 4.0, 16.0, 64.0, 256.0)


@jax.jit
def _estimates(x_NxD):
    unit = metrics.unit_vectors(x_NxD)
    raw_scales = metrics.gride_scaling(x_NxD, max_rank=16)
    unit_scales = metrics.gride_scaling(unit, max_rank=16)
    return {
        "average_cosine": metrics.average_cosine_similarity(x_NxD),
        "twonn": metrics.twonn_dimension(x_NxD),
        "twonn_unit": metrics.twonn_dimension(unit),
        "gride_1_2": raw_scales.dimension[0], "gride_8_16": raw_scales.dimension[3],
        "gride_1_2_unit": unit_scales.dimension[0], "gride_8_16_unit": unit_scales.dimension[3],
    }


def _cloud(seed, s, dtype):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(N, DIM))
    u = rng.normal(size=DIM)
    u /= np.linalg.norm(u)
    return jnp.asarray(z + s * u, dtype)


def main(argv=None):
    parser = argparse.ArgumentParser(description="TwoNN / GRIDE on x = z + s·u.")
    parser.add_argument("--json", type=pathlib.Path, default=None,
                        help="Also write every row as JSON here (default: nothing written).")
    out = parser.parse_args(argv).json
    start = time.time()
    rows = []
    for dtype_name in ("float32", "float64"):
        seeds = SEEDS if dtype_name == "float32" else SEEDS[:1]
        with jax.enable_x64(dtype_name == "float64"):
            for s in BIAS_NORMS:
                for seed in seeds:
                    got = {k: float(v) for k, v in
                           _estimates(_cloud(seed, s, getattr(jnp, dtype_name))).items()}
                    rows.append({"dtype": dtype_name, "s": s, "seed": seed, **got})
    keys = ("average_cosine", "twonn", "twonn_unit", "gride_1_2", "gride_8_16", "gride_1_2_unit",
            "gride_8_16_unit")
    print(f"TwoNN / GRIDE on x = z + s·u, N = {N}, D = {DIM}; float32 mean ± sd over seeds "
          f"{list(SEEDS)}, and float64 seed 0")
    print(f"{'s':>6} " + " ".join(f"{k:>22}" for k in keys))
    summary = []
    for s in BIAS_NORMS:
        sel = [r for r in rows if r["s"] == s and r["dtype"] == "float32"]
        f64 = next(r for r in rows if r["s"] == s and r["dtype"] == "float64")
        cells, entry = [], {"s": s}
        for k in keys:
            vals = np.array([r[k] for r in sel])
            entry[k] = {"mean": float(vals.mean()), "sd": float(vals.std(ddof=1)),
                        "float64_seed0": f64[k]}
            cells.append(f"{vals.mean():10.4f} ± {vals.std(ddof=1):7.4f}" if k == "average_cosine"
                         else f"{vals.mean():11.3f} ± {vals.std(ddof=1):6.3f}")
        summary.append(entry)
        print(f"{s:6.0f} " + " ".join(f"{c:>22}" for c in cells))
    print("float64, seed 0:")
    for s in BIAS_NORMS:
        f64 = next(r for r in rows if r["s"] == s and r["dtype"] == "float64")
        print(f"{s:6.0f} " + " ".join(f"{f64[k]:22.6f}" for k in keys))
    elapsed = time.time() - start
    print(f"{elapsed:.0f} s on {platform.machine()} ({jax.devices()[0].platform}), jax "
          f"{jax.__version__}")
    if out is None:
        return
    out.write_text(json.dumps({
        "command": "python docs/results/extreme/intrinsic_dimension/bias_probe.py",
        "n": N, "dim": DIM, "seeds": list(SEEDS), "bias_norms": list(BIAS_NORMS),
        "summary": summary, "rows": rows, "seconds": elapsed, "jax": jax.__version__,
        "device": jax.devices()[0].platform}, indent=1) + "\n")


if __name__ == "__main__":
    main()
