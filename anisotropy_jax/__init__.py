"""anisotropy_jax: is anisotropy inherent to self-attention? Measure it, in JAX.

Layers (each imports only the ones above it): config → model → metrics → inputs → sweep →
data/train/checkpointing/dynamics → pretrained → results/plotting. See README.md.
"""
__version__ = "0.1.0"
