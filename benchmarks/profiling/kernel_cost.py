r"""What the fused attention kernel's on-chip reduction statistics cost (GPU tuning).

  python -m benchmarks.profiling.kernel_cost [--chunk=32] [--ablate] [--repeats=20] [--json=FILE]

Times `models.fused_attention.fused_attention` alone on the sweep's BERT-base shapes (B = 32,
L = 128, 12 heads of 64) with affine inputs, vmapped over a chunk of coefficients as the sweep
calls it, with and without `reduction_statistics`, for query blocks of 128 and 64 and 4 or 8
warps, at TF32 and bfloat16: µs per grid point.

  --ablate: the statistics' parts switched off one at a time (their outputs written as zeros: a
  profiling device, not a result), to see which part of the on-chip statistics costs the time.
"""
from __future__ import annotations

import functools

from absl import flags

from benchmarks.profiling import harness


def define_flags():
    flags.DEFINE_integer("chunk", 32, "Grid points (coefficients) per call.")
    flags.DEFINE_bool("ablate", False, "Also time the statistics with parts switched off.")

ABLATIONS = ("token norms and sums", "key mass and unit mass", "votes")


def _ablated(module, part: str):
    """Patches `module` (models.fused_attention) so that the kernel writes zeros for `part`;
    returns the undo function."""
    import jax.numpy as jnp

    write, votes = module._write_reduction_statistics, module._key_votes

    def zero(ref):
        ref[...] = jnp.zeros(ref.shape, jnp.float32)

    def partial_write(refs, q, k, p, counted):
        if part != "token norms and sums":
            refs[0][...] = module._scaled_norms(q)
            refs[1][...] = module._scaled_norms(k)
            refs[2][...] = jnp.sum(q, axis=0)
            refs[3][...] = jnp.sum(k, axis=0)
        else:
            for ref in refs[:4]:
                zero(ref)
        if part != "key mass and unit mass":
            refs[4][...] = jnp.sum(p, axis=0)
            row = jnp.sqrt(jnp.sum(p * p, axis=1))
            refs[5][...] = jnp.sum(p * (1.0 / row)[:, None], axis=0)
        else:
            zero(refs[4])
            zero(refs[5])

    def no_votes(shifted, counted):
        return jnp.zeros(shifted.shape[1:], jnp.float32)

    module._write_reduction_statistics = partial_write
    if part == "votes":
        module._key_votes = no_votes

    def undo():
        module._write_reduction_statistics, module._key_votes = write, votes
    return undo


def main(args, report):
    import jax
    import jax.numpy as jnp

    from anisotropy_jax.models import fused_attention

    b, l, h, dh = 32, 128, 12, 64
    chunk = args.chunk
    keys = jax.random.split(jax.random.key(0), 6)
    t = jnp.linspace(0.0, 100.0, chunk)
    slopes = [jax.random.normal(k, (h, dh)) for k in keys[3:]]
    report.describe(f"chunk {chunk}, B={b}, L={l}, H={h}, Dh={dh}; µs per point", chunk=chunk,
                    batch=b, seq_len=l, heads=h, head_dim=dh)
    for precision, dtype in ((jax.lax.Precision.DEFAULT, jnp.float32),
                             (jax.lax.Precision.DEFAULT, jnp.bfloat16)):
        q, k, v = (jax.random.normal(key, (b, l, h, dh)).astype(dtype) for key in keys[:3])
        q = q.astype(jnp.float32)  # the sweep's affine queries stay float32

        def point(c, reduce=True, **tiling):
            extra = {"key_slope_HxDh": slopes[1]} if reduce else {}
            return fused_attention.fused_attention(
                q, k, v, logit_scale=0.125, precision=precision, query_slope_HxDh=slopes[0],
                value_slope_HxDh=slopes[2], coefficient=c, reduction_statistics=reduce,
                **tiling, **extra)

        name = jnp.dtype(dtype).name
        for reduce in (False, True):
            for block_q in (0, 64):
                for warps in (4, 8):
                    fn = jax.jit(jax.vmap(functools.partial(point, reduce=reduce, block_q=block_q,
                                                            num_warps=warps)))
                    report.time(f"{name} reduction_statistics={reduce!s:5s} "
                                f"block_q={block_q or l:3d} warps={warps}", fn, t, per=chunk,
                                unit="µs")
        for part in ABLATIONS if args.ablate else ():
            undo = _ablated(fused_attention, part)
            jax.clear_caches()
            try:
                report.time(f"{name} statistics without {part}", jax.jit(jax.vmap(point)), t,
                            per=chunk, unit="µs")
            finally:
                undo()
                jax.clear_caches()


if __name__ == "__main__":
    harness.run("kernel_cost", main, define_flags)
