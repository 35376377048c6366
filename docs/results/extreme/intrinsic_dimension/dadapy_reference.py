"""dadapy's TwoNN and GRIDE on fixed data sets: the oracle values tests/test_intrinsic_dimension.py
checks `anisotropy_jax.metrics.intrinsic_dimension` against.

dadapy 0.3.4 pins jax==0.4.30, flax==0.8.5 and numpy<2, which conflict with this project's pins
(jax 0.10.2, numpy 2.4.6), so it runs in a virtual environment of its own
(tests/test_dadapy.py runs it live in .venv-dadapy), and its numbers on these sets are
committed in dadapy_reference.json beside this file. Regenerate (or use .venv-dadapy/bin/python):

    python3 -m venv /tmp/dadapy_venv && /tmp/dadapy_venv/bin/pip install dadapy==0.3.4
    /tmp/dadapy_venv/bin/python docs/results/extreme/intrinsic_dimension/dadapy_reference.py \
        > docs/results/extreme/intrinsic_dimension/dadapy_reference.json

`make_datasets` uses numpy only (the test imports it from this file); the JSON keeps a checksum
of every data set so that a change in numpy's random stream fails the test instead of comparing
different data.
"""
import json
import sys

import numpy as np


def make_datasets():
    """{name: (points (N, D) float64, true intrinsic dimension)}."""
    rng = np.random.default_rng(20240522)
    out = {}
    basis = np.linalg.qr(rng.normal(size=(20, 5)))[0]  # a 5-dim linear subspace of R^20
    out["plane5_in_20"] = (rng.normal(size=(400, 5)) @ basis.T + 3.0, 5)
    sphere = rng.normal(size=(400, 4))
    sphere /= np.linalg.norm(sphere, axis=1, keepdims=True)  # uniform on S^3 (dimension 3)
    out["sphere3_in_10"] = (sphere @ np.linalg.qr(rng.normal(size=(10, 4)))[0].T, 3)
    out["gaussian_64"] = (rng.normal(size=(500, 64)), 64)
    return out


def checksum(x):
    return {"sum": float(np.sum(x)), "first": [float(v) for v in x[0, :3]]}


def main():
    import dadapy
    from dadapy._utils import utils as ut

    result = {"dadapy": dadapy.__version__ if hasattr(dadapy, "__version__") else "0.3.4",
              "numpy": np.__version__, "datasets": {}}
    for name, (x, dim) in make_datasets().items():
        data = dadapy.Data(coordinates=x.copy(), verbose=False)
        twonn_fit = data.compute_id_2NN(algorithm="base", mu_fraction=0.9)[0]
        data = dadapy.Data(coordinates=x.copy(), verbose=False)
        twonn_ml = data.compute_id_2NN(algorithm="ml", mu_fraction=1.0)[0]
        data = dadapy.Data(coordinates=x.copy(), verbose=False)
        ids, errs, scales = data.return_id_scaling_gride(range_max=64)
        _, _, mus, _ = data._return_mus_scaling(range_scaling=64)
        dropped = [int(len(mus) - len(ut._filter_mus(data.dtype, mus[:, i].copy(), 1, 2)[0]))
                   for i in range(mus.shape[1])]
        result["datasets"][name] = {
            "true_dimension": dim, "n": len(x), "checksum": checksum(x),
            "twonn_fit_fraction_0.9": float(twonn_fit),
            "twonn_ml_unbiased": float(twonn_ml),
            "gride_scaling_64": {"dimension": [float(v) for v in ids],
                                 "stderr": [float(v) for v in errs],
                                 "scale": [float(v) for v in scales],
                                 "ratios_dropped_by_dadapy_filter": dropped},
        }
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
