"""A training run of experiments/train.py (orbax checkpoints) → a checkpoint series of Hugging
Face directories (`step_N/`: config.json, model.safetensors, tokenizer.json), loadable by
`models.registry` and analysable by the series study (docs/SERIES.md).

The training LMs are the `Transformer` of a registered family, so a run exports by renaming,
the family's name table inverted:
  mlm (post-LN encoder, embedding LayerNorm, exact GELU, learned positions, 257 ids: 256 bytes +
      MASK) → "bert" (BertModel); a one-row token-type embedding of zeros stands in for the
      missing segment embedding (adding 0 changes nothing).
  clm (pre-LN causal LM, final LayerNorm, exact GELU, learned positions, 256 byte ids) → "gpt2"
      (GPT2LMHeadModel) with activation_function "gelu".
The LM head of both is exported as it was trained (`head_tensors`; models/transformer.py: the
logits are final_hidden · Wᵀ + b with W the token embedding when tied, else the `output` Dense
kernel transposed, and b the output bias — `output_bias` (tied) or `output.bias` (untied)):
lm_head.weight (V, D) and lm_head.bias (V,), named in config.json "lm_head" with "tied"
(also "tie_word_embeddings"). transformers' GPT2LMHeadModel reads lm_head.weight but has no bias,
and BertForMaskedLM's head has a transform ours lacks, so `exported_logits` — the exported hidden
states (models/registry.py) times this head — is what reproduces the training run's logits
(tests/test_series.py). This package's families ignore the head tensors (listed as unused), so
their embedding analysis sees the input embedding only.

tokenizer.json is byte-level: the GPT-2 byte↔unicode alphabet, a BPE with the 256 bytes as its
vocabulary (id = byte value) and no merges, so any UTF-8 text maps to its bytes, as in training;
mlm adds "[MASK]" = 256 as a special token. No [CLS]/[SEP]/BOS: the models never saw any.
"""
from __future__ import annotations

import json
import os
import pathlib
from typing import Any, Iterable

import jax
import numpy as np

from anisotropy_jax import checkpointing, results
from anisotropy_jax.config import MASK_ID, NUM_BYTES, TrainConfig, require
from anisotropy_jax.models.families import bert, gpt2
from anisotropy_jax.models.formats import checkpoint
from anisotropy_jax.models import registry
from anisotropy_jax.studies import training

HEAD_WEIGHT, HEAD_BIAS = "lm_head.weight", "lm_head.bias"


def byte_alphabet() -> dict[int, str]:
    """GPT-2's reversible byte → printable unicode character map (256 entries)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = dict(zip(keep, keep)), 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + extra
            extra += 1
    return {b: chr(c) for b, c in chars.items()}


def byte_tokenizer_json(with_mask: bool) -> str:
    """tokenizer.json text of the byte tokenizer (module docstring)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {char: byte for byte, char in byte_alphabet().items()}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    if with_mask:
        tokenizer.add_special_tokens(["[MASK]"])
        if tokenizer.token_to_id("[MASK]") != MASK_ID:
            raise RuntimeError(f"[MASK] got id {tokenizer.token_to_id('[MASK]')}, not {MASK_ID}")
    return tokenizer.to_str()


def hf_config(config: TrainConfig) -> dict[str, Any]:
    """config.json of the exported family (bert for mlm, gpt2 for clm)."""
    model, seq_len = config.model, config.data.seq_len
    head = {"lm_head": {"weight": HEAD_WEIGHT, "bias": HEAD_BIAS, "tied": model.tie_embeddings},
            "tie_word_embeddings": model.tie_embeddings}
    if config.objective == "mlm":
        return {"model_type": "bert", "architectures": ["BertModel"],
                "hidden_size": model.d_model, "num_attention_heads": model.num_heads,
                "num_hidden_layers": model.num_layers, "intermediate_size": model.d_ff,
                "vocab_size": NUM_BYTES + 1, "max_position_embeddings": seq_len,
                "type_vocab_size": 1, "layer_norm_eps": model.layer_norm_eps,
                "hidden_act": "gelu", "initializer_range": model.init_std, "pad_token_id": 0,
                "position_embedding_type": "absolute", "hidden_dropout_prob": 0.0,
                "attention_probs_dropout_prob": 0.0, **head}
    return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": model.d_model,
            "n_head": model.num_heads, "n_layer": model.num_layers, "n_inner": model.d_ff,
            "vocab_size": NUM_BYTES, "n_positions": seq_len,
            "layer_norm_epsilon": model.layer_norm_eps, "activation_function": "gelu",
            "initializer_range": model.init_std, "pad_token_id": 0, "resid_pdrop": 0.0,
            "embd_pdrop": 0.0, "attn_pdrop": 0.0, **head}


