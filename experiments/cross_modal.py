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
import sys

from absl import app, flags
from ml_collections import config_flags

from anisotropy_jax import cli, config, results
from anisotropy_jax.config.pretrained import CrossModalConfig
from anisotropy_jax.studies.pretrained import cross_modal

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file, e.g. experiments/configs/cross_modal.py[:smoke].",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (created if missing).")


def main(argv: list[str]) -> None:
    del argv
    workdir = cli.workdir(_WORKDIR.value)
    cli.require_flag(_CONFIG.value, "config", "experiments/configs/cross_modal.py")
    with cli.user_errors():
        cfg = config.from_mapping(CrossModalConfig, _CONFIG.value)
        provenance = results.Provenance()
        skipped = cross_modal.run_models(cfg, workdir)
        models = cross_modal.collect(workdir, cfg.models)
        if not models:
            cli.fail(f"models: none measured ({'; '.join(f'{k}: {v}' for k, v in skipped.items())})")
        cross_modal.write(models, skipped, workdir, provenance, " ".join(["python", *sys.argv]))
    print(cross_modal.table(models))
    print(f"wrote {workdir}/results.json, cross_modal.md, figures/cross_modal.png"
          + (f"; skipped {sorted(skipped)}" if skipped else ""))


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags_or_exit)
