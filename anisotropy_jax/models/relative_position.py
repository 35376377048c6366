"""Bucketed relative positions (T5, MPNet): which learned bias each (query, key) pair gets.

The bucket of a relative position r = key position − query position follows Mesh TensorFlow's
`_relative_position_bucket` as Hugging Face implements it for T5 (`T5Attention`) and MPNet
(`MPNetEncoder.relative_position_bucket`, the same function written with n = −r):

  bidirectional: half of the buckets for r > 0, half for r ≤ 0, on |r|;
  then |r| < max_exact = buckets/2 (of the half) gets its own bucket, and larger |r| fall into
  logarithmically wider buckets up to max_distance, beyond which all share the last bucket:
      max_exact + int( log(|r| / max_exact) / log(max_distance / max_exact) · (buckets − max_exact) )

The table is computed on the host in numpy with the same float32 operations as torch (log of a
float32 quotient, divided by the float32 of log(max_distance/max_exact)), so the truncation
to int agrees at the bucket edges; tests/test_families_encoders.py checks every r in
[−2048, 2048] against transformers for several (buckets, max_distance). Sequence lengths are
static under jit, so the table is a constant of the compiled program.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def relative_position_bucket(relative_position: np.ndarray, *, bidirectional: bool,
                             num_buckets: int, max_distance: int) -> np.ndarray:
    """Bucket ids (int32, same shape) of integer relative positions r = key − query."""
    rel = np.asarray(relative_position, dtype=np.int64)
    buckets = np.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (rel > 0).astype(np.int64) * num_buckets
        distance = np.abs(rel)
    else:
        distance = -np.minimum(rel, 0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    # float32 throughout, as torch: log(d / max_exact) / log(max_distance / max_exact) · width.
    ratio = np.maximum(distance, 1).astype(np.float32) / np.float32(max_exact)
    scaled = (np.log(ratio) / np.float32(math.log(max_distance / max_exact))
              * np.float32(num_buckets - max_exact))
    large = np.minimum(max_exact + scaled.astype(np.int64), num_buckets - 1)
    return (buckets + np.where(is_small, distance, large)).astype(np.int32)


def bucket_table(query_len: int, key_len: int, *, bidirectional: bool, num_buckets: int,
                 max_distance: int) -> np.ndarray:
    """(Lq, Lk) bucket ids for query positions 0..Lq-1 and key positions 0..Lk-1."""
    rel = np.arange(key_len)[None, :] - np.arange(query_len)[:, None]
    return relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets,
                                    max_distance=max_distance)


def position_bias(bias_table_NxH: Array, buckets_LqxLk: np.ndarray) -> Array:
    """The learned bias per (head, query, key): (1, H, Lq, Lk) float32, to add to the logits."""
    values_LqxLkxH = jnp.take(jnp.asarray(bias_table_NxH, jnp.float32),
                              jnp.asarray(buckets_LqxLk), axis=0)
    return values_LqxLkxH.transpose(2, 0, 1)[None]


def encoder_bias(bias_table_NxH: Array, seq_len: int, *, num_buckets: int, max_distance: int
                 ) -> Array:
    """An encoder's bias (1, H, L, L) over L positions: bidirectional buckets (T5's encoder,
    MPNet), one table shared by every layer."""
    return position_bias(bias_table_NxH, bucket_table(
        seq_len, seq_len, bidirectional=True, num_buckets=num_buckets, max_distance=max_distance))
