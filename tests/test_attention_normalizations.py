"""The attention normalisations (models/normalizations.py, the registry NORMALIZATIONS of
models/attention.py), the head-wise output gate and
the statistics of weights that need not sum to one (metrics/attention.py `weight_statistics`,
metrics/used_attention.py `used_weight_statistics`):
each against an mpmath/float64 loop over its definition on fresh random logits, with causal,
padding and fully masked rows and logits of ±1e4; their limits; the gate against a loop; a block
with each normalisation forward and backward; the config's refusals."""
import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest

from anisotropy_jax import metrics
from anisotropy_jax.config import BlockConfig, ConfigError
from anisotropy_jax.config.model import ATTENTION_NORMALIZATIONS
from anisotropy_jax.metrics.attention import renormalized_weights, weight_statistics
from anisotropy_jax.metrics.used_attention import USED_WEIGHT_STATISTICS, used_weight_statistics
from anisotropy_jax.models import attention, block as block_lib, normalizations

NEW = ("off_by_one", "sigmoid", "sigmoid_per_query_bias", "softpick", "clipped_softmax")
ZETA, GAMMA, EPS = 1.02, -0.05, 1e-6


def _exp(x):
    return mpmath.e ** mpmath.mpf(float(x))


def _reference_row(name, row, visible):
    """One query's weights from the definition, in mpmath (no overflow at ±1e4), then float64."""
    out = np.zeros(len(row))
    idx = [j for j in range(len(row)) if visible[j]]
    if not idx:
        return out
    e = {j: _exp(row[j]) for j in idx}
    if name == "off_by_one":
        total = 1 + sum(e.values())
        vals = {j: e[j] / total for j in idx}
    elif name == "sigmoid":  # σ(ℓ − ln L), L every key of the row (Ramapuram et al.'s bias)
        vals = {j: 1 / (1 + _exp(-row[j]) * len(row)) for j in idx}
    elif name == "sigmoid_per_query_bias":  # σ(ℓ − ln n), n the query's visible keys
        vals = {j: 1 / (1 + _exp(-row[j]) * len(idx)) for j in idx}
    elif name == "softpick":
        total = sum(abs(e[j] - 1) for j in idx) + EPS
        vals = {j: max(e[j] - 1, 0) / total for j in idx}
    else:
        total = sum(e.values())
        vals = {j: min(max((ZETA - GAMMA) * e[j] / total + GAMMA, 0), 1) for j in idx}
    for j, v in vals.items():
        out[j] = float(v)
    return out


def _normalize(name, logits, mask):
    fn = attention.NORMALIZATIONS[name]
    if name == "clipped_softmax":
        return fn(logits, mask, zeta=ZETA, gamma=GAMMA)
    return fn(logits, mask)


def _masked_inputs(seed, scale, kind):
    """Random logits (2, 2, 6, 6) × scale, masked as the attention core masks them."""
    logits = scale * jax.random.normal(jax.random.key(seed), (2, 2, 6, 6))
    key_mask = None
    if kind in ("padding", "fully_masked"):
        key_mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]], bool)
        if kind == "fully_masked":
            key_mask[1] = False  # every row of the second sequence has no visible key
    mask = attention.attention_mask(6, kind == "causal", key_mask)
    if mask is not None:
        logits = jnp.where(mask, logits, attention.MASK_VALUE)
    return logits, mask


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("kind", ["none", "causal", "padding", "fully_masked"])
@pytest.mark.parametrize("scale", [3.0, 1e4])
def test_each_normalization_equals_its_definition(name, kind, scale):
    logits, mask = _masked_inputs(hash((name, kind, scale)) % 1000, scale, kind)
    got = np.asarray(_normalize(name, logits, mask))
    visible = np.broadcast_to(True if mask is None else np.asarray(mask), logits.shape)
    want = np.zeros(logits.shape)
    for b, h, q in np.ndindex(*logits.shape[:3]):
        want[b, h, q] = _reference_row(name, np.asarray(logits[b, h, q], np.float64),
                                       visible[b, h, q])
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
    assert np.all(got[~visible] == 0.0)  # masked keys: exactly zero
    if kind == "fully_masked":  # rows without a visible key: all zero (softmax: uniform)
        assert np.all(got[1] == 0.0)
        np.testing.assert_allclose(np.asarray(attention.softmax(logits, mask))[1], 1 / 6)


