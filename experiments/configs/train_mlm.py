"""Training config: BERT-style post-LN byte-level encoder with masked-LM loss on Shakespeare
(issue 4).

Run (defaults: about 15 minutes on 2 CPU cores, then the per-checkpoint analysis):
  python experiments/train.py --config=experiments/configs/train_mlm.py --workdir=runs/mlm
  python experiments/qk_dynamics.py --workdir=runs/mlm      # re-run the analysis alone
Variants (the `:arg` suffix):
  :smoke  tiny model, 40 steps, under a minute on 2 CPU cores (CI)
  :small  d = 128, 4 layers, 300 steps (the seeded CPU runs; experiments/train_seeds.py)
  :gpu    sized for one H100 (a few minutes)
Override any field with --config.FIELD=VALUE, e.g.
  --config.steps=2000 --config.model.tie_embeddings=False
Every field, default and variant: experiments/configs/train_common.py (shared with train_clm.py).
"""
import importlib.util
import pathlib

_spec = importlib.util.spec_from_file_location(
    "train_common", pathlib.Path(__file__).with_name("train_common.py"))
train_common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train_common)
VARIANTS = train_common.VARIANTS


def get_config(arg=None):
    # 'mlm': post-LN encoder with embedding LayerNorm, masked-byte loss; LayerNorm epsilon of BERT.
    return train_common.get_config(arg, objective="mlm", layer_norm_eps=1e-12)
