"""dadapy's TwoNN and GRIDE on a 5-dimensional Gaussian with 60 % of its points exact copies: the
oracle that tests/test_intrinsic_dimension.py checks the duplicate handling of
`anisotropy_jax.metrics.intrinsic_dimension` (identical points counted once) against.

dadapy 0.3.4 pins jax==0.4.30, flax==0.8.5 and numpy<2, so it runs in a virtual environment of
its own (`pip install dadapy==0.3.4` took 2 min 6 s on the shared 2-core CPU, 2026-11-28, too slow
for the test extra even without the conflicting pins). Regenerate:

    python3 -m venv /tmp/dadapy_venv && /tmp/dadapy_venv/bin/pip install dadapy==0.3.4
    /tmp/dadapy_venv/bin/python docs/results/extreme/intrinsic_dimension/dadapy_duplicates.py \\
        > docs/results/extreme/intrinsic_dimension/dadapy_duplicates.json

`make_datasets` uses numpy only (the test imports it from this file); the JSON keeps a checksum
of each data set.
"""
import contextlib
import json
import sys

import numpy as np


def make_datasets():
    """{name: (points (N, D) float64, the same points without copies, true dimension)}: 400
    distinct points of N(0, I_5) in a random 5-dimensional subspace of R^20, and 600 copies of
    randomly chosen ones (60 % of the 1,000 points), shuffled; and the same for 3 dimensions in
    R^10 with 300 distinct points and 450 copies."""
    rng = np.random.default_rng(20261128)
    out = {}
    for name, dim, ambient, distinct, copies in (("gauss5_in_20_dup60", 5, 20, 400, 600),
                                                 ("gauss3_in_10_dup60", 3, 10, 300, 450)):
        basis = np.linalg.qr(rng.normal(size=(ambient, dim)))[0]
        x = rng.normal(size=(distinct, dim)) @ basis.T
        both = np.concatenate([x, x[rng.integers(0, distinct, size=copies)]])
        out[name] = (both[rng.permutation(len(both))], x, dim)
    return out


def checksum(x):
    return {"sum": float(np.sum(x)), "first": [float(v) for v in x[0, :3]]}


def main():
    import dadapy

    result = {"dadapy": "0.3.4", "numpy": np.__version__, "datasets": {}}
    with contextlib.redirect_stdout(sys.stderr):  # dadapy prints what it removes
        measure(dadapy, result)
    json.dump(result, sys.stdout, indent=1)
    print()


def measure(dadapy, result):
    for name, (x, unique, dim) in make_datasets().items():
        entry = {"true_dimension": dim, "n": len(x), "n_distinct": len(unique),
                 "checksum": checksum(x)}
        for label, points in (("with_copies", x), ("distinct_only", unique)):
            data = dadapy.Data(coordinates=points.copy(), verbose=False)
            data.remove_identical_points()
            twonn = data.compute_id_2NN(algorithm="base", mu_fraction=0.9)[0]
            data = dadapy.Data(coordinates=points.copy(), verbose=False)
            data.remove_identical_points()
            ids, _, _ = data.return_id_scaling_gride(range_max=32)
            entry[label] = {"n_after_remove_identical_points": int(data.N),
                            "twonn_fit_fraction_0.9": float(twonn),
                            "gride_scaling_32": [float(v) for v in ids]}
        result["datasets"][name] = entry


if __name__ == "__main__":
    main()
