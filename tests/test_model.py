"""Numerical claims about anisotropy_jax.model: the block against a naive float64 loop, probe
identities, masks, initialisation statistics, docs/SCIENCE.md F2/F3 and the functional contracts."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

from anisotropy_jax import metrics
from anisotropy_jax.models import block as block_lib, layers, transformer
from anisotropy_jax.config import BlockConfig, ConfigError, TransformerConfig

SMALL = BlockConfig(d_model=32, num_heads=4, d_ff=64)


def _params_np(params):
    return jax.tree.map(lambda a: np.asarray(a, np.float64), params)


def _layer_norm(x, p, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * p["scale"] + p["bias"]


def _naive_attention(x, p, cfg, mask=None):
    """Per-batch, per-head, per-query loop in float64."""
    b, l, d = x.shape
    h, dh = cfg.num_heads, cfg.d_head
    out = np.zeros((b, l, d))
    weights = np.zeros((b, h, l, l))
    for bi in range(b):
        q = x[bi] @ p["query"]["kernel"] + p["query"]["bias"]
        k = x[bi] @ p["key"]["kernel"] + p["key"]["bias"]
        v = x[bi] @ p["value"]["kernel"] + p["value"]["bias"]
        heads = []
        for hi in range(h):
            sl = slice(hi * dh, (hi + 1) * dh)
            head_out = np.zeros((l, dh))
            for qi in range(l):
                logits = np.array([q[qi, sl] @ k[ki, sl] for ki in range(l)]) / (
                    np.sqrt(dh) * cfg.logit_temperature)
                if mask is not None:
                    logits = np.where(mask[bi, qi], logits, -np.inf)
                w = np.exp(logits - logits.max())
                w /= w.sum()
                weights[bi, hi, qi] = w
                head_out[qi] = w @ v[:, sl]
            heads.append(head_out)
        out[bi] = np.concatenate(heads, -1) @ p["out"]["kernel"] + p["out"]["bias"]
    return out, weights


def _naive_block(x, p, cfg, mask=None):
    def ln(y, name):
        return _layer_norm(y, p[name], cfg.layer_norm_eps)

    def mlp(y):
        hidden = y @ p["mlp"]["fc_in"]["kernel"] + p["mlp"]["fc_in"]["bias"]
        hidden = 0.5 * hidden * (1.0 + special.erf(hidden / np.sqrt(2.0)))  # exact GELU
        return hidden @ p["mlp"]["fc_out"]["kernel"] + p["mlp"]["fc_out"]["bias"]

    if cfg.norm_position == "pre":
        a, _ = _naive_attention(ln(x, "attention_norm"), p["attention"], cfg, mask)
        h = x + a
        return h + mlp(ln(h, "mlp_norm"))
    a, _ = _naive_attention(x, p["attention"], cfg, mask)
    if cfg.norm_position == "post":
        h = ln(x + a, "attention_norm")
        return ln(h + mlp(h), "mlp_norm")
    h = x + a
    return h + mlp(h)


def _randomised(params, seed=0, scale=0.3):
    """Replaces every leaf by random values (LayerNorm γ around 1), so that zero biases and unit
    γ cannot hide a bug in the reference comparison."""
    leaves_with_paths, tree = jax.tree_util.tree_flatten_with_path(params)
    keys = jax.random.split(jax.random.key(seed), len(leaves_with_paths))
    new = []
    for k, (path, leaf) in zip(keys, leaves_with_paths):
        offset = 1.0 if "scale" in jax.tree_util.keystr(path) else 0.0
        new.append(offset + scale * jax.random.normal(k, leaf.shape))
    return jax.tree.unflatten(tree, new)


@pytest.mark.parametrize("norm_position", ["post", "pre", "none"])
@pytest.mark.parametrize("causal", [False, True])
def test_block_equals_naive_float64_loop(norm_position, causal):
    cfg = SMALL.replace(norm_position=norm_position, causal=causal, logit_temperature=0.7)
    x = jax.random.normal(jax.random.key(1), (2, 5, cfg.d_model)) * 2 + 0.5
    params = _randomised(jax.jit(block_lib.Block(cfg).init)(jax.random.key(0), x))
    y, probes = jax.jit(block_lib.Block(cfg).apply)(params, x)
    mask = np.broadcast_to(np.tril(np.ones((5, 5), bool)), (2, 5, 5)) if causal else None
    p = _params_np(params)["params"]
    want = _naive_block(np.asarray(x, np.float64), p, cfg, mask)
    np.testing.assert_allclose(y, want, rtol=2e-4, atol=2e-4)
    attn_in = np.asarray(x, np.float64)
    if norm_position == "pre":
        attn_in = _layer_norm(attn_in, p["attention_norm"], cfg.layer_norm_eps)
    attn_out, weights = _naive_attention(attn_in, p["attention"], cfg, mask)
    np.testing.assert_allclose(probes["attn_out"], attn_out, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(probes["attn_weights"], weights, rtol=2e-4, atol=1e-6)


def test_padding_mask_equals_naive_loop_and_ignores_padded_keys():
    cfg = SMALL
    x = jax.random.normal(jax.random.key(2), (2, 6, cfg.d_model))
    key_mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], bool)
    params = jax.jit(block_lib.Block(cfg).init)(jax.random.key(0), x)
    _, probes = jax.jit(block_lib.Block(cfg).apply)(params, x, key_mask)
    p = _params_np(params)["params"]
    full_mask = np.broadcast_to(key_mask[:, None, :], (2, 6, 6))
    _, weights = _naive_attention(np.asarray(x, np.float64), p["attention"], cfg, full_mask)
    np.testing.assert_allclose(probes["attn_weights"], weights, rtol=2e-4, atol=1e-6)
    np.testing.assert_array_equal(probes["attn_weights"][1, :, :, 3:], 0.0)
    # Changing padded tokens changes nothing for the valid queries.
    x2 = x.at[1, 3:].set(100.0)
    y1, _ = jax.jit(block_lib.Block(cfg).apply)(params, x, key_mask)
    y2, _ = jax.jit(block_lib.Block(cfg).apply)(params, x2, key_mask)
    np.testing.assert_allclose(y1[1, :3], y2[1, :3], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("norm_position", ["post", "pre", "none"])
def test_probe_identities(norm_position):
    cfg = SMALL.replace(norm_position=norm_position)
    x = jax.random.normal(jax.random.key(3), (2, 7, cfg.d_model)) + 1.0
    params = _randomised(jax.jit(block_lib.Block(cfg).init)(jax.random.key(0), x), seed=4)
    y, pr = jax.jit(block_lib.Block(cfg).apply)(params, x)
    assert set(pr) == {"resid_pre", "queries", "keys", "values", "attn_logits", "attn_weights",
                       "attn_entropy", "attn_max", "attn_sink", "attn_out", "resid_mid",
                       "mlp_out", "resid_post"}
    np.testing.assert_allclose(pr["attn_entropy"], metrics.attention_entropy(pr["attn_logits"]),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pr["attn_max"], metrics.attention_max(pr["attn_logits"]),
                               rtol=1e-5)
    np.testing.assert_allclose(pr["attn_max"], pr["attn_weights"].max(-1), rtol=1e-5)
    np.testing.assert_allclose(pr["attn_sink"], pr["attn_weights"][..., 0], rtol=1e-5)
    p = _params_np(params)["params"]
    eps = cfg.layer_norm_eps
    f64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
    np.testing.assert_array_equal(pr["resid_pre"], x)
    np.testing.assert_array_equal(pr["resid_post"], y)
    if norm_position == "post":
        np.testing.assert_allclose(
            pr["resid_mid"], _layer_norm(f64(pr["resid_pre"]) + f64(pr["attn_out"]),
                                         p["attention_norm"], eps), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(
            pr["resid_post"], _layer_norm(f64(pr["resid_mid"]) + f64(pr["mlp_out"]),
                                          p["mlp_norm"], eps), rtol=1e-4, atol=1e-4)
    else:
        np.testing.assert_allclose(pr["resid_mid"], pr["resid_pre"] + pr["attn_out"], rtol=1e-6)
        np.testing.assert_allclose(pr["resid_post"], pr["resid_mid"] + pr["mlp_out"], rtol=1e-6)
    np.testing.assert_allclose(pr["attn_weights"], jax.nn.softmax(pr["attn_logits"]), rtol=1e-5,
                               atol=1e-9)
    logits = jnp.einsum("bqhd,bkhd->bhqk", pr["queries"], pr["keys"],
                        precision="highest") / np.sqrt(cfg.d_head)
    np.testing.assert_allclose(pr["attn_logits"], logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pr["attn_weights"].sum(-1), 1.0, rtol=1e-6)


def test_attention_only_block_has_no_mlp():
    cfg = SMALL.replace(use_mlp=False)
    x = jax.random.normal(jax.random.key(3), (2, 4, cfg.d_model))
    params = jax.jit(block_lib.Block(cfg).init)(jax.random.key(0), x)
    assert "mlp" not in params["params"] and "mlp_norm" not in params["params"]
    y, pr = jax.jit(block_lib.Block(cfg).apply)(params, x)
    assert "mlp_out" not in pr
    np.testing.assert_array_equal(y, pr["resid_mid"])


def test_causal_mask_blocks_the_future_exactly():
    cfg = SMALL.replace(causal=True, norm_position="pre")
    x = jax.random.normal(jax.random.key(5), (1, 6, cfg.d_model))
    params = _randomised(jax.jit(block_lib.Block(cfg).init)(jax.random.key(0), x), seed=6)
    # d output[t] / d input[t'] for every pair, in one reverse-mode pass per output position.
    jac = jax.jit(jax.jacrev(
        lambda xx: block_lib.Block(cfg).apply(params, xx)[0][0].sum(-1)))(x)
    per_pair = np.abs(np.asarray(jac[:, 0])).sum(-1)  # (L_out, L_in)
    for t in range(6):
        assert np.all(per_pair[t, t + 1:] == 0.0), (t, per_pair[t])
        assert np.all(per_pair[t, :t + 1] > 0.0), (t, per_pair[t])


def test_post_ln_output_norm_is_sqrt_d():
    cfg = BlockConfig(d_model=64, num_heads=4, d_ff=128)
    x = jax.random.normal(jax.random.key(7), (2, 8, 64)) * 5 + 3
    params = jax.jit(block_lib.Block(cfg).init)(jax.random.key(0), x)
    y, _ = jax.jit(block_lib.Block(cfg).apply)(params, x)
    np.testing.assert_allclose(jnp.linalg.norm(y, axis=-1), np.sqrt(64), rtol=1e-5)


def test_bert_init_is_untruncated_normal_with_std_002():
    cfg = BlockConfig(d_model=128, num_heads=4, d_ff=512)
    params = jax.jit(block_lib.Block(cfg).init)(jax.random.key(0), jnp.zeros((1, 2, 128)))["params"]
    kernels = np.concatenate([np.ravel(params["attention"][n]["kernel"])
                              for n in ("query", "key", "value", "out")]
                             + [np.ravel(params["mlp"][n]["kernel"]) for n in ("fc_in", "fc_out")])
    n = kernels.size
    # The sample std of n Gaussian draws has standard error σ/√(2n); allow 5 of them.
    assert abs(kernels.std() - 0.02) < 5 * 0.02 / np.sqrt(2 * n)
    assert abs(kernels.mean()) < 5 * 0.02 / np.sqrt(n)
    # Untruncated: ≈ 4.55% of draws beyond 2σ (a 2σ-truncated normal has none).
    beyond = np.mean(np.abs(kernels) > 0.04)
    assert abs(beyond - 0.0455) < 5 * np.sqrt(0.0455 * 0.9545 / n)
    for leaf_path, leaf in jax.tree_util.tree_leaves_with_path(params):
        name = jax.tree_util.keystr(leaf_path)
        if "bias" in name:
            np.testing.assert_array_equal(leaf, 0.0, err_msg=name)
        if "scale" in name:
            np.testing.assert_array_equal(leaf, 1.0, err_msg=name)


@pytest.mark.parametrize("init,expected_var", [("lecun", 1 / 128), ("xavier", 2 / (128 + 128))])
def test_named_inits_have_their_variance(init, expected_var):
    cfg = BlockConfig(d_model=128, num_heads=4, d_ff=512, init=init)
    params = jax.jit(block_lib.Block(cfg).init)(jax.random.key(0), jnp.zeros((1, 2, 128)))["params"]
    w = np.ravel(params["attention"]["query"]["kernel"])
    assert abs(w.var() / expected_var - 1) < 0.05
    assert np.abs(w).max() <= 2.0 * np.sqrt(expected_var) / 0.8796 + 1e-6  # truncated at 2σ


def test_science_f2_query_norm_and_f3_entropy_at_zero_bias():
    """F2: ‖q‖ ≈ σ_w √(d·Dh) (4.43 for BERT-base); F3: entropy ≈ ln L − ½(σ_w² d)²."""
    cfg = BlockConfig()  # BERT-base, N(0, 0.02²)
    x = jax.random.normal(jax.random.key(8), (2, 128, 768))
    params = jax.jit(block_lib.Block(cfg).init)(jax.random.key(9), x)
    _, pr = jax.jit(block_lib.Block(cfg).apply)(params, x)
    query_norm = float(jnp.linalg.norm(pr["queries"], axis=-1).mean())
    expected_q = 0.02 * np.sqrt(768 * 64)  # = 4.43, the value docs/SCIENCE.md quotes
    assert abs(query_norm / expected_q - 1) < 0.03, query_norm
    assert abs(query_norm - 4.43) < 0.03 * 4.43, query_norm
    entropy = float(metrics.attention_entropy(pr["attn_logits"]).mean())
    expected_h = np.log(128) - 0.5 * (0.02 ** 2 * 768) ** 2
    assert abs(entropy - expected_h) < 0.01, (entropy, expected_h)
    assert abs(entropy / np.log(128) - 0.99) < 0.005

    lecun = cfg.replace(init="lecun")
    params = jax.jit(block_lib.Block(lecun).init)(jax.random.key(9), x)
    _, pr = jax.jit(block_lib.Block(lecun).apply)(params, x)
    normalized = float(metrics.normalized_attention_entropy(pr["attn_logits"]).mean())
    assert abs(normalized - 0.90) < 0.02, normalized


def test_logit_temperature_divides_logits():
    x = jax.random.normal(jax.random.key(10), (1, 5, 32))
    params = jax.jit(block_lib.Block(SMALL).init)(jax.random.key(0), x)
    _, hot = jax.jit(block_lib.Block(SMALL).apply)(params, x)
    _, cold = block_lib.Block(SMALL.replace(logit_temperature=4.0)).apply(params, x)
    np.testing.assert_allclose(cold["attn_logits"] * 4.0, hot["attn_logits"], rtol=1e-5)


def test_qk_layernorm_normalises_queries_and_keys():
    cfg = SMALL.replace(attention="qk_layernorm")
    x = jax.random.normal(jax.random.key(11), (2, 5, 32)) + 10.0
    params = jax.jit(block_lib.Block(cfg).init)(jax.random.key(0), x)
    _, pr = jax.jit(block_lib.Block(cfg).apply)(params, x)
    np.testing.assert_allclose(jnp.linalg.norm(pr["queries"], axis=-1), np.sqrt(cfg.d_head),
                               rtol=1e-4)
    np.testing.assert_allclose(pr["keys"].mean(-1), 0.0, atol=1e-5)


def test_vmapped_init_over_seeds_equals_separate_inits():
    keys = jax.random.split(jax.random.key(12), 3)
    stacked = block_lib.init_block_params(SMALL, keys)
    for i in range(3):
        single = block_lib.Block(SMALL).init(keys[i], jnp.zeros((1, 2, 32)))
        jax.tree.map(lambda a, b: np.testing.assert_array_equal(a[i], b), stacked, single)


def test_jit_equals_no_jit():
    cfg = SMALL.replace(causal=True)
    x = jax.random.normal(jax.random.key(13), (2, 5, 32))
    params = jax.jit(block_lib.Block(cfg).init)(jax.random.key(0), x)
    eager = block_lib.Block(cfg).apply(params, x)
    jitted = jax.jit(block_lib.Block(cfg).apply)(params, x)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 eager, jitted)


def test_bfloat16_precision_keeps_logits_float32_and_stays_close():
    x = jax.random.normal(jax.random.key(14), (2, 6, 32))
    params = jax.jit(block_lib.Block(SMALL).init)(jax.random.key(0), x)
    y32, _ = jax.jit(block_lib.Block(SMALL).apply)(params, x)
    y16, pr = block_lib.Block(SMALL.replace(precision="bfloat16")).apply(params, x)
    assert pr["attn_logits"].dtype == jnp.float32 and pr["attn_weights"].dtype == jnp.float32
    assert y16.dtype == jnp.float32
    np.testing.assert_allclose(y16, y32, atol=0.05)


def test_transformer_stack_probes_and_heads():
    cfg = TransformerConfig(block=SMALL.replace(norm_position="pre", causal=True), num_layers=2,
                            vocab_size=11, max_len=8, embedding_norm=False, final_norm=True)
    tokens = jnp.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    m = transformer.Transformer(cfg)
    params = m.init(jax.random.key(0), tokens)
    logits, pr = m.apply(params, tokens)
    assert logits.shape == (2, 4, 11)
    assert len(pr["blocks"]) == 2
    np.testing.assert_array_equal(pr["blocks"][0]["resid_post"], pr["blocks"][1]["resid_pre"])
    np.testing.assert_array_equal(pr["blocks"][1]["resid_post"], pr["final_norm_in"])
    emb = params["params"]["token_embedding"]["embedding"]
    np.testing.assert_allclose(logits, jnp.einsum("bld,vd->blv", pr["final_hidden"], emb,
                                                  precision="highest"), rtol=1e-5, atol=1e-6)
    untied = cfg.replace(tie_embeddings=False, output_bias=False)
    params_u = transformer.Transformer(untied).init(jax.random.key(0), tokens)
    assert params_u["params"]["output"]["kernel"].shape == (32, 11)
    with pytest.raises(ValueError, match="max_len"):
        m.apply(params, jnp.zeros((1, 9), jnp.int32))


@pytest.mark.parametrize("fields,name", [
    (dict(d_model=30, num_heads=4), "model.d_model"),
    (dict(norm_position="middle"), "model.norm_position"),
    (dict(init="orthogonal"), "model.init"),
    (dict(attention="linear"), "model.attention"),
    (dict(logit_temperature=0.0), "model.logit_temperature"),
    (dict(init_std=float("nan")), "model.init_std"),
    (dict(precision="fp8"), "model.precision"),
])
def test_bad_block_config_names_the_field(fields, name):
    with pytest.raises(ConfigError, match=name) as info:
        BlockConfig(**fields)
    assert "\n" not in str(info.value)


def test_float32_erf_and_exact_gelu_against_float64():
    from scipy import special

    x = np.concatenate([np.linspace(-12, 12, 48_001), [-1e30, -5.7, 5.7, 1e30, 0.0]])
    x32 = x.astype(np.float32)
    erf = np.asarray(layers.erf_float32(jnp.asarray(x32)), np.float64)
    assert np.max(np.abs(erf - special.erf(x32.astype(np.float64)))) < 5e-7
    gelu = np.asarray(layers.gelu_exact(jnp.asarray(x32)), np.float64)
    x64 = x32.astype(np.float64)
    want = 0.5 * x64 * (1 + special.erf(x64 / np.sqrt(2)))
    assert np.all(np.abs(gelu - want) <= 2e-6 * np.maximum(1.0, np.abs(want)))
    # Not the tanh approximation, which is off by up to ~5e-4 here.
    tanh = np.asarray(jax.nn.gelu(jnp.asarray(x32[:48_001]), approximate=True), np.float64)
    assert np.max(np.abs(tanh - want[:48_001])) > 1e-4
    half = layers.gelu_exact(jnp.asarray(x32, jnp.bfloat16))
    assert half.dtype == jnp.bfloat16
