"""metrics.intervention and the logit-variance decomposition of metrics.logit_terms, against
float64 loops over queries and keys: the identity of the decomposition, the softmax-invariance of
the constant terms, the permutation controls and the attention statistics after each removal."""
import math

import jax
import numpy as np
import pytest

from anisotropy_jax.metrics import intervention, matched_control
from anisotropy_jax.metrics.logit_terms import logit_variance_decomposition, split_logits

B, L, H, DH = 2, 6, 3, 4
S = 1 / math.sqrt(DH)


def _draw(seed):
    rng = np.random.default_rng(seed)
    common = rng.standard_normal((1, 1, H, DH)) * 1.5  # a shared direction: m is not negligible
    return (rng.standard_normal((B, L, H, DH)) + common,
            rng.standard_normal((B, L, H, DH)) - 0.5 * common)


def _visible(causal):
    return [list(range(i + 1)) if causal else list(range(L)) for i in range(L)]


def _loop_decomposition(q, k, causal):
    out = {name: np.zeros(H) for name in ("key_term_var", "query_specific_var",
                                          "key_query_covariance", "logit_var")}
    for h in range(H):
        qbar = sum(q[b, i, h] for b in range(B) for i in range(L)) / (B * L)
        kbar = sum(k[b, i, h] for b in range(B) for i in range(L)) / (B * L)
        rows = []
        for b in range(B):
            for i, keys in enumerate(_visible(causal)):
                if len(keys) < 2:
                    continue
                m = np.array([S * qbar @ (k[b, j, h] - kbar) for j in keys])
                r = np.array([S * (q[b, i, h] - qbar) @ (k[b, j, h] - kbar) for j in keys])
                lg = np.array([S * q[b, i, h] @ k[b, j, h] for j in keys])
                rows.append((np.var(m), np.var(r), np.cov(m, r, bias=True)[0, 1], np.var(lg)))
        for name, value in zip(out, np.mean(rows, axis=0)):
            out[name][h] = value
    return out


def _logits(q, k, causal):
    logits = np.einsum("bihd,bjhd->bhij", q, k) * S
    return np.where(np.tril(np.ones((L, L), bool)), logits, -np.inf) if causal else logits


@pytest.mark.parametrize("causal", [False, True])
def test_decomposition_matches_a_loop_and_the_identity_is_exact(causal):
    q, k = _draw(0)
    mask = np.tril(np.ones((L, L), bool)) if causal else None
    with jax.enable_x64(True):
        got = {n: np.asarray(v) for n, v in
               logit_variance_decomposition(q, k, _logits(q, k, causal), mask).items()}
    want = _loop_decomposition(q, k, causal)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-10, err_msg=name)
    np.testing.assert_allclose(got["key_term_var"] + got["query_specific_var"]
                               + 2 * got["key_query_covariance"], got["logit_var"], rtol=1e-12)
    assert np.all(np.abs(got["key_query_covariance"]) > 1e-3)  # the identity's third term is live


def _softmax(x):
    x = x - np.max(x, axis=-1, keepdims=True)
    e = np.exp(x)
    return e / np.sum(e, axis=-1, keepdims=True)


def test_removing_the_softmax_invariant_terms_leaves_attention_unchanged_removing_m_does_not():
    q, k = _draw(1)
    with jax.enable_x64(True):
        terms = {n: np.asarray(v) for n, v in split_logits(q, k).items()}
    logits = _logits(q, k, False)
    np.testing.assert_allclose(terms["constant"] + terms["key_term"] + terms["query_specific"],
                               logits, rtol=1e-12, atol=1e-12)
    # The constant per query is s q̄·k̄ + s (q_i − q̄)·k̄: check it against its two parts.
    qbar, kbar = q.mean(axis=(0, 1)), k.mean(axis=(0, 1))
    parts = (np.einsum("hd,hd->h", qbar, kbar)[None, :, None]
             + np.einsum("bihd,hd->bhi", q - qbar, kbar)) * S
    np.testing.assert_allclose(terms["constant"][..., 0], parts, rtol=1e-12)
    p = _softmax(logits)
    np.testing.assert_allclose(_softmax(logits - terms["constant"]), p, rtol=1e-12, atol=1e-15)
    without_m = _softmax(logits - terms["key_term"])
    assert np.max(np.abs(without_m - p)) > 1e-2


def _loop_permute(values, visible, noise):
    out = values.copy()
    for row in np.ndindex(values.shape[:-1]):
        keys = [j for j in range(values.shape[-1]) if visible[row][j]]
        source = sorted(keys, key=lambda j: noise[row][j])
        for target, j in zip(keys, source):
            out[row][target] = values[row][j]
    return out


