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
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from anisotropy_jax.metrics.geometry import log_partition_functions
from anisotropy_jax.metrics.norms import as_points

Array = jax.Array
_HI = jax.lax.Precision.HIGHEST


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
        for variant, x in (("raw", w), ("centered", w - jnp.mean(w, axis=0, keepdims=True))):
            for convention, value in partition_isotropy_conventions(x).items():
                out[f"{name}_{variant}_{convention}"] = value
    return out


def svd_projection_2d(w: Array, center: bool = False) -> Array:
    """Rows of w (N, D) projected on its two leading right singular vectors, (N, 2) — the 2-D
    view Machina & Mercer plot (centred first when `center`). Signs of the axes are arbitrary."""
    x = as_points(w)
    if center:
        x = x - jnp.mean(x, axis=0, keepdims=True)
    _, _, vt_KxD = jnp.linalg.svd(x, full_matrices=False)
    return jnp.einsum("nd,kd->nk", x, vt_KxD[:2], precision=_HI)
