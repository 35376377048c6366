"""Checkpoint file formats: `checkpoint` (a Hugging Face directory: config.json, safetensors; the
one TensorReader; PretrainedError; the check of config.json keys), `gguf` (llama.cpp; `gguf_file`
reads its header, `gguf_packages` finds the offline models), `onnx` (PyTorch-exported graphs) and
`ctranslate2` (model.bin). A format names no family: what a family reads of a format (GGUF
architecture, ONNX graph, CTranslate2 spec) is declared by the family as a
`checkpoint.NativeFormat` (models/family.py)."""
