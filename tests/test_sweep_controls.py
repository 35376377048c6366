"""The bias sweep's controls (docs/SWEEP.md, "The controls"): the fixed-norm and per-sequence
inputs against numpy float64, the draws they share with the biased inputs, the controls' exact
identities on the block's own logits, the closed forms of every inputs kind against a float64
Monte Carlo of the attention logits (no JAX, no closed form inside), and `controls.summary`
against a loop over seeds."""
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from anisotropy_jax import inputs
from anisotropy_jax.config import BlockConfig
from anisotropy_jax.configs.sweep import SweepConfig
from anisotropy_jax.studies.sweep import affine, controls, grid, theory
from tests import reference

BLOCK = BlockConfig(d_model=32, num_heads=4, d_ff=64)
CONFIG = SweepConfig(model=BLOCK, batch_size=3, seq_len=6, bias_norms=(0.0, 0.5, 3.0, 20.0),
                     num_seeds=2, seed=7, chunk_size=0)


# --------------------------------------------------------------------------------------------
# The inputs against numpy float64

def test_fixed_norm_inputs_are_the_biased_ones_rescaled_to_the_unbiased_norm():
    z = jax.random.normal(jax.random.key(0), (64, 32, 48))
    u = inputs.random_unit_vector(jax.random.key(1), 48)
    z64, u64 = np.asarray(z, np.float64), np.asarray(u, np.float64)
    for s in (0.0, 3.0, 40.0, 1e4):
        x = np.asarray(inputs.fixed_norm_inputs(z, u, s), np.float64)
        np.testing.assert_allclose(x, (z64 + s * u64) / math.sqrt(1 + s * s / 48), rtol=2e-6,
                                   atol=1e-6)
        # E‖x‖² = d: the mean over 2,048 tokens is within 5 sd (Var‖z + s·u‖² = 2d + 4s²,
        # divided by c⁴ and by the token count).
        sd = math.sqrt(2 * 48 + 4 * s * s) / (1 + s * s / 48) / math.sqrt(64 * 32)
        assert abs((x ** 2).sum(-1).mean() - 48) < 5 * sd, s
        # The direction is the biased inputs': their cosines are equal.
        biased = (z64 + s * u64)[:2].reshape(-1, 48)
        np.testing.assert_allclose(reference.average_cosine(x[:2].reshape(-1, 48)),
                                   reference.average_cosine(biased), atol=1e-6)


def test_per_sequence_inputs_add_one_direction_per_sequence():
    z = jax.random.normal(jax.random.key(2), (5, 7, 16))
    u_BxD = inputs.sequence_directions(jax.random.key(3), 5, 16)
    x = np.asarray(inputs.per_sequence_inputs(z, u_BxD, 2.5), np.float64)
    z64, u64 = np.asarray(z, np.float64), np.asarray(u_BxD, np.float64)
    for b, t in itertools.product(range(5), range(7)):
        np.testing.assert_allclose(x[b, t], z64[b, t] + 2.5 * u64[b], rtol=1e-6, atol=1e-6)


