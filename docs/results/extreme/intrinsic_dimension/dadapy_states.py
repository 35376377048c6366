"""dadapy's TwoNN and GRIDE on hidden states of a real model: the oracle that
tests/test_intrinsic_dimension.py checks `anisotropy_jax.metrics.intrinsic_dimension` against on
real states (the known manifolds are dadapy_reference.py and dadapy_duplicates.py).

The states are all-MiniLM-L6-v2's (trained weights) on the pretrained study's first 32
Shakespeare sentences (seed 0, ≤ 64 tokens): the embedding output, where the 32 [CLS] rows (the
same token at the same position) are exact copies, and the output of block 3; the first 400
measured tokens of each, in (sentence, position) order, stored as float16 in
minilm_states.npz (the test and dadapy read the same float16 values, widened to float64).
Two steps, in two environments (dadapy 0.3.4 pins jax==0.4.30 and numpy<2; see README.md):

    .venv/bin/python docs/results/extreme/intrinsic_dimension/dadapy_states.py --states
    python3 -m venv /tmp/dadapy_venv && /tmp/dadapy_venv/bin/pip install dadapy==0.3.4
    /tmp/dadapy_venv/bin/python docs/results/extreme/intrinsic_dimension/dadapy_states.py \\
        > docs/results/extreme/intrinsic_dimension/dadapy_states.json
"""
import contextlib
import importlib.util
import json
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
STATES = HERE / "minilm_states.npz"
TOKENS = 400
LAYERS = {"embeddings": 0, "block_3": 3}


def write_states():
    from anisotropy_jax.configs.pretrained import PretrainedConfig
    from anisotropy_jax.studies.pretrained import analysis

    config = PretrainedConfig(num_sentences=32, max_length=64, length_multiple=32,
                              untrained_seeds=1, num_pairs=10)
    states = analysis.run(config).hidden_states["trained"]
    np.savez_compressed(STATES, **{name: states.layers[i][:TOKENS].astype(np.float16)
                                   for name, i in LAYERS.items()})


def measure(dadapy):
    """dadapy's numbers on the stored states, through the test suite's live oracle (the same
    calls: remove_identical_points, compute_id_2NN, return_id_scaling_gride(range_max=32))."""
    spec = importlib.util.spec_from_file_location(
        "dadapy_oracle", HERE.parents[3] / "tests" / "dadapy_oracle.py")
    oracle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(oracle)
    out = {"dadapy": "0.3.4", "numpy": np.__version__, "states": {}}
    with np.load(STATES) as stored:
        for name in LAYERS:
            x = stored[name].astype(np.float64)
            got = oracle.measure(dadapy, x)
            out["states"][name] = {"n": got["n"], "n_after_remove_identical_points":
                                   got["n_distinct"], "sum": float(np.sum(x)),
                                   "twonn_fit_fraction_0.9": got["twonn"],
                                   "gride_scaling_32": got["gride_scaling_32"]}
    return out


def main():
    if sys.argv[1:] == ["--states"]:
        write_states()
        return
    import dadapy

    with contextlib.redirect_stdout(sys.stderr):  # dadapy prints what it removes
        result = measure(dadapy)
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
