"""Machina & Mercer's object: the partition isotropy of embedding matrices, with their sign
convention beside the sign-free one, and the 2-D SVD projection they plot.

Mu & Viswanath's partition isotropy of W (N, D) is I(W) = min_c Z(c) / max_c Z(c) with
Z(c) = Σ_i exp(w_i·c) and c over the eigenvectors of WᵀW. An eigenvector is defined only up to its
sign, and Z(c) ≠ Z(−c) in general:
  one_sign   c = the eigenvectors as `jnp.linalg.eigh` returns them (one sign each): the
             convention of a direct implementation such as Machina & Mercer's. Which sign comes
             back is the eigensolver's choice, so this number depends on the implementation;
  sign_free  c over both signs (2D directions), `metrics.partition_isotropy`: a property of W.
Because its min and max run over a superset, sign_free ≤ one_sign always; they are equal when the
rows come in ± pairs. In log space (logsumexp): no overflow for large norms.

The controls of the final norm's gain γ (`gain_controls`). I is not scale-invariant: for a
scalar a > 1, I(aW) is in general lower than I(W) (I(aW) → 1 as a → 0), and the mean gain of
trained models is well above 1. So "W·diag(γ) is less isotropic than W" mixes the scale γ adds
with the reweighting of directions it does. Separated here:
  equalnorm  W·c with the scalar c = ‖W·diag(γ)‖_F / ‖W‖_F: the same Frobenius norm as
             W·diag(γ), so I(W·diag γ) − I(W·c) is what the direction-dependence of γ does;
  meangain   W·mean(γ): the uniform rescaling by the mean gain (for reference; its norm differs
             from W·diag(γ)'s by the spread of γ);
  rowdir     every row of W·diag(γ) (of its centred version, for "centered") keeps its norm and
             gets an independent, uniformly random direction; I averaged over `draws` draws:
             the isotropy the row norms alone imply.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from anisotropy_jax.metrics.geometry import log_partition_functions
from anisotropy_jax.metrics.norms import as_points, unit_vectors, vector_norms

Array = jax.Array
_HI = jax.lax.Precision.HIGHEST


def _centred(w_NxD: Array) -> Array:
    return w_NxD - jnp.mean(w_NxD, axis=0, keepdims=True)


def partition_isotropy_conventions(w: Array) -> dict[str, Array]:
    """{"one_sign", "sign_free"}: partition isotropy of w (N, D) in both conventions (module
    docstring); in (0, 1], 1 = isotropic. Centre w first for the centred variant."""
    plus, minus = log_partition_functions(w)
    both = jnp.concatenate([plus, minus])
    return {"one_sign": jnp.exp(jnp.min(plus) - jnp.max(plus)),
            "sign_free": jnp.exp(jnp.min(both) - jnp.max(both))}


def embedding_isotropy(w_in_VxD: Array, w_out_VxD: Array, final_gain_D: Array
                       ) -> dict[str, Array]:
    """Partition isotropy of the input embedding, the output embedding, and the output embedding
    scaled by the final LayerNorm's gain (w_out · diag(γ): the logits are h·(γ ⊙ w_v) + β·w_v, so
    γ scales the output matrix the model effectively uses), each raw and centred (row mean
    removed), in both sign conventions: keys "<matrix>_<raw|centered>_<one_sign|sign_free>"."""
    w_out = jnp.asarray(w_out_VxD)
    matrices = {"input": jnp.asarray(w_in_VxD), "output": w_out,
                "output_scaled": w_out * jnp.asarray(final_gain_D)[None, :]}
    out = {}
    for name, w in matrices.items():
        for variant, x in (("raw", w), ("centered", _centred(w))):
            for convention, value in partition_isotropy_conventions(x).items():
                out[f"{name}_{variant}_{convention}"] = value
    return out


GAIN_CONTROLS = ("equalnorm", "meangain", "rowdir")


def frobenius_ratio(w_VxD: Array, final_gain_D: Array) -> Array:
    """c = ‖W·diag(γ)‖_F / ‖W‖_F (1 for W = 0): the scalar with ‖W·c‖_F = ‖W·diag(γ)‖_F."""
    w_VxD, gain_D = jnp.asarray(w_VxD), jnp.asarray(final_gain_D)
    column_norms_D = vector_norms(w_VxD.T)  # ‖W diag γ‖_F² = Σ_d γ_d² ‖W[:, d]‖²
    total = vector_norms(column_norms_D[None])[0]
    scaled = vector_norms((column_norms_D * gain_D)[None])[0]
    return jnp.where(total > 0, scaled / jnp.where(total > 0, total, 1.0), 1.0)


def random_row_directions(w_NxD: Array, key: Array) -> Array:
    """w with every row's norm kept and its direction drawn uniformly on the sphere
    (normalised N(0, I) draws, independent per row); zero rows stay zero."""
    w_NxD = as_points(w_NxD)
    g_NxD = jax.random.normal(key, w_NxD.shape, w_NxD.dtype)
    return unit_vectors(g_NxD) * vector_norms(w_NxD)[:, None]


def row_direction_isotropy(w_NxD: Array, key: Array, draws: int = 8) -> dict[str, Array]:
    """{"one_sign", "sign_free"}: the mean over `draws` draws (keys `jax.random.split(key,
    draws)`) of the partition isotropy of `random_row_directions(w, k)`. One draw at a time
    (`lax.map`): a vocabulary-sized matrix per draw, never `draws` of them at once."""
    w_NxD = as_points(w_NxD)
    values = jax.lax.map(lambda k: partition_isotropy_conventions(random_row_directions(w_NxD, k)),
                         jax.random.split(key, draws))
    return {name: jnp.mean(v) for name, v in values.items()}


def gain_controls(w_out_VxD: Array, final_gain_D: Array, key: Array, draws: int = 8
                  ) -> dict[str, Array]:
    """The gain controls of the module docstring for the output embedding W (V, D) and the final
    norm's gain γ (D,): keys "output_<equalnorm|meangain|rowdir>_<raw|centered>_<one_sign|
    sign_free>" ("centered": the matrix centred over the vocabulary; for rowdir, the rows of
    centred W·diag(γ) keep their norms), and "final_gain_frobenius_ratio" (c). Compare each with
    `embedding_isotropy`'s "output_scaled_<variant>_<convention>"."""
    w_VxD, gain_D = jnp.asarray(w_out_VxD), jnp.asarray(final_gain_D)
    ratio = frobenius_ratio(w_VxD, gain_D)
    scaled_VxD = w_VxD * gain_D[None, :]
    out = {"final_gain_frobenius_ratio": ratio}
    keys = dict(zip(("raw", "centered"), jax.random.split(key)))
    for variant, centre in (("raw", lambda x: x), ("centered", _centred)):
        values = {"equalnorm": partition_isotropy_conventions(centre(w_VxD * ratio)),
                  "meangain": partition_isotropy_conventions(centre(w_VxD * jnp.mean(gain_D))),
                  "rowdir": row_direction_isotropy(centre(scaled_VxD), keys[variant], draws)}
        for control, conventions in values.items():
            for convention, value in conventions.items():
                out[f"output_{control}_{variant}_{convention}"] = value
    return out


def svd_projection_2d(w: Array, center: bool = False) -> Array:
    """Rows of w (N, D) projected on its two leading right singular vectors, (N, 2) — the 2-D
    view Machina & Mercer plot (centred first when `center`). Signs of the axes are arbitrary."""
    x = as_points(w)
    if center:
        x = x - jnp.mean(x, axis=0, keepdims=True)
    _, _, vt_KxD = jnp.linalg.svd(x, full_matrices=False)
    return jnp.einsum("nd,kd->nk", x, vt_KxD[:2], precision=_HI)
