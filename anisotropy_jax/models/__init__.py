"""Flax Linen models (below the studies and data, above metrics; .importlinter).

Every module returns `(output, probes)` with the canonical probe names (README "Probes");
`init`/`apply` are pure (no `sow`, no mutable collections), so `jax.vmap(module.init)` gives
parameters for many seeds. A model never sees a swept quantity such as the bias norm.

  layers           initialisers, precision, dense, LayerNorm, exact GELU, MLP
  attention        self-attention as named steps; the 'xla' | 'pallas' core chosen in one place
  fused_attention  the Pallas GPU kernel (attention + per-query softmax statistics)
  block            one Transformer block (post-LN, pre-LN, no LN)
  transformer      embeddings + blocks (+ final LayerNorm, + LM head)
  bert             Hugging Face BERT: config mapping, weight conversion, hidden-state forward
"""