def test_permute_over_visible_is_a_permutation_of_each_rows_visible_values():
    rng = np.random.default_rng(2)
    values = rng.standard_normal((3, L, L))
    visible = np.broadcast_to(np.tril(np.ones((L, L), bool)), values.shape)
    noise = rng.uniform(size=values.shape)
    with jax.enable_x64(True):
        got = np.asarray(intervention.permute_over_visible(values, visible, noise))
    want = _loop_permute(values, visible, noise)
    np.testing.assert_array_equal(np.where(visible, got, 0), np.where(visible, want, 0))
    for row in np.ndindex(values.shape[:-1]):  # the same multiset: the same variance per query
        keys = visible[row]
        np.testing.assert_array_equal(np.sort(got[row][keys]), np.sort(values[row][keys]))
    assert not np.array_equal(np.where(visible, got, 0), np.where(visible, values, 0))


def _loop_sharpness(logits, causal):
    """Per head: normalised entropy and max probability averaged over counted queries, argmax
    agreement per sequence averaged over the batch."""
    out = {s: np.zeros(H) for s in intervention.STATISTICS}
    for h in range(H):
        ent, mx, agree = [], [], []
        for b in range(B):
            votes = []
            for i, keys in enumerate(_visible(causal)):
                if len(keys) < 2:
                    continue
                p = _softmax(np.array([logits[b, h, i, j] for j in keys]))
                ent.append(-np.sum(p * np.log(p)) / math.log(len(keys)))
                mx.append(np.max(p))
                votes.append(keys[int(np.argmax(p))])
            agree.append(max(votes.count(v) for v in votes) / len(votes))
        out["entropy"][h], out["max"][h], out["agreement"][h] = (np.mean(ent), np.mean(mx),
                                                                 np.mean(agree))
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_intervention_matches_loops_over_the_same_permutations(causal):
    q, k = _draw(3)
    mask = np.tril(np.ones((L, L), bool)) if causal else None
    logits = _logits(q, k, causal)
    rng = jax.random.key(7)
    with jax.enable_x64(True):
        run = jax.jit(lambda key: intervention.key_term_intervention(
            q, k, logits, mask, rng=key, num_permutations=3))
        got = {n: np.asarray(v) for n, v in run(rng).items()}
        noise = {n: np.asarray(v) for n, v in
                 intervention.control_noise(rng, logits.shape, 3).items()}
    qbar, kbar = q.mean(axis=(0, 1)), k.mean(axis=(0, 1))
    m = np.zeros((B, H, 1, L))
    for b in range(B):
        for h in range(H):
            for j in range(L):
                m[b, h, 0, j] = S * qbar[h] @ (k[b, j, h] - kbar[h])
    original = _loop_sharpness(logits, causal)
    visible = np.broadcast_to(mask if causal else np.ones((L, L), bool), logits.shape)
    alpha, unmatched, shortfall = _loop_matched_control(q, k, causal)
    r = np.einsum("bihd,bjhd->bhij", q - qbar, k - kbar) * S
    removed = {"key_term": _loop_sharpness(logits - m, causal),
               "matched_control": _loop_sharpness(logits - alpha[..., None] * r, causal)}
    for name, keys_visible in (("control", visible),
                               ("shared_control", np.ones((B, H, 1, L), bool))):
        runs = [_loop_sharpness(logits - _loop_permute(
            np.broadcast_to(m, keys_visible.shape).copy(), keys_visible, n), causal)
            for n in noise[name]]
        removed[name] = {s: np.mean([r[s] for r in runs], axis=0) for s in runs[0]}
    for s in intervention.STATISTICS:
        np.testing.assert_allclose(got[f"original_{s}"], original[s], rtol=1e-10, err_msg=s)
        for name in intervention.REMOVALS:
            np.testing.assert_allclose(got[f"delta_{s}_{name}"], removed[name][s] - original[s],
                                       rtol=1e-9, atol=1e-12, err_msg=f"{s} {name}")
    np.testing.assert_allclose(got["matched_control_unmatched_fraction"], unmatched, atol=1e-12)
    np.testing.assert_allclose(got["matched_control_shortfall"], shortfall, rtol=1e-8,
                               atol=1e-12)
    for name in ("key_term", "matched_control"):
        deficit = 1 - original["entropy"]
        np.testing.assert_allclose(got[f"entropy_deficit_share_{name}"],
                                   (removed[name]["entropy"] - original["entropy"]) / deficit,
                                   rtol=1e-9, err_msg=name)
    # A fixed key repeats; another key draws other permutations.
    with jax.enable_x64(True):
        again, other = run(rng), run(jax.random.key(8))
    np.testing.assert_array_equal(np.asarray(again["delta_entropy_control"]),
                                  got["delta_entropy_control"])
    assert not np.allclose(np.asarray(other["delta_entropy_control"]),
                           got["delta_entropy_control"])


