r"""Where the time of one bias-sweep chunk goes: the block's parts timed on their own (GPU tuning).

  python -m benchmarks.profile_block [--chunk=32] [--precision=tf32|highest|bfloat16]

Times, for one chunk of `chunk` bias norms (BERT-base, B = 32, L = 128; M = chunk·B·L rows): the
whole bare forward, the four D×D projections, the MLP with and without its GELU, the attention
core (q·kᵀ, softmax, ·v), the two LayerNorms with their residual adds, and bare GEMMs of the
block's shapes. Each line gives ms per chunk, ms per grid point and TFLOP/s of counted matmuls.
Used to find what stands between the sweep and the matmul rate (docs/PERFORMANCE.md).
"""
from __future__ import annotations

import functools

from absl import app, flags

from benchmarks.timing import median_time

_CHUNK = flags.DEFINE_integer("chunk", 32, "Bias norms per chunk.")
_PRECISION = flags.DEFINE_enum("precision", "tf32", ["highest", "tf32", "bfloat16"], "Precision.")
_REPEATS = flags.DEFINE_integer("repeats", 20, "Timed repetitions (median).")


def main(argv):
    del argv
    import jax
    import jax.numpy as jnp

    from anisotropy_jax import inputs
    from anisotropy_jax.models import block as block_lib, layers
    from anisotropy_jax.config import BlockConfig

    precision = {"highest": "highest", "tf32": "default", "bfloat16": "bfloat16"}[_PRECISION.value]
    block = BlockConfig(precision=precision)
    dtype, lax_precision = layers.matmul_settings(block)
    chunk, b, l, d, f, h = _CHUNK.value, 32, 128, 768, 3072, 12
    m = chunk * b * l
    key = jax.random.key(0)
    params = block_lib.TransformerBlock(block).init(key, jnp.zeros((1, 2, d)))
    z = jax.random.normal(key, (b, l, d))
    u = inputs.random_unit_vector(jax.random.key(1), d)
    s = jnp.linspace(0.0, 100.0, chunk)
    x = jax.random.normal(key, (chunk, b, l, d))
    rows = []

    def report(name, seconds, gflop):
        rows.append((name, seconds, gflop))
        print(f"{name:44s}{seconds * 1e3:9.3f} ms{seconds * 1e3 / chunk:9.4f} ms/pt"
              f"{gflop / seconds / 1e3 if gflop else 0:9.1f} TFLOP/s", flush=True)

    def bare(params, z, u, s, block=block):
        def point(si):
            y, _ = block_lib.TransformerBlock(block).apply(params, inputs.biased_inputs(z, u, si))
            return jnp.sum(y)
        return jax.vmap(point)(s)

    gflop_point = (8 * b * l * d * d + 4 * b * h * l * l * 64 + 4 * b * l * d * f) / 1e9
    report("whole block, bare forward", median_time(jax.jit(bare), params, z, u, s,
                                              repeats=_REPEATS.value), gflop_point * chunk)
    pallas_block = block.replace(attention_impl="pallas")
    report("whole block, bare forward, pallas attention",
           median_time(jax.jit(functools.partial(bare, block=pallas_block)), params, z, u, s,
                 repeats=_REPEATS.value), gflop_point * chunk)

    def gemm(x2, w):
        return jnp.dot(x2.astype(dtype), w.astype(dtype), precision=lax_precision,
                       preferred_element_type=jnp.float32)

    for k_dim, n_dim in ((d, d), (d, f), (f, d), (d, 3 * d)):
        a = jax.random.normal(key, (m, k_dim))
        w = jax.random.normal(key, (k_dim, n_dim)) * 0.02
        report(f"GEMM {m}×{k_dim}×{n_dim}", median_time(jax.jit(lambda a, w: jnp.sum(gemm(a, w))),
                                                  a, w, repeats=_REPEATS.value),
               2 * m * k_dim * n_dim / 1e9)

    p = params["params"]

    def projections(x):
        outs = [gemm(x, p["attention"][n]["kernel"]) + p["attention"][n]["bias"]
                for n in ("query", "key", "value", "out")]
        return sum(jnp.sum(o) for o in outs)

    report("4 projections (+bias)", median_time(jax.jit(projections), x, repeats=_REPEATS.value),
           8 * m * d * d / 1e9)

    def mlp(x, gelu=layers.gelu_exact):
        hdn = gemm(x, p["mlp"]["fc_in"]["kernel"]) + p["mlp"]["fc_in"]["bias"]
        hdn = gelu(hdn.astype(dtype))
        return jnp.sum(gemm(hdn, p["mlp"]["fc_out"]["kernel"]) + p["mlp"]["fc_out"]["bias"])

    for name, gelu in (("exact GELU (layers.gelu_exact)", layers.gelu_exact),
                       ("exact GELU (jax.nn.gelu, XLA's erf)",
                        functools.partial(jax.nn.gelu, approximate=False)),
                       ("tanh GELU", functools.partial(jax.nn.gelu, approximate=True)),
                       ("no GELU", lambda hdn: hdn)):
        report(f"MLP, {name}", median_time(jax.jit(functools.partial(mlp, gelu=gelu)), x,
                                     repeats=_REPEATS.value), 4 * m * d * f / 1e9)

    q = jax.random.normal(key, (chunk * b, l, h, 64)).astype(dtype)

    def attention_core(q, k, v):
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, precision=lax_precision,
                            preferred_element_type=jnp.float32) * 0.125
        w = jax.nn.softmax(logits, axis=-1)
        o = jnp.einsum("bhqk,bkhd->bqhd", w.astype(v.dtype), v, precision=lax_precision,
                       preferred_element_type=jnp.float32)
        return jnp.sum(o)

    report("attention core (qk, softmax, pv)", median_time(jax.jit(attention_core), q, q * 0.5, q * 2,
                                                     repeats=_REPEATS.value),
           4 * chunk * b * h * l * l * 64 / 1e9)

    from anisotropy_jax.models import fused_attention

    def pallas_core(q, k, v):
        o, stats = fused_attention.fused_attention(q, k, v, logit_scale=0.125,
                                                   precision=lax_precision)
        return jnp.sum(o) + jnp.sum(stats["attn_entropy"])

    report("attention core, fused pallas kernel + stats",
           median_time(jax.jit(pallas_core), q, q * 0.5, q * 2, repeats=_REPEATS.value),
           4 * chunk * b * h * l * l * 64 / 1e9)
    for warps in (4, 8):
        def core_w(q, k, v, warps=warps):
            o, stats = fused_attention.fused_attention(q, k, v, logit_scale=0.125,
                                                       precision=lax_precision, num_warps=warps)
            return jnp.sum(o) + jnp.sum(stats["attn_entropy"])
        report(f"  same, num_warps={warps}", median_time(jax.jit(core_w), q, q * 0.5, q * 2,
                                                    repeats=_REPEATS.value),
               4 * chunk * b * h * l * l * 64 / 1e9)

    def norms(x):
        ln = functools.partial(layers.layer_norm, block)
        y = ln("a").apply({"params": p["attention_norm"]}, x + x * 0.5)
        return jnp.sum(ln("b").apply({"params": p["mlp_norm"]}, y + y * 0.5))

    report("2 LayerNorms + residual adds", median_time(jax.jit(norms), x, repeats=_REPEATS.value), 0.0)
    print(f"device {jax.devices()[0].device_kind}, precision {_PRECISION.value}, chunk {chunk}")


if __name__ == "__main__":
    app.run(main)
