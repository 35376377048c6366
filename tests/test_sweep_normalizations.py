"""The bias sweep with the softmax alternatives (docs/SWEEP.md, "Softmax alternatives at
init"): a point's reduction of non-softmax weights against a float64 loop over the block's probes,
the sink metrics, the softmax path left as it was, the softmax-only closed forms and rounding bound
left out, the `:normalizations` config and the controls' identity for another normalisation."""
import itertools
import json
import math
import pathlib

import jax
import numpy as np
import pytest

from anisotropy_jax.config import BlockConfig, ConfigError
from anisotropy_jax.configs.sweep import SweepConfig, sweep_configs_from_mapping
from anisotropy_jax.models import block as block_lib
from anisotropy_jax.models import fused_attention
from anisotropy_jax.studies.sweep import controls, grid, points, report, tables, theory
from tests import reference
from tests.test_sweep import _experiment_config

BLOCK = BlockConfig(d_model=32, num_heads=4, d_ff=64)


def _probes(block, s=6.0, seed=0):
    x = (jax.random.normal(jax.random.key(seed + 1), (3, 6, 32))
         + s * jax.random.normal(jax.random.key(seed + 2), (1, 1, 32)) / math.sqrt(32))
    params = block_lib.Block(block).init(jax.random.key(seed), x)
    return block_lib.Block(block).apply(params, x)[1]


def _renormalised_rows(weights_QxK):
    rows = []
    for w in weights_QxK:
        rows.append(w / w.sum() if w.sum() > 0 else np.full(len(w), 1 / len(w)))
    return rows


def _entropy(p):
    return -sum(pi * math.log(pi) for pi in p if pi > 0)


@pytest.mark.parametrize("name", ["off_by_one", "sigmoid", "softpick", "clipped_softmax"])
def test_point_reduction_of_other_normalizations_against_a_loop(name):
    block = BLOCK.replace(attention_normalization=name)
    probes = _probes(block)
    got = points.reduce_probes(probes, block, sink_metrics=True)
    assert set(n for n in got if "/" not in n) == set(points.scalar_metrics(block, 3, True))
    assert "attention_rounding_bound" not in got  # softmax-only: left out, not a wrong number
    w = np.asarray(probes["attn_weights"], np.float64)
    logits = np.asarray(probes["attn_logits"], np.float64)
    values = np.asarray(probes["values"], np.float64)
    ent, mass, mx, agreement, row_cos, info, alpha0, noop, free = ([] for _ in range(9))
    for b, h in itertools.product(range(3), range(4)):
        rows = _renormalised_rows(w[b, h])
        ent += [_entropy(p) / math.log(6) for p in rows]
        mass += list(w[b, h].sum(-1))
        mx += list(w[b, h].max(-1))
        votes = np.bincount(logits[b, h].argmax(-1), minlength=6)
        agreement.append(votes.max() / 6)
        row_cos.append(np.mean([reference.cosine(rows[i], rows[j])
                                for i in range(6) for j in range(6) if i != j]))
        info.append(_entropy(sum(rows) / 6) - np.mean([_entropy(p) for p in rows]))
        alpha0.append(w[b, h, :, 0].mean())
        norms = np.linalg.norm(values[b, :, h], axis=-1)
        noop.append(alpha0[-1] * norms[0] / norms.mean())
        free.append(w[b, h].mean(0).max())  # every query sees every key: α_k, raw weights
    want = {"attention_entropy_normalized": np.mean(ent), "attention_mass": np.mean(mass),
            "attention_max": np.mean(mx), "attention_query_agreement": np.mean(agreement),
            "attention_row_cosine": np.mean(row_cos),
            "attention_query_key_information": np.mean(info),
            "attention_sink_rate": np.mean(np.array(alpha0) > 0.3),
            "attention_noop_score": np.mean(noop),
            "attention_free_sink_rate": np.mean(np.array(free) > 0.3)}
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=2e-5, atol=2e-6, err_msg=key)