def test_the_limits():
    # clipped softmax with ζ = 1, γ = 0 is the softmax, bit for bit, on rows with visible keys
    logits, mask = _masked_inputs(1, 5.0, "causal")
    np.testing.assert_array_equal(normalizations.clipped_softmax(logits, mask, zeta=1.0, gamma=0.0),
                                  attention.softmax(logits, mask))
    # off-by-one: one very large logit → one-hot; every logit ≪ 0 → nothing
    row = jnp.array([[0.3, -1.0, 80.0, 2.0]])
    np.testing.assert_allclose(normalizations.off_by_one(row), [[0.0, 0.0, 1.0, 0.0]], atol=1e-30)
    assert float(jnp.max(normalizations.off_by_one(row - 200.0))) < 1e-80
    # sigmoid: b = −ln n → −∞ as n grows: zero logits give 1/(n + 1) per key → 0, mass → 1
    for n in (4, 64, 4096):
        w = np.asarray(normalizations.sigmoid(jnp.zeros((1, n))), np.float64)
        np.testing.assert_allclose(w, 1 / (n + 1), rtol=1e-6)
    assert float(normalizations.sigmoid(jnp.zeros((1, 4096))).max()) < 3e-4
    # causal, zero logits: the paper's bias is one scalar −ln L for every query, σ(−ln L) =
    # 1/(L + 1) on each visible key; the per-query bias −ln(i + 1) gives query i 1/(i + 2)
    length = 8
    mask = attention.attention_mask(length, True, None)
    zeros = jnp.where(mask, jnp.zeros((1, 1, length, length)), attention.MASK_VALUE)
    visible = np.tril(np.ones((length, length), bool))
    scalar = np.where(visible, 1 / (length + 1), 0.0)
    per_query = np.where(visible, 1 / (np.arange(length)[:, None] + 2.0), 0.0)
    np.testing.assert_allclose(normalizations.sigmoid(zeros, mask)[0, 0], scalar, rtol=1e-6)
    np.testing.assert_allclose(normalizations.sigmoid_per_query_bias(zeros, mask)[0, 0],
                               per_query, rtol=1e-6)
    # softpick of all-equal logits: uniform (times 1 − tiny) above 0, exactly 0 at or below 0
    for c, want in ((2.0, 0.25), (0.0, 0.0), (-3.0, 0.0), (1e4, 0.25)):
        np.testing.assert_allclose(normalizations.softpick(jnp.full((1, 4), c)), want, rtol=1e-5,
                                   err_msg=str(c))


