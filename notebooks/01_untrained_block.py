# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 — One untrained Transformer block and a common input bias
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/)
# (upload this notebook, or open it from your copy of the repository)
#
# Godey et al. (EACL 2024) argue that a common bias in a block's inputs makes self-attention
# sharper: all queries come to prefer the same keys. This notebook runs the library's bias sweep
# (`anisotropy_jax.studies.sweep`) on one BERT-base layer at initialisation, prints the closed
# forms of docs/SCIENCE.md beside the measurements, and shows attention maps as the bias norm
# grows. Everything computed here is a library call; the notebook holds no logic of its own.
#
# Set `ANISOTROPY_JAX_SMOKE=1` for a tiny, seconds-long run (CI executes it that way).

# %%
# Guarded install: only when the package is missing (e.g. a fresh Colab runtime). Point
# ANISOTROPY_JAX_SOURCE at your copy of the repository (a path or a pip-installable URL).
import importlib.util
import os
import subprocess
import sys

if importlib.util.find_spec("anisotropy_jax") is None:
    source = os.environ.get("ANISOTROPY_JAX_SOURCE", "..")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], check=True)

# %%
import jax
import numpy as np
import treescope

from anisotropy_jax.config import BlockConfig, SweepConfig
from anisotropy_jax.models import fused_attention
from anisotropy_jax.models.block import TransformerBlock
from anisotropy_jax.plotting import attention as attention_plots, sweep as sweep_plots
from anisotropy_jax.studies import sweep
from anisotropy_jax.studies.sweep import affine, grid, report

SMOKE = os.environ.get("ANISOTROPY_JAX_SMOKE", "0") == "1"
print(jax.default_backend(), jax.devices())

# %% [markdown]
# ## The block and the grid
# BERT-base post-LN, N(0, 0.02²) weights (smoke: a 64-wide block). The attention core is the
# platform's default: the fused Pallas kernel on GPUs, XLA einsums on CPUs and TPUs.

# %%
if SMOKE:
    block = BlockConfig(d_model=64, num_heads=4, d_ff=128)
    config = SweepConfig(block=block, batch_size=4, seq_len=16, num_seeds=2,
                         bias_norms=(0.0, 1.0, 4.0, 16.0, 64.0, 256.0))
else:
    block = BlockConfig()
    config = SweepConfig(block=block)  # the README's main job: 30 bias norms × 3 seeds
impl = fused_attention.default_impl(config.seq_len, block.d_head)
print("attention core on this platform:", impl)
params = TransformerBlock(block).init(jax.random.key(0), np.zeros((1, 2, block.d_model)))
treescope.render_to_text(jax.tree.map(lambda a: a.shape, params))

# %% [markdown]
# ## The sweep and its closed forms

# %%
result = sweep.run(config)
summary = report.run_summary("this notebook", result)
print(report.format_table(summary))

# %%
sweep_plots.cosine_figure({"this notebook": summary})

# %%
sweep_plots.attention_figure({"this notebook": summary})

# %% [markdown]
# ## Attention maps as the bias norm grows
# The weights of one sequence for a few heads of seed 0, at a few bias norms. With post-LN the
# maps turn into vertical stripes: every query attends to the same keys.

# %%
state = grid.init_seeds(config)
params0, z0, u0 = (jax.tree.map(lambda a: a[0], tree) for tree in state)
shown = [s for s in config.bias_norms if s in (0.0, 16.0, 256.0)] or list(config.bias_norms[:3])
maps = [affine.block_at(block, params0, z0, u0, s)[1]["attn_weights"][0] for s in shown]
attention_plots.attention_maps(np.stack(maps), shown, heads=range(min(4, block.num_heads)))
