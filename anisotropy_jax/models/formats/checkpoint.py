"""Reading checkpoints from disk: config.json, safetensors (one file or shards), and the one
tensor reader every family's name table goes through. Every problem is a `PretrainedError`: one
line that names the file and what is wrong with it. The GGUF, ONNX and CTranslate2 readers
(`gguf`, `onnx`, `ctranslate2`) have their own file formats but raise the same error.

Also here, what every format shares with the families:
  Format, NativeFormat   a file format other than a Hugging Face directory, and what one family
                         reads of it (declared by the family: `Family.native_formats`)
  check_keys             a family refuses config.json keys it does not handle: each family lists
                         the keys it reads and those it knows to be irrelevant; any other key
                         might change the computation, so it is a PretrainedError naming the
                         file and the key (IRRELEVANT_KEYS: those of every family)
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import pathlib
import re
from typing import Any, Callable, Collection, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.config import ConfigError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
TOKENIZER_FILE = "tokenizer.json"


class PretrainedError(ConfigError):
    """A checkpoint cannot be used. The message is one line naming the file and the problem."""


# config.json keys that change nothing a family computes (hidden states from weights): the hub's
# and transformers' bookkeeping, token ids (padding is masked; a family that reads one lists it),
# the heads and tasks a base model does not run, dropout (inference only), generation settings,
# and what the native formats write about the file they came from.
IRRELEVANT_KEYS = frozenset({
    "_name_or_path", "_commit_hash", "architectures", "auto_map", "model_type",
    "transformers_version", "torch_dtype", "dtype", "use_cache", "return_dict",
    "output_hidden_states", "output_attentions", "torchscript", "tie_encoder_decoder",
    "chunk_size_feed_forward", "pruned_heads", "gradient_checkpointing",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "cls_token_id",
    "unk_token_id", "mask_token_id", "decoder_start_token_id", "forced_bos_token_id",
    "forced_eos_token_id", "id2label", "label2id", "num_labels", "problem_type",
    "finetuning_task", "task_specific_params", "tokenizer_class", "prefix",
    "classifier_dropout", "summary_type", "summary_use_proj", "summary_activation",
    "summary_proj_to_labels", "summary_first_dropout",
    "hidden_dropout_prob", "attention_probs_dropout_prob", "hidden_dropout", "attention_dropout",
    "activation_dropout", "dropout", "dropout_rate", "resid_pdrop", "embd_pdrop", "attn_pdrop",
    "gguf_file", "gguf_file_type", "converted_from", "ctranslate2_spec", "source",
    # The LM head of a training run exported as a series (studies/series/export.py): the hidden
    # states never use it, and the families list its tensors as unused.
    "lm_head"})


def check_keys(hf_config: dict[str, Any], known: Collection[str], source: str,
               family: str) -> None:
    """PretrainedError naming `source` and the keys of `hf_config` that are neither in `known`
    (the family's handled and irrelevant keys) nor in IRRELEVANT_KEYS: a setting the family
    would otherwise ignore silently."""
    unknown = sorted(set(hf_config) - IRRELEVANT_KEYS - set(known))
    if unknown:
        raise PretrainedError(f"{source}: unsupported config key{'s' * (len(unknown) > 1)} "
                              f"{', '.join(map(repr, unknown))}: the {family} family does not "
                              "handle it (its CONFIG_KEYS)")


@dataclasses.dataclass(frozen=True)
class Format:
    """A checkpoint file format other than a Hugging Face directory. `probe(path)`: (the file or
    folder of this format that `path` designates, the key saying what it holds, e.g. GGUF's
    general.architecture or a CTranslate2 spec name), or None when `path` is not of this
    format."""

    name: str
    probe: Callable[[pathlib.Path], tuple[pathlib.Path, str] | None]


@dataclasses.dataclass(frozen=True)
class NativeFormat:
    """What a family reads of one `Format`: the files whose key is `key` (None: every file of the
    format). `read_config(file)` → the config.json-equivalent mapping (the family's
    config_from_hf takes it); `read_tensors(file, mapping)` → tensors under the names `convert`
    takes (None: the family's own convert); `tokenizer_json(file)` → a tokenizer.json string."""

    format: Format
    key: str | None
    read_config: Callable[[pathlib.Path], dict[str, Any]]
    read_tensors: Callable[[pathlib.Path, dict[str, Any]], dict[str, np.ndarray]]
    convert: Callable[..., Any] | None = None
    tokenizer_json: Callable[[pathlib.Path], str] | None = None


def read_hf_config(model_dir: str | pathlib.Path) -> dict[str, Any]:
    """The parsed config.json of a checkpoint directory (PretrainedError if absent or invalid)."""
    model_dir = pathlib.Path(model_dir)
    if model_dir.is_file():
        raise PretrainedError(f"{model_dir}: is a file, not a model directory (config.json and "
                              "weights), a .gguf, a DINOv2 .onnx or a CTranslate2 Whisper folder")
    if not model_dir.is_dir():
        raise PretrainedError(f"{model_dir}: model directory does not exist")
    path = model_dir / CONFIG_FILE
    if not path.is_file():
        raise PretrainedError(f"{model_dir}: missing {CONFIG_FILE}")
    try:
        hf_config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PretrainedError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(hf_config, dict):
        raise PretrainedError(f"{path}: expected a JSON object")
    return hf_config


def load_state_dict(model_dir: str | pathlib.Path) -> dict[str, np.ndarray]:
    """All tensors of model.safetensors (or of the shards listed in model.safetensors.index.json).

    No torch: `safetensors.numpy` (bfloat16 files through `safetensors.flax`, upcast to
    float32). Raises PretrainedError when no safetensors file is there or it cannot be read.
    """
    from safetensors.numpy import load_file  # optional dependency: extra "pretrained"

    model_dir = pathlib.Path(model_dir)
    single, index = model_dir / WEIGHTS_FILE, model_dir / WEIGHTS_INDEX_FILE
    if single.is_file():
        files = [single]
    elif index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map", {})
        files = [model_dir / f for f in sorted(set(weight_map.values()))]
        absent = [f.name for f in files if not f.is_file()]
        if absent:
            raise PretrainedError(f"{model_dir}: missing weight shards {absent}")
    else:
        others = sorted(p.name for p in model_dir.glob("*.bin")) + sorted(
            p.name for p in model_dir.glob("*.h5"))
        hint = f" (found {others}; convert them to safetensors)" if others else ""
        raise PretrainedError(f"{model_dir}: missing {WEIGHTS_FILE}{hint}")
    tensors: dict[str, np.ndarray] = {}
    for f in files:
        try:
            try:
                tensors.update(load_file(str(f)))
            except TypeError:  # numpy has no bfloat16: read through JAX, upcast to float32
                from safetensors.flax import load_file as load_file_jax

                tensors.update({k: np.asarray(v.astype(jnp.float32) if v.dtype == jnp.bfloat16
                                              else v) for k, v in load_file_jax(str(f)).items()})
        except Exception as e:  # safetensors raises its own error types for corrupt files
            message = " ".join(str(e).split())
            raise PretrainedError(f"{f}: cannot read safetensors ({type(e).__name__}: "
                                  f"{message})") from None
    return tensors


def detect_prefix(tensors: dict[str, Any], anchor: str, prefixes: Sequence[str]) -> str:
    """The prefix ('' or one of `prefixes`, e.g. 'model.') under which `anchor` is stored; ''
    when none matches."""
    return next((p for p in ("",) + tuple(prefixes) if p + anchor in tensors), "")


def config_error(source: str, error: Exception) -> PretrainedError:
    """A config value the family rejected, as one line naming `source`."""
    return PretrainedError(f"{source}: {' '.join(str(error).split())}")


@contextlib.contextmanager
def config_errors(source: str) -> Iterator[None]:
    """Inside, a ValueError or TypeError (a rejected or malformed config.json value, a
    BlockConfig field out of range) becomes one PretrainedError line naming `source`."""
    try:
        yield
    except (ValueError, TypeError) as e:  # ConfigError and PretrainedError are ValueErrors
        raise config_error(source, e) from None


def require_keys(hf_config: dict[str, Any], keys: Sequence[str], source: str) -> None:
    missing = [k for k in keys if k not in hf_config]
    if missing:
        raise PretrainedError(f"{source}: missing required keys {missing}")


def int_or(hf_config: dict[str, Any], keys: Sequence[str], default: int) -> int:
    """The first of `keys` that config.json holds as an integer (not a bool), else `default`."""
    for key in keys:
        value = hf_config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return default


def tree_get(tree: dict[str, Any], path: Sequence[str]) -> Any:
    """tree[path[0]][path[1]]…: one node of a parameter tree."""
    for key in path:
        tree = tree[key]
    return tree


def torch_tensors(module: dict[str, Any]) -> dict[str, np.ndarray]:
    """One module's parameters under PyTorch's names, the inverse of `TensorReader`'s `get`,
    `norm` and `linear`: a table's weight; a norm's weight (= scale) and bias; a Linear's weight
    (out, in) = kernelᵀ and bias."""
    if "embedding" in module:
        return {"weight": module["embedding"]}
    if "scale" in module:
        return {"weight": module["scale"], **({"bias": module["bias"]} if "bias" in module else {})}
    return {"weight": np.asarray(module["kernel"]).T,
            **({"bias": module["bias"]} if "bias" in module else {})}


def block_names(qkv: Sequence[str], out: str, attention_norm: str, fc_in: str, fc_out: str,
                mlp_norm: str, fc_gate: str | None = None) -> dict[tuple[str, ...], str]:
    """A family's name table of one block: Block parameter path → the checkpoint's module name
    (relative to the layer). `qkv`: the query, key and value projections; `fc_gate`: the
    activated half of a gated MLP."""
    names = {("attention", "query"): qkv[0], ("attention", "key"): qkv[1],
             ("attention", "value"): qkv[2], ("attention", "out"): out,
             ("attention_norm",): attention_norm, ("mlp", "fc_in"): fc_in,
             ("mlp", "fc_out"): fc_out, ("mlp_norm",): mlp_norm}
    return names if fc_gate is None else {**names, ("mlp", "fc_gate"): fc_gate}


class TensorReader:
    """Takes a checkpoint's tensors by name (after `prefix`), as float32, checking shapes, and
    records what was used, what is missing and what is misshapen; `finish` turns those records
    into one PretrainedError line. Every family's name table goes through one of these.
    `sep` joins a module name and its "weight"/"bias" in `linear` and `norm` ("/" in
    CTranslate2 files)."""

    def __init__(self, tensors: dict[str, np.ndarray], prefix: str = "", sep: str = "."):
        self.tensors, self.prefix, self.sep = tensors, prefix, sep
        self.used: set[str] = set()
        self.missing: list[str] = []
        self.wrong: list[str] = []

    def has(self, name: str) -> bool:
        return self.prefix + name in self.tensors

    def get(self, name: str, shape: Sequence[int] | None, aliases: Sequence[str] = (),
            prefixed: bool = True) -> np.ndarray | None:
        """The float32 tensor `prefix + name` (or the first of `aliases` present; just `name`
        when not `prefixed`, e.g. an LM head stored beside the base model), or None with the
        problem recorded. A tensor of the right size stored flat or with extra unit axes
        (e.g. a (1, 1, D) token stored as (D,)) is reshaped to `shape`; None: any shape."""
        for candidate in (self.prefix + n if prefixed else n for n in (name, *aliases)):
            if candidate not in self.tensors:
                continue
            value = np.asarray(self.tensors[candidate])
            self.used.add(candidate)
            if not jnp.issubdtype(value.dtype, jnp.floating):  # bfloat16 counts too
                self.wrong.append(f"{candidate} has dtype {value.dtype}, expected float")
                return None
            if shape is not None and tuple(value.shape) != tuple(shape):
                if value.size == int(np.prod(shape)) and _squeezed(value.shape) == _squeezed(
                        shape):
                    value = value.reshape(shape)
                else:
                    self.wrong.append(f"{candidate} has shape {tuple(value.shape)}, "
                                      f"expected {tuple(shape)}")
                    return None
            return value.astype(np.float32)
        self.missing.append(self.prefix + name if prefixed else name)
        return None

    def linear(self, name: str, d_in: int | None, d_out: int | None, bias: bool = True,
               scale: np.ndarray | None = None) -> dict[str, Any]:
        """A Dense layer from a PyTorch Linear: the (out, in) weight transposed to the (in, out)
        kernel; `bias` False: no bias; `scale` (out,): folded into kernel and bias."""
        shape = None if d_in is None else (d_out, d_in)
        weight = self.get(name + self.sep + "weight", shape)
        kernel = None if weight is None else np.ascontiguousarray(weight.T)
        params: dict[str, Any] = {"kernel": kernel}
        if bias:
            params["bias"] = self.get(name + self.sep + "bias", None if weight is None else (
                weight.shape[0],))
        if scale is not None and kernel is not None:
            params["kernel"] = kernel * scale[None, :]
            if params.get("bias") is not None:
                params["bias"] = params["bias"] * scale
        return params

    def norm(self, name: str, width: int, bias: bool = True) -> dict[str, Any]:
        """A LayerNorm (weight/bias or the old gamma/beta names) or, with bias False, an RMSNorm."""
        params = {"scale": self.get(name + self.sep + "weight", (width,),
                                     aliases=(name + self.sep + "gamma",))}
        if bias:
            params["bias"] = self.get(name + self.sep + "bias", (width,),
                                      aliases=(name + self.sep + "beta",))
        return params

    def block(self, names: dict[tuple[str, ...], str], cfg: Any) -> dict[str, Any]:
        """The parameters of one `Block(cfg)` from a name table: parameter path (("attention",
        "query"), ("mlp", "fc_in"), ("attention_norm",), …) → Hugging Face module name, a
        PyTorch Linear or, where the path ends in "norm", a norm of cfg.norm's kind. Shapes
        and biases follow the BlockConfig `cfg`."""
        d, f = cfg.d_model, cfg.d_ff
        q, kv = cfg.num_heads * cfg.d_head, cfg.kv_heads * cfg.d_head
        shapes = {"query": (d, q), "key": (d, kv), "value": (d, kv), "out": (q, d),
                  "fc_in": (d, f), "fc_gate": (d, f), "fc_out": (f, d)}
        groups = {"query": "qkv", "key": "qkv", "value": "qkv", "out": "out"}
        params: dict[str, Any] = {}
        for path, name in names.items():
            tree = params
            for key in path[:-1]:
                tree = tree.setdefault(key, {})
            leaf = path[-1]
            tree[leaf] = (self.norm(name, d, bias=cfg.norm == "layer") if leaf.endswith("norm")
                          else self.linear(name, *shapes[leaf], bias=cfg.bias(
                              groups.get(leaf, "mlp"))))
        return params

    def finish(self, params: dict[str, Any], source: str, layer_pattern: str | None = None,
               num_layers: int = 0) -> tuple[dict[str, Any], list[str]]:
        """({"params": tree} as jax arrays, the names of the tensors not used), or one
        PretrainedError line naming `source`: the missing tensors (the first 8, then a count),
        the misshapen ones, or a tensor of a layer beyond `num_layers` (`layer_pattern`: a regex
        over names after the prefix whose group 1 is the layer index)."""
        if self.missing:
            shown = ", ".join(self.missing[:8]) + (
                f", ... ({len(self.missing)} missing in all)" if len(self.missing) > 8 else "")
            raise PretrainedError(f"{source}: missing tensors {shown}")
        if self.wrong:
            raise PretrainedError(f"{source}: {'; '.join(self.wrong[:4])}")
        unused = sorted(set(self.tensors) - self.used)
        if layer_pattern is not None:
            pattern = re.compile(re.escape(self.prefix) + layer_pattern)
            beyond = [k for k in unused if (m := pattern.match(k)) and int(m.group(1)) >= num_layers]
            if beyond:
                raise PretrainedError(f"{source}: tensors of layers beyond num_hidden_layers="
                                      f"{num_layers}, e.g. {beyond[0]}")
        return {"params": jax.tree.map(jnp.asarray, params)}, unused


def _squeezed(shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(n for n in shape if n != 1)
