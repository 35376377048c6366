"""Flax Linen models (below the studies and data, above metrics; .importlinter).

Every module returns `(output, probes)` with the canonical probe names (README "Probes");
`init`/`apply` are pure (no `sow`, no mutable collections), so `jax.vmap(module.init)` gives
parameters for many seeds. A model never sees a swept quantity such as the bias norm.

Three rooms, each importing only the ones listed after it:

  registry         finds every family's `FAMILY` by Hugging Face `model_type`, or by the native
                   format a family declares; reads a checkpoint's config once; `load`
  families/        one module per model family: bert, gpt2, gpt_neox, llama, qwen2, gemma3, t5,
                   mpnet, canine, vit, resnet, whisper, wav2vec2 (docs/EXTENDING.md: adding one)
  the building blocks, here:
    transformer      embeddings + blocks (+ final norm, + LM head): the one token stack, shared
                     by the training LMs and the BERT, GPT-2, GPT-NeoX, Llama, Qwen2 and Gemma-3
                     families
    family           `Family`: a family as a value; the shared apply / hidden states / init
    block            THE block (`Block`): every family, the sweep, the depth stacks, the LMs
    attention        self-attention as named steps (project → logits → mask → normalise → mix →
                     output); NORMALIZATIONS; the 'xla' | local | 'pallas' core chosen in one place
    layers           initialisers, precision, dense, LayerNorm / RMSNorm, activations, the MLP
    normalizations   the normalisation step's functions: softmax, off-by-one, sigmoid (scalar
                     bias −ln L), sigmoid_per_query_bias, softpick, clipped softmax
    fused_attention  the Pallas GPU kernel (attention + per-query softmax statistics)
    rotary           rotary position embeddings (GPT-NeoX / Llama convention) and the one reading
                     of a checkpoint's rotary settings
    relative_position  T5 / MPNet relative-position buckets and the shared logit bias
  formats/         checkpoint files: checkpoint (config.json, safetensors, the one TensorReader,
                   PretrainedError, the config-key check), gguf, onnx, ctranslate2

The modules that lived here before the rooms (`anisotropy_jax.models.bert`, `.gguf`,
`.checkpoint`, `.onnx_bert`, `.ct2_format`, ...) are still reachable as attributes:
`from anisotropy_jax.models import bert` gives `anisotropy_jax.models.families.bert`.
"""
from __future__ import annotations

import importlib
from typing import Any

_FAMILIES = ("bert", "canine", "gemma3", "gpt2", "gpt_neox", "llama", "mpnet", "qwen2",
             "resnet", "t5", "vit", "wav2vec2", "whisper")
# Former module name → its module in the rooms.
MOVED = {**{name: f"families.{name}" for name in _FAMILIES},
         "checkpoint": "formats.checkpoint", "gguf": "formats.gguf",
         "onnx_bert": "formats.onnx", "ct2_format": "formats.ctranslate2"}


def __getattr__(name: str) -> Any:
    if name in MOVED:
        return importlib.import_module(f"{__name__}.{MOVED[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
