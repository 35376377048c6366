"""Flax Linen models (below the studies and data, above metrics; .importlinter).

Every module returns `(output, probes)` with the canonical probe names (README "Probes");
`init`/`apply` are pure (no `sow`, no mutable collections), so `jax.vmap(module.init)` gives
parameters for many seeds. A model never sees a swept quantity such as the bias norm.

  layers           initialisers, precision, dense, LayerNorm / RMSNorm, activations, the MLP
  attention        self-attention as named steps (project → logits → mask → normalise → mix →
                   output); NORMALIZATIONS; the 'xla' | local | 'pallas' core chosen in one place
  normalizations   the normalisation step's functions: softmax, off-by-one, sigmoid, softpick,
                   clipped softmax
  fused_attention  the Pallas GPU kernel (attention + per-query softmax statistics)
  rotary           rotary position embeddings (GPT-NeoX / Llama convention)
  relative_position  T5 / MPNet relative-position buckets and the shared logit bias
  block            THE block (`Block`): every family, the sweep, the depth stacks, the LMs
  transformer      embeddings + blocks (+ final norm, + LM head): the one token stack, shared
                   by the training LMs and the BERT, GPT-2, GPT-NeoX, Llama, Qwen2 and Gemma-3
                   families
  checkpoint       config.json, safetensors, the one TensorReader, PretrainedError
  family           `Family`: a family as a value; the shared apply / hidden states / init
  registry         finds every module's `FAMILY` by Hugging Face `model_type`; `load`
  families         bert, gpt2, gpt_neox, llama, qwen2, gemma3, t5, mpnet, canine, vit, resnet,
                   whisper, wav2vec2 (docs/EXTENDING.md: adding one); file readers gguf, onnx_bert,
                   ct2_format
"""
