"""Numerical claims about anisotropy_jax.metrics: brute-force references, closed forms,
invariances and documented edge cases."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from anisotropy_jax import metrics
from tests import reference

RNG_SEEDS = [0, 1, 2]


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def _cloud(seed, n=40, d=7, bias=0.0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) * rng.uniform(0.5, 2.0, size=d)
    return x + bias * rng.normal(size=d)


# ---------------------------------------------------------------- brute-force references

@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_average_cosine_matches_pair_loop(seed):
    x = _cloud(seed, bias=1.5)
    np.testing.assert_allclose(metrics.average_cosine_similarity(x), reference.average_cosine(x),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_average_cosine_float32_close_to_float64_reference(seed):
    x = _cloud(seed, bias=1.5)
    got = metrics.average_cosine_similarity(jnp.asarray(x, jnp.float32))
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, reference.average_cosine(x), atol=1e-5)


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_sequence_cosines_match_pair_loop(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(3, 5, 4)) + 0.7
    cross, within = reference.cross_and_within_cosine(x)
    np.testing.assert_allclose(metrics.cross_sequence_cosine_similarity(x), cross, rtol=1e-10)
    np.testing.assert_allclose(metrics.within_sequence_cosine_similarity(x), within, rtol=1e-10)


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_masked_sequence_cosines_match_pair_loop(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(3, 6, 4)) + 0.5
    mask = np.ones((3, 6), bool)
    mask[0, 4:] = False
    mask[2, 2:] = False
    cross, within = reference.cross_and_within_cosine(x, mask)
    np.testing.assert_allclose(metrics.cross_sequence_cosine_similarity(x, mask), cross,
                               rtol=1e-10)
    np.testing.assert_allclose(metrics.within_sequence_cosine_similarity(x, mask), within,
                               rtol=1e-10)
    np.testing.assert_allclose(metrics.average_cosine_similarity(x, mask),
                               reference.average_cosine(x[mask]), rtol=1e-10)


def test_sampled_pairs_estimate_all_pairs():
    x = _cloud(3, n=200, d=5, bias=1.0)
    exact = reference.average_cosine(x)
    estimate = metrics.sampled_pair_cosine_similarity(x, jax.random.key(0), num_pairs=200_000)
    # Pair cosines have std < 1, so the standard error is < 1/√K ≈ 0.0022; 5 sigma.
    assert abs(float(estimate) - exact) < 5 / np.sqrt(200_000)


def test_sampled_pairs_never_pair_a_vector_with_itself():
    # Two vectors pointing opposite ways: every distinct pair has cosine -1, a self-pair +1.
    x = np.array([[1.0, 0.0], [-1.0, 0.0]])
    estimate = metrics.sampled_pair_cosine_similarity(x, jax.random.key(1), num_pairs=1000)
    np.testing.assert_allclose(estimate, -1.0)


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_drift_matches_reference(seed):
    x = _cloud(seed, bias=2.0)
    mu = x.mean(0)
    np.testing.assert_allclose(metrics.drift_norm(x), np.linalg.norm(mu), rtol=1e-12)
    rel = np.linalg.norm(mu) / np.mean([np.linalg.norm(v) for v in x])
    np.testing.assert_allclose(metrics.relative_drift(x), rel, rtol=1e-12)


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_isoscore_equals_the_papers_algorithm(seed):
    x = _cloud(seed, n=60, d=6)
    np.testing.assert_allclose(metrics.isoscore(x), reference.isoscore_algorithm(x), rtol=1e-9)


def test_isoscore_star_shrinks_towards_identity():
    x = _cloud(4, n=5, d=8)  # fewer samples than dimensions: rank-deficient covariance
    zeta = 0.3
    cov = (1 - zeta) * np.cov(x.T) + zeta * np.eye(8)
    lam = np.linalg.eigvalsh(cov)
    expected = ((lam.sum() ** 2 / (lam ** 2).sum()) - 1) / 7
    np.testing.assert_allclose(metrics.isoscore_star(x, zeta), expected, rtol=1e-10)
    np.testing.assert_allclose(metrics.isoscore_star(x, 0.0), metrics.isoscore(x), rtol=1e-12)
    assert metrics.isoscore_star(x, zeta) > metrics.isoscore(x)


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_partition_isotropy_matches_reference(seed):
    w = _cloud(seed, n=30, d=5, bias=0.3) * 0.5
    np.testing.assert_allclose(metrics.partition_isotropy(w), reference.partition_isotropy(w),
                               rtol=1e-9)


@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_spectral_metrics_match_svd(seed, center):
    x = _cloud(seed, n=25, d=6, bias=1.0)
    np.testing.assert_allclose(metrics.effective_rank(x, center=center),
                               reference.effective_rank(x, center), rtol=1e-8)
    np.testing.assert_allclose(metrics.top_pc_variance_ratio(x, center=center),
                               reference.top_pc_share(x, center), rtol=1e-8)


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_attention_metrics_match_row_loop(seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(2, 3, 5, 6)) * 3
    ent, mx, first = [], [], []
    for row_block in logits.reshape(-1, 5, 6):
        e, m, f = reference.attention_stats(row_block)
        ent.append(e), mx.append(m), first.append(f)
    ent, mx, first = (np.array(a).reshape(2, 3, 5) for a in (ent, mx, first))
    np.testing.assert_allclose(metrics.attention_entropy(logits), ent, rtol=1e-10)
    np.testing.assert_allclose(metrics.normalized_attention_entropy(logits), ent / np.log(6),
                               rtol=1e-10)
    np.testing.assert_allclose(metrics.attention_max(logits), mx, rtol=1e-12)
    np.testing.assert_allclose(metrics.attention_sink_mass(logits), first, rtol=1e-12)
    stats = metrics.attention_statistics(logits)  # the one implementation behind the wrappers
    assert sorted(stats) == sorted(metrics.STATISTICS)
    for got, want in ((stats["entropy"], ent), (stats["max"], mx), (stats["sink"], first)):
        np.testing.assert_allclose(got, want, rtol=1e-10)


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_masked_statistics_and_mean_over_queries_match_loops(seed):
    """A causal mask plus a padded last key: every statistic equals the float64 loop over the
    visible keys of each query, and the per-head mean skips queries with one visible key."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(2, 3, 5, 5)) * 4
    mask = np.tril(np.ones((5, 5), bool))
    mask[:, 4] = False  # no query sees key 4
    stats = metrics.attention_statistics(logits, mask)
    counts = np.asarray(metrics.visible_key_counts(logits.shape[-2:], mask))
    np.testing.assert_array_equal(counts, [1, 2, 3, 4, 4])
    norm = metrics.normalized_entropy(stats["entropy"], counts)
    want = {"entropy": np.zeros((2, 3, 5)), "max": np.zeros((2, 3, 5)),
            "sink": np.zeros((2, 3, 5)), "norm": np.zeros((2, 3, 5))}
    for b, h, q in np.ndindex(2, 3, 5):
        visible = logits[b, h, q][mask[q]]
        e, m, f = reference.attention_stats(visible[None])
        want["entropy"][b, h, q], want["max"][b, h, q], want["sink"][b, h, q] = e[0], m[0], f[0]
        want["norm"][b, h, q] = e[0] / np.log(len(visible)) if len(visible) > 1 else 0.0
    for name in ("entropy", "max", "sink"):
        np.testing.assert_allclose(stats[name], want[name], rtol=1e-10, atol=1e-15, err_msg=name)
    np.testing.assert_allclose(norm, want["norm"], rtol=1e-10, atol=1e-15)
    head_mean = metrics.mean_over_queries(norm, counts)
    np.testing.assert_allclose(head_mean, want["norm"][:, :, 1:].mean(axis=(0, 2)), rtol=1e-12)


