"""The Pallas flash attention core against the XLA core at `train:gpu`'s attention shapes (causal
B = 64, L = 256, H = 6, Dh = 64), each normalisation at TF32 and bf16: largest errors of out, dq,
dk, dv (over the largest |value| of a float32 'highest' XLA reference), the XLA core's own beside
them, ms per forward + backward. Exit 1 where flash's exceed 2x XLA's + 1e-3. Other shapes:
`python -m benchmarks.flash_check [B L H Dh]`."""
import functools
import sys
import time

import jax
import jax.numpy as jnp

from anisotropy_jax.models import attention, flash_attention
from anisotropy_jax.models.layers import precision_settings


def _core(impl: str, normalization: str, precision: str, scale: float):
    """jit of (q, k, v, cotangent) → (out, dq, dk, dv) of the core `impl` ('xla' or 'flash')."""
    kwargs = dict(causal=True, precision=precision_settings(precision)[1],
                  normalization=normalization)
    core = (functools.partial(flash_attention.flash_attention, logit_scale=scale, **kwargs)
            if impl == "flash" else
            lambda *qkv: attention.attention_core(*qkv, scale=scale, **kwargs)[0])
    return jax.jit(lambda q, k, v, cotangent: (lambda out, vjp: (out, *vjp(cotangent)))(
        *jax.vjp(core, q, k, v)))


def _ms(f, *args) -> float:
    jax.block_until_ready(f(*args))
    start = time.perf_counter()
    jax.block_until_ready([f(*args) for _ in range(10)])
    return 1e3 * (time.perf_counter() - start) / 10


def main(batch: int = 64, seq_len: int = 256, heads: int = 6, d_head: int = 64) -> int:
    shape, scale, failed = (batch, seq_len, heads, d_head), d_head ** -0.5, 0
    q, k, v, cotangent = (jax.random.normal(key, shape) for key in jax.random.split(
        jax.random.key(0), 4))
    print(jax.devices()[0].device_kind, shape, "errors of out dq dk dv, ms per forward+backward")
    for normalization in flash_attention.FLASH_NORMALIZATIONS:
        reference = _core("xla", normalization, "highest", scale)(q, k, v, cotangent)
        for precision in ("default", "bfloat16"):
            inputs = [x.astype(precision_settings(precision)[0]) for x in (q, k, v)]
            errors = {}
            for impl in ("xla", "flash"):
                f = _core(impl, normalization, precision, scale)
                errors[impl] = [float(jnp.max(jnp.abs(g.astype(jnp.float32) - r)) / jnp.max(
                    jnp.abs(r))) for g, r in zip(f(*inputs, cotangent), reference)]
                print(f"{normalization:23s} {precision:8s} {impl:5s} "
                      + " ".join(f"{e:.1e}" for e in errors[impl])
                      + f"  {_ms(f, *inputs, cotangent):8.2f} ms")
            failed += (bad := any(f > 2 * x + 1e-3 for f, x in zip(errors["flash"],
                                                                   errors["xla"])))
            print("  CHECK: flash error above 2x XLA's + 1e-3" if bad else "  ok")
    print(f"{failed} failed")
    return int(failed > 0)


if __name__ == "__main__":
    sys.exit(main(*(int(arg) for arg in sys.argv[1:])))
