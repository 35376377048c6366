r"""Where the time of one bias-sweep chunk goes: the block's parts timed on their own (GPU tuning).

  python -m benchmarks.profiling.profile_block [--chunk=32] [--precision=default|highest|bfloat16]
      [--repeats=20] [--json=FILE]

Times, for one chunk of `chunk` bias norms (BERT-base, B = 32, L = 128; M = chunk·B·L rows): the
whole bare forward, the four D×D projections, the MLP with and without its GELU, the attention
core (q·kᵀ, softmax, ·v), the two LayerNorms with their residual adds, and bare GEMMs of the
block's shapes. Each row gives ms per grid point and TFLOP/s of counted matmuls.
Used to find what stands between the sweep and the matmul rate (docs/PERFORMANCE.md).
"""
from __future__ import annotations

import functools

from absl import flags

from benchmarks.profiling import harness


def define_flags():
    flags.DEFINE_integer("chunk", 32, "Bias norms per chunk.")
    flags.DEFINE_enum("precision", "default", ["highest", "default", "bfloat16", "tf32"],
                      "Precision ('default': TF32 on NVIDIA GPUs; 'tf32' is accepted for it).")


def main(args, report):
    import jax
    import jax.numpy as jnp

    from anisotropy_jax import inputs
    from anisotropy_jax.models import block as block_lib, layers
    from anisotropy_jax.config import BlockConfig, precision_name

    precision = precision_name(args.precision)
    block = BlockConfig(precision=precision)
    dtype, lax_precision = layers.matmul_settings(block)
    chunk, b, l, d, f, h = args.chunk, 32, 128, 768, 3072, 12
    m = chunk * b * l
    key = jax.random.key(0)
    params = block_lib.TransformerBlock(block).init(key, jnp.zeros((1, 2, d)))
    z = jax.random.normal(key, (b, l, d))
    u = inputs.random_unit_vector(jax.random.key(1), d)
    s = jnp.linspace(0.0, 100.0, chunk)
    x = jax.random.normal(key, (chunk, b, l, d))
    report.describe(f"precision {args.precision}, chunk {chunk}, B={b}, L={l}, D={d}",
                    precision=args.precision, chunk=chunk, batch=b, seq_len=l, d_model=d)
    timed = functools.partial(report.time, per=chunk)

    def bare(params, z, u, s, block=block):
        def point(si):
            y, _ = block_lib.TransformerBlock(block).apply(params, inputs.biased_inputs(z, u, si))
            return jnp.sum(y)
        return jax.vmap(point)(s)

    flop_chunk = chunk * (8 * b * l * d * d + 4 * b * h * l * l * 64 + 4 * b * l * d * f)
    timed("whole block, bare forward", jax.jit(bare), params, z, u, s, flop=flop_chunk)
    pallas_block = block.replace(attention_impl="pallas")
    timed("whole block, bare forward, pallas attention",
          jax.jit(functools.partial(bare, block=pallas_block)), params, z, u, s, flop=flop_chunk)

    def gemm(x2, w):
        return jnp.dot(x2.astype(dtype), w.astype(dtype), precision=lax_precision,
                       preferred_element_type=jnp.float32)

    for k_dim, n_dim in ((d, d), (d, f), (f, d), (d, 3 * d)):
        a = jax.random.normal(key, (m, k_dim))
        w = jax.random.normal(key, (k_dim, n_dim)) * 0.02
        timed(f"GEMM {m}×{k_dim}×{n_dim}", jax.jit(lambda a, w: jnp.sum(gemm(a, w))), a, w,
              flop=2 * m * k_dim * n_dim)

    p = params["params"]

    def projections(x):
        outs = [gemm(x, p["attention"][n]["kernel"]) + p["attention"][n]["bias"]
                for n in ("query", "key", "value", "out")]
        return sum(jnp.sum(o) for o in outs)

    timed("4 projections (+bias)", jax.jit(projections), x, flop=8 * m * d * d)

    def mlp(x, gelu=layers.gelu_exact):
        hdn = gemm(x, p["mlp"]["fc_in"]["kernel"]) + p["mlp"]["fc_in"]["bias"]
        hdn = gelu(hdn.astype(dtype))
        return jnp.sum(gemm(hdn, p["mlp"]["fc_out"]["kernel"]) + p["mlp"]["fc_out"]["bias"])

    for name, gelu in (("exact GELU (layers.gelu_exact)", layers.gelu_exact),
                       ("exact GELU (jax.nn.gelu, XLA's erf)",
                        functools.partial(jax.nn.gelu, approximate=False)),
                       ("tanh GELU", functools.partial(jax.nn.gelu, approximate=True)),
                       ("no GELU", lambda hdn: hdn)):
        timed(f"MLP, {name}", jax.jit(functools.partial(mlp, gelu=gelu)), x, flop=4 * m * d * f)

    q = jax.random.normal(key, (chunk * b, l, h, 64)).astype(dtype)
    qkv = (q, q * 0.5, q * 2)
    core_flop = 4 * chunk * b * h * l * l * 64

    def attention_core(q, k, v):
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, precision=lax_precision,
                            preferred_element_type=jnp.float32) * 0.125
        w = jax.nn.softmax(logits, axis=-1)
        o = jnp.einsum("bhqk,bkhd->bqhd", w.astype(v.dtype), v, precision=lax_precision,
                       preferred_element_type=jnp.float32)
        return jnp.sum(o)

    timed("attention core (qk, softmax, pv)", jax.jit(attention_core), *qkv, flop=core_flop)

    from anisotropy_jax.models import fused_attention

    for warps in (None, 4, 8):
        def pallas_core(q, k, v, warps=warps):
            extra = {} if warps is None else {"num_warps": warps}
            o, stats = fused_attention.fused_attention(q, k, v, logit_scale=0.125,
                                                       precision=lax_precision, **extra)
            return jnp.sum(o) + jnp.sum(stats["attn_entropy"])
        label = ("attention core, fused pallas kernel + stats" if warps is None
                 else f"  same, num_warps={warps}")
        timed(label, jax.jit(pallas_core), *qkv, flop=core_flop)

    def norms(x):
        ln = functools.partial(layers.layer_norm, block)
        y = ln("a").apply({"params": p["attention_norm"]}, x + x * 0.5)
        return jnp.sum(ln("b").apply({"params": p["mlp_norm"]}, y + y * 0.5))

    timed("2 LayerNorms + residual adds", jax.jit(norms), x)


if __name__ == "__main__":
    harness.run("profile_block", main, define_flags)