def test_masked_attention_entropy_normalises_by_visible_keys():
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(4, 4))
    causal = np.tril(np.ones((4, 4), bool))
    got = metrics.normalized_attention_entropy(logits, causal)
    for q in range(4):
        e, _, _ = reference.attention_stats(logits[q:q + 1, :q + 1])
        expected = 0.0 if q == 0 else e[0] / np.log(q + 1)  # one visible key: defined as 0
        np.testing.assert_allclose(got[q], expected, rtol=1e-10, atol=1e-15)
    np.testing.assert_array_equal(metrics.visible_key_counts(logits.shape, causal), [1, 2, 3, 4])


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_query_key_geometry_matches_loop(seed):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(2, 5, 3, 4)) + 0.3
    k = rng.normal(size=(2, 5, 3, 4)) - 0.2
    got = metrics.query_key_geometry(q, k)
    want = reference.query_key_geometry(q, k)
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-10, err_msg=name)


def test_query_key_geometry_mask_equals_dropping_tokens():
    rng = np.random.default_rng(6)
    q, k = rng.normal(size=(2, 2, 5, 3, 4)) + 0.4
    mask = np.array([[True] * 5, [True, True, False, False, False]])
    got = metrics.query_key_geometry(q, k, mask)
    kept_q = np.concatenate([q[0], q[1, :2]])[None]
    kept_k = np.concatenate([k[0], k[1, :2]])[None]
    want = reference.query_key_geometry(kept_q, kept_k)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-10, err_msg=name)


