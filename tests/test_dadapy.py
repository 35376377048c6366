"""TwoNN and GRIDE against dadapy 0.3.4 itself, run live on fresh inputs (tests/dadapy_oracle.py
in .venv-dadapy, which `scripts/install.sh test` makes): the hidden states of a real model and
a known manifold with exact copies. test_intrinsic_dimension.py checks the same estimators
against dadapy's committed numbers on other data; here nothing is precomputed."""
import json
import pathlib
import subprocess

import jax
import numpy as np
import pytest

from anisotropy_jax import metrics

ROOT = pathlib.Path(__file__).resolve().parent.parent
DADAPY_PYTHON = ROOT / ".venv-dadapy" / "bin" / "python"


def _dadapy(tmp_path, sets):
    """dadapy's numbers on {name: (N, D) float64}, from its own environment."""
    assert DADAPY_PYTHON.exists(), (
        f"{DADAPY_PYTHON} is missing: `scripts/install.sh test` makes it (dadapy's own pins)")
    path = tmp_path / "points.npz"
    np.savez(path, **sets)
    done = subprocess.run([str(DADAPY_PYTHON), str(ROOT / "tests" / "dadapy_oracle.py"),
                           str(path)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["dadapy"] == "0.3.4"
    return out["sets"]


def _dadapy_filter(log_mu_N):
    """dadapy's `_filter_mus` before GRIDE: it drops μ ≥ 20·(q95 − q50) + q50 as "overlapping
    points" (a far cluster's ratios fall there too); this project keeps every ratio."""
    mu = np.exp(log_mu_N)
    q95, q50 = np.percentile(mu, [95, 50])
    return mu < 20 * (q95 - q50) + q50


def _check(name, x, ref, twonn_rel=1e-9):
    """TwoNN and the distinct-point count equal dadapy's; each GRIDE scale equals dadapy's where
    its ratio filter drops nothing, and, where it drops some, `gride_from_ratios` on the ratios it
    keeps equals dadapy's. twonn_rel: float32 states have near-ties that this project's distances
    (through the Gram expansion) and dadapy's order differently at 1e-9. Returns the n1 of the
    scales at which the filter dropped ratios."""
    filtered = []
    with jax.enable_x64(True):
        distinct = metrics.distinct_points(x)
        assert int(distinct.sum()) == ref["n_distinct"], name
        assert float(metrics.twonn_dimension(x)) == pytest.approx(ref["twonn"], rel=twonn_rel), name
        ours = metrics.gride_scaling(x, max_rank=32, unbiased=True).dimension
        r = np.asarray(metrics.neighbor_distances(x, (1, 2, 4, 8, 16, 32), distinct))
        r = r[np.asarray(distinct)]
        for i, n1 in enumerate((1, 2, 4, 8, 16)):  # dadapy's bisection stops at |d0 − d1| < 1e-7
            log_mu = np.log(r[:, i + 1] / r[:, i])
            keep = _dadapy_filter(log_mu)
            if keep.all():
                assert float(ours[i]) == pytest.approx(ref["gride_scaling_32"][i], rel=1e-6)
                continue
            filtered.append(n1)
            dim, _ = metrics.gride_from_ratios(log_mu[keep], n1, 2 * n1, unbiased=True)
            assert float(dim) == pytest.approx(ref["gride_scaling_32"][i], rel=1e-6), (name, n1)
    return filtered


def _manifold_with_copies(seed=11):
    """S^4 in R^16 (500 points), 40 % of them copied once more, plus a far cluster of 16 points
    (the shape of a batch's first tokens), shuffled."""
    rng = np.random.default_rng(seed)
    s = rng.normal(size=(500, 5))
    s = (s / np.linalg.norm(s, axis=1, keepdims=True)) @ np.linalg.qr(
        rng.normal(size=(16, 5)))[0].T
    far = 40.0 + 0.1 * rng.normal(size=(16, 16))
    x = np.concatenate([s, s[rng.choice(500, 200, replace=False)], far])
    return x[rng.permutation(len(x))]


def test_matches_dadapy_live_on_a_manifold_with_copies(tmp_path):
    x = _manifold_with_copies()
    ref = _dadapy(tmp_path, {"sphere4": x})["sphere4"]
    assert ref["n_distinct"] == 516 < len(x)
    # the far cluster's 16 ratios at (8, 16) are the ones dadapy's filter drops (and only there):
    # with them GRIDE reads about 2.3, without them about 3.9
    assert _check("sphere4", x, ref) == [8]
    assert ref["twonn"] == pytest.approx(4.0, rel=0.2)  # and dadapy sees the true dimension
    with jax.enable_x64(True):
        ours = float(metrics.gride_scaling(x, max_rank=32, unbiased=True).dimension[3])
    assert ours < 0.7 * ref["gride_scaling_32"][3]


def test_matches_dadapy_live_on_a_real_models_states(tmp_path):
    """all-MiniLM-L6-v2 (trained weights) on 24 Shakespeare sentences (seed 5), every measured
    token ([CLS] included: exact copies in the embeddings) of the embedding output, block 1 and
    block 5, float32 states widened to float64 for both sides."""
    from anisotropy_jax.configs.pretrained import PretrainedConfig
    from anisotropy_jax.studies.pretrained import analysis

    config = PretrainedConfig(num_sentences=24, max_length=48, length_multiple=16,
                              untrained_seeds=1, num_pairs=10, seed=5)
    layers = analysis.run(config).hidden_states["trained"].layers
    sets = {f"state_{i}": np.asarray(layers[i], np.float64) for i in (0, 1, 5)}
    refs = _dadapy(tmp_path, sets)
    assert refs["state_0"]["n_distinct"] < len(sets["state_0"])  # the [CLS] rows coincide
    filtered = {name: _check(name, x, refs[name], twonn_rel=1e-7) for name, x in sets.items()}
    # The 24 [CLS] rows of a block's output are a far cluster of 24 points: dadapy's filter drops
    # their ratios at (16, 32) (where r_32 leaves the cluster), nothing at the smaller scales.
    assert filtered == {"state_0": [], "state_1": [16], "state_5": [16]}
