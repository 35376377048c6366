"""Partition isotropy of a checkpoint's embedding matrices (docs/PRETRAINED.md).

For the input embedding E (V, D), the output embedding / LM head W (V, D; = E when tied) and
W·diag(γ), γ the final norm's gain (the logits are (γ ⊙ x̂ + β)·w = x̂·(γ ⊙ w) + β·w, so γ ⊙ w is
the output embedding the normalised state x̂ meets): Mu & Viswanath's partition isotropy
I(W) = min_c Z(c) / max_c Z(c) (1 = isotropic) of the raw matrix and of the matrix centred over
the vocabulary, in both sign conventions of `metrics.embedding_isotropy.embedding_isotropy` (the
one entry point: one_sign = the eigenvectors as the eigensolver returns them, the convention of a
direct implementation such as Machina & Mercer's; sign_free = over ±c, a property of W).

Where there is a gain, its controls (`metrics.embedding_isotropy.gain_controls`; I falls with
scale alone, so W·diag(γ) against W is mostly a comparison of norms): W·c at the Frobenius norm of
W·diag(γ) ("output_equalnorm"), W·mean(γ) ("output_meangain"), and each row of W·diag(γ) with its
norm in a random direction, averaged over ROW_DRAWS draws of the fixed key ROW_KEY
("output_rowdir"; 2 draws: a pretrained vocabulary has tens of thousands of rows, and I varies
little from draw to draw (SmolLM2: 8 draws and 2 differ by 0.0003), while one draw of its
49,152 × 576 matrix costs about as much as all the other values). I(W·diag γ) − I(W·c) is what
the direction-dependence of γ does.

Keys: "<matrix>_<raw|centered>_<one_sign|sign_free>" for matrix in input, output, output_scaled,
output_equalnorm, output_meangain, output_rowdir; "final_gain_mean" and
"final_gain_frobenius_ratio" (c); and, kept so that results files and readers of before this
change read the same, "<matrix>_raw" and "<matrix>_centred" = the sign-free values. Families
without an output embedding or a final norm (encoders) report the input only.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.metrics.embedding_isotropy import GAIN_CONTROLS, gain_controls
from anisotropy_jax.metrics.embedding_isotropy import embedding_isotropy as _conventions

ROW_KEY = 0x60A1
ROW_DRAWS = 2
_isotropy = jax.jit(_conventions)


@functools.partial(jax.jit, static_argnames="draws")
def _controls(w_out_VxD: jax.Array, gain_D: jax.Array, draws: int) -> dict[str, jax.Array]:
    out = gain_controls(w_out_VxD, gain_D, jax.random.key(ROW_KEY), draws)
    return {**out, "final_gain_mean": jnp.mean(gain_D)}


def _matrix(key: str) -> str:
    """"output_scaled_raw_one_sign" → "output_scaled"."""
    return key.split("_raw")[0].split("_centered")[0]


def embedding_isotropy(matrices: dict[str, np.ndarray | None]) -> dict[str, float]:
    """The keys of the module docstring for a family's `embedding_matrices`
    (models/registry.py). Raises FloatingPointError when a value is not finite."""
    w_in = np.asarray(matrices["input"], np.float32)
    w_out, gain = matrices.get("output"), matrices.get("final_norm_scale")
    keep = ["input"]
    if w_out is not None:
        keep.append("output")
        if gain is not None:
            keep += ["output_scaled"] + [f"output_{c}" for c in GAIN_CONTROLS]
    # Without an output matrix (or gain) the call still needs one: the input (ones) stands in and
    # the stand-in entries are dropped.
    w_out = w_in if w_out is None else np.asarray(w_out, np.float32)
    gain = np.ones(w_in.shape[1], np.float32) if gain is None or "output" not in keep else gain
    gain = np.asarray(gain, np.float32)
    values = {k: float(v) for k, v in jax.device_get(_isotropy(w_in, w_out, gain)).items()}
    if "output_scaled" in keep:
        values |= {k: float(v) for k, v in jax.device_get(
            _controls(w_out, gain, ROW_DRAWS)).items()}
    out = {k: v for k, v in values.items()
           if _matrix(k) in keep or (k.startswith("final_gain") and "output_scaled" in keep)}
    for matrix in keep:
        out[f"{matrix}_raw"] = out[f"{matrix}_raw_sign_free"]
        out[f"{matrix}_centred"] = out[f"{matrix}_centered_sign_free"]
    bad = [k for k, v in out.items() if not np.isfinite(v)]
    if bad:
        raise FloatingPointError(f"partition isotropy {bad} is not finite")
    return out