def test_drift_anisotropy_correlation_matches_scipy():
    drift = [0.1, 0.5, 0.3, 0.9, 0.7]
    cos = [0.2, 0.4, 0.35, 0.8, 0.5]
    got = metrics.drift_anisotropy_correlation(drift, cos)
    np.testing.assert_allclose(got["spearman"], stats.spearmanr(drift, cos)[0])
    np.testing.assert_allclose(got["pearson_p"], stats.pearsonr(drift, cos)[1])
    assert got["n"] == 5
    with pytest.raises(ValueError, match="at least 3"):
        metrics.drift_anisotropy_correlation([1.0, 2.0], [1.0, 2.0])


def _categorical_loop(logits, mask=None):
    """(agreement, row cosine, information), each (B, H), from the float64 loop per matrix."""
    b, h = logits.shape[:2]
    out = np.zeros((3, b, h))
    for bi, hi in np.ndindex(b, h):
        visible = None if mask is None else np.broadcast_to(mask, logits.shape)[bi, hi]
        out[:, bi, hi] = reference.categorical_attention(logits[bi, hi], visible)
    return out


CATEGORICAL = (metrics.attention_query_agreement, metrics.attention_row_cosine,
               metrics.attention_query_key_information)


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_categorical_attention_matches_loops(seed):
    rng = np.random.default_rng(seed)
    # A shared key preference (column offsets) plus per-query noise: agreement strictly between
    # 1/L and 1, so an argmax or counting bug changes the value.
    logits = rng.normal(size=(2, 3, 7, 7)) * 2 + rng.normal(size=(2, 3, 1, 7)) * 2
    want = _categorical_loop(logits)
    for fn, expected in zip(CATEGORICAL, want):
        got = fn(logits)
        assert got.shape == (2, 3), fn.__name__
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12, err_msg=fn.__name__)
    assert 1 / 7 < want[0].min() and want[0].max() < 1  # the test data is not a degenerate case


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_categorical_attention_with_causal_and_padding_masks_matches_loops(seed):
    """Causal (the first query, one visible key, is left out) and a per-sequence padding mask
    (a sequence of 3 valid keys: its queries see 1–3 keys) against the loops."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(2, 3, 6, 6)) * 3 + rng.normal(size=(2, 3, 1, 6))
    causal = np.tril(np.ones((6, 6), bool))
    padding = np.ones((2, 1, 1, 6), bool)
    padding[1, ..., 3:] = False
    for mask in (causal, causal & padding, np.broadcast_to(padding, (2, 1, 6, 6))):
        want = _categorical_loop(logits, mask)
        for fn, expected in zip(CATEGORICAL, want):
            np.testing.assert_allclose(fn(logits, mask), expected, rtol=1e-10, atol=1e-12,
                                       err_msg=fn.__name__)
    # Left out means left out: changing the first query's logits changes nothing under causal.
    moved = logits.copy()
    moved[..., 0, 0] += 50.0
    for fn in CATEGORICAL:
        np.testing.assert_array_equal(fn(moved, causal), fn(logits, causal), err_msg=fn.__name__)


def test_categorical_attention_float32_close_to_float64_loop():
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(2, 2, 16, 16)) * 4 + rng.normal(size=(2, 2, 1, 16)) * 3
    want = _categorical_loop(logits)
    for fn, expected in zip(CATEGORICAL, want):
        got = fn(jnp.asarray(logits, jnp.float32))
        assert got.dtype == jnp.float32
        np.testing.assert_allclose(got, expected, atol=2e-6, err_msg=fn.__name__)


def test_categorical_statistics_accept_precomputed_probabilities_and_entropy():
    """The sweep passes the block's weights and entropy probes instead of recomputing them."""
    rng = np.random.default_rng(7)
    logits = rng.normal(size=(2, 3, 5, 5)) * 3
    causal = np.tril(np.ones((5, 5), bool))
    direct = metrics.categorical_attention_statistics(logits, causal)
    masked = np.where(causal, logits, -np.inf)
    shortcut = metrics.categorical_attention_statistics(
        logits, causal, probabilities=jax.nn.softmax(masked, axis=-1),
        entropy=metrics.attention_entropy(logits, causal))
    assert sorted(direct) == sorted(metrics.CATEGORICAL_STATISTICS)
    for name in direct:
        np.testing.assert_allclose(shortcut[name], direct[name], rtol=1e-12, err_msg=name)


