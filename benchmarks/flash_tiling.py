"""Tile sizes of the Pallas flash attention core at `train:gpu`'s attention shapes (causal
B = 64, L = 256, H = 6, Dh = 64): ms per forward + backward for each (block_q, block_k,
block_backward, num_warps) below, softmax and off-by-one at TF32 and bf16, beside cuDNN's
fused attention (bf16 softmax). One JSON line per row to stdout. GPU only.
`python -m benchmarks.flash_tiling`."""
import functools
import json

import jax

from anisotropy_jax.models import flash_attention
from anisotropy_jax.models.layers import precision_settings
from benchmarks.flash_check import _ms

TILES = [(64, 64, 32, None), (64, 64, 64, None), (128, 64, 32, None), (128, 64, 64, None),
         (128, 128, 64, 8), (64, 32, 32, None), (128, 32, 32, 4), (64, 64, 32, 8)]


def _step(core):
    """jit of (q, k, v, cotangent) → (out, dq, dk, dv); the cotangent cast to out's dtype (flash
    returns float32, cuDNN the inputs' dtype)."""
    return jax.jit(lambda q, k, v, g: (lambda out, vjp: (out, *vjp(g.astype(out.dtype))))(
        *jax.vjp(core, q, k, v)))


def main(shape=(64, 256, 6, 64)) -> None:
    q, k, v, g = (jax.random.normal(key, shape) for key in jax.random.split(jax.random.key(0), 4))
    scale = shape[-1] ** -0.5
    for precision in ("default", "bfloat16"):
        dtype, lax_precision = precision_settings(precision)
        inputs = [x.astype(dtype) for x in (q, k, v)] + [g]
        if precision == "bfloat16":
            cudnn = _step(lambda q, k, v: jax.nn.dot_product_attention(
                q, k, v, scale=scale, is_causal=True, implementation="cudnn"))
            print(json.dumps({"core": "cudnn", "precision": precision, "normalization": "softmax",
                              "ms": _ms(cudnn, *inputs)}))
        for normalization in ("softmax", "off_by_one"):
            for block_q, block_k, block_backward, warps in TILES:
                core = functools.partial(
                    flash_attention.flash_attention, normalization=normalization,
                    logit_scale=scale, causal=True, precision=lax_precision, block_q=block_q,
                    block_k=block_k, block_backward=block_backward, num_warps=warps)
                try:
                    ms = _ms(_step(core), *inputs)
                except Exception as error:  # noqa: BLE001 - a tile Triton refuses: say so
                    ms = f"{type(error).__name__}: {str(error)[:120]}"
                print(json.dumps({"core": "flash", "precision": precision,
                                  "normalization": normalization, "block_q": block_q,
                                  "block_k": block_k, "block_backward": block_backward,
                                  "num_warps": warps, "ms": ms}), flush=True)


if __name__ == "__main__":
    main()
