"""Explicit floating-point operation counts of a Transformer block (for achieved FLOP/s).

Only matrix products are counted, 2 FLOPs per multiply-add (the convention of matmul-rate
benchmarks); LayerNorm, GELU, softmax and the metric reductions are O(B·L·D) or O(B·H·L²)
element-wise work, below 1% of the total for BERT-base, and are not counted.

BERT-base block, B = 32, L = 128: 59.6 GFLOP per forward (19.3 in the four D×D projections,
38.7 in the MLP, 1.6 in the two attention products), as the performance issue states.
"""
from __future__ import annotations

from anisotropy_jax.config import BlockConfig


def qkv_projection_flops(config: BlockConfig, batch_size: int, seq_len: int) -> int:
    """FLOPs of the attention input projection x·[W_q W_k W_v]: 3 · 2·B·L·D²."""
    return 3 * 2 * batch_size * seq_len * config.d_model ** 2


def block_forward_flops(config: BlockConfig, batch_size: int, seq_len: int) -> dict[str, int]:
    """FLOPs of one forward pass of `Block(config)` on (batch_size, seq_len, D).

    Returns {"projections", "attention", "mlp", "total"}:
      projections = 4 · 2·B·L·D²         (query, key, value, output)
      attention   = 2 · 2·B·H·L²·Dh      (q·kᵀ and weights·v)
      mlp         = 2 · 2·B·L·D·d_ff     (fc_in, fc_out; 0 when use_mlp=False)
    """
    tokens = batch_size * seq_len
    d = config.d_model
    projections = 4 * 2 * tokens * d * d
    attention = 2 * 2 * batch_size * config.num_heads * seq_len * seq_len * config.d_head
    mlp = 2 * 2 * tokens * d * config.d_ff if config.use_mlp else 0
    return {"projections": projections, "attention": attention, "mlp": mlp,
            "total": projections + attention + mlp}


def sweep_point_flops(config: BlockConfig, batch_size: int, seq_len: int,
                      points_per_projection: int) -> int:
    """FLOPs executed per bias-sweep grid point when `points_per_projection` points of one seed
    share one projection z·[W_q W_k W_v] (`SweepConfig.reuse_projections`: the points of a
    seed in one chunk). 1 = the literal block. Pre-LN blocks cannot share it (full count).
    The u·W projection (one vector) is below the counting resolution and left out."""
    total = block_forward_flops(config, batch_size, seq_len)["total"]
    if config.norm_position == "pre" or points_per_projection <= 1:
        return total
    qkv = qkv_projection_flops(config, batch_size, seq_len)
    return total - qkv + qkv // points_per_projection