def _loop_matched_control(q, k, causal):
    """Per query (B, H, Lq) with float64 loops: α of the variance-matched control (the real root
    of smallest |α| of Var(l − α r) = Var(l − m), from np.roots; else the α of least variance),
    and per head the fraction of counted queries without a real root and the mean shortfall
    (Var(l − α r) − Var(l − m)) / Var(l), each variance taken directly over the visible keys."""
    alpha = np.zeros((B, H, L))
    unmatched, shortfall = np.zeros(H), np.zeros(H)
    for h in range(H):
        qbar, kbar = q[:, :, h].mean((0, 1)), k[:, :, h].mean((0, 1))
        counted = 0
        for b in range(B):
            for i, keys in enumerate(_visible(causal)):
                lg = np.array([S * q[b, i, h] @ k[b, j, h] for j in keys])
                m = np.array([S * qbar @ (k[b, j, h] - kbar) for j in keys])
                r = np.array([S * (q[b, i, h] - qbar) @ (k[b, j, h] - kbar) for j in keys])
                if len(keys) < 2:  # no variance to match: α = 0
                    continue
                cov = np.cov(lg, r, bias=True)[0, 1]
                roots = np.roots([np.var(r), -2 * cov, np.var(lg) - np.var(lg - m)])
                real = [x.real for x in roots if abs(x.imag) < 1e-12]
                a = min(real, key=abs) if real else cov / np.var(r)
                alpha[b, h, i] = a
                counted += 1
                unmatched[h] += not real
                shortfall[h] += (np.var(lg - a * r) - np.var(lg - m)) / np.var(lg)
        unmatched[h] /= counted
        shortfall[h] /= counted
    return alpha, unmatched, shortfall


def test_the_matched_control_removes_the_variance_m_removes_where_it_can():
    # Causal: the first queries see few keys, where r often cannot match (both cases occur).
    q, k = _draw(5)
    q = q - 0.7 * q.mean(axis=(0, 1), keepdims=True)  # a weaker m: most queries can match
    mask = np.tril(np.ones((L, L), bool))
    logits = _logits(q, k, True)
    with jax.enable_x64(True):
        terms = {n: np.asarray(v) for n, v in split_logits(q, k).items()}
        got = {n: np.asarray(v) for n, v in matched_control.matched_control_scale(
            logits, terms["key_term"], terms["query_specific"],
            np.broadcast_to(mask, logits.shape)).items()}
    alpha, _, _ = _loop_matched_control(q, k, True)
    np.testing.assert_allclose(got["alpha"], alpha, rtol=1e-8, atol=1e-12)
    matched = got["matched"][..., 1:]  # queries with one visible key have nothing to match
    assert 0 < matched.mean() < 1, matched.mean()
    # Matched queries: the control's logits vary exactly as much as the logits without m.
    control = logits - got["alpha"][..., None] * terms["query_specific"]
    without_m = logits - terms["key_term"]
    for b, h, i in zip(*np.nonzero(got["matched"])):
        keys = slice(0, i + 1)
        assert np.var(control[b, h, i, keys]) == pytest.approx(np.var(without_m[b, h, i, keys]),
                                                               rel=1e-9, abs=1e-12)
    # Unmatched queries: no α gets lower; the control's variance is the least it can reach.
    for b, h, i in zip(*np.nonzero(~got["matched"])):
        keys = slice(0, i + 1)
        nearby = [np.var(logits[b, h, i, keys] - (got["alpha"][b, h, i] + e)
                         * terms["query_specific"][b, h, i, keys]) for e in (-1e-3, 1e-3)]
        assert np.var(control[b, h, i, keys]) < min(nearby)
        assert np.var(control[b, h, i, keys]) > np.var(without_m[b, h, i, keys])


def test_the_deficit_share_is_undefined_for_uniform_heads_never_infinite():
    original = np.array([0.5, 0.995, 1.0, 0.2])
    removed = np.array([0.75, 1.0, 1.0, 0.1])
    got = np.asarray(matched_control.entropy_deficit_share(original, removed))
    np.testing.assert_allclose(got[[0, 3]], [0.5, -0.125])
    assert np.all(np.isnan(got[1:3]))


def test_a_planted_common_bias_is_what_sharpens():
    # Queries all equal q̄ (plus small noise): the logits are m_j plus little else. Removing m
    # flattens attention; removing a permuted m of the same variance does not flatten it.
    rng = np.random.default_rng(4)
    qbar = rng.standard_normal((1, 1, H, DH)) * 3
    q = qbar + 0.05 * rng.standard_normal((B, L, H, DH))
    k = rng.standard_normal((B, L, H, DH)) * 2
    with jax.enable_x64(True):
        got = jax.jit(intervention.key_term_intervention)(q, k, _logits(q, k, False),
                                                          rng=jax.random.key(0))
    assert np.all(np.asarray(got["delta_entropy_key_term"]) > 0.2)
    assert np.all(np.asarray(got["delta_entropy_control"]) < np.asarray(
        got["delta_entropy_key_term"]) - 0.2)
    assert np.all(np.asarray(got["delta_max_key_term"]) < 0)
