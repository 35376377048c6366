"""Layer-wise anisotropy, drift and their correlation in a pretrained checkpoint of any family of
anisotropy_jax/models/registry.py (BERT, GPT-2, GPT-NeoX, Llama, T5/ByT5, CANINE, ...; ViT/DINOv2,
ResNet, Whisper, wav2vec 2.0 on images or audio: --config.inputs=DIR; a Hugging Face directory, a
GGUF file / a directory holding one, a CTranslate2 Whisper directory or a DINOv2 .onnx file).

  python experiments/pretrained_anisotropy.py \
      --config=experiments/configs/pretrained_anisotropy.py[:smoke] --workdir=DIR \
      [--config.model_dir=/path/to/model --config.text_file=corpus.txt --config.FIELD=VALUE]

Writes into DIR: config.json, sentences.txt, report.txt, figures/{cosine,drift,isotropy}_by_layer
.png and drift_vs_cosine.png, hidden_states[_untrained].npz with save_hidden_states, and
results.json last (anisotropy_jax/studies/pretrained/report.py; docs/PRETRAINED.md). A bad
flag, text file or checkpoint exits with status 2 and one line naming the field, before anything
is compiled; a non-finite metric exits with status 1.
"""
import sys

from absl import app, flags
from ml_collections import config_flags

from anisotropy_jax import cli, config, results
from anisotropy_jax.studies.pretrained import analysis, report

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file, e.g. experiments/configs/pretrained_anisotropy.py[:smoke].",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (created if missing).")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show a progress bar over batches (stderr).")


def _progress(iterable, name):
    from tqdm import tqdm

    return tqdm(iterable, desc=f"{name} forward", unit="batch", file=sys.stderr,
                disable=not _PROGRESS.value)


def main(argv: list[str]) -> None:
    del argv
    workdir = cli.workdir(_WORKDIR.value)
    cli.require_flag(_CONFIG.value, "config", "experiments/configs/pretrained_anisotropy.py")
    with cli.user_errors():
        cfg = config.from_mapping(config.PretrainedConfig, _CONFIG.value)
        inputs = analysis.validate(cfg)  # every check and all loading; nothing compiled yet
        provenance = results.Provenance()
        model = inputs.model
        what = "sentences" if inputs.media is None else f"{model.modality} inputs"
        print(f"model {model.model_dir} ({model.hf_config.get('model_type')}, "
              f"{model.shape['num_layers']} layers, d={model.shape['d_model']}, "
              f"{model.num_parameters:,} parameters); {len(inputs.sentences)} of "
              f"{inputs.num_candidate_sentences} {what} from {inputs.text_source}")
        result = analysis.run(cfg, inputs, progress=_progress)
        report.write(result, workdir, provenance)
    print(report.format_report(result))
    print(f"wrote {workdir}/results.json, report.txt, figures/*.png"
          + (", hidden_states*.npz" if cfg.save_hidden_states else ""))


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags_or_exit)
