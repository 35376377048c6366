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
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("pretrained", "experiments/configs/pretrained_anisotropy.py")
