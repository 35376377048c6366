"""Machina & Mercer's object: partition isotropy of the embedding matrices of GPT-NeoX-style
causal LMs trained on a byte-level BPE vocabulary, along checkpoints and across widths
(docs/EMBEDDINGS.md).

  python experiments/embedding_isotropy.py \
      --config=experiments/configs/embedding_isotropy.py[:smoke|:gpu] --workdir=DIR \
      [--config.FIELD=VALUE ...]

Prints a line per measured checkpoint, then the tables; writes DIR/tokenizer.json, results.npz,
figures/{isotropy,training,svd_D<width>}.png and, last, results.json
(anisotropy_jax/studies/embeddings/report.py). A bad flag or config exits with status 2 and one
line naming the field before anything is compiled; a non-finite loss or metric exits with 1.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("embeddings", "experiments/configs/embedding_isotropy.py:smoke")