@pytest.mark.parametrize("kind", ["none", "causal", "fully_masked"])
def test_weight_statistics_against_a_loop(kind):
    """Entropy of the renormalised weights (a row of zero mass counts as uniform, a row without
    visible keys has entropy 0), raw max and first-key weight, and the mass."""
    logits, mask = _masked_inputs(5, 3.0, kind)
    weights = normalizations.softpick(logits, mask)  # softpick: many rows of zero mass at scale 3
    weights = weights.at[0, 0, 2].set(0.0)  # and one made so by hand
    stats = weight_statistics(weights, mask)
    visible = np.broadcast_to(True if mask is None else np.asarray(mask), logits.shape)
    w64 = np.asarray(weights, np.float64)
    for b, h, q in np.ndindex(*logits.shape[:3]):
        row, vis = np.where(visible[b, h, q], w64[b, h, q], 0.0), visible[b, h, q]
        mass, n = row.sum(), vis.sum()
        p = row / mass if mass > 0 else (vis / n if n else np.zeros_like(row))
        entropy = -sum(pi * math.log(pi) for pi in p if pi > 0)
        for key, want in (("entropy", entropy), ("mass", mass), ("max", row.max()),
                          ("sink", row[0])):
            np.testing.assert_allclose(stats[key][b, h, q], want, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{key} at {(b, h, q)}")
    np.testing.assert_allclose(stats["entropy"][0, 0, 2], math.log(visible[0, 0, 2].sum()),
                               rtol=1e-6)
    if kind == "fully_masked":
        assert np.all(np.asarray(stats["entropy"][1]) == 0) and np.all(stats["mass"][1] == 0)
    p = renormalized_weights(weights, mask)
    rows = np.asarray(jnp.sum(p, axis=-1))
    np.testing.assert_allclose(rows[visible.any(-1)], 1.0, rtol=1e-6)
    assert all(np.all(np.isfinite(v)) for v in stats.values())


def test_softmax_statistics_are_unchanged_and_other_normalizations_use_the_weights():
    """The softmax core's statistics are exactly `attention_statistics` of the logits (no mass);
    another normalisation's are those of its weights, with attn_mass."""
    q, k, v = (jax.random.normal(jax.random.key(i), (2, 6, 3, 4)) for i in range(3))
    for name in ("softmax",) + NEW:
        _, probes = attention.attention_core(q, k, v, scale=0.5, precision="highest", causal=True,
                                             normalization=name)
        mask = attention.attention_mask(6, True, None)
        if name == "softmax":
            want = metrics.attention_statistics(probes["attn_logits"], mask)
            assert "attn_mass" not in probes
        else:
            want = weight_statistics(probes["attn_weights"], mask)
        for key, value in want.items():
            np.testing.assert_array_equal(probes[f"attn_{key}"], value, err_msg=f"{name} {key}")


def _block(**changes):
    return BlockConfig(d_model=16, num_heads=2, d_ff=32, **changes)


def test_output_gate_against_a_loop():
    cfg = _block(attention_output_gate=True, use_mlp=False)
    x = jax.random.normal(jax.random.key(3), (2, 5, 16))
    params = block_lib.Block(cfg).init(jax.random.key(0), x)
    params = jax.tree.map(lambda a: a + 0.3 * jax.random.normal(jax.random.key(9), a.shape),
                          params)
    _, probes = block_lib.Block(cfg).apply(params, x)
    att = jax.tree.map(lambda a: np.asarray(a, np.float64), params)["params"]["attention"]
    w, vals = np.asarray(probes["attn_weights"], np.float64), np.asarray(probes["values"])
    x64 = np.asarray(x, np.float64)
    out = np.zeros((2, 5, 16))
    for b, i in np.ndindex(2, 5):
        heads = []
        for h in range(2):
            gate = 1 / (1 + math.exp(-(x64[b, i] @ att["gate"]["kernel"][:, h]
                                       + att["gate"]["bias"][h])))
            heads.append(gate * sum(w[b, h, i, j] * vals[b, j, h] for j in range(5)))
        out[b, i] = np.concatenate(heads) @ att["out"]["kernel"] + att["out"]["bias"]
    np.testing.assert_allclose(probes["attn_out"], out, rtol=1e-4, atol=1e-5)
    assert probes["attn_gate"].shape == (2, 5, 2)


def test_parameters_are_unchanged_without_the_gate():
    x = jnp.zeros((1, 2, 16))
    plain = block_lib.Block(_block()).init(jax.random.key(0), x)
    for name in ATTENTION_NORMALIZATIONS:
        other = block_lib.Block(_block(attention_normalization=name)).init(jax.random.key(0), x)
        assert jax.tree.structure(other) == jax.tree.structure(plain)
        jax.tree.map(np.testing.assert_array_equal, other, plain)
    gated = block_lib.Block(_block(attention_output_gate=True)).init(jax.random.key(0), x)
    gate = gated["params"]["attention"].pop("gate")
    assert (gate["kernel"].shape, gate["bias"].shape) == ((16, 2), (2,))
    assert set(gated["params"]["attention"]) == set(plain["params"]["attention"])


@pytest.mark.parametrize("name", ATTENTION_NORMALIZATIONS)
@pytest.mark.parametrize("gate", [False, True])
def test_block_forward_and_backward_are_finite(name, gate):
    cfg = _block(attention_normalization=name, attention_output_gate=gate, causal=True)
    x = 4.0 * jax.random.normal(jax.random.key(2), (2, 6, 16))
    key_mask = jnp.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], bool)
    params = block_lib.Block(cfg).init(jax.random.key(0), x)

    def loss(p):
        y, probes = block_lib.Block(cfg).apply(p, x, key_mask)  # (statistics: not for gradients)
        return jnp.sum(y ** 2) + jnp.sum(probes["attn_out"] ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    assert np.isfinite(value)
    assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
    assert float(sum(jnp.sum(jnp.abs(g)) for g in jax.tree.leaves(grads["params"]["attention"]))) > 0


def test_local_chunks_take_any_normalization():
    cfg = _block(attention_normalization="sigmoid", local_chunk=4)
    x = jax.random.normal(jax.random.key(2), (1, 6, 16))
    _, probes = block_lib.Block(cfg).apply(block_lib.Block(cfg).init(jax.random.key(0), x), x)
    w = np.asarray(probes["attn_weights"])
    assert np.all(w[:, :, :4, 4:] == 0) and np.all(w[:, :, 4:, :4] == 0)
    np.testing.assert_allclose(probes["attn_mass"], w.sum(-1), rtol=1e-6)
    chunk = np.asarray(probes["attn_logits"])[:, :, 4:, 4:]
    np.testing.assert_allclose(w[:, :, 4:, 4:], 1 / (1 + 2 * np.exp(-chunk)), rtol=1e-5)


def test_the_config_refuses_what_the_fused_cores_cannot_compute():
    assert tuple(attention.NORMALIZATIONS) == ATTENTION_NORMALIZATIONS
    for impl in ("pallas", "dot_product"):
        with pytest.raises(ConfigError, match="attention_normalization='sigmoid'.*attention_impl"):
            BlockConfig(attention_impl=impl, attention_normalization="sigmoid")
        with pytest.raises(ConfigError, match="attention_output_gate=True"):
            BlockConfig(attention_impl=impl, attention_output_gate=True)
    BlockConfig(local_chunk=4, attention_normalization="softpick")  # the xla core: accepted
    for field, value in (("clip_zeta", 0.9), ("clip_gamma", 0.01), ("clip_gamma", float("nan")),
                         ("attention_normalization", "sparsemax"), ("attention_output_gate", 1)):
        with pytest.raises(ConfigError, match=f"model.{field}"):
            BlockConfig(**{field: value})
    cfg = BlockConfig(attention_normalization="clipped_softmax", clip_zeta=1.1, clip_gamma=-0.2)
    fn = attention.normalization_function(cfg)
    logits = jnp.array([[0.0, 1.0, 2.0]])
    np.testing.assert_array_equal(fn(logits), normalizations.clipped_softmax(logits, None, 1.1, -0.2))


def _used_reference(w, visible):
    """`used_weight_statistics` from its definition: float64 loops over heads, sequences and
    queries; queries of zero mass left out of the shape statistics and counted."""
    batch, heads, num_q, _ = w.shape
    out = {name: np.full(heads, np.nan) for name in USED_WEIGHT_STATISTICS}
    for h in range(heads):
        shape_rows, masses, zero, per_sequence = [], [], [], {"query_agreement": [],
                                                              "row_cosine": [],
                                                              "query_key_information": []}
        for b in range(batch):
            rows = []
            for q in range(num_q):
                vis = visible[b, h, q]
                if vis.sum() <= 1:
                    continue  # not counted
                row = np.where(vis, w[b, h, q], 0.0)
                mass = row.sum()
                masses.append(mass)
                zero.append(mass == 0)
                if mass == 0:
                    continue
                p = row / mass
                entropy = -sum(x * math.log(x) for x in p if x > 0)
                shape_rows.append((entropy, entropy / math.log(vis.sum()), p.max(), p[0]))
                rows.append((p, entropy, row))
            if rows:
                votes = np.zeros(w.shape[-1])
                for _, _, row in rows:
                    votes[row == row.max()] += 1
                per_sequence["query_agreement"].append(votes.max() / len(rows))
                mean_p = np.mean([p for p, _, _ in rows], axis=0)
                h_mean = -sum(x * math.log(x) for x in mean_p if x > 0)
                per_sequence["query_key_information"].append(
                    h_mean - np.mean([e for _, e, _ in rows]))
            if len(rows) >= 2:
                cosines = [p_i @ p_j / np.linalg.norm(p_i) / np.linalg.norm(p_j)
                           for i, (p_i, _, _) in enumerate(rows)
                           for j, (p_j, _, _) in enumerate(rows) if i != j]
                per_sequence["row_cosine"].append(np.mean(cosines))
        if shape_rows:
            for i, name in enumerate(("entropy", "entropy_normalized", "max", "first_key")):
                out[name][h] = np.mean([r[i] for r in shape_rows])
        for name, values in per_sequence.items():
            if values:
                out[name][h] = np.mean(values)
        out["mass"][h], out["zero_mass_share"][h] = np.mean(masses), np.mean(zero)
    return out


@pytest.mark.parametrize("name", ["softpick", "sigmoid", "softmax"])
def test_used_weight_statistics_against_a_float64_loop(name):
    """The statistics of the weights a model used (metrics.used_attention) against loops over
    their definition: renormalised over the visible keys, zero-mass queries (softpick at scale
    3, and a head made all zero by hand) left out of the means and counted, never a NaN in a
    mean: NaN only for the head that has no query with weight."""
    logits, mask = _masked_inputs(7, 3.0, "causal")
    logits = jnp.concatenate([logits, logits[:, :1] - 50.0], axis=1)  # a third head
    weights = _normalize(name, logits, mask)
    if name != "softmax":
        weights = weights.at[:, 2].set(0.0)  # the third head attends to nothing
    got = used_weight_statistics(weights, mask)
    visible = np.broadcast_to(np.asarray(mask), logits.shape)
    want = _used_reference(np.asarray(weights, np.float64), visible)
    for key in USED_WEIGHT_STATISTICS:
        np.testing.assert_allclose(got[key], want[key], rtol=2e-5, atol=1e-6, err_msg=key)
    if name == "softmax":  # the statistics of metrics.attention, mass 1
        stats = metrics.attention_statistics(logits, mask)
        counts = metrics.visible_key_counts(logits.shape, mask)[0, 0]
        np.testing.assert_allclose(got["entropy"], metrics.mean_over_queries(
            stats["entropy"], counts), rtol=1e-5)
        np.testing.assert_allclose(got["mass"], 1.0, rtol=1e-6)
        assert np.all(np.asarray(got["zero_mass_share"]) == 0)
    else:
        assert np.all(np.isnan(np.asarray(got["entropy"][2])))  # no query with weight
        assert float(got["zero_mass_share"][2]) == 1.0 and float(got["mass"][2]) == 0.0
        assert all(np.all(np.isfinite(np.asarray(got[k][:2]))) for k in got)
    if name == "softpick":
        assert 0 < float(got["zero_mass_share"][0]) < 1  # some rows of zero mass, left out