def test_query_agreement_counts_a_tied_maximum_for_every_tied_key():
    logits = np.array([[0.0, 0.0, -1.0],   # tie between keys 0 and 1
                       [-1.0, 2.0, 0.0],   # key 1
                       [3.0, 0.0, 0.0]])   # key 0
    np.testing.assert_allclose(metrics.attention_query_agreement(logits), 2 / 3)
    np.testing.assert_allclose(reference.categorical_attention(logits)[0], 2 / 3)


def test_categorical_attention_is_nan_without_enough_counted_queries():
    logits = np.zeros((1, 3, 3))
    only_first = np.zeros((3, 3), bool)
    only_first[:, 0] = True          # every query sees one key: none is counted
    for fn in CATEGORICAL:
        assert np.isnan(fn(logits, only_first)).all(), fn.__name__
    one_query = only_first.copy()
    one_query[2] = True              # one counted query: no pair for the row cosine
    assert float(metrics.attention_query_agreement(logits, one_query)[0]) == 1.0
    assert float(metrics.attention_query_key_information(logits, one_query)[0]) == 0.0
    assert np.isnan(metrics.attention_row_cosine(logits, one_query)[0])


# ---------------------------------------------------------------- closed forms

@pytest.mark.parametrize("k", [1, 2, 5, 10])
def test_isoscore_of_k_equal_eigenvalues(k):
    d = 10
    rng = np.random.default_rng(k)
    rotation, _ = np.linalg.qr(rng.normal(size=(d, d)))
    # 2k points ±e_i (i < k) have covariance ∝ diag(1,..,1,0,..,0) exactly: k equal eigenvalues.
    basis = np.eye(d)[:k]
    x = np.concatenate([basis, -basis]) @ rotation.T + 3.0
    np.testing.assert_allclose(metrics.isoscore(x), (k - 1) / (d - 1), atol=1e-12)