def hf_tensors(params: dict, config: TrainConfig) -> dict[str, np.ndarray]:
    """The trained parameters under the exported family's names (`bert.to_hf`, or `gpt2.to_hf`
    under GPT2LMHeadModel's "transformer." prefix); the mlm gets a one-row token-type table of
    zeros, which BertModel needs."""
    cfg = config.transformer_config()
    if config.objective == "mlm":
        zeros = np.zeros((1, config.model.d_model), np.float32)
        return bert.to_hf({"type_embedding": {"embedding": zeros}, **params}, cfg)
    return {f"transformer.{name}": value for name, value in gpt2.to_hf(params, cfg).items()}


def head_tensors(params: dict, config: TrainConfig) -> dict[str, np.ndarray]:
    """{lm_head.weight (V, D), lm_head.bias (V,)}: the trained head of our Transformer
    (models/transformer.py), tied (token embedding + "output_bias") or untied ("output")."""
    if config.transformer_config().tie_embeddings:
        weight, bias = params["token_embedding"]["embedding"], params.get("output_bias")
    else:
        weight, bias = params["output"]["kernel"].T, params["output"].get("bias")
    if bias is None:
        raise ValueError("the trained model has no output bias (output_bias=False is not "
                         "exported)")
    return {HEAD_WEIGHT: weight, HEAD_BIAS: bias}


def exported_logits(model_dir: str | os.PathLike, tokens_BxL: np.ndarray) -> np.ndarray:
    """(B, L, V) float32 logits of an exported checkpoint: its last hidden state (the final
    LayerNorm's output for clm, the last layer's for mlm; models/registry.py) · lm_head.weightᵀ +
    lm_head.bias, as the trained model computes them."""
    loaded = registry.load(model_dir)
    tokens = np.asarray(tokens_BxL, np.int32)
    states = loaded.family.hidden_states_fn(loaded.config)(
        loaded.params, tokens, np.zeros_like(tokens), np.ones(tokens.shape, bool))
    tensors = checkpoint.load_state_dict(model_dir)
    head = np.asarray(tensors[HEAD_WEIGHT], np.float64)
    final = np.asarray(states[-1], np.float64)
    return (final @ head.T + np.asarray(tensors[HEAD_BIAS], np.float64)).astype(np.float32)


# The model fields whose value BERT and GPT-2 fix: a run with another one has no such export.
_HF_FIXED = {"norm_position": "auto", "norm_gain": "per_channel",
             "attention_normalization": "softmax", "attention_output_gate": False}


def require_exportable(config: TrainConfig) -> None:
    """One-line ConfigError when the run's model is not a BERT (mlm) or GPT-2 (clm): another
    norm position, norm gain, attention normalisation or an output gate."""
    for name, value in _HF_FIXED.items():
        require(getattr(config.model, name) == value, f"model.{name}",
                f"{getattr(config.model, name)!r}: a {config.objective} run exports as "
                f"{'BERT' if config.objective == 'mlm' else 'GPT-2'} only with {value!r}")


def write_checkpoint(params: dict, config: TrainConfig, out: pathlib.Path) -> pathlib.Path:
    """One exported directory (config.json, model.safetensors, tokenizer.json), atomically per
    file. `params` is the "params" tree of our Transformer."""
    from safetensors.numpy import save_file  # optional dependency: extra "pretrained"

    host = jax.tree.map(lambda a: np.asarray(a, np.float32), jax.device_get(params))
    tensors = hf_tensors(host, config)
    tensors.update(head_tensors(host, config))
    tensors = {k: np.ascontiguousarray(v, np.float32) for k, v in tensors.items()}
    out.mkdir(parents=True, exist_ok=True)
    with results.atomic_path(out / "model.safetensors") as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})
    results.write_text(out / "tokenizer.json", byte_tokenizer_json(config.objective == "mlm"))
    results.write_json(out / "config.json", hf_config(config))  # last: marks it complete
    return out


def export_training_run(workdir: str | os.PathLike, out_dir: str | os.PathLike,
                        steps: Iterable[int] | None = None) -> list[pathlib.Path]:
    """Writes every readable checkpoint (or those of `steps`) of the run in `workdir` as
    `out_dir/step_N/`. Returns the directories written, by ascending step. FileNotFoundError
    naming the folder when the run has no config.json or no checkpoints."""
    workdir, out_dir = pathlib.Path(workdir), pathlib.Path(out_dir)
    config = training.read_train_config(workdir)
    require_exportable(config)
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    abstract = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=device),
                            training.abstract_state(config)[0])
    written = []
    with checkpointing.manager(workdir / "checkpoints", read_only=True) as mngr:
        wanted = checkpointing.saved_steps(mngr) if steps is None else sorted(steps)
        if not wanted:
            raise FileNotFoundError(f"{workdir / 'checkpoints'}: no checkpoints to export")
        for step, state in checkpointing.iterate_readable(mngr, abstract, wanted):
            written.append(write_checkpoint(state["params"]["params"], config,
                                            out_dir / f"step_{step}"))
    (out_dir / "export.json").write_text(json.dumps(
        {"source_workdir": str(workdir), "objective": config.objective,
         "steps": [int(p.name.split("_")[1]) for p in written]}, indent=1) + "\n")
    return written
