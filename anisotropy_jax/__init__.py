"""anisotropy_jax: is anisotropy inherent to self-attention? Measure it, in JAX.

Layers, from the bottom (each imports only the layers below it; `.importlinter`, checked in CI):
config → results, cli → metrics → models → corpus → data, inputs, checkpointing, flops →
plotting → studies (sweep, training → dynamics, pretrained). See README.md "Layout".
"""
__version__ = "0.1.0"
