"""Overflow-safe vector norms and unit vectors: the one norm of the package."""
from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array

def as_points(x: Array) -> Array:
    """(..., D) → (N, D)."""
    x = jnp.asarray(x)
    if x.ndim < 1:
        raise ValueError("expected (..., D) vectors, got a scalar")
    return x.reshape(-1, x.shape[-1])


def _scale_and_sum_of_squares_two_pass(x: Array) -> tuple[Array, Array]:
    """(m, q) with m a power of two above max|x_i| (one pass), then q = Σ (x_i/m)² (a second)."""
    m, inv_m = power_of_two_above(jnp.max(jnp.abs(x), axis=-1))
    y = x * inv_m[..., None]
    return m, jnp.sum(y * y, axis=-1)


def _scale_and_sum_of_squares_one_pass(x: Array) -> tuple[Array, Array]:
    """The same (m, q) in one pass: a variadic reduction carries the running maximum and rescales
    the running sum when it grows (the LAPACK nrm2 scheme); the maximum is then replaced by a
    power of two above it, q rescaled to match."""
    a = jnp.abs(x)
    zero = jnp.zeros((), a.dtype)

    def combine(left, right):
        (m1, q1), (m2, q2) = left, right
        m = jnp.maximum(m1, m2)
        safe = jnp.where(m > 0, m, jnp.ones((), a.dtype))
        r1, r2 = m1 / safe, m2 / safe
        return m, q1 * r1 * r1 + q2 * r2 * r2

    peak, q = jax.lax.reduce((a, (a > 0).astype(a.dtype)), (zero, zero), combine, (x.ndim - 1,))
    m, inv_m = power_of_two_above(peak)
    ratio = peak * inv_m
    return m, q * ratio * ratio


def _scale_and_sum_of_squares(x: Array) -> tuple[Array, Array]:
    """(m, q) over the last axis with ‖x‖ = m·√q: m is a power of two above max|x_i| whose inverse
    is a normal float, q = Σ (x_i/m)² ≤ 16·D (0 for a zero vector). The squares never overflow or
    underflow, and 1/m is never flushed to zero (it was, as a subnormal, for max|x_i| beyond
    ~8.5e37 when m was the maximum itself): norms up to float32's largest value.

    One pass on accelerators, two on the CPU, where XLA runs the variadic reduction slower than
    the two plain ones (measured: docs/PERFORMANCE.md). Both are tested against float64 on the
    CPU.
    """
    return jax.lax.platform_dependent(x, cpu=_scale_and_sum_of_squares_two_pass,
                                      default=_scale_and_sum_of_squares_one_pass)


def vector_norms(x: Array) -> Array:
    """‖x‖ over the last axis without overflow or underflow of the squares (norms up to ~1e38)."""
    m, q = _scale_and_sum_of_squares(x)
    return m * jnp.sqrt(q)


def unit_vectors(x: Array) -> Array:
    """x / ‖x‖ over the last axis; a zero vector stays zero (its cosine with anything is 0)."""
    m, q = _scale_and_sum_of_squares(x)
    inv_m = 1.0 / jnp.where(m > 0, m, 1.0)
    inv_root_q = 1.0 / jnp.sqrt(jnp.where(q > 0, q, 1.0))
    return x * inv_m[..., None] * inv_root_q[..., None]  # never forms ‖x‖: no overflow


def require_pairs(n: int, what: str) -> None:
    if n < 2:
        raise ValueError(f"{what} needs at least 2 vectors to form a pair, got {n}")


def power_of_two_above(max_abs: Array) -> tuple[Array, Array]:
    """(c, 1/c) with c = 2^k the smallest power of two above 2·max_abs, k clipped so that c and
    1/c are normal floats (then |x|/c < 4 still holds for any finite x). Dividing by c is exact
    (no digit changes unless a value underflows), so sums of x/c cannot overflow where sums of x
    could (N·|x| beyond ~3.4e38 in float32)."""
    finfo = jnp.finfo(max_abs.dtype)
    _, exponent = jnp.frexp(max_abs)  # max_abs < 2^exponent
    k = jnp.clip(exponent + 1, -finfo.maxexp + 1, -finfo.minexp)
    one = jnp.ones((), max_abs.dtype)
    return jnp.ldexp(one, k), jnp.ldexp(one, -k)


def mean_norm(x: Array) -> Array:
    """Mean ‖x_i‖ over the vectors of x (..., D), without overflow of the squares or of their sum
    (norms up to ~1e38)."""
    norms_N = vector_norms(as_points(x))
    c, inv_c = power_of_two_above(jnp.max(norms_N))
    return jnp.mean(norms_N * inv_c) * c
