"""The training step's memory-bound parts alone, at `train:gpu`'s shapes (B = 64, L = 256,
d = 384, MLP 1536): forward + backward of

  layer_norm   the model's LayerNorm (Flax's, float32, on the float32 residual stream) against
               jax's Pallas LayerNorm (jax.experimental.pallas.ops.gpu.layer_norm, Triton), with
               the largest difference of y, dx, dγ, dβ over each array's largest |value|
  bias_gelu    the MLP's bias + exact GELU on the bf16 activation (the fc_in bias gradient in
               the backward), XLA's fusion only

each against its memory bound: the bytes an ideal fused forward + backward must move
(read x; write y; read x, dy; write dx) over the card's measured copy bandwidth (one large
device-to-device copy). `python -m benchmarks.fused_parts [B L d mlp]`."""
import sys
import time

import flax.linen as nn
import jax
import jax.numpy as jnp

from anisotropy_jax.models.layers import gelu_exact


def _ms(f, *args) -> float:
    jax.block_until_ready(f(*args))
    start = time.perf_counter()
    jax.block_until_ready([f(*args) for _ in range(50)])
    return 1e3 * (time.perf_counter() - start) / 50


def _forward_backward(fn):
    """jit of (*inputs, cotangent) → (y, *gradients of every input)."""
    return jax.jit(lambda *a: (lambda y, vjp: (y, *vjp(a[-1])))(*jax.vjp(fn, *a[:-1])))


def copy_bandwidth(n_bytes: int = 1 << 28) -> float:
    x = jnp.ones((n_bytes // 4,), jnp.float32)
    return 2 * n_bytes / (1e-3 * _ms(jax.jit(lambda v: v + 1.0), x))  # read + write


def main(batch: int = 64, seq_len: int = 256, d: int = 384, mlp: int = 1536) -> int:
    from jax.experimental.pallas.ops.gpu import layer_norm as pallas_layer_norm

    bandwidth = copy_bandwidth()
    print(jax.devices()[0].device_kind, f"copy bandwidth {bandwidth / 1e12:.2f} TB/s")
    keys = jax.random.split(jax.random.key(0), 5)
    x, dy = (jax.random.normal(k, (batch, seq_len, d), jnp.float32) for k in keys[:2])
    w, b = 1.0 + 0.1 * jax.random.normal(keys[2], (d,)), 0.1 * jax.random.normal(keys[3], (d,))
    flax_ln = nn.LayerNorm(epsilon=1e-5, dtype=jnp.float32, param_dtype=jnp.float32)
    xla = _forward_backward(lambda x, w, b: flax_ln.apply({"params": {"scale": w, "bias": b}}, x))
    pallas = _forward_backward(lambda x, w, b: pallas_layer_norm.layer_norm(
        x, w, b, eps=1e-5, interpret=jax.default_backend() != "gpu"))
    bound_ms = 1e3 * 5 * x.nbytes / bandwidth
    ref, got = xla(x, w, b, dy), pallas(x, w, b, dy)
    errors = [float(jnp.max(jnp.abs(g - r)) / jnp.max(jnp.abs(r))) for g, r in zip(got, ref)]
    print(f"layer_norm {x.shape} float32: xla {_ms(xla, x, w, b, dy):.4f} ms, pallas "
          f"{_ms(pallas, x, w, b, dy):.4f} ms, bound {bound_ms:.4f} ms; pallas - xla of y, dx, dw,"
          f" db: {', '.join(f'{e:.1e}' for e in errors)}")
    h = jax.random.normal(keys[4], (batch, seq_len, mlp), jnp.bfloat16)
    bias = jnp.zeros((mlp,), jnp.bfloat16)
    gelu = _forward_backward(lambda h, bias: gelu_exact(h + bias))
    bound_ms = 1e3 * 5 * h.nbytes / bandwidth
    print(f"bias_gelu {h.shape} bfloat16: xla {_ms(gelu, h, bias, h):.4f} ms, "
          f"bound {bound_ms:.4f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(*map(int, sys.argv[1:])))
