"""Godey 4b's rule end to end, on queries and keys where the answer is known: each "seed" is one
random draw of q, k per layer, measured by `analysis.head_metrics` (the per-layer function the
training analysis vmaps), summarised by `seeds.aggregate` and decided by `verdicts.godey_4b`.
Negative controls: uniform attention (step 0) and i.i.d. q, k with no common mean must not give
"holds"; a query-specific term that sharpens more per unit of variance must give "does not hold".
Positive controls: a key term that alone sharpens must give "holds", with the matched control
both unmatched (weak query-specific term) and mostly matched (a sink-like key term)."""
import math

import jax
import numpy as np
import pytest

from anisotropy_jax.studies.report import verdicts
from anisotropy_jax.studies.train import analysis, seeds, trends

B, L, H, DH, LAYERS = 2, 12, 4, 16, 2
S = 1 / math.sqrt(DH)
_HEAD_METRICS = jax.jit(analysis.head_metrics, static_argnums=3)


def _seed_run(draw, seed, causal):
    """One seed's results.json as the analysis writes it (one checkpoint), for the fields the
    summary reads; the layers, embeddings and losses are placeholders the verdict never reads."""
    rng = np.random.default_rng(seed)
    per_layer = []
    for layer in range(LAYERS):
        q, k = (np.asarray(x, np.float32) for x in draw(rng))
        logits = np.einsum("bihd,bjhd->bhij", q, k) * np.float32(S)
        per_layer.append(jax.device_get(_HEAD_METRICS(q, k, logits, causal,
                                                      jax.random.key(layer))))
    heads = {n: np.stack([p[n] for p in per_layer])[None] for n in per_layer[0]}
    return {"heads": heads, "correlation": trends.entropy_correlations_across_heads(heads),
            "layers": {"cross_sequence_cosine": np.zeros((1, LAYERS + 1))},
            "embeddings": {"input_centered": [0.0], "output_centered": [0.0]},
            "training": {"val_loss": [[0, 1.0]]}, "steps": [0],
            "config": {"train": {"seed": seed}}}


def _verdict(draw, seed_values, causal=False):
    """(Godey 4b's verdict, whether the permutation control's rule would have said "holds")."""
    summary = seeds.aggregate([_seed_run(draw, s, causal) for s in seed_values])
    old = summary["quantities"]["heads_mean/delta_entropy_key_term_minus_shared_control"]
    return (verdicts.godey_4b({"clm" if causal else "mlm": summary}),
            bool(np.ravel(old["low"])[-1] > 0))


def _uniform(rng):  # about step 0: tiny q, k (H/ln L ≈ 1)
    return 0.05 * rng.standard_normal((2, B, L, H, DH))


def _independent(rng):  # i.i.d. zero-mean: no common mean, m is sampling noise
    return rng.standard_normal((2, B, L, H, DH))


def _unit_direction(rng):
    u = rng.standard_normal((H, DH))
    return u / np.linalg.norm(u, axis=-1, keepdims=True)


def _shared_key_component(rng):
    """Every query ≈ 3u; keys share a strong component g_j·u (one u per head): the logits are
    m_j plus a weak query-specific part, which cannot match m's variance (unmatched control)."""
    u = _unit_direction(rng)
    q = 3 * u + 0.1 * rng.standard_normal((B, L, H, DH))
    k = 0.5 * rng.standard_normal((B, L, H, DH)) + 3 * rng.standard_normal((B, L, H, 1)) * u
    return q, k


def _sink_key(rng):
    """m is one outlier key (key 0 of every sequence) along axis 0 that every query weighs
    (q·e_0 = 3); the query-specific part is Gaussian and larger, so the control can match."""
    q = 1.6 * rng.standard_normal((B, L, H, DH))
    k = 1.6 * rng.standard_normal((B, L, H, DH))
    q[..., 0] = 3.0
    k[..., 0] = 0.1 * rng.standard_normal((B, L, H))
    k[:, 0, :, 0] += 4.0
    return q, k


def _query_peak(rng):
    """m Gaussian (variance 0.75 over the keys); the query-specific part is a one-hot peak on the
    query's own key (q_i, k_i share axis 1 + i): per unit of variance the peak sharpens more."""
    eye = np.eye(L, DH - 1)  # token i ↦ axis 1 + i
    q = np.zeros((B, L, H, DH)) + 0.05 * rng.standard_normal((B, L, H, DH))
    k = np.zeros((B, L, H, DH)) + 0.05 * rng.standard_normal((B, L, H, DH))
    q[..., 1:] += 3.5 * eye[None, :, None, :]
    k[..., 1:] += 3.5 * eye[None, :, None, :]
    q[..., 0] += 2.0
    k[..., 0] += 1.7 * rng.standard_normal((B, L, H))
    return q, k


def test_uniform_attention_cannot_pass():
    v, permutation_rule_holds = _verdict(_uniform, range(4))
    assert v.verdict == verdicts.NO_TEST, v.numbers
    assert "32 of 32 seed-heads undefined" in v.numbers[0]
    assert permutation_rule_holds  # the control that cannot fail passes even here


@pytest.mark.parametrize("causal", [False, True])
def test_independent_queries_and_keys_do_not_hold(causal):
    permutation_rule = []
    for first in (0, 5, 10):
        v, holds = _verdict(_independent, range(first, first + 5), causal)
        assert v.verdict != verdicts.HOLDS, (first, v.numbers)
        permutation_rule.append(holds)
    assert any(permutation_rule)  # and here the permuted control's rule passes


def _unmatched(v):
    return float(v.numbers[0].split("control unmatched in ")[1].split(" ")[0])


def test_a_key_term_that_alone_sharpens_holds_and_shows_its_unmatched_control():
    v, _ = _verdict(_shared_key_component, range(4))
    assert v.verdict == verdicts.HOLDS, v.numbers
    assert _unmatched(v) > 0.9  # the weak query-specific part cannot lose m's variance
    # The key term's variance ranks are the logit spread's: the partial correlation says why.
    assert "undefined in 4 of 4 seeds: seed 0: the key term's ranks fixed" in v.numbers[0]


@pytest.mark.parametrize("causal", [False, True])
def test_a_sink_key_term_holds_against_a_mostly_matched_control(causal):
    v, _ = _verdict(_sink_key, range(4), causal)
    assert v.verdict == verdicts.HOLDS, v.numbers
    assert _unmatched(v) < 0.1


@pytest.mark.parametrize("causal", [False, True])
def test_a_query_specific_peak_that_sharpens_more_does_not_hold(causal):
    v, _ = _verdict(_query_peak, range(4), causal)
    assert v.verdict == verdicts.FAILS, v.numbers
    assert "difference -" in v.numbers[0]


def test_the_docs_quote_the_criterion_verbatim():
    from anisotropy_jax.studies.report.verdicts_key_term import CRITERION

    root = __import__("pathlib").Path(__file__).resolve().parent.parent
    assert f"> {CRITERION}." in (root / "docs" / "TRAIN.md").read_text()
