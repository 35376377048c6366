"""A/B of the MLP's bias + exact GELU as one Pallas kernel per direction against XLA's fusions.

  forward   y = GELU(h + b), h the fc_in GEMM's output (B·L, F), computed in float32, stored in
            h's dtype; the kernel reads h and b once and writes y
  backward  dh = dy · GELU'(h + b) and the bias gradient db = Σ_rows dh: one kernel reads h, b,
            dy once, writes dh and one float32 partial sum of db per row block (summed by XLA)

The reference is the model's own `gelu_exact(h + b)` under autodiff. `python -m
benchmarks.bias_gelu_ab [precision rounds variant]` checks the kernels against it (on the CPU in
Pallas' interpret mode), times both alone at `train:gpu`'s shapes, then the training step with the
model's MLP and with `FusedMlp` alternating `rounds` times in one process (tokens/s, best of 3).
"""
import functools
import json
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
from jax.experimental import pallas as pl

from anisotropy_jax.models import block, layers
from benchmarks import train_throughput

ROWS, COLS = 64, 256  # the tile of one program


def _gelu_parts(h_ref, b_ref):
    x = (h_ref[...] + b_ref[...].astype(h_ref.dtype)).astype(jnp.float32)
    cdf = 0.5 * (1.0 + layers.erf_float32(x * 0.7071067811865476))
    return x, cdf


def _forward_kernel(h_ref, b_ref, y_ref):
    x, cdf = _gelu_parts(h_ref, b_ref)
    y_ref[...] = (x * cdf).astype(y_ref.dtype)


def _backward_kernel(h_ref, b_ref, dy_ref, dh_ref, db_ref, *, n_rows: int):
    x, cdf = _gelu_parts(h_ref, b_ref)
    pdf = jnp.exp(-0.5 * x * x) * 0.3989422804014327
    dh = dy_ref[...].astype(jnp.float32) * (cdf + x * pdf)
    dh_ref[...] = dh.astype(dh_ref.dtype)
    # the rows of a last, partial block past the array's end hold whatever was read: left out
    row = pl.program_id(0) * ROWS + jax.lax.broadcasted_iota(jnp.int32, dh.shape, 0)
    dh_stored = jnp.where(row < n_rows, dh.astype(dh_ref.dtype).astype(jnp.float32), 0.0)
    db_ref[...] = jnp.sum(dh_stored, axis=0, keepdims=True)


def _call(kernel, n_in, out_shapes, h, *args):
    rows, cols = h.shape
    grid = (pl.cdiv(rows, ROWS), pl.cdiv(cols, COLS))
    tile = pl.BlockSpec((ROWS, COLS), lambda i, j: (i, j))
    specs = {"h": tile, "b": pl.BlockSpec((1, COLS), lambda i, j: (0, j))}
    in_specs = [specs["h"], specs["b"]] + [tile] * (n_in - 2)
    out_specs = [tile, pl.BlockSpec((1, COLS), lambda i, j: (i, j))][:len(out_shapes)]
    return pl.pallas_call(kernel, out_shape=out_shapes, grid=grid, in_specs=in_specs,
                          out_specs=out_specs, interpret=jax.default_backend() != "gpu")(h, *args)


@jax.custom_vjp
def bias_gelu(h_NxF, b_F):
    return _call(_forward_kernel, 2, [jax.ShapeDtypeStruct(h_NxF.shape, h_NxF.dtype)],
                 h_NxF, b_F[None, :])[0]


def _fwd(h, b):
    return bias_gelu(h, b), (h, b)


def _bwd(residuals, dy):
    h, b = residuals
    n_blocks = pl.cdiv(h.shape[0], ROWS)
    kernel = functools.partial(_backward_kernel, n_rows=h.shape[0])
    dh, db = _call(kernel, 3, [jax.ShapeDtypeStruct(h.shape, h.dtype),
                                          jax.ShapeDtypeStruct((n_blocks, h.shape[1]),
                                                               jnp.float32)],
                   h, b[None, :], dy)
    return dh, db.sum(axis=0).astype(b.dtype)