def test_uniform_attention_entropy_is_log_length():
    logits = np.zeros((3, 128))
    np.testing.assert_allclose(metrics.attention_entropy(logits), np.log(128), rtol=1e-12)
    np.testing.assert_allclose(metrics.normalized_attention_entropy(logits), 1.0, rtol=1e-12)
    np.testing.assert_allclose(metrics.attention_max(logits), 1 / 128, rtol=1e-12)
    np.testing.assert_allclose(metrics.attention_sink_mass(logits), 1 / 128, rtol=1e-12)


@pytest.mark.parametrize("seq_len", [2, 5, 64])
def test_categorical_attention_closed_forms(seq_len):
    """Identical rows → agreement 1, row cosine 1, information 0; a permutation one-hot pattern
    → 1/L, 0, ln L (as one-hot as float64 allows: logit gap 1e3)."""
    rng = np.random.default_rng(seq_len)
    identical = np.broadcast_to(rng.normal(size=(1, seq_len)) * 3, (seq_len, seq_len))
    permutation = np.zeros((seq_len, seq_len))
    permutation[np.arange(seq_len), rng.permutation(seq_len)] = 1e3
    for logits, (agree, row_cos, info) in ((identical, (1.0, 1.0, 0.0)),
                                           (permutation, (1 / seq_len, 0.0, np.log(seq_len)))):
        np.testing.assert_allclose(metrics.attention_query_agreement(logits), agree, rtol=1e-12)
        np.testing.assert_allclose(metrics.attention_row_cosine(logits), row_cos, atol=1e-12)
        np.testing.assert_allclose(metrics.attention_query_key_information(logits), info,
                                   atol=1e-12)


@pytest.mark.parametrize("masked_value", [-np.inf, -1e30, float(jnp.finfo(jnp.float32).min)])
def test_one_hot_attention_entropy_is_zero_without_nan(masked_value):
    logits = np.full((4, 6), masked_value)
    logits[np.arange(4), [0, 2, 5, 1]] = 1.0
    ent = metrics.attention_entropy(logits)
    assert np.all(np.isfinite(ent))
    np.testing.assert_array_equal(ent, 0.0)
    np.testing.assert_array_equal(metrics.normalized_attention_entropy(logits), 0.0)


def test_one_hot_entropy_float32_from_huge_logits():
    logits = jnp.asarray([[0.0, 1e4, 0.0]], jnp.float32)
    ent = metrics.attention_entropy(logits)
    assert ent.dtype == jnp.float32 and float(ent[0]) == 0.0


def test_average_cosine_of_uniform_cube_is_three_quarters():
    # E[u·v] / (E‖u‖ E‖v‖) → (d/4) / (d/3) = 3/4 for large d.
    x = jax.random.uniform(jax.random.key(0), (2000, 512), dtype=jnp.float32)
    np.testing.assert_allclose(metrics.average_cosine_similarity(x), 0.75, atol=0.01)


def test_isotropic_gaussian_is_isotropic():
    x = jax.random.normal(jax.random.key(1), (20000, 16))
    assert abs(float(metrics.average_cosine_similarity(x))) < 1e-3
    assert float(metrics.isoscore(x)) > 0.99
    assert float(metrics.relative_drift(x)) < 0.02


# ---------------------------------------------------------------- invariances

def test_isoscore_invariant_to_shift_and_scale():
    x = _cloud(7, n=50, d=6)
    base = metrics.isoscore(x)
    np.testing.assert_allclose(metrics.isoscore(x + 100.0 * np.arange(6)), base, rtol=1e-8)
    np.testing.assert_allclose(metrics.isoscore(x * 1e-3), base, rtol=1e-10)
    np.testing.assert_allclose(metrics.isoscore(x * 1e5), base, rtol=1e-10)


