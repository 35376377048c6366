"""A/B of the attention's input projection in the training step: the model's one (D, 3D) GEMM
whose output is split into q, k, v (and whose backward concatenates dq, dk, dv), against three
(D, D) GEMMs whose outputs need no split. `train:gpu` at bf16 with the core 'auto' resolves to,
the variants alternating `rounds` times in one process, tokens/s best of `repeats` each
(benchmarks.train_throughput's timing). `python -m benchmarks.qkv_layout_ab [precision rounds
variant]` (variant: of `train`, e.g. smoke on the CPU)."""
import json
import sys

import jax
import jax.numpy as jnp
import ml_collections

from anisotropy_jax.models import attention
from anisotropy_jax.models.layers import DenseParams, matmul_settings
from benchmarks import train_throughput

CONCATENATED = attention.project


def separate_projection(cfg, x_BxLxD, precomputed_qkv):
    """q, k, v from three GEMMs (the same parameters); otherwise `attention.project`."""
    if precomputed_qkv is not None or cfg.attention == "qk_layernorm" or cfg.rotary_dims \
            or cfg.kv_heads != cfg.num_heads:
        return CONCATENATED(cfg, x_BxLxD, precomputed_qkv)
    (batch, seq_len, d_model), (dtype, precision) = x_BxLxD.shape, matmul_settings(cfg)
    x = x_BxLxD.astype(dtype)
    out = []
    for name in attention.QKV_NAMES:
        kernel, bias = DenseParams(cfg, d_model, d_model, cfg.bias("qkv"), name=name)()
        y = jnp.dot(x, kernel.astype(dtype), precision=precision)
        y = y if bias is None else y + bias.astype(dtype)[None, None, :]
        out.append(y.reshape(batch, seq_len, cfg.num_heads, cfg.d_head))
    return tuple(out)


def main(precision: str = "bfloat16", rounds: int = 2, variant: str = "gpu") -> int:
    c = ml_collections.ConfigDict(dict(train_variant=variant, batch_size=0, warmup_steps=20,
                                       steps=100, repeats=3, log_every=50))
    config = train_throughput.train_config(c, precision)
    rows = {"concatenated": [], "separate": []}
    for _ in range(int(rounds)):
        for name, fn in (("concatenated", CONCATENATED), ("separate", separate_projection)):
            attention.project = fn
            jax.clear_caches()
            row = train_throughput.time_jax(config, "async", c)
            rows[name].append(config.data.batch_size * config.data.seq_len / row["s_per_step"])
            print(name, f"{rows[name][-1]:,.0f} tokens/s", flush=True)
    attention.project = CONCATENATED
    print(json.dumps({"device": jax.devices()[0].device_kind, "precision": precision,
                      "tokens_per_s": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2], *map(int, sys.argv[2:3]), *sys.argv[3:4]))