bias_gelu.defvjp(_fwd, _bwd)


class FusedMlp(layers.Mlp):
    """The model's MLP with fc_in's bias and the exact GELU in `bias_gelu` (same parameters);
    other MLPs as the model's. No mlp_pre tap (a benchmark, not for patching)."""

    @nn.compact
    def __call__(self, x_BxLxD):
        cfg = self.config
        if cfg.gated_mlp or cfg.activation != "gelu" or not cfg.bias("mlp"):
            return super().__call__(x_BxLxD)
        dtype, precision = layers.matmul_settings(cfg)
        kernel, b = layers.DenseParams(cfg, cfg.d_model, cfg.d_ff, True, name="fc_in")()
        h = jnp.dot(x_BxLxD.astype(dtype), kernel.astype(dtype), precision=precision)
        shape = h.shape
        h = bias_gelu(h.reshape(-1, shape[-1]), b.astype(dtype)).reshape(shape)
        h = self.tap("mlp_post", h)
        return layers.dense(cfg, cfg.d_model, "fc_out", True)(h).astype(jnp.float32)



def _forward_backward(fn):
    return jax.jit(lambda h, b, dy: (lambda y, vjp: (y, *vjp(dy)))(*jax.vjp(fn, h, b)))


def check_and_time(rows: int, cols: int, dtype) -> dict:
    """Largest |fused − reference| of y, dh, db over each array's largest |value|, and ms per
    forward + backward of both (GPU only)."""
    keys = jax.random.split(jax.random.key(0), 3)
    h, dy = (jax.random.normal(k, (rows, cols), dtype) for k in keys[:2])
    b = (0.5 * jax.random.normal(keys[2], (cols,))).astype(dtype)
    ref = _forward_backward(lambda h, b: layers.gelu_exact(h + b[None, :]))
    fused = _forward_backward(bias_gelu)
    want, got = ref(h, b, dy), fused(h, b, dy)
    out = {"shape": [rows, cols], "dtype": jnp.dtype(dtype).name, "errors": [
        float(jnp.max(jnp.abs(g.astype(jnp.float32) - w.astype(jnp.float32)))
              / float(jnp.max(jnp.abs(w.astype(jnp.float32))))) for g, w in zip(got, want)]}
    if jax.default_backend() == "gpu":
        from benchmarks.fused_parts import _ms
        out.update(xla_ms=_ms(ref, h, b, dy), fused_ms=_ms(fused, h, b, dy))
    return out


def main(precision: str = "bfloat16", rounds: int = 2, variant: str = "gpu") -> int:
    gpu = jax.default_backend() == "gpu"
    result = {"device": jax.devices()[0].device_kind, "precision": precision, "alone": [
        check_and_time(*shape, dtype) for shape, dtype in
        [((64 * 256, 1536) if gpu else (130, 512), jnp.bfloat16), ((130, 512), jnp.float32)]]}
    print(json.dumps(result["alone"]), flush=True)
    c = ml_collections.ConfigDict(dict(train_variant=variant, batch_size=0, warmup_steps=20,
                                       steps=100 if gpu else 4, repeats=3, log_every=50))
    config = train_throughput.train_config(c, precision)
    rows = result["tokens_per_s"] = {"xla": [], "fused": []}
    for _ in range(int(rounds)):
        for name, mlp in (("xla", layers.Mlp), ("fused", FusedMlp)):
            block.Mlp = mlp
            jax.clear_caches()
            row = train_throughput.time_jax(config, "async", c)
            rows[name].append(config.data.batch_size * config.data.seq_len / row["s_per_step"])
            print(name, f"{rows[name][-1]:,.0f} tokens/s", flush=True)
    block.Mlp = layers.Mlp
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2], *map(int, sys.argv[2:3]), *sys.argv[3:4]))
