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
from absl import app, flags
from ml_collections import config_flags

from anisotropy_jax import cli, config, results
from anisotropy_jax.studies import embeddings
from anisotropy_jax.studies.embeddings import report

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "experiments/configs/embedding_isotropy.py[:smoke|:gpu]", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (created if missing).")


def main(argv: list[str]) -> None:
    del argv
    workdir = cli.workdir(_WORKDIR.value)
    cli.require_flag(_CONFIG.value, "config", "experiments/configs/embedding_isotropy.py:smoke")
    with cli.user_errors():
        cfg = config.from_mapping(config.EmbeddingsConfig, _CONFIG.value)  # nothing compiled
        provenance = results.Provenance()
        print(f"embedding isotropy: vocabulary {cfg.vocab_size}, widths {list(cfg.widths)}, "
              f"{cfg.num_layers} layers, {cfg.steps} steps, seeds {list(cfg.seeds)}, measured at "
              f"{list(cfg.measured_steps)}, on {embeddings.devices()}; workdir {workdir}",
              flush=True)
        result = embeddings.run(cfg, progress=report.progress_printer())
        doc = report.write(result, workdir, provenance, _CONFIG.value)
    print(report.format_report(doc))
    print(f"\nwrote {workdir}/results.json, results.npz, tokenizer.json, figures/ in "
          f"{result.seconds:.1f} s")


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags_or_exit)
