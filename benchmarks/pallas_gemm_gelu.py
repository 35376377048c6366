r"""A negative result kept reproducible: a Pallas (Triton) GEMM with bias + exact GELU fused into
its epilogue, against XLA's cuBLAS GEMM followed by a separate GELU pass (GPU only).

  python -m benchmarks.pallas_gemm_gelu

Shape: the BERT-base MLP's first layer over one 32-point chunk, 131,072 × 768 × 3,072, at TF32 and
bfloat16, 16 tilings each. On an H200 (2026-11-26) the best TF32 tiling ran at 89 TFLOP/s against
213 for XLA's GEMM + GELU, and the best bfloat16 one at 323 against 324: fusing the GELU this way
does not pay, so the library keeps XLA's GEMMs (docs/PERFORMANCE.md).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from anisotropy_jax.models.layers import gelu_exact

from benchmarks.timing import median_time


def _kernel(x_ref, w_ref, b_ref, o_ref, *, block_k: int, k_total: int, precision):
    block_m, block_n = o_ref.shape

    def body(i, acc_MxN):
        x_MxK = x_ref[:, pl.ds(i * block_k, block_k)]
        w_KxN = w_ref[pl.ds(i * block_k, block_k), :]
        return acc_MxN + jax.lax.dot_general(x_MxK, w_KxN, (((1,), (0,)), ((), ())),
                                             precision=precision,
                                             preferred_element_type=jnp.float32)

    acc_MxN = jax.lax.fori_loop(0, k_total // block_k, body,
                                jnp.zeros((block_m, block_n), jnp.float32))
    o_ref[...] = gelu_exact(acc_MxN + b_ref[...].astype(jnp.float32)[None, :]).astype(o_ref.dtype)


def gemm_gelu(x_MxK, w_KxN, b_N, *, block_m, block_n, block_k, warps, stages):
    from jax.experimental.pallas import triton as plgpu

    m, k = x_MxK.shape
    n = w_KxN.shape[1]
    return pl.pallas_call(
        functools.partial(_kernel, block_k=block_k, k_total=k,
                          precision=jax.lax.Precision.DEFAULT),
        grid=(m // block_m, n // block_n),
        in_specs=[pl.BlockSpec((block_m, k), lambda i, j: (i, 0)),
                  pl.BlockSpec((k, block_n), lambda i, j: (0, j)),
                  pl.BlockSpec((block_n,), lambda i, j: (j,))],
        out_specs=pl.BlockSpec((block_m, block_n), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), x_MxK.dtype),
        compiler_params=plgpu.CompilerParams(num_warps=warps, num_stages=stages),
    )(x_MxK, w_KxN, b_N)


def _median_ms(fn, *args):
    return median_time(fn, *args, repeats=20) * 1e3


def main():
    if jax.default_backend() != "gpu":
        raise SystemExit("pallas_gemm_gelu.py: needs a GPU (Pallas Triton kernels)")
    m, k, n = 32 * 4096, 768, 3072
    keys = jax.random.split(jax.random.key(0), 3)
    for label, dtype, block_k in (("tf32", jnp.float32, 32), ("bf16", jnp.bfloat16, 64)):
        x = jax.random.normal(keys[0], (m, k), dtype)
        w = (0.02 * jax.random.normal(keys[1], (k, n))).astype(dtype)
        b = 0.1 * jax.random.normal(keys[2], (n,))
        exact = gelu_exact(jnp.dot(x.astype(jnp.float32), w.astype(jnp.float32),
                                   precision="highest") + b)
        xla = jax.jit(lambda x, w, b: gelu_exact(
            jnp.dot(x, w, precision="default", preferred_element_type=jnp.float32) + b
        ).astype(x.dtype))
        ms = _median_ms(xla, x, w, b)
        print(f"{label} XLA GEMM + GELU pass: {ms:.3f} ms, {2 * m * k * n / ms / 1e9:.0f} TFLOP/s")
        for block_m, block_n in ((128, 128), (128, 256), (256, 128), (64, 256)):
            for warps in (4, 8):
                for stages in (3, 4):
                    fn = jax.jit(functools.partial(gemm_gelu, block_m=block_m, block_n=block_n,
                                                   block_k=block_k, warps=warps, stages=stages))
                    err = float(jnp.max(jnp.abs(fn(x, w, b).astype(jnp.float32) - exact)))
                    ms = _median_ms(fn, x, w, b)
                    print(f"{label} pallas {block_m}×{block_n}×{block_k}, {warps} warps, "
                          f"{stages} stages: {ms:.3f} ms, {2 * m * k * n / ms / 1e9:.0f} TFLOP/s, "
                          f"max |error| {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
