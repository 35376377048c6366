"""Per-layer anisotropy and per-head query/key geometry of a series of checkpoints of one model,
against the training step (docs/PRETRAINED.md, "Checkpoint series").

  python experiments/checkpoint_series.py --config=experiments/configs/checkpoint_series.py \
      --config.series_dir=DIR --workdir=OUT

DIR holds one sub-folder per step (step_N, step-N, stepN, checkpoint-N, checkpoint_N or N), each a
Hugging Face directory of a registered family; our training runs are exported to that layout by
`anisotropy_jax.studies.series.export_training_run`. Writes into OUT: config.json, sentences.txt,
report.txt, series.npz, figures/layers_vs_step.png, figures/heads_vs_step.png and results.json
last. A bad flag, text file or series folder exits with status 2 and one line naming it, before
anything is compiled; a non-finite metric exits with status 1.
"""
import sys

from absl import app, flags
from ml_collections import config_flags

from anisotropy_jax import cli, config, results
from anisotropy_jax.studies import series

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file, e.g. experiments/configs/checkpoint_series.py[:smoke].",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (created if missing).")


def main(argv: list[str]) -> None:
    del argv
    workdir = cli.workdir(_WORKDIR.value)
    cli.require_flag(_CONFIG.value, "config", "experiments/configs/checkpoint_series.py")
    with cli.user_errors():
        cfg = config.from_mapping(config.SeriesConfig, _CONFIG.value)
        inputs = series.validate(cfg)  # every check; nothing compiled yet
        provenance = results.Provenance()
        print(f"{len(inputs.series.checkpoints)} checkpoints of {inputs.series.family.name} "
              f"(steps {inputs.series.steps[0]} … {inputs.series.steps[-1]}); "
              f"{len(inputs.sentences)} sentences from {inputs.text_source}")
        result = series.run(cfg, inputs, progress=lambda m: print(m, file=sys.stderr, flush=True))
        series.write(result, workdir, provenance)
    print(series.format_report(result))
    print(f"wrote {workdir}/results.json, report.txt, series.npz, figures/*.png")


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags_or_exit)
