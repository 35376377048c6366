"""Numerical claims about anisotropy_jax.metrics.extreme and .sinks: float64 loops over each definition on
fresh random inputs, the papers' worked examples, masks, extreme scales, jit and vmap."""
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from anisotropy_jax import metrics
from anisotropy_jax.metrics import logit_terms, sinks

SEEDS = [0, 1]

# Every metric jitted once per shape: op-by-op dispatch compiles each primitive separately and made
# this module several times slower on 2 cores. Eager equals jit: test_jit_and_vmap_equal_eager_and_loops.
_STATIC = {"massive_activations": ("k",), "top_contribution_share": ("k",),
           "top_pc_share": ("drop_first",), "sink_rate": ("axis",)}
M = types.SimpleNamespace(**{
    name: jax.jit(getattr(metrics, name), static_argnames=_STATIC.get(name, ()))
    for name in ("key_attention_scores", "key_attention_scores_from_sums",
                 "sink_scores_from_probabilities", "sink_rate", "attention_sink_rate",
                 "max_key_attention", "massive_activations", "activation_kurtosis",
                 "activation_inf_norm", "cosine_contributions", "top_contribution_share",
                 "standardized_average_cosine", "top_pc_share", "top_pc_variance_ratio",
                 "noop_head_score", "attention_output_norms", "sink_logit_split",
                 "average_cosine_similarity")})


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def _attention(rng, b=2, h=3, lq=5, lk=5, sharp=2.0):
    logits = sharp * rng.normal(size=(b, h, lq, lk))
    p = np.exp(logits - logits.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def _causal_padded(b=2, l=5):
    """Causal (1, 1, L, L) visibility and a (B, L) token mask: sequence 1 has 2 padding tokens."""
    causal = np.tril(np.ones((l, l), bool))[None, None]
    tokens = np.ones((b, l), bool)
    tokens[1, l - 2:] = False
    visible = causal & tokens[:, None, None, :]
    return visible, tokens


def _masked_attention(rng, visible, h=3):
    b, _, l, _ = visible.shape
    logits = 2.0 * rng.normal(size=(b, h, l, l))
    logits = np.where(visible, logits, -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


# ---------------------------------------------------------------- attention sinks (Gu et al.)

def _key_scores_loop(attn, visible, tokens):
    b, h, lq, lk = attn.shape
    out = np.full((b, h, lk), np.nan)
    for s in range(b):
        for hh in range(h):
            for k in range(lk):
                qs = [q for q in range(lq) if visible[s, hh, q, k] and tokens[s, q]]
                if qs:
                    out[s, hh, k] = np.mean([attn[s, hh, q, k] for q in qs])
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_key_attention_scores_match_loop(seed):
    rng = np.random.default_rng(seed)
    attn = _attention(rng)
    ones = np.ones(attn.shape, bool)
    np.testing.assert_allclose(M.key_attention_scores(attn),
                               _key_scores_loop(attn, ones, np.ones((2, 5), bool)), rtol=1e-12)
    visible, tokens = _causal_padded()
    attn = _masked_attention(rng, visible)
    vis = np.broadcast_to(visible, attn.shape)
    got = M.key_attention_scores(attn, visible, tokens)
    np.testing.assert_allclose(got, _key_scores_loop(attn, vis, tokens), rtol=1e-12)
    # Causal: the last key of a full sequence is seen by the last query alone (Gu: 1/(T−k+1)).
    np.testing.assert_allclose(got[0, :, -1], attn[0, :, -1, -1], rtol=1e-12)
    assert np.all(np.isnan(got[1, :, -2:]))  # padding keys: no counted query sees them


def test_sink_scores_from_probabilities_equal_column_scores():
    rng = np.random.default_rng(3)
    visible, tokens = _causal_padded()
    attn = _masked_attention(rng, visible)
    from_probe = M.sink_scores_from_probabilities(attn[..., 0], tokens)
    np.testing.assert_allclose(from_probe,
                               M.key_attention_scores(attn, visible, tokens)[..., 0],
                               rtol=1e-12)
    # the first query of a causal head sees only key 0 (A_00 = 1) and counts, as in Gu et al.
    manual = np.array([[attn[s, hh, tokens[s], 0].mean() for hh in range(3)] for s in range(2)])
    np.testing.assert_allclose(from_probe, manual, rtol=1e-12)
    sums = np.sum(np.where(np.broadcast_to(visible, attn.shape) & tokens[:, None, :, None],
                           attn, 0.0), axis=-2)
    counts = np.sum(np.broadcast_to(visible, attn.shape) & tokens[:, None, :, None], axis=-2)
    np.testing.assert_allclose(M.key_attention_scores_from_sums(sums, counts),
                               M.key_attention_scores(attn, visible, tokens), rtol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_sink_rate_matches_loop(seed):
    rng = np.random.default_rng(seed)
    scores = rng.uniform(0, 0.6, size=(4, 6))
    scores[1, 2] = np.nan
    expected = np.mean([v > 0.3 for v in scores.ravel() if not np.isnan(v)])
    assert float(M.sink_rate(scores)) == pytest.approx(expected, abs=1e-15)
    per_head = [np.mean([v > 0.3 for v in scores[:, j] if not np.isnan(v)]) for j in range(6)]
    np.testing.assert_allclose(M.sink_rate(scores, axis=0), per_head, rtol=1e-15)
    assert float(M.sink_rate(np.array([0.3, 0.30001]))) == 0.5  # strictly above ε


def test_gu_worked_examples():
    # Uniform attention over L keys: α_0 = 1/L < ε → sink rate 0; all on the first key → 1.
    uniform = np.full((2, 4, 8, 8), 1 / 8)
    assert float(M.attention_sink_rate(uniform)) == 0.0
    on_first = np.zeros((2, 4, 8, 8))
    on_first[..., 0] = 1.0
    assert float(M.attention_sink_rate(on_first)) == 1.0
    # A causal head uniform over its visible keys: α_0 = (1/T) Σ_q 1/(q+1) = H_T/T.
    t = 8
    causal = np.tril(np.ones((t, t), bool))[None, None]
    p = causal / causal.sum(-1, keepdims=True)
    alpha0 = float(M.key_attention_scores(p, causal)[0, 0, 0])
    assert alpha0 == pytest.approx(sum(1 / (q + 1) for q in range(t)) / t, rel=1e-14)
    # Half the heads sink in one sequence only: rate 1/4 of (sequence, head) pairs.
    mixed = np.broadcast_to(uniform, (2, 4, 8, 8)).copy()
    mixed[0, :2] = on_first[0, :2]
    assert float(M.attention_sink_rate(mixed)) == 0.25
    np.testing.assert_allclose(M.sink_rate(M.key_attention_scores(mixed)[..., 0],
                                                 axis=0), [0.5, 0.5, 0.0, 0.0])


def test_max_key_attention_is_position_free():
    rng = np.random.default_rng(4)
    attn = _attention(rng, b=2, h=2, lq=6, lk=6, sharp=0.1)
    attn = 0.2 * attn
    attn[0, 1, :, 3] += 0.8  # a sink at key 3, not at key 0
    scores = M.key_attention_scores(attn)
    best, key = M.max_key_attention(scores)
    s = np.asarray(scores)
    np.testing.assert_allclose(best, s.max(-1), rtol=1e-15)
    np.testing.assert_array_equal(key, s.argmax(-1))
    assert int(key[0, 1]) == 3 and float(best[0, 1]) > 0.8
    assert float(M.sink_rate(best)) == 0.25 and float(M.sink_rate(s[..., 0])) == 0.0
    nan_best, nan_key = M.max_key_attention(np.array([[[np.nan, 0.2, np.nan]],
                                                            [[np.nan] * 3]]))
    assert float(nan_best[0, 0]) == 0.2 and int(nan_key[0, 0]) == 1
    assert np.isnan(nan_best[1, 0]) and int(nan_key[1, 0]) == -1


# ---------------------------------------------------------------- massive activations (Sun et al.)

def test_massive_activations_match_loop():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 6, 8))
    x[0, 0, 3] = 2500.0    # > 100 and > 1000 × median: massive
    x[1, 2, 5] = -4000.0   # negative: magnitude counts
    x[1, 3, 5] = 150.0     # > 100 but < 1000 × median: not massive
    x[0, 4, 1] = 9000.0    # on a padding token: ignored
    mask = np.ones((2, 6), bool)
    mask[0, 4:] = False
    got = M.massive_activations(x, mask, k=4)
    medians = [np.median(np.abs(x[s][mask[s]])) for s in range(2)]
    np.testing.assert_allclose(got["median"], medians, rtol=1e-14)
    entries = sorted(((abs(x[s, t, d]), s, t, d) for s in range(2) for t in range(6)
                      for d in range(8) if mask[s, t]), reverse=True)[:4]
    np.testing.assert_allclose(got["top_values"], [x[s, t, d] for _, s, t, d in entries])
    np.testing.assert_array_equal(got["top_batch"], [e[1] for e in entries])
    np.testing.assert_array_equal(got["top_token"], [e[2] for e in entries])
    np.testing.assert_array_equal(got["top_dim"], [e[3] for e in entries])
    np.testing.assert_allclose(got["top_ratio"], [m / medians[s] for m, s, _, _ in entries])
    massive = np.array([[[mask[s, t] and abs(x[s, t, d]) > 100
                          and abs(x[s, t, d]) > 1000 * medians[s] for d in range(8)]
                         for t in range(6)] for s in range(2)])
    np.testing.assert_array_equal(got["massive_count"], massive.sum((1, 2)))
    np.testing.assert_array_equal(got["massive_count"], [1, 1])
    np.testing.assert_array_equal(got["massive_per_dim"], massive.sum((0, 1)))
    np.testing.assert_array_equal(got["massive_per_token"], massive.sum(2))
    np.testing.assert_array_equal(got["relative_count"], [1, 1])


def test_single_massive_activation_found_at_its_coordinates_float32():
    x = np.random.default_rng(6).normal(size=(3, 7, 16)).astype(np.float32)
    x[2, 5, 11] = -1e30  # extreme: still finite results
    got = M.massive_activations(jnp.asarray(x), k=2)
    assert (int(got["top_batch"][0]), int(got["top_token"][0]), int(got["top_dim"][0])) == \
        (2, 5, 11)
    assert float(got["top_values"][0]) == pytest.approx(-1e30, rel=1e-6)
    assert np.isfinite(np.asarray(got["top_ratio"])).all()
    np.testing.assert_array_equal(got["massive_count"], [0, 0, 1])
    # k beyond the valid entries: NaN values and coordinates −1, not padding picks
    few = M.massive_activations(x[:1, :2, :2], np.array([[True, False]]), k=3)
    assert np.isnan(few["top_values"][2]) and int(few["top_token"][2]) == -1
    with pytest.raises(ValueError, match="k must be"):
        M.massive_activations(x, k=0)


# ---------------------------------------------------------------- kurtosis and ∞-norm (Bondarenko)

@pytest.mark.parametrize("seed", SEEDS)
def test_kurtosis_and_inf_norm_match_definitions(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_t(df=5, size=(3, 6, 10)) * 3 + 2
    mask = np.ones((3, 6), bool)
    mask[2, 3:] = False
    got = M.activation_kurtosis(x, mask)
    for s in range(3):
        v = x[s][mask[s]].ravel()
        assert float(got[s]) == pytest.approx(stats.kurtosis(v, fisher=False), rel=1e-12)
        # Bondarenko et al.'s code: μ4 / (unbiased std⁴ + 1e-6): within ~2/n relative
        theirs = np.mean((v - v.mean()) ** 4) / (v.std(ddof=1) ** 4 + 1e-6)
        assert float(got[s]) == pytest.approx(theirs, rel=3.0 / v.size)
    np.testing.assert_allclose(M.activation_inf_norm(x, mask),
                               [np.abs(x[s][mask[s]]).max() for s in range(3)], rtol=1e-15)


def test_kurtosis_worked_examples_and_extreme_scale():
    signs = np.where(np.arange(64) % 2 == 0, 1.0, -1.0).reshape(1, 8, 8)
    assert float(M.activation_kurtosis(signs)[0]) == pytest.approx(1.0, rel=1e-12)
    gauss = np.random.default_rng(7).normal(size=(1, 256, 256))
    assert float(M.activation_kurtosis(gauss)[0]) == pytest.approx(3.0, abs=0.05)
    spike = np.zeros((1, 10, 10))
    spike[0, 0, 0] = 1.0  # one outlier among n: kurtosis = n − 2 + 1/(n − 1)
    assert float(M.activation_kurtosis(spike)[0]) == pytest.approx(98 + 1 / 99, rel=1e-12)
    assert np.isnan(M.activation_kurtosis(np.ones((1, 3, 3)))[0])
    x32 = jnp.asarray(np.random.default_rng(8).normal(size=(2, 5, 12)), jnp.float32)
    ref = np.asarray(M.activation_kurtosis(np.asarray(x32, np.float64)))
    for scale in (1e-30, 1.0, 1e30):
        got = M.activation_kurtosis(x32 * scale)
        assert got.dtype == jnp.float32
        np.testing.assert_allclose(got, ref, rtol=1e-5)
        assert np.isfinite(np.asarray(M.activation_inf_norm(x32 * scale))).all()


# ---------------------------------------------------------------- rogue dimensions (Timkey)

def _unit(v):
    n = np.linalg.norm(v)
    return v / n if n > 0 else v


@pytest.mark.parametrize("seed", SEEDS)
def test_cosine_contributions_match_pair_loop(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(12, 5)) * rng.uniform(0.3, 3, size=5) + rng.normal(size=5)
    n = len(x)
    u = np.array([_unit(v) for v in x])
    loop = np.mean([u[i] * u[j] for i in range(n) for j in range(n) if i != j], axis=0)
    got = M.cosine_contributions(x)
    np.testing.assert_allclose(got, loop, rtol=1e-11, atol=1e-14)
    assert float(jnp.sum(got)) == pytest.approx(float(M.average_cosine_similarity(x)),
                                                rel=1e-12)
    mask = np.ones(n, bool)
    mask[[2, 7]] = False
    sub = u[mask]
    m = len(sub)
    loop = np.mean([sub[i] * sub[j] for i in range(m) for j in range(m) if i != j], axis=0)
    np.testing.assert_allclose(M.cosine_contributions(x, mask), loop, rtol=1e-11,
                               atol=1e-14)


def test_rogue_dimension_dominates_and_standardisation_removes_it():
    rng = np.random.default_rng(9)
    x = rng.normal(size=(200, 16))
    x[:, 5] += 40.0  # one rogue dimension shared by every vector
    cc = M.cosine_contributions(x)
    share, dims = M.top_contribution_share(cc, k=1)
    assert int(dims[0]) == 5 and float(share) > 0.99
    share3, dims3 = M.top_contribution_share(cc, k=3)
    top3 = np.argsort(np.asarray(cc))[::-1][:3]
    np.testing.assert_array_equal(dims3, top3)
    assert float(share3) == pytest.approx(float(np.sum(np.asarray(cc)[top3]) / np.sum(cc)))
    assert float(M.average_cosine_similarity(x)) > 0.8
    # Standardised: the float64 loop over the definition, and ≈ −1/(N − 1) for a shifted cloud.
    z = (x - x.mean(0)) / x.std(0)
    n = len(z)
    uz = np.array([_unit(v) for v in z])
    total = uz.sum(0)
    expected = (total @ total - n) / (n * (n - 1))  # the pair loop, summed in closed form
    small = x[:15]
    zs = (small - small.mean(0)) / small.std(0)
    pair_loop = np.mean([_unit(zs[i]) @ _unit(zs[j]) for i in range(15) for j in range(15)
                         if i != j])
    assert float(M.standardized_average_cosine(small)) == pytest.approx(pair_loop,
                                                                             rel=1e-11)
    got = float(M.standardized_average_cosine(x))
    assert got == pytest.approx(expected, rel=1e-10) and abs(got) < 0.01
    with pytest.raises(ValueError, match="k must be"):
        M.top_contribution_share(cc, k=17)


def test_rogue_metrics_float32_extreme_scales():
    rng = np.random.default_rng(10)
    x = rng.normal(size=(30, 6))
    x[:, 2] += 5.0
    cc64 = np.asarray(M.cosine_contributions(x))
    st64 = float(M.standardized_average_cosine(x))
    for scale in (1e-30, 1e30):
        x32 = jnp.asarray(x * scale, jnp.float32)
        np.testing.assert_allclose(M.cosine_contributions(x32), cc64, atol=1e-6)
        assert float(M.standardized_average_cosine(x32)) == pytest.approx(st64, abs=1e-6)
    with pytest.raises(ValueError, match="at least 2"):
        M.cosine_contributions(x[:1])


# ---------------------------------------------------------------- top principal component

def test_top_pc_share_matches_covariance_eigenvalues_and_bos_outlier():
    rng = np.random.default_rng(11)
    x = rng.normal(size=(4, 6, 5)) * rng.uniform(0.5, 2, size=5)
    mask = np.ones((4, 6), bool)
    mask[3, 4:] = False

    def share(points):
        eig = np.linalg.eigvalsh(np.cov(points.T))
        return eig.max() / eig.sum()

    assert float(M.top_pc_share(x, mask)) == pytest.approx(share(x[mask]), rel=1e-12)
    assert float(M.top_pc_share(x, mask, drop_first=True)) == pytest.approx(
        share(x[:, 1:][mask[:, 1:]]), rel=1e-12)
    assert float(M.top_pc_share(x)) == pytest.approx(
        float(M.top_pc_variance_ratio(x)), rel=1e-12)
    # A BOS outlier (a different huge vector on each first token) makes the top PC alone.
    bos = x.copy()
    bos[:, 0, :] += np.outer(np.arange(1, 5), np.full(5, 300.0))
    assert float(M.top_pc_share(bos)) > 0.99
    assert float(M.top_pc_share(bos, drop_first=True)) == pytest.approx(
        share(x[:, 1:].reshape(-1, 5)), rel=1e-12)
    big = jnp.asarray(bos * 1e30, jnp.float32)
    assert float(M.top_pc_share(big)) == pytest.approx(
        float(M.top_pc_share(bos)), abs=1e-5)
    assert float(M.top_pc_share(np.ones((2, 3, 4)))) == 0.0


# ---------------------------------------------------------------- no-op heads

def test_noop_head_score_matches_loop_and_worked_example():
    rng = np.random.default_rng(12)
    visible, tokens = _causal_padded()
    attn = _masked_attention(rng, visible)
    v = rng.normal(size=(2, 5, 3, 4))
    sink = np.asarray(M.key_attention_scores(attn, visible, tokens)[..., 0])
    got = M.noop_head_score(sink, v, tokens)
    for s in range(2):
        for hh in range(3):
            norms = [np.linalg.norm(v[s, t, hh]) for t in range(5) if tokens[s, t]]
            expected = sink[s, hh] * np.linalg.norm(v[s, 0, hh]) / np.mean(norms)
            assert float(got[s, hh]) == pytest.approx(expected, rel=1e-12)
    v0 = v.copy()
    v0[:, 0] = 0.0  # the sink writes nothing: a no-op head scores 0 whatever its sink mass
    np.testing.assert_array_equal(M.noop_head_score(np.ones((2, 3)), v0), 0.0)
    big = M.noop_head_score(jnp.asarray(sink, jnp.float32),
                                  jnp.asarray(v * 1e36, jnp.float32), tokens)
    np.testing.assert_allclose(big, got, rtol=1e-5)


def test_attention_output_norms_match_loop():
    rng = np.random.default_rng(13)
    visible, tokens = _causal_padded()
    attn = _masked_attention(rng, visible)
    v = rng.normal(size=(2, 5, 3, 4)) + 0.5
    got = M.attention_output_norms(attn, v, visible, tokens)
    for s in range(2):
        for hh in range(3):
            qs = [q for q in range(5) if tokens[s, q]]
            out = [np.linalg.norm(sum(attn[s, hh, q, k] * v[s, k, hh] for k in range(5)))
                   for q in qs]
            wv = [sum(attn[s, hh, q, k] * np.linalg.norm(v[s, k, hh]) for k in range(5))
                  for q in qs]
            assert float(got["output_norm"][s, hh]) == pytest.approx(np.mean(out), rel=1e-12)
            assert float(got["weighted_value_norm"][s, hh]) == pytest.approx(np.mean(wv),
                                                                             rel=1e-12)
            assert float(got["ratio"][s, hh]) == pytest.approx(np.mean(out) / np.mean(wv),
                                                               rel=1e-12)
    assert np.all(np.asarray(got["ratio"]) <= 1 + 1e-12)
    same = np.broadcast_to(v[:, :1], v.shape)  # every value equal: nothing cancels, ratio 1
    np.testing.assert_allclose(M.attention_output_norms(attn, same, visible)["ratio"],
                               1.0, rtol=1e-12)
    big = M.attention_output_norms(jnp.asarray(attn, jnp.float32),
                                         jnp.asarray(v * 1e36, jnp.float32), visible, tokens)
    assert np.isfinite(np.asarray(big["output_norm"])).all()
    np.testing.assert_allclose(big["ratio"], got["ratio"], rtol=1e-5)


# ---------------------------------------------------------------- the bridge to Godey

def _split_loop(q, k, visible, tokens, s):
    b, l, h, _ = q.shape
    qbar = np.array([q[:, :, hh][tokens].mean(0) for hh in range(h)])
    out = {key: np.zeros(h) for key in ("excess", "shared", "query_specific")}
    for hh in range(h):
        rows = []
        for bb in range(b):
            for i in range(l):
                vis = [j for j in range(l) if visible[bb, hh, i, j]]
                if not tokens[bb, i] or 0 not in vis or len(vis) < 2:
                    continue
                logits = [s * q[bb, i, hh] @ k[bb, j, hh] for j in vis]
                m = [s * qbar[hh] @ k[bb, j, hh] for j in vis]  # logit_terms' m_j (+ const)
                excess = logits[0] - np.mean(logits)
                shared = m[0] - np.mean(m)
                rows.append((excess, shared, excess - shared))
        for key, col in zip(("excess", "shared", "query_specific"), np.array(rows).T):
            out[key][hh] = col.mean()
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_sink_logit_split_matches_logit_loop(seed):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(2, 5, 3, 4)) + 0.7
    k = rng.normal(size=(2, 5, 3, 4))
    k[:, 0] += 1.5  # a distinct first key
    visible, tokens = _causal_padded()
    vis = np.broadcast_to(visible, (2, 3, 5, 5))
    got = M.sink_logit_split(q, k, visible, tokens)
    expected = _split_loop(q, k, vis, tokens, 0.5)
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(got["excess"], got["shared"] + got["query_specific"], rtol=1e-12)
    np.testing.assert_allclose(got["shared"], 0.5 * got["mean_query_norm"]
                               * got["sink_offset_norm"] * got["sink_offset_cosine"], rtol=1e-12)
    # Without masks it uses logit_terms' q̄ (every token) and scale; the excess is in the logits.
    full = M.sink_logit_split(q, k, scale=0.3)
    expected = _split_loop(q, k, np.ones((2, 3, 5, 5), bool), np.ones((2, 5), bool), 0.3)
    np.testing.assert_allclose(full["shared"], expected["shared"], rtol=1e-11)


def test_sink_logit_split_all_queries_equal_is_all_shared():
    rng = np.random.default_rng(14)
    q = np.broadcast_to(rng.normal(size=(1, 1, 2, 4)), (2, 6, 2, 4))
    k = rng.normal(size=(2, 6, 2, 4))
    got = M.sink_logit_split(q, k)
    np.testing.assert_allclose(got["query_specific"], 0.0, atol=1e-14)
    np.testing.assert_allclose(got["excess"], got["shared"], rtol=1e-12)
    # and then logit_terms says the key term carries all the logit variance
    logits = np.einsum("blhd,bkhd->bhlk", q, k) / 2.0
    terms = logit_terms.mean_query_key_terms(q, k, logits)
    np.testing.assert_allclose(terms["key_term_share"], 1.0, rtol=1e-10)


def test_sink_logit_split_float32_large_common_key():
    rng = np.random.default_rng(15)
    q = rng.normal(size=(2, 6, 2, 8))
    k = rng.normal(size=(2, 6, 2, 8))
    k[:, 0] += 2.0
    ref = M.sink_logit_split(q, k)
    # A common key offset (orthogonal to nothing in particular) changes no logit difference.
    shift = 1e4 * rng.normal(size=8)
    got = M.sink_logit_split(jnp.asarray(q, jnp.float32),
                                   jnp.asarray(k + shift, jnp.float32))
    for key in ("excess", "shared", "query_specific"):
        np.testing.assert_allclose(got[key], ref[key], atol=2e-3)
        assert got[key].dtype == jnp.float32


# ---------------------------------------------------------------- jit, vmap, shapes

def test_jit_and_vmap_equal_eager_and_loops():
    rng = np.random.default_rng(16)
    visible, tokens = _causal_padded()
    layers = np.stack([_masked_attention(rng, visible) for _ in range(3)])  # (layers, B, H, L, L)
    scores = jax.vmap(metrics.key_attention_scores, in_axes=(0, None, None))(
        layers, visible, tokens)
    for i in range(3):
        np.testing.assert_allclose(scores[i], metrics.key_attention_scores(layers[i], visible,
                                                                           tokens), rtol=1e-14)
    rate = jax.jit(metrics.attention_sink_rate, static_argnames="epsilon")(layers[0], visible,
                                                                          tokens)
    assert float(rate) == float(metrics.attention_sink_rate(layers[0], visible, tokens))
    x = rng.normal(size=(2, 5, 6))
    x[1, 0, 2] = 3000.0
    jitted = jax.jit(metrics.massive_activations, static_argnames="k")(x, tokens, k=3)
    eager = metrics.massive_activations(x, tokens, k=3)
    for key in eager:
        np.testing.assert_array_equal(jitted[key], eager[key])
    for fn in (metrics.activation_kurtosis, metrics.activation_inf_norm,
               lambda a, m: metrics.top_pc_share(a, m, drop_first=True),
               metrics.cosine_contributions, metrics.standardized_average_cosine):
        np.testing.assert_allclose(jax.jit(fn)(x, tokens), fn(x, tokens), rtol=1e-12)
    stacked = np.stack([x, 2 * x + 1])
    np.testing.assert_allclose(jax.vmap(metrics.activation_kurtosis)(stacked),
                               [metrics.activation_kurtosis(a) for a in stacked], rtol=1e-12)
    q = rng.normal(size=(2, 5, 3, 4))
    split = jax.jit(metrics.sink_logit_split)(q, q + 1, visible, tokens)
    eager_split = metrics.sink_logit_split(q, q + 1, visible, tokens)
    for key in split:
        np.testing.assert_allclose(split[key], eager_split[key], rtol=1e-12)


def test_shape_errors():
    with pytest.raises(ValueError, match=r"\(B, H, Lq, Lk\)"):
        metrics.key_attention_scores(np.ones((3, 3)))
    with pytest.raises(ValueError, match="query mask"):
        metrics.key_attention_scores(np.ones((2, 1, 3, 3)), None, np.ones((2, 4), bool))
    with pytest.raises(ValueError, match=r"\(B, L, D\)"):
        metrics.activation_kurtosis(np.ones((3, 3)))
    with pytest.raises(ValueError, match="sink scores"):
        metrics.noop_head_score(np.ones((2, 2)), np.ones((2, 4, 3, 5)))
    with pytest.raises(ValueError, match="do not match"):
        metrics.attention_output_norms(np.ones((2, 3, 4, 4)), np.ones((2, 5, 3, 2)))
    assert sinks.SINK_EPSILON == metrics.SINK_EPSILON == 0.3
