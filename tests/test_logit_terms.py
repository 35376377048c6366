"""metrics.logit_terms: the key-dependent mean-query term of the attention logits, against a
float64 loop and closed forms."""
import math

import jax
import numpy as np
import pytest

from anisotropy_jax.metrics.logit_terms import mean_query_key_terms

B, L, H, DH = 3, 6, 2, 4


def _loop(q, k, causal):
    """Per head: the module docstring's definitions with explicit loops over queries and keys."""
    s = 1 / math.sqrt(DH)
    out = {"key_term_std": [], "key_term_share": [], "logit_std": []}
    for h in range(H):
        qbar = sum(q[b, i, h] for b in range(B) for i in range(L)) / (B * L)
        kbar = sum(k[b, i, h] for b in range(B) for i in range(L)) / (B * L)
        key_vars, logit_vars = [], []
        for b in range(B):
            for i in range(L):
                keys = range(i + 1) if causal else range(L)
                if len(keys) < 2:
                    continue
                m = [s * float(qbar @ (k[b, j, h] - kbar)) for j in keys]
                lg = [s * float(q[b, i, h] @ k[b, j, h]) for j in keys]
                key_vars.append(np.var(m))
                logit_vars.append(np.var(lg))
        kv, lv = np.mean(key_vars), np.mean(logit_vars)
        out["key_term_std"].append(math.sqrt(kv))
        out["key_term_share"].append(kv / lv)
        out["logit_std"].append(math.sqrt(lv))
    return {name: np.array(v) for name, v in out.items()}


def _logits(q, k):
    return np.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(DH)


@pytest.mark.parametrize("causal", [False, True])
def test_matches_a_float64_loop(causal):
    rng = np.random.default_rng(0)
    common = rng.standard_normal((1, 1, H, DH)) * 2
    q = rng.standard_normal((B, L, H, DH)) + common
    k = rng.standard_normal((B, L, H, DH)) - common
    mask = np.tril(np.ones((L, L), bool)) if causal else None
    logits = _logits(q, k)
    if causal:
        logits = np.where(mask, logits, -np.inf)  # masked logits must not leak into the variance
    with jax.enable_x64(True):
        got = mean_query_key_terms(q, k, logits, mask)
    want = _loop(q, k, causal)
    for name in want:
        np.testing.assert_allclose(np.asarray(got[name]), want[name], rtol=1e-10, err_msg=name)
    assert np.all(np.asarray(got["key_term_share"]) > 0)


def test_identical_queries_give_share_one_and_the_logit_spread():
    # Every query equals q̄: the logits are m_j plus a constant, so the term is all the variance.
    rng = np.random.default_rng(1)
    q = np.broadcast_to(rng.standard_normal((1, 1, H, DH)), (B, L, H, DH))
    k = rng.standard_normal((B, L, H, DH))
    with jax.enable_x64(True):
        got = mean_query_key_terms(q, k, _logits(q, k))
    np.testing.assert_allclose(got["key_term_share"], 1.0, rtol=1e-12)
    np.testing.assert_allclose(got["key_term_std"], got["logit_std"], rtol=1e-12)


def test_keys_constant_along_mean_query_give_zero_and_a_common_key_shift_changes_nothing():
    rng = np.random.default_rng(2)
    q = rng.standard_normal((B, L, H, DH))
    q[..., 0] += 5.0  # q̄ ≈ (5, 0, 0, 0) … exactly orthogonal to keys with k[..., 0] = const
    q[..., 1:] -= q[..., 1:].mean(axis=(0, 1), keepdims=True)
    k = rng.standard_normal((B, L, H, DH))
    k[..., 0] = 3.0
    with jax.enable_x64(True):
        got = mean_query_key_terms(q, k, _logits(q, k))
        np.testing.assert_allclose(got["key_term_std"], 0.0, atol=1e-12)
        assert np.all(np.asarray(got["logit_std"]) > 0.1)
        # A vector added to every key moves q̄·k̄ (softmax-invariant), not the key term.
        k2 = k + rng.standard_normal((1, 1, H, DH)) * 10
        k3 = rng.standard_normal((B, L, H, DH))
        a = mean_query_key_terms(q, k3, _logits(q, k3))
        b = mean_query_key_terms(q, k3 + (k2 - k)[:1, :1], _logits(q, k3 + (k2 - k)[:1, :1]))
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-9, err_msg=name)


def test_rejects_mismatched_shapes():
    q = np.zeros((B, L, H, DH), np.float32)
    with pytest.raises(ValueError, match="equal shape"):
        mean_query_key_terms(q, q[:, :-1], np.zeros((B, H, L, L), np.float32))
    with pytest.raises(ValueError, match="logits"):
        mean_query_key_terms(q, q, np.zeros((B, H + 1, L, L), np.float32))
