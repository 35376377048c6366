"""dadapy 0.3.4's TwoNN and GRIDE on point sets given in an .npz: the live oracle of
tests/test_dadapy.py. It runs in `.venv-dadapy` (made by `scripts/install.sh test` from
tests/dadapy_requirements.txt), not in the project's venv, because dadapy pins jax==0.4.30 and
numpy<2 against this project's jax and numpy 2.

    .venv-dadapy/bin/python tests/dadapy_oracle.py POINTS.npz > OUT.json

Every array in POINTS.npz is one (N, D) point set, read as float64. For each, as dadapy's users
call it: remove_identical_points, then compute_id_2NN (mu_fraction 0.9) and
return_id_scaling_gride (range_max 32).
"""
import contextlib
import importlib.metadata
import json
import sys

import numpy as np


def measure(dadapy, x):
    data = dadapy.Data(coordinates=x.copy(), verbose=False)
    data.remove_identical_points()
    twonn = data.compute_id_2NN(algorithm="base", mu_fraction=0.9)[0]
    n_distinct = int(data.N)
    data = dadapy.Data(coordinates=x.copy(), verbose=False)
    data.remove_identical_points()
    ids, _, _ = data.return_id_scaling_gride(range_max=32)
    return {"n": len(x), "n_distinct": n_distinct, "twonn": float(twonn),
            "gride_scaling_32": [float(v) for v in ids]}


def main():
    import dadapy

    out = {"dadapy": importlib.metadata.version("dadapy"),
           "numpy": np.__version__, "sets": {}}
    with np.load(sys.argv[1]) as stored, contextlib.redirect_stdout(sys.stderr):
        for name in stored.files:  # dadapy prints what it removes: keep stdout for the JSON
            out["sets"][name] = measure(dadapy, stored[name].astype(np.float64))
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
