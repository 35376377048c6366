"""docs/SCIENCE.md closed forms F1, F2, F3, F5 measured by the bias sweep of a BERT-base-width block
(d = 768, 12 heads of 64, N(0, 0.02²)), with tolerances derived from the sampling noise of this
small grid (B = 4 sequences of L = 32 tokens, 2 seeds). Two compilations: post-LN and pre-LN.

Noise model (N = B·L tokens, n = seeds, Dh = d/H, v = (σ_w² d)² the logit variance at s = 0):
  F1  avg cos ≈ (s² + 2s u·z̄ + pair terms)/(s² + d): u·z̄ ~ N(0, 1/N) and the mean of the
      N²/2 pair products z_i·z_j has sd √(2d)/N, so sd ≈ (2s/√N + √(2d)/N)/(s² + d), plus the
      norm fluctuations √(4s² + 2d)/(2√N (s² + d)) times the cosine itself.
  F2  at large s all queries of a head are ≈ s·W_hᵀu, and ‖W_hᵀu‖² ~ σ_w² χ²(Dh): relative sd
      1/√(2 Dh) per head, 1/√(2 Dh H n) after the means; at s = 0 the mean over tokens of ‖q‖
      sits 1/(4 Dh) below its root-mean-square (Jensen on a χ with Dh degrees of freedom).
  F3  per query, the entropy deficit is half the sample variance of L logits: relative sd
      √(2/L) per query and √(2/Dh) across queries (a rank-Dh quadratic form), averaged over the
      N·H queries, plus O(v²/L) from the next cumulant.
All tolerances are 5 standard deviations.
"""
import math

import numpy as np
import pytest

from anisotropy_jax.config import BlockConfig, SweepConfig
from anisotropy_jax.studies.sweep import grid

NORMS = (0.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 1e4, 1e6)
BATCH, SEQ, SEEDS = 4, 32, 2
D, H, DH, SIGMA = 768, 12, 64, 0.02
N = BATCH * SEQ


@pytest.fixture(scope="module")
def post():
    config = SweepConfig(block=BlockConfig(), batch_size=BATCH, seq_len=SEQ,
                               bias_norms=NORMS, num_seeds=SEEDS, seed=3, chunk_size=0)
    return grid.run(config).per_seed


@pytest.fixture(scope="module")
def pre():
    config = SweepConfig(block=BlockConfig(norm_position="pre", layer_norm_eps=1e-5),
                               batch_size=BATCH, seq_len=SEQ, bias_norms=NORMS,
                               num_seeds=SEEDS, seed=3, chunk_size=0)
    return grid.run(config).per_seed


def _mean(per_seed, name):
    return per_seed[name].astype(np.float64).mean(axis=0)


def test_extreme_bias_norms_are_finite_for_post_and_pre(post, pre):
    for per_seed in (post, pre):
        for name, values in per_seed.items():
            assert np.all(np.isfinite(values)), name


def test_f1_input_cosine(post):
    s = np.asarray(NORMS)
    f1 = s ** 2 / (s ** 2 + D)
    sd = ((2 * s / math.sqrt(N) + math.sqrt(2 * D) / N)
          + f1 * np.sqrt(4 * s ** 2 + 2 * D) / (2 * math.sqrt(N))) / (s ** 2 + D)
    np.testing.assert_array_less(np.abs(_mean(post, "input_cosine") - f1), 5 * sd + 1e-6)


def test_f2_query_norm(post, pre):
    s = np.asarray(NORMS)
    growth = s ** 2 / (s ** 2 + D)  # share of ‖x‖² carried by the bias direction
    rel_tol = 5 * growth / math.sqrt(2 * DH * H * SEEDS) + 1 / (4 * DH) + 0.005
    f2_post = SIGMA * math.sqrt(D * DH) * np.sqrt(1 + s ** 2 / D)
    np.testing.assert_array_less(np.abs(_mean(post, "query_norm") / f2_post - 1), rel_tol)
    assert abs(SIGMA * math.sqrt(D * DH) - 4.43) < 0.01  # docs/SCIENCE.md: ≈ 4.43 at s = 0
    # Pre-LN: LN(x) has norm √d whatever s, so the queries keep their s = 0 norm, with the same
    # bias-direction noise once LN(x) is dominated by u.
    f2_pre = SIGMA * math.sqrt(D * DH)
    np.testing.assert_array_less(np.abs(_mean(pre, "query_norm") / f2_pre - 1), rel_tol)


def test_f3_entropy_at_zero_bias(post, pre):
    v = (SIGMA ** 2 * D) ** 2
    predicted = math.log(SEQ) - 0.5 * v * (SEQ - 1) / SEQ
    tol = 5 * 0.5 * v * math.sqrt(2 / (DH * N) + 2 / (SEQ * N * H)) + v ** 2 / SEQ
    for per_seed in (post, pre):
        assert abs(_mean(per_seed, "attention_entropy")[0] - predicted) < tol
    # docs/SCIENCE.md: H / ln L ≈ 0.99 at L = 128 for BERT init.
    assert abs(1 - 0.5 * v * 127 / 128 / math.log(128) - 0.99) < 0.005


def test_f5_post_ln_sharpens_and_pre_ln_flattens(post, pre):
    h_post = _mean(post, "attention_entropy_normalized")
    h_pre = _mean(pre, "attention_entropy_normalized")
    assert np.all(np.diff(h_post) <= 1e-3), h_post        # falls as s grows ...
    assert h_post[NORMS.index(1024.0)] < h_post[0] - 0.5   # ... and a lot
    assert np.all(np.diff(_mean(post, "attention_max")) >= -1e-3)
    assert np.all(np.diff(h_pre) >= -1e-3), h_pre          # rises as s grows ...
    assert h_pre[-1] > h_pre[0] + 0.005                    # ... towards uniform attention
    assert h_pre[-1] > 0.999


def test_f5_mean_query_and_key_are_unaligned_at_init(post, pre):
    # cos(W_Qᵀa, W_Kᵀb) of independent Gaussian maps ~ N(0, 1/Dh) per head.
    tol = 5 / math.sqrt(DH * H * SEEDS)
    for per_seed in (post, pre):
        assert np.all(np.abs(_mean(per_seed, "mean_query_key_cosine")) < tol)


def test_post_ln_output_norm_is_sqrt_d_and_output_cosine_follows_the_bias(post):
    np.testing.assert_allclose(post["output_norm"], math.sqrt(D), rtol=1e-4)
    out = _mean(post, "output_cosine")
    assert out[0] < 0.1 and out[-1] > 0.999