def test_softmax_points_are_unchanged_by_the_sink_metrics():
    """The softmax reduction with the sink metrics: the same values, bit for bit, mass 1, and
    Gu et al.'s sink rate and the no-op score from α_0 (loop)."""
    probes = _probes(BLOCK, s=30.0)
    plain = points.reduce_probes(probes, BLOCK)
    more = points.reduce_probes(probes, BLOCK, sink_metrics=True)
    assert set(more) - set(plain) == set(points.SINK_METRICS)
    for key, value in plain.items():
        np.testing.assert_array_equal(more[key], value, err_msg=key)
    assert more["attention_mass"] == 1.0
    w = np.asarray(probes["attn_weights"], np.float64)
    alpha0 = w[..., 0].mean(-1)  # (B, H)
    norms = np.linalg.norm(np.asarray(probes["values"], np.float64), axis=-1)  # (B, L, H)
    np.testing.assert_allclose(more["attention_sink_rate"], np.mean(alpha0 > 0.3))
    np.testing.assert_allclose(more["attention_noop_score"],
                               np.mean(alpha0 * norms[:, 0] / norms.mean(1)), rtol=1e-5)
    np.testing.assert_allclose(more["attention_free_sink_rate"],
                               np.mean(w.mean(-2).max(-1) > 0.3))


def _free_sink_rate64(weights_BxHxLxL, causal):
    """The position-free rate in float64 loops: per (sequence, head), α_k = the mean weight on
    key k over the queries with > 1 visible key that see it, over the keys seen by at least half
    of those queries; the share of pairs whose largest α_k exceeds 0.3."""
    b, h, length, _ = weights_BxHxLxL.shape
    counted = [q for q in range(length) if (q + 1 if causal else length) > 1]
    over = []
    for i, j in itertools.product(range(b), range(h)):
        best = -1.0
        for k in range(length):
            viewers = [q for q in counted if not causal or k <= q]
            if 2 * len(viewers) >= len(counted):
                best = max(best, np.mean([weights_BxHxLxL[i, j, q, k] for q in viewers]))
        over.append(best > 0.3)
    return np.mean(over)


def test_free_sink_rate_is_the_same_from_the_kernel_key_sums_weights_and_logits():
    """Causal softmax: the rate from the fused kernel's on-chip column sums (interpret mode),
    from the weights probe, and recomputed from queries and keys, against a float64 loop; the
    weights ×6 and the biased inputs make some heads sink (measured: 0, 0.33, 0.92 at s = 0, 8,
    30), so every path is compared on rates strictly between 0 and 1 as well."""
    block = BlockConfig(d_model=64, num_heads=4, d_ff=64, causal=True)  # L = 16, Dh = 16
    rates = []
    for s in (0.0, 8.0, 30.0):
        x = (jax.random.normal(jax.random.key(1), (3, 16, 64))
             + s * jax.random.normal(jax.random.key(2), (1, 1, 64)) / 8.0)
        params = jax.tree.map(lambda p: 6.0 * p, block_lib.Block(block).init(jax.random.key(0), x))
        probes = block_lib.Block(block).apply(params, x)[1]
        _, stats = fused_attention.fused_attention(
            probes["queries"], probes["keys"], probes["values"], causal=True, interpret=True,
            logit_scale=fused_attention.logit_scale(16, 1.0), reduction_statistics=True)
        bare = {n: v for n, v in probes.items() if n not in ("attn_weights", "attn_logits")}
        want = _free_sink_rate64(np.asarray(probes["attn_weights"], np.float64), causal=True)
        for variant in (probes, {**bare, "attn_key_mass": stats["attn_key_mass"]}, bare):
            np.testing.assert_allclose(points._free_sink_rate(variant, block), want)
        rates.append(want)
    assert rates[0] == 0.0 and 0.0 < rates[1] < 1.0 and 0.0 < rates[2] < 1.0, rates


def test_softmax_only_forms_and_the_rounding_bound_are_left_out():
    s = np.array([0.0, 3.0])
    for block in (BLOCK.replace(attention_normalization="sigmoid"),
                  BLOCK.replace(attention_output_gate=True)):
        forms = theory.closed_forms(SweepConfig(model=block, bias_norms=(0.0, 3.0)), s)
        assert "attention_entropy" not in forms
        assert "attention_output_cross_sequence_cosine" not in forms
        assert {"input_cosine", "query_norm", "output_norm"} <= set(forms)  # not softmax forms
    assert "attention_entropy" in theory.closed_forms(SweepConfig(model=BLOCK), s)
    sweep = SweepConfig(model=BLOCK.replace(attention_normalization="softpick"))
    assert sweep.reports_sink_metrics and not SweepConfig().reports_sink_metrics
    result = grid.SweepResult(sweep, s, {"input_cosine": np.zeros((1, 2))}, {}, None, 1, 0.0, 0.0)
    assert report.reliable_points(result) == [None, None]  # not assessed, never "reliable"
    assert report.unreliable_warning({"label": "x", "bias_norms": [0.0, 3.0],
                                      "reliable": [None, None]}) is None
    softmax = grid.SweepResult(SweepConfig(), s, {"input_cosine": np.zeros((1, 2))}, {}, None, 1,
                               0.0, 0.0)
    assert report.reliable_points(softmax) == [True, True]  # a run without metrics, as before


