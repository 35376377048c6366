"""Flax Linen models (below the studies and data, above metrics; .importlinter).

Every module returns `(output, probes)` with the canonical probe names (README "Probes");
`init`/`apply` are pure (no `sow`, no mutable collections), so `jax.vmap(module.init)` gives
parameters for many seeds. A model never sees a swept quantity such as the bias norm.

  layers           initialisers, precision, dense, LayerNorm / RMSNorm, activations, MLPs
  attention        self-attention as named steps; `attention_core` shared by every family; the
                   'xla' | 'pallas' core chosen in one place
  fused_attention  the Pallas GPU kernel (attention + per-query softmax statistics)
  rotary           rotary position embeddings (GPT-NeoX / Llama convention)
  block            one Transformer block (post-LN, pre-LN, no LN)
  transformer      embeddings + blocks (+ final LayerNorm, + LM head): the from-scratch LMs
  registry         finds family modules by Hugging Face `model_type` (their `MODEL_TYPES`) and
                   documents the interface every family exposes
  families         bert, gpt2, gpt_neox, llama (over `decoder`), t5, mpnet, canine (over
                   `encoder_layer`, `relative_position`), vit, resnet, whisper, wav2vec2
                   (`modality_common`); file readers gguf, onnx_bert
"""