def test_sequence_directions_are_unit_independent_and_uniform():
    """2,000 directions of R^16: unit norms; their mean ~ 0 and pairwise dot products of mean 0
    and variance 1/d (uniform on the sphere: E t² = 1/d and E t⁴ = 3/(d(d + 2)) for t = u_b·u_c,
    so sd(t²) = √(2(d − 1)/(d + 2))/d); and independent of u drawn from the same direction key
    (u·u_b has mean 0 and mean square 1/d)."""
    d, n = 16, 2000
    key = jax.random.key(4)
    u_BxD = np.asarray(inputs.sequence_directions(key, n, d), np.float64)
    u_D = np.asarray(inputs.random_unit_vector(key, d), np.float64)
    np.testing.assert_allclose(np.linalg.norm(u_BxD, axis=1), 1.0, rtol=1e-6)
    # ‖mean‖² has expectation 1/n; 5 sd of a sum of d squared normals of variance 1/(nd).
    assert np.sum(u_BxD.mean(0) ** 2) < (1 + 5 * math.sqrt(2 / d)) / n
    dots = (u_BxD[: n // 2] * u_BxD[n // 2:]).sum(1)  # 1,000 independent pairs
    assert abs(dots.mean()) < 5 / math.sqrt(d * n / 2)
    sd_square = math.sqrt(2 * (d - 1) / (d + 2)) / d
    assert abs((dots ** 2).mean() - 1 / d) < 5 * sd_square / math.sqrt(n / 2)
    with_u = u_BxD @ u_D
    assert abs(with_u.mean()) < 5 / math.sqrt(d * n)
    assert abs((with_u ** 2).mean() - 1 / d) < 5 * sd_square / math.sqrt(n)


def test_every_kind_shares_the_biased_runs_weights_and_tokens():
    """The draws of a seed do not depend on the inputs kind, except u's shape: (B, D) per-sequence
    directions for 'per_sequence'; so the controls' differences are paired seed by seed."""
    biased = grid.init_seeds(CONFIG)
    for kind in ("norm_matched", "fixed_norm", "per_sequence"):
        other = grid.init_seeds(CONFIG.replace(inputs=kind))
        for a, b in zip(jax.tree.leaves((biased.params, biased.z)),
                        jax.tree.leaves((other.params, other.z))):
            np.testing.assert_array_equal(a, b)
        if kind == "per_sequence":
            assert other.u.shape == (2, 3, 32)
            np.testing.assert_allclose(np.linalg.norm(other.u, axis=-1), 1.0, rtol=1e-6)
            assert not np.allclose(other.u[:, 0], other.u[:, 1])  # one direction per sequence
        else:
            np.testing.assert_array_equal(other.u, biased.u)


def test_sweep_inputs_of_each_kind_match_numpy():
    state = grid.init_seeds(CONFIG.replace(inputs="per_sequence"))
    z, u_BxD = np.asarray(state.z[0], np.float64), np.asarray(state.u[0], np.float64)
    u_D = np.asarray(grid.init_seeds(CONFIG).u[0], np.float64)
    s, c = 7.0, math.sqrt(1 + 49 / 32)
    want = {"biased": z + s * u_D, "norm_matched": z * c, "fixed_norm": (z + s * u_D) / c,
            "per_sequence": z + s * u_BxD[:, None, :]}
    for kind, x in want.items():
        u = u_BxD if kind == "per_sequence" else u_D
        got = affine.sweep_inputs(kind, jnp.asarray(z, jnp.float32), jnp.asarray(u, jnp.float32),
                                  np.float32(s))
        np.testing.assert_allclose(np.asarray(got, np.float64), x, rtol=1e-5, atol=1e-5,
                                   err_msg=kind)


# --------------------------------------------------------------------------------------------
# The identities on the block's own logits

def _logits(block, kind, s, projected=False):
    state = grid.init_seeds(CONFIG.replace(model=block, inputs=kind))
    params = jax.tree.map(lambda a: a[0], state.params)
    z, u = state.z[0], state.u[0]
    proj = affine.project_seed(block, params, z, u) if projected else None
    _, probes = affine.block_at(block, params, z, u, np.float32(s), proj, kind)
    return np.asarray(probes["attn_logits"], np.float64)


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_controls_logits_are_the_biased_or_unbiased_logits_times_a_positive_factor(norm_position):
    """controls.py's identities, on the logits (B, H, L, L) of the block at init (zero linear
    biases): norm-matched = s = 0 logits × c² (post-LN; pre-LN: × 1), fixed-norm = biased
    logits / c² (post-LN; pre-LN: × 1). A positive factor keeps every argmax (the agreement) and,
    for a factor of 1, every attention statistic."""
    block = BLOCK.replace(norm_position=norm_position)
    s = 9.0
    c2 = 1 + s * s / 32
    post = norm_position == "post"
    biased, zero = _logits(block, "biased", s), _logits(block, "biased", 0.0)
    np.testing.assert_allclose(_logits(block, "norm_matched", s),
                               zero * (c2 if post else 1.0), rtol=2e-4, atol=1e-6)
    np.testing.assert_allclose(_logits(block, "fixed_norm", s),
                               biased / (c2 if post else 1.0), rtol=2e-4, atol=1e-6)
    assert not np.allclose(biased, zero, rtol=0.05)  # the bias moves the logits


# --------------------------------------------------------------------------------------------
# The closed forms of every kind against a float64 Monte Carlo

D, H, L, B, SIGMA, REPS = 256, 4, 64, 8, 0.02, 6
DH = D // H
MC_NORMS = np.array([0.0, 4.0, 16.0, 32.0, 64.0, 4096.0])


def _layer_norm(x, eps):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)


def _monte_carlo(kind, norm_position, rng):
    """Mean attention entropy (nats) and mean per-head query norm, (REPS, s), from N(0, σ²)
    query/key kernels and the inputs of `kind` built in numpy float64."""
    entropy, query_norm = np.zeros((2, REPS, len(MC_NORMS)))
    for r in range(REPS):
        w_q, w_k = rng.normal(0, SIGMA, (2, D, D))
        z = rng.normal(size=(B, L, D))
        u = rng.normal(size=D)
        u /= np.linalg.norm(u)
        u_b = rng.normal(size=(B, D))
        u_b /= np.linalg.norm(u_b, axis=1, keepdims=True)
        for j, s in enumerate(MC_NORMS):
            c = math.sqrt(1 + s * s / D)
            x = {"biased": z + s * u, "norm_matched": z * c, "fixed_norm": (z + s * u) / c,
                 "per_sequence": z + s * u_b[:, None, :]}[kind]
            a = _layer_norm(x, 1e-5) if norm_position == "pre" else x
            q, k = ((a @ w).reshape(B, L, H, DH) for w in (w_q, w_k))
            logits = np.einsum("blhe,bmhe->bhlm", q, k) / math.sqrt(DH)
            p = np.exp(logits - logits.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            entropy[r, j] = np.mean(-(p * np.log(np.where(p > 0, p, 1.0))).sum(-1))
            query_norm[r, j] = np.linalg.norm(q, axis=-1).mean()
    return entropy, query_norm


@pytest.mark.parametrize("norm_position,kind", list(itertools.product(
    ["post", "pre"], ["biased", "norm_matched", "fixed_norm", "per_sequence"])))
def test_closed_forms_of_every_kind_match_a_float64_monte_carlo(norm_position, kind):
    """F3(s) and F2 of `theory.closed_forms` against attention computed directly. Tolerance: 5
    standard errors of the Monte Carlo mean (from the REPS repetitions: at large s the key-
    dependent logit variance rests on ‖W_hᵀu‖², a χ² of Dh degrees of freedom per head), plus
    5% of the entropy deficit ln L − H for the expansion (softmax of Gaussian logits: ln L − v/2
    up to O(e^v/L)) and 1% of ‖q‖ for E‖q‖ < √E‖q‖² (Jensen, 1/(4 Dh) = 0.4%) and LN's centring."""
    config = SweepConfig(model=BlockConfig(d_model=D, num_heads=H, d_ff=4 * D,
                                           norm_position=norm_position),
                         batch_size=B, seq_len=L, inputs=kind, bias_norms=tuple(MC_NORMS))
    forms = theory.closed_forms(config, MC_NORMS)
    entropy, query_norm = _monte_carlo(kind, norm_position, np.random.default_rng(5))
    predicted = forms["attention_entropy"]["predicted"]
    where = np.isfinite(predicted)
    assert where[:4].all()  # the operating range is covered
    error = np.std(entropy, axis=0, ddof=1) / math.sqrt(REPS)
    deficit = math.log(L) - predicted
    np.testing.assert_array_less(np.abs(entropy.mean(0) - predicted)[where],
                                 (5 * error + 0.05 * deficit)[where])
    f2 = forms["query_norm"]["predicted"]
    q_error = np.std(query_norm, axis=0, ddof=1) / math.sqrt(REPS)
    np.testing.assert_array_less(np.abs(query_norm.mean(0) - f2), 5 * q_error + 0.01 * f2)


def test_input_cosine_forms_of_every_kind_match_numpy_inputs():
    """F1 and its within/cross-sequence parts against the cosines of numpy-built inputs (exact
    pair loops), B = 4 sequences of L = 8 tokens, d = 64: tolerance 5 sd of the z·u and z·z pair
    terms, (2s/√N + √(2d)/N)/(s² + d) with N the pairs' token count, plus the u_b·u_c terms of
    the per-sequence inputs (sd s²/(s² + d)/√d over B(B−1)/2 pairs)."""
    rng = np.random.default_rng(6)
    d, b, seq_len = 64, 4, 8
    z = rng.normal(size=(b, seq_len, d))
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    u_b = rng.normal(size=(b, d))
    u_b /= np.linalg.norm(u_b, axis=1, keepdims=True)
    s_all = np.array([0.0, 4.0, 8.0, 16.0, 64.0])
    for kind in ("biased", "norm_matched", "fixed_norm", "per_sequence"):
        config = SweepConfig(model=BlockConfig(d_model=d, num_heads=4, d_ff=128), batch_size=b,
                             seq_len=seq_len, inputs=kind, bias_norms=tuple(s_all))
        forms = theory.closed_forms(config, s_all)
        for j, s in enumerate(s_all):
            c = math.sqrt(1 + s * s / d)
            x = {"biased": z + s * u, "norm_matched": z * c, "fixed_norm": (z + s * u) / c,
                 "per_sequence": z + s * u_b[:, None, :]}[kind]
            cross, within = reference.cross_and_within_cosine(x)
            measured = {"input_cosine": reference.average_cosine(x.reshape(-1, d)),
                        "input_within_sequence_cosine": within,
                        "input_cross_sequence_cosine": cross}
            n = b * seq_len
            sd = (2 * s / math.sqrt(seq_len) + math.sqrt(2 * d) / seq_len) / (s * s + d)
            if kind == "per_sequence":
                sd += s * s / (s * s + d) / math.sqrt(d * b * (b - 1) / 2)
            for name, value in measured.items():
                assert abs(value - forms[name]["predicted"][j]) < 5 * sd + 1e-9, (kind, s, name)
            assert n == 32


# --------------------------------------------------------------------------------------------
# controls.summary against a loop over seeds

class _Run:
    def __init__(self, config, per_seed):
        self.config, self.per_seed = config, per_seed
        self.bias_norms = np.asarray(config.bias_norms, np.float64)


def test_summary_pairs_each_control_with_its_biased_run():
    rng = np.random.default_rng(7)
    norms = (0.0, 10.0, 20.0, 30.0, 400.0)
    base = SweepConfig(bias_norms=norms, num_seeds=3)
    metrics = controls.COMPARED_METRICS + ("input_cosine",)
    per_seed = {kind: {m: rng.normal(size=(3, 5)) for m in metrics}
                for kind in ("biased", "norm_matched", "fixed_norm", "per_sequence")}
    per_seed["biased"]["input_cosine"] = np.array([[0.0, 0.09, 0.35, 0.6, 0.99]] * 3)
    agreement = per_seed["biased"]["attention_query_agreement"]
    per_seed["fixed_norm"]["attention_query_agreement"] = agreement + 1e-3  # near the identity
    runs = {f"inputs={k}": _Run(base.replace(inputs=k), v) for k, v in per_seed.items()}
    runs["other block"] = _Run(base.replace(inputs="norm_matched", seq_len=64),
                               per_seed["norm_matched"])  # no biased partner: left out
    out = controls.summary(runs)
    assert list(out) == ["inputs=biased"]
    entry = out["inputs=biased"]
    assert entry["operating_points"] == [2, 3] and entry["operating_bias_norms"] == [20.0, 30.0]
    assert set(entry["runs"]) == {"inputs=norm_matched", "inputs=fixed_norm",
                                  "inputs=per_sequence"}
    for label, control in entry["runs"].items():
        kind = label.removeprefix("inputs=")
        for name, diff in control["minus_biased"].items():
            for j in range(5):
                paired = [per_seed[kind][name][i, j] - per_seed["biased"][name][i, j]
                          for i in range(3)]
                mean, sd = np.mean(paired), np.std(paired, ddof=1)
                half = stats.t.ppf(0.975, 2) * sd / math.sqrt(3)
                np.testing.assert_allclose([diff["mean"][j], diff["low"][j], diff["high"][j]],
                                           [mean, mean - half, mean + half], rtol=1e-12)
    fixed = entry["runs"]["inputs=fixed_norm"]["identity"]
    np.testing.assert_allclose(fixed["max_abs_deviation"]["attention_query_agreement"], 1e-3)
    matched = entry["runs"]["inputs=norm_matched"]["identity"]["max_abs_deviation"]
    want = np.max(np.abs(per_seed["norm_matched"]["attention_query_agreement"]
                         - per_seed["norm_matched"]["attention_query_agreement"][:, :1]))
    np.testing.assert_allclose(matched["attention_query_agreement"], want)
    assert entry["runs"]["inputs=per_sequence"]["identity"] is None
    one_seed = controls.paired_difference(np.ones((1, 2)), np.zeros((1, 2)))
    assert one_seed["mean"] == [1.0, 1.0] and all(math.isnan(v) for v in one_seed["low"])
