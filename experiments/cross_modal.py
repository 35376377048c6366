"""Cross-modal comparison: the pretrained study on every offline model of every modality, then one
figure of per-layer average cosine against relative depth (trained solid, untrained dashed) and a
table (anisotropy_jax/studies/pretrained/cross_modal.py; docs/MODALITIES.md).

  python experiments/cross_modal.py --config=experiments/configs/cross_modal.py[:smoke] \
      --workdir=DIR [--config.models="('DINOv2-S',)"] [--config.reuse=False] \
      [--config.pretrained.FIELD=V]

Writes DIR/<model>/ (the pretrained study's outputs, results.json last), DIR/figures/
cross_modal.png, DIR/cross_modal.md and DIR/results.json (last). Models not installed are skipped
and listed. A bad field or input exits with status 2 and one line naming it.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("cross-modal", "experiments/configs/cross_modal.py")
