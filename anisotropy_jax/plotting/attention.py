"""Attention maps: the softmax weights of a few heads at a few bias norms, as one grid figure."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from anisotropy_jax.plotting import new_figure


def attention_maps(weights_SxHxLxL, bias_norms: Sequence[float], heads: Sequence[int]):
    """Rows = bias norms s, columns = heads; each panel the (Lq, Lk) weights of one sequence.

    weights_SxHxLxL: attention weights (one sequence) per bias norm, as numpy or JAX arrays.
    Categorical attention shows as vertical stripes (every query attends the same keys).
    """
    weights = np.asarray(weights_SxHxLxL, np.float64)
    if weights.ndim != 4 or weights.shape[0] != len(bias_norms):
        raise ValueError(f"expected (len(bias_norms), H, L, L) weights, got {weights.shape}")
    fig, axes = new_figure(len(heads), len(bias_norms), width=2.2, height=2.2)
    for i, s in enumerate(bias_norms):
        for j, head in enumerate(heads):
            ax = axes[i, j]
            ax.imshow(weights[i, head], cmap="viridis", vmin=0.0, aspect="auto",
                      interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if i == len(bias_norms) - 1:
                ax.set_xlabel(f"key (head {head})")
            if j == 0:
                ax.set_ylabel(f"s = {s:g}\nquery")
    fig.suptitle("attention weights of one sequence (rows: bias norm s; columns: heads)")
    return fig