def test_normalizations_variant_and_several_compared_fields():
    for variant in ("normalizations", "smoke+normalizations"):
        runs = sweep_configs_from_mapping(_experiment_config(variant))
        assert len(runs) == 12
        blocks = [(c.model.attention_normalization, c.model.attention_output_gate) for _, c in runs]
        assert set(blocks) == {("softmax", False), ("off_by_one", False),
                               ("sigmoid_per_query_bias", False),
                               ("softpick", False), ("clipped_softmax", False), ("softmax", True)}
        for (_, biased), (label, control) in zip(runs[::2], runs[1::2]):
            assert (biased.inputs, control.inputs) == ("biased", "norm_matched")
            assert biased.replace(inputs="norm_matched") == control and biased.sink_metrics
            assert label.endswith(", inputs=norm_matched")
    assert runs[0][0] == "attention_normalization=softmax, attention_output_gate=False, inputs=biased"
    config = _experiment_config("smoke")
    config.compare_fields = ("model.attention_normalization", "inputs")
    config.compare_values = (("sigmoid",),)
    with pytest.raises(ConfigError, match="compare_values: .* one value for each"):
        sweep_configs_from_mapping(config)
    config.compare_values = (("sigmoid", "biased"), ("softmax", "sideways"))
    with pytest.raises(ConfigError, match="compare_values: inputs"):
        sweep_configs_from_mapping(config)
    config.compare_fields = ("model.attention_normalization", "colour")
    with pytest.raises(ConfigError, match="^compare_fields: 'colour'"):
        sweep_configs_from_mapping(config)
    config = _experiment_config("smoke")
    config.compare_fields, config.compare_values = ("model.attention_impl",), ("xla",)
    config.model.attention_impl = "xla"
    one, = sweep_configs_from_mapping(config)
    assert one[0] == "attention_impl=xla"


def test_controls_identity_holds_for_another_normalization():
    """The norm-matched control's logits are the s = 0 logits × c² (post-LN): the query agreement
    (votes by the largest logit) is its s = 0 value for sigmoid attention too; the biased run's
    is not constant."""
    base = SweepConfig(model=BLOCK.replace(attention_normalization="sigmoid"), batch_size=2,
                       seq_len=8, bias_norms=(0.0, 4.0, 40.0), num_seeds=2, chunk_size=0)
    runs = {kind: grid.run(base.replace(inputs=kind)) for kind in ("biased", "norm_matched")}
    assert set(points.SINK_METRICS) <= set(runs["biased"].per_seed)
    assert "attention_rounding_bound" not in runs["biased"].per_seed
    entry, = controls.summary(runs).values()
    identity = entry["runs"]["norm_matched"]["identity"]
    assert identity["max_abs_deviation"]["attention_query_agreement"] == 0.0
    agreement = runs["biased"].per_seed["attention_query_agreement"]
    assert np.ptp(agreement.mean(0)) > 0


def test_committed_h100_kernel_run_equals_the_xla_softmax_rows():
    """docs/results/sweep/sink_rates_h100: the fused kernel's sweep (on-chip column sums) and the XLA
    sweep, same block, seeds and grid, agree on the sink metrics at every s; the table kind
    renders the seeds' range."""
    folder = pathlib.Path(__file__).resolve().parent.parent / "docs/results/sweep/sink_rates_h100"
    xla, fused = (json.loads((folder / f"results_{name}.json").read_text())
                  for name in ("normalizations", "pallas"))
    assert xla["bias_norms"] == fused["bias_norms"] and len(xla["bias_norms"]) == 30
    for kind in ("biased", "norm_matched"):
        a, b = (tables._softmax_run(doc, kind)["metrics"] for doc in (xla, fused))
        for name in points.SINK_METRICS + ("attention_query_agreement", "attention_max"):
            assert len(a[name]["per_seed"]) == len(b[name]["per_seed"]) == 5
            np.testing.assert_allclose(b[name]["per_seed"], a[name]["per_seed"], atol=2e-4,
                                       err_msg=f"{kind} {name}")
    row = tables.sink_rates_table(xla).splitlines()[2 + tables.SINK_ROWS.index(4096.0)]
    seeds = [run[-1] for run in tables._softmax_run(xla, "biased")["metrics"][
        "attention_free_sink_rate"]["per_seed"]]
    assert f"[{min(seeds):.3f}, {max(seeds):.3f}]" in row
