"""The fused Pallas attention (interpret mode on CPU) against the plain XLA path."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from anisotropy_jax import metrics
from anisotropy_jax.config import BlockConfig, ConfigError
from anisotropy_jax.configs.sweep import SweepConfig
from anisotropy_jax.models import block as block_lib, fused_attention
from anisotropy_jax.studies.sweep import affine, grid

CFG = BlockConfig(d_model=32, num_heads=2, d_ff=64)  # Dh = 16


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_pallas_block_equals_xla_block(causal, norm_position):
    xla_cfg = CFG.replace(causal=causal, norm_position=norm_position, logit_temperature=0.5)
    pallas_cfg = xla_cfg.replace(attention_impl="pallas")
    x = jax.random.normal(jax.random.key(0), (2, 16, 32)) * 3 + 2.0
    params = block_lib.Block(xla_cfg).init(jax.random.key(1), x)
    y_xla, p_xla = block_lib.Block(xla_cfg).apply(params, x)
    y_pal, p_pal = block_lib.Block(pallas_cfg).apply(params, x)
    np.testing.assert_allclose(y_pal, y_xla, rtol=1e-5, atol=1e-5)
    assert "attn_logits" not in p_pal and "attn_weights" not in p_pal
    mask = jnp.tril(jnp.ones((16, 16), bool)) if causal else None
    reference = metrics.attention_statistics(p_xla["attn_logits"], mask)  # the kernel's reference
    np.testing.assert_allclose(p_pal["attn_entropy"], reference["entropy"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(p_pal["attn_max"], reference["max"], rtol=1e-5)
    np.testing.assert_allclose(p_pal["attn_sink"], reference["sink"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(p_pal["attn_sink"], p_xla["attn_weights"][..., 0], rtol=1e-5,
                               atol=1e-7)
    for name in ("queries", "keys", "values", "attn_out", "resid_mid", "resid_post"):
        np.testing.assert_allclose(p_pal[name], p_xla[name], rtol=1e-5, atol=1e-5, err_msg=name)


def test_statistics_of_one_hot_and_uniform_attention():
    q = jnp.zeros((1, 16, 1, 16))
    k = jax.random.normal(jax.random.key(2), (1, 16, 1, 16))
    _, uniform = fused_attention.fused_attention(q, k, k, logit_scale=1.0, interpret=True)
    np.testing.assert_allclose(uniform["attn_entropy"], np.log(16), rtol=1e-6)
    np.testing.assert_allclose(uniform["attn_max"], 1 / 16, rtol=1e-6)
    # Huge logits: every query picks one key; entropy exactly 0, no NaN.
    q = jnp.ones((1, 16, 1, 16)) * 1e3
    k = jnp.zeros((1, 16, 1, 16)).at[0, 3].set(1e3)
    _, sharp = fused_attention.fused_attention(q, k, k, logit_scale=1.0, interpret=True)
    assert np.all(np.isfinite(sharp["attn_entropy"]))
    np.testing.assert_allclose(sharp["attn_entropy"], 0.0, atol=1e-6)
    np.testing.assert_allclose(sharp["attn_max"], 1.0)


def test_unsupported_shapes_and_masks_are_explicit_errors():
    cfg = BlockConfig(d_model=24, num_heads=2, d_ff=32, attention_impl="pallas")  # Dh = 12
    x = jnp.zeros((1, 16, 24))
    params = block_lib.Block(cfg).init(jax.random.key(0), x)  # init takes the plain path
    with pytest.raises(ValueError, match="attention_impl"):
        block_lib.Block(cfg).apply(params, x)
    cfg = CFG.replace(attention_impl="pallas")
    x = jnp.zeros((1, 16, 32))
    params = block_lib.Block(CFG).init(jax.random.key(0), x)
    with pytest.raises(ValueError, match="padding mask"):
        block_lib.Block(cfg).apply(params, x, jnp.ones((1, 16), bool))
    with pytest.raises(ConfigError, match="model.attention_impl"):
        BlockConfig(attention_impl="cuda")
    with pytest.raises(ConfigError, match="model.attention_impl"):
        BlockConfig(attention_impl="pallas", attention="qk_layernorm")


@pytest.mark.parametrize("causal,inputs", [(False, "biased"), (True, "biased"),
                                           (False, "norm_matched")])
def test_sweep_metrics_with_the_fused_kernel_equal_the_plain_path(causal, inputs):
    """Every metric of the results contract: the fused kernel's on-chip reduction statistics
    (affine inputs for x = z + s·u, a stored projection for the control) against the plain path,
    which reduces the logits and weights probes."""
    block = CFG.replace(causal=causal)
    cfg = SweepConfig(model=block, batch_size=2, seq_len=16, bias_norms=(0.0, 3.0, 30.0),
                            num_seeds=2, chunk_size=0)
    state = grid.init_seeds(cfg)
    s = jnp.asarray(cfg.bias_norms)
    plain = jax.jit(grid.chunk_computation(block, inputs=inputs))(*state, s)
    fused = jax.jit(grid.chunk_computation(block.replace(attention_impl="pallas"),
                                           inputs=inputs))(*state, s)
    assert set(plain) == set(fused)
    for name in plain:
        np.testing.assert_allclose(fused[name], plain[name], rtol=2e-5, atol=2e-6, err_msg=name)


@pytest.mark.parametrize("causal", [False, True])
def test_query_blocks_equal_one_block_and_the_plain_statistics(causal):
    """block_q = 16 of L = 32 (two programs per head; the causal mask offsets by the block)."""
    q, k, v = (jax.random.normal(key, (2, 32, 2, 16)) * 2.0
               for key in jax.random.split(jax.random.key(4), 3))
    whole = fused_attention.fused_attention(q, k, v, logit_scale=0.25, causal=causal,
                                            interpret=True)
    split = fused_attention.fused_attention(q, k, v, logit_scale=0.25, causal=causal,
                                            interpret=True, block_q=16)
    for a, b in zip(jax.tree.leaves(split), jax.tree.leaves(whole)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) * 0.25
    mask = jnp.tril(jnp.ones((32, 32), bool)) if causal else None
    np.testing.assert_allclose(split[1]["attn_entropy"], metrics.attention_entropy(logits, mask),
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="block_q"):
        fused_attention.fused_attention(q, k, v, logit_scale=0.25, interpret=True, block_q=24)


@pytest.mark.parametrize("causal", [False, True])
def test_affine_inputs_under_vmap_equal_the_assembled_projection(causal):
    """The sweep's shared projection through the kernel (q + s·q_u on chip, keys without s·k_u,
    s·v_u added to the output; z-parts unbatched under the vmap over s) against the plain XLA
    block on x = z + s·u, with random parameters and biases, s up to 500."""

    block = CFG.replace(causal=causal)
    config = SweepConfig(model=block, batch_size=2, seq_len=16, num_seeds=1,
                               bias_norms=(0.0, 1.0, 30.0, 500.0), chunk_size=0)
    state = grid.init_seeds(config)
    leaves, tree = jax.tree_util.tree_flatten_with_path(state.params)
    keys = jax.random.split(jax.random.key(1), len(leaves))
    params = jax.tree.unflatten(tree, [
        (1.0 if "scale" in jax.tree_util.keystr(path) else 0.0) + 0.3 * jax.random.normal(k, x.shape)
        for k, (path, x) in zip(keys, leaves)])
    norms = jnp.asarray(config.bias_norms, jnp.float32)

    def run(b, reuse):
        def point(params, z, u, s, projected):
            y, probes = affine.block_at(b, params, z, u, s, projected)
            return {"resid_post": y, **{n: probes[n] for n in
                                        ("attn_entropy", "attn_max", "attn_sink", "keys")}}
        return jax.jit(grid.grid_computation(point, b, reuse, 0))(params, state.z, state.u, norms)

    want = run(block, False)
    got = run(block.replace(attention_impl="pallas"), True)
    for name in want:
        scale = float(jnp.max(jnp.abs(want[name])))
        np.testing.assert_allclose(got[name], want[name], atol=1e-4 * scale, err_msg=name)
    with pytest.raises(ValueError, match="together"):
        q = jnp.zeros((1, 16, 2, 16))
        fused_attention.fused_attention(q, q, q, logit_scale=1.0, interpret=True, coefficient=1.0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_q", [0, 16])
def test_reduction_statistics_equal_their_definitions(causal, block_q):
    """The kernel's on-chip inputs of the metric reduction, against norms, sums and
    `metrics.categorical_key_sums` of the logits; one query block or two (partials combined),
    with affine inputs (keys k + t·k_slope) and norms far beyond √(float32 max)."""
    kq, kk, kv, ks = jax.random.split(jax.random.key(7), 4)
    q, k, v = (jax.random.normal(key, (2, 32, 2, 16)) for key in (kq, kk, kv))
    q = q.at[0, 3].multiply(1e25)  # squares overflow float32: the norms must not
    slope_q, slope_k, slope_v = jax.random.normal(ks, (3, 2, 16))
    t = 0.7
    _, stats = fused_attention.fused_attention(
        q, k, v, logit_scale=0.25, causal=causal, interpret=True, block_q=block_q,
        query_slope_HxDh=slope_q, value_slope_HxDh=slope_v, coefficient=t,
        key_slope_HxDh=slope_k, reduction_statistics=True)
    assert set(fused_attention.REDUCTION_STATISTICS) <= set(stats)
    q64 = np.asarray(q, np.float64) + t * np.asarray(slope_q, np.float64)
    k64 = np.asarray(k, np.float64) + t * np.asarray(slope_k, np.float64)
    np.testing.assert_allclose(stats["attn_query_norms"],
                               np.linalg.norm(q64, axis=-1).transpose(0, 2, 1), rtol=1e-6)
    np.testing.assert_allclose(stats["attn_key_norms"],
                               np.linalg.norm(k64, axis=-1).transpose(0, 2, 1), rtol=1e-6)
    np.testing.assert_allclose(stats["attn_query_sums"], q64.sum(axis=1), rtol=1e-6)
    np.testing.assert_allclose(stats["attn_key_sums"], k64.sum(axis=1), rtol=1e-5, atol=1e-5)
    # The categorical key sums of the softmax the kernel computes: keys without t·k_slope, as the
    # kernel's logits (the softmax cancels the key slope's constant per-query term).
    logits = jnp.einsum("bqhd,bkhd->bhqk", q + t * slope_q[None, None], k) * 0.25
    mask = jnp.tril(jnp.ones((32, 32), bool)) if causal else None
    want = metrics.categorical_key_sums(logits, mask)
    np.testing.assert_array_equal(stats["attn_key_votes"], want.votes)
    np.testing.assert_allclose(stats["attn_key_mass"], want.mass, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats["attn_key_unit_mass"], want.unit_mass, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="key_slope_HxDh"):
        fused_attention.fused_attention(q, k, v, logit_scale=0.25, interpret=True,
                                        query_slope_HxDh=slope_q, value_slope_HxDh=slope_v,
                                        coefficient=t, reduction_statistics=True)
