"""The explicit FLOP count against the reference figure (59.6 GFLOP for a BERT-base block at
B = 32, L = 128) and XLA's own cost analysis."""
import jax
import jax.numpy as jnp
import pytest

from anisotropy_jax import flops
from anisotropy_jax.models import block as block_lib
from anisotropy_jax.config import BlockConfig


def test_bert_base_block_is_59_6_gflop():
    count = flops.block_forward_flops(BlockConfig(), batch_size=32, seq_len=128)
    assert count["total"] == count["projections"] + count["attention"] + count["mlp"]
    assert round(count["total"] / 1e9, 1) == 59.6


@pytest.mark.parametrize("use_mlp", [True, False])
def test_count_agrees_with_xla_cost_analysis(use_mlp):
    """XLA also counts element-wise work (LayerNorm, GELU, softmax), about 1.6% here."""
    cfg = BlockConfig(use_mlp=use_mlp)
    x = jax.ShapeDtypeStruct((2, 128, 768), jnp.float32)
    params = jax.eval_shape(block_lib.Block(cfg).init, jax.random.key(0), x)
    compiled = jax.jit(lambda p, xx: block_lib.Block(cfg).apply(p, xx)[0]).lower(
        params, x).compile()
    xla = compiled.cost_analysis()
    xla = xla[0] if isinstance(xla, (list, tuple)) else xla
    ours = flops.block_forward_flops(cfg, 2, 128)["total"]
    assert ours <= xla["flops"] <= 1.03 * ours, (ours, xla["flops"])


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_sweep_point_count_with_shared_projection_agrees_with_xla(norm_position):
    """A chunk of 4 bias norms of one seed shares one z·W_qkv (post-LN), not with pre-LN."""
    from anisotropy_jax.studies.sweep import grid

    cfg = BlockConfig(norm_position=norm_position)
    batch, seq_len, points = 2, 128, 4
    params = jax.eval_shape(lambda k: block_lib.init_block_params(cfg, k),
                            jax.random.split(jax.random.key(0), 1))
    z = jax.ShapeDtypeStruct((1, batch, seq_len, 768), jnp.float32)
    u = jax.ShapeDtypeStruct((1, 768), jnp.float32)
    s = jax.ShapeDtypeStruct((points,), jnp.float32)
    chunk = grid.chunk_computation(cfg, with_metrics=False)
    xla = jax.jit(chunk).lower(params, z, u, s).compile().cost_analysis()
    xla = xla[0] if isinstance(xla, (list, tuple)) else xla
    ours = flops.sweep_point_flops(cfg, batch, seq_len, points)
    full = flops.block_forward_flops(cfg, batch, seq_len)["total"]
    assert (ours < full) == (norm_position == "post")
    assert ours <= xla["flops"] / points <= 1.03 * ours, (ours, xla["flops"] / points)