def test_cosine_metrics_invariant_to_rotation():
    rng = np.random.default_rng(8)
    x = rng.normal(size=(3, 6, 5)) + 1.0
    rotation, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    y = x @ rotation
    for fn in (metrics.average_cosine_similarity, metrics.cross_sequence_cosine_similarity,
               metrics.within_sequence_cosine_similarity, metrics.isoscore,
               metrics.relative_drift, metrics.effective_rank):
        np.testing.assert_allclose(fn(y), fn(x), rtol=1e-9, err_msg=fn.__name__)


def test_cosine_metrics_invariant_to_per_vector_scale():
    rng = np.random.default_rng(9)
    x = rng.normal(size=(2, 5, 4)) + 0.5
    y = x * rng.uniform(0.1, 10.0, size=(2, 5, 1))
    np.testing.assert_allclose(metrics.average_cosine_similarity(y),
                               metrics.average_cosine_similarity(x), rtol=1e-10)
    np.testing.assert_allclose(metrics.cross_sequence_cosine_similarity(y),
                               metrics.cross_sequence_cosine_similarity(x), rtol=1e-10)


# ---------------------------------------------------------------- edge cases

def test_zero_vector_has_zero_cosine_with_everything():
    x = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    # pairs: (a,b)=1, (a,0)=0, (b,0)=0 → mean over 3 unordered pairs = 1/3
    np.testing.assert_allclose(metrics.average_cosine_similarity(x), 1 / 3)
    np.testing.assert_allclose(metrics.average_cosine_similarity(x),
                               reference.average_cosine(x))


def test_all_zero_cloud_is_finite():
    x = np.zeros((5, 3))
    for fn in (metrics.average_cosine_similarity, metrics.drift_norm, metrics.relative_drift,
               metrics.isoscore, metrics.effective_rank, metrics.top_pc_variance_ratio):
        assert np.isfinite(jax.jit(fn)(x)), fn.__name__
    assert float(metrics.isoscore(x)) == 0.0


def test_single_vector_raises():
    x = np.ones((1, 4))
    for fn in (metrics.average_cosine_similarity, metrics.isoscore):
        with pytest.raises(ValueError, match="at least 2"):
            fn(x)
    with pytest.raises(ValueError, match="B >= 2"):
        metrics.cross_sequence_cosine_similarity(np.ones((1, 3, 4)))
    with pytest.raises(ValueError, match="length >= 2"):
        metrics.within_sequence_cosine_similarity(np.ones((3, 1, 4)))
    # Drift of one vector is well defined: its own norm.
    np.testing.assert_allclose(metrics.drift_norm(x), 2.0)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_huge_vectors_give_finite_results(dtype):
    rng = np.random.default_rng(10)
    x = rng.normal(size=(2, 8, 6))
    x_big = jnp.asarray(x * 1e6, dtype)
    x_huge = jnp.asarray(x * 1e30, dtype)
    for fn in (metrics.average_cosine_similarity, metrics.cross_sequence_cosine_similarity,
               metrics.within_sequence_cosine_similarity, metrics.relative_drift,
               metrics.isoscore, metrics.effective_rank, metrics.top_pc_variance_ratio):
        jitted = jax.jit(fn)
        for arr in (x_big, x_huge):
            value = jitted(arr)
            assert np.isfinite(value), (fn.__name__, dtype)
            np.testing.assert_allclose(value, jitted(jnp.asarray(x, dtype)), rtol=2e-4,
                                       err_msg=fn.__name__)
    assert np.isfinite(metrics.drift_norm(x_huge))
    assert np.isfinite(metrics.partition_isotropy(x_big))


