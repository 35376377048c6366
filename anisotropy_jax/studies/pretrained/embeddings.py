"""Partition isotropy of a checkpoint's embedding matrices (issue 12 item 4; docs/PRETRAINED.md).

For the input embedding E (V, D) and the output embedding / LM head W (V, D; = E when tied):
`metrics.partition_isotropy` (Mu & Viswanath 2018: min_c Z(c) / max_c Z(c) over the
eigenvectors of WᵀW, 1 = isotropic) of the raw matrix and of the matrix centred over the
vocabulary, and for W also of W·diag(γ), γ the final norm's gain: the logits are
(γ ⊙ x̂ + β)·w = x̂·(γ ⊙ w) + β·w, so γ ⊙ w is the output embedding the normalised state x̂ meets.
Families without an output embedding or a final norm (BERT encoders) report the input only.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax import metrics

_isotropy = jax.jit(metrics.partition_isotropy)


def raw_and_centred(w_VxD: np.ndarray) -> tuple[float, float]:
    """(I(W), I(W − mean_v W)) in float32."""
    w = jnp.asarray(w_VxD, jnp.float32)
    return float(_isotropy(w)), float(_isotropy(w - jnp.mean(w, axis=0, keepdims=True)))


def embedding_isotropy(matrices: dict[str, np.ndarray | None]) -> dict[str, float]:
    """{"input_raw", "input_centred"[, "output_raw", "output_centred"][, "output_scaled_raw",
    "output_scaled_centred"]} for a family's `embedding_matrices` (models/registry.py).
    Raises FloatingPointError when a value is not finite."""
    out: dict[str, float] = {}
    parts = {"input": matrices.get("input"), "output": matrices.get("output")}
    gain = matrices.get("final_norm_scale")
    if parts["output"] is not None and gain is not None:
        parts["output_scaled"] = np.asarray(parts["output"]) * np.asarray(gain)[None, :]
    for name, w in parts.items():
        if w is None:
            continue
        out[f"{name}_raw"], out[f"{name}_centred"] = raw_and_centred(w)
    bad = [k for k, v in out.items() if not np.isfinite(v)]
    if bad:
        raise FloatingPointError(f"partition isotropy {bad} is not finite")
    return out
