"""Partition isotropy of the embedding matrices of BPE LMs trained here (docs/EMBEDDINGS.md).

  python experiments/embeddings.py --workdir=DIR [--config=embeddings:VARIANT] [--config.FIELD=VALUE ...]

The same as `anisotropy-jax embeddings ...`; `--help` lists its flags, variants and config fields.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("embeddings")