@pytest.mark.parametrize("scale", [2e37, 1e38])  # norms stay below float32 max
def test_sums_of_near_float32_max_vectors_do_not_overflow(scale):
    """128 vectors near float32's largest value (entries up to 1e38, whose reciprocal is
    subnormal): their plain sum overflows, yet the mean norm, drift, relative drift and IsoScore
    (sums over x/2^k inside) equal float64 on the same data."""
    rng = np.random.default_rng(11)
    x64 = rng.normal(size=(128, 8)) + 2.0
    x64 = x64 / np.abs(x64).max() * scale
    x = jnp.asarray(x64, jnp.float32)
    x64 = np.asarray(x, np.float64)  # the float32 values, exactly
    assert not np.isfinite(np.sum(np.asarray(x), axis=0, dtype=np.float32)).all()
    norms = np.linalg.norm(x64, axis=1)
    mean = x64.mean(axis=0)
    want = {"mean_norm": norms.mean(), "drift_norm": np.linalg.norm(mean),
            "relative_drift": np.linalg.norm(mean) / norms.mean(),
            "isoscore": reference.isoscore_algorithm(x64)}
    for name, value in want.items():
        got = jax.jit(getattr(metrics, name))(x)
        np.testing.assert_allclose(float(got), value, rtol=2e-5, atol=1e-6, err_msg=name)


def test_partition_isotropy_does_not_overflow():
    w = jnp.asarray(_cloud(11, n=20, d=4, bias=50.0), jnp.float32) * 100  # w·c ~ 1e4
    value = metrics.partition_isotropy(w)
    assert np.isfinite(value) and 0.0 <= float(value) <= 1.0


def test_metrics_are_jit_and_vmap_safe():
    x = jax.random.normal(jax.random.key(2), (3, 4, 5, 6))  # vmap over the leading 3
    for fn in (metrics.average_cosine_similarity, metrics.cross_sequence_cosine_similarity,
               metrics.within_sequence_cosine_similarity, metrics.drift_norm,
               metrics.relative_drift, metrics.isoscore, metrics.effective_rank,
               metrics.top_pc_variance_ratio, metrics.partition_isotropy):
        batched = jax.jit(jax.vmap(fn))(x)
        single = jax.jit(fn)
        looped = np.array([single(xi) for xi in x])
        np.testing.assert_allclose(batched, looped, rtol=1e-9, err_msg=fn.__name__)


def test_average_cosine_of_many_vectors_does_not_overflow_the_pair_count():
    # N(N − 1) = 1e10 does not fit in int32; half the vectors along e1, half along e2:
    # pairs within a half have cosine 1, across halves 0 → (2·(N/2)(N/2 − 1)) / (N(N − 1)).
    n = 100_000
    x = np.zeros((n, 2), np.float32)
    x[: n // 2, 0] = 1.0
    x[n // 2:, 1] = 1.0
    expected = 2 * (n / 2) * (n / 2 - 1) / (n * (n - 1))
    np.testing.assert_allclose(metrics.average_cosine_similarity(jnp.asarray(x)), expected,
                               rtol=1e-5)


@pytest.mark.parametrize("variant", ["one_pass", "two_pass"])
def test_scaled_sum_of_squares_variants_give_exact_norms_at_extremes(variant):
    """Both forms of (max, scaled sum of squares) behind the norms (one pass on GPUs, two on the
    CPU) against float64, for norms from 1e-30 to 1e30, entries up to 3e38 (whose reciprocal is
    subnormal: flushed to zero, it once made such norms 0) and a zero vector."""
    fn = getattr(metrics.norms, f"_scale_and_sum_of_squares_{variant}")
    x = np.random.default_rng(3).normal(size=(61, 96)) * np.logspace(-30, 30, 61)[:, None]
    x[7] = 0.0
    x[8] = 1e36
    x[8, :2] = (3e38, -1e38)
    x[9, 0] = 2e-38
    m, q = jax.jit(fn)(jnp.asarray(x, jnp.float32))
    norms = np.asarray(m, np.float64) * np.sqrt(np.asarray(q, np.float64))
    want = np.linalg.norm(x.astype(np.float32).astype(np.float64), axis=-1)
    np.testing.assert_allclose(norms, want, rtol=2e-6)
    assert norms[7] == 0.0 and np.all(np.isfinite(norms))
