"""The CANINE family (CanineModel / CanineFor* checkpoints, e.g. canine-s and canine-c): Hugging
Face config mapping, weight conversion and forward (no torch), following transformers'
CanineModel step by step:

  1. characters: Unicode code points, [CLS] = U+E000, [SEP] = U+E001 (`encode_text`);
  2. hash embeddings: for the k-th of `num_hash_functions` primes p_k, the bucket
     ((id + 1) · p_k) mod num_hash_buckets indexes a table of width D / num_hash_functions; the
     shards are concatenated, plus token-type and character-position embeddings, LayerNorm;
  3. the initial shallow encoder: one post-LN BERT layer with local attention, each chunk of
     `local_transformer_stride` characters attending only to itself;
  4. downsampling: a strided convolution (kernel = stride = downsampling_rate) → GELU; its last
     output is dropped and the [CLS] character state is put in front → LayerNorm: M = ⌊L/r⌋
     molecules, masked by max-pooling the character mask over windows of r (transformers pairs
     pooled window m with molecule m, although molecule m ≥ 1 comes from window m − 1; kept);
  5. the deep Transformer: num_hidden_layers post-LN BERT layers over the molecules;
  6. upsampling: molecules 1 … M−1 each repeated r times, the last repeated r + L mod r times,
     concatenated with the initial encoder's output (2D channels) → convolution of width
     upsampling_kernel_size with zero padding ((K−1)//2 before, the rest after) → GELU →
     LayerNorm;
  7. the final shallow encoder: one post-LN BERT layer with full attention.
The pooler and heads are not used. transformers' output_hidden_states and output_attentions list
the initial encoder's input and output, the deep encoder's input and outputs (molecules) and the
final encoder's input and output; every one equals `transformers.CanineModel` in float32 within
1e-4 (tests/test_families_encoders.py; for the local layer, every chunk's attention, where
transformers returns the first chunk's only).

`hidden_states_fn` stacks the states at character resolution, the molecule states upsampled as
step 6 does, except that the [CLS] character keeps the [CLS] molecule (so the characters of one
molecule share one state: pairs of them have cosine 1 and weigh in the anisotropy metrics);
`apply_fn`'s probes keep the deep blocks at molecule resolution ("molecule_mask").

Name mapping ("canine." prefix accepted):
  char_embeddings.HashBucketCodepointEmbedder_k     hash_embedding_k
  char_embeddings.{char_position,token_type}_embeddings, LayerNorm
                                                    position_embedding, type_embedding, embedding_norm
  initial_char_encoder.layer.0 / final_char_encoder.layer.0 / encoder.layer.i
                                                    initial_layer / final_layer / layer_i (BERT names)
  chars_to_molecules.conv (D, D, r), LayerNorm      downsample_conv.kernel (r, D, D), downsample_norm
  projection.conv (D, 2D, K), LayerNorm             upsample_conv.kernel (K, 2D, D), upsample_norm
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.config import require
from anisotropy_jax.models import registry
from anisotropy_jax.models.bert import CONFIG_FILE, WEIGHTS_FILE, PretrainedError
from anisotropy_jax.models.encoder_layer import (EncoderLayer, EncoderLayerConfig, TensorReader,
                                                 layer_params)
from anisotropy_jax.models.layers import gelu_exact, matmul_settings

MODEL_TYPES = ("canine",)
CAUSAL = False
PRIMES = (31, 43, 59, 61, 73, 97, 103, 113, 137, 149, 157, 173, 181, 193, 211, 223)
CLS, SEP, PAD = 0xE000, 0xE001, 0


@dataclasses.dataclass(frozen=True)
class CanineConfig:
    layer: EncoderLayerConfig  # the deep layers; the shallow ones differ only in local_chunk
    num_layers: int
    num_hash_functions: int = 8
    num_hash_buckets: int = 16384
    max_len: int = 2048  # min(max_position_embeddings, num_hash_buckets rows of positions)
    type_vocab_size: int = 16
    downsampling_rate: int = 4
    upsampling_kernel_size: int = 4
    local_stride: int = 128

    def __post_init__(self):
        for name in ("num_layers", "num_hash_functions", "num_hash_buckets", "max_len",
                     "type_vocab_size", "downsampling_rate", "upsampling_kernel_size",
                     "local_stride"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, name,
                    f"must be a positive integer, got {value!r}")
        require(self.num_hash_functions <= len(PRIMES), "num_hash_functions",
                f"must be <= {len(PRIMES)}, got {self.num_hash_functions}")
        require(self.layer.d_model % self.num_hash_functions == 0, "hidden_size",
                f"{self.layer.d_model} is not divisible by num_hash_functions="
                f"{self.num_hash_functions}")

    @property
    def shallow_layer(self) -> EncoderLayerConfig:
        return dataclasses.replace(self.layer, local_chunk=self.local_stride)


def config_from_hf(hf_config: dict[str, Any], precision: str = "highest",
                   source: str = CONFIG_FILE) -> CanineConfig:
    """A Hugging Face CANINE config.json → CanineConfig (PretrainedError naming what is wrong).
    Defaults of absent keys are transformers.CanineConfig's."""
    if hf_config.get("model_type") not in MODEL_TYPES:
        raise PretrainedError(f"{source}: model_type={hf_config.get('model_type')!r} is not "
                              f"one of {MODEL_TYPES}")
    if hf_config.get("hidden_act", "gelu") != "gelu":
        raise PretrainedError(f"{source}: unsupported hidden_act={hf_config['hidden_act']!r} "
                              "(supported: 'gelu')")
    get = lambda key, default: int(hf_config.get(key, default))  # noqa: E731
    d, heads = get("hidden_size", 768), get("num_attention_heads", 12)
    try:
        require(heads >= 1 and d % heads == 0, "hidden_size",
                f"{d} is not divisible by num_attention_heads={heads}")
        layer = EncoderLayerConfig(
            d_model=d, num_heads=heads, d_head=d // heads, d_ff=get("intermediate_size", 3072),
            norm="post_layer_norm", norm_eps=float(hf_config.get("layer_norm_eps", 1e-12)),
            use_bias=True, activation="gelu", logit_scale=1.0 / math.sqrt(d // heads),
            init="bert", init_std=float(hf_config.get("initializer_range", 0.02)),
            precision=precision)
        buckets = get("num_hash_buckets", 16384)
        return CanineConfig(
            layer=layer, num_layers=get("num_hidden_layers", 12),
            num_hash_functions=get("num_hash_functions", 8), num_hash_buckets=buckets,
            max_len=min(get("max_position_embeddings", 16384), buckets),
            type_vocab_size=get("type_vocab_size", 16),
            downsampling_rate=get("downsampling_rate", 4),
            upsampling_kernel_size=get("upsampling_kernel_size", 4),
            local_stride=get("local_transformer_stride", 128))
    except ValueError as e:  # ConfigError is a ValueError
        raise PretrainedError(f"{source}: {e}") from None


def encode_text(text: str) -> list[int]:
    """CanineTokenizer without padding or truncation: [CLS] code points [SEP]."""
    return [CLS] + [ord(c) for c in text] + [SEP]


def text_encoder(hf_config: dict[str, Any]) -> registry.TextEncoder:
    """CANINE checkpoints ship no tokenizer.json: `encode_text`; ids are code points, hashed into
    the embedding (not rows of a table)."""
    del hf_config
    return registry.TextEncoder("CanineTokenizer (code points, [CLS] U+E000, [SEP] U+E001)",
                                encode_text, num_leading=1, num_trailing=1, ids_are_rows=False)


# --------------------------------------------------------------------------------------------
# Forward

def _conv(x_BxLxC: jax.Array, kernel_KxCxO: jax.Array, bias_O: jax.Array, stride: int,
          precision) -> jax.Array:
    """1-D convolution over L (no padding): out[t] = Σ_k x[t·stride + k] · kernel[k] + bias."""
    width = kernel_KxCxO.shape[0]
    steps = (x_BxLxC.shape[1] - width) // stride + 1
    out = sum(jnp.einsum("blc,co->blo",
                         x_BxLxC[:, k:k + (steps - 1) * stride + 1:stride], kernel_KxCxO[k],
                         precision=precision, preferred_element_type=jnp.float32)
              for k in range(width))
    return out + bias_O[None, None]


def upsample(molecules_BxMxD: jax.Array, seq_len: int, rate: int) -> jax.Array:
    """transformers' _repeat_molecules: molecules 1 … M−1 repeated `rate` times, the last one
    `rate + seq_len mod rate` times → (B, seq_len, D)."""
    repeated = jnp.repeat(molecules_BxMxD[:, 1:], rate, axis=1)
    last = jnp.repeat(molecules_BxMxD[:, -1:], rate + seq_len % rate, axis=1)
    return jnp.concatenate([repeated, last], axis=1)


class Conv1D(nn.Module):
    """torch.nn.Conv1d over (B, L, C) with kernel (width, C, D) and bias (D,), no padding."""

    config: EncoderLayerConfig
    width: int
    stride: int = 1

    @nn.compact
    def __call__(self, x_BxLxC):
        lc = self.config
        kernel = self.param("kernel", nn.initializers.normal(lc.init_std),
                            (self.width, x_BxLxC.shape[-1], lc.d_model), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (lc.d_model,), jnp.float32)
        return _conv(x_BxLxC, kernel, bias, self.stride, matmul_settings(lc)[1])


class CanineEmbeddings(nn.Module):
    """Hash embeddings of the code points + token type + character position → LayerNorm."""

    config: CanineConfig

    @nn.compact
    def __call__(self, codes_BxL, types_BxL):
        cfg, lc = self.config, self.config.layer
        init = nn.initializers.normal(lc.init_std)
        shard = lc.d_model // cfg.num_hash_functions
        x = jnp.concatenate([nn.Embed(cfg.num_hash_buckets, shard, embedding_init=init,
                                      name=f"hash_embedding_{k}")(
            ((codes_BxL + 1) * p) % cfg.num_hash_buckets)
            for k, p in enumerate(PRIMES[:cfg.num_hash_functions])], axis=-1)
        x = x + nn.Embed(cfg.type_vocab_size, lc.d_model, embedding_init=init,
                         name="type_embedding")(types_BxL)
        x = x + nn.Embed(cfg.num_hash_buckets, lc.d_model, embedding_init=init,
                         name="position_embedding")(jnp.arange(codes_BxL.shape[1]))[None]
        return nn.LayerNorm(epsilon=lc.norm_eps, name="embedding_norm")(x.astype(jnp.float32))


class CanineEncoder(nn.Module):
    """code points (B, L) → (final characters (B, L, D), probes {"embeddings",
    "initial_encoder", "molecules", "molecule_mask", "upsampled", "blocks": [initial layer,
    deep layers…, final layer], "final_hidden"})."""

    config: CanineConfig

    @nn.compact
    def __call__(self, codes_BxL, key_mask_BxL=None, types_BxL=None):
        cfg, lc = self.config, self.config.layer
        batch, seq_len = codes_BxL.shape
        rate = cfg.downsampling_rate
        if seq_len < rate:
            raise ValueError(f"CANINE needs at least downsampling_rate={rate} characters, "
                             f"got {seq_len}")
        mask = jnp.ones((batch, seq_len), bool) if key_mask_BxL is None else key_mask_BxL
        types = jnp.zeros_like(codes_BxL) if types_BxL is None else types_BxL
        probes: dict[str, Any] = {"embeddings": CanineEmbeddings(cfg, name="embeddings")(
            codes_BxL, types)}
        chars, initial = EncoderLayer(cfg.shallow_layer, name="initial_layer")(
            probes["embeddings"], mask)
        down = gelu_exact(Conv1D(lc, rate, rate, name="downsample_conv")(chars))
        molecules = nn.LayerNorm(epsilon=lc.norm_eps, name="downsample_norm")(
            jnp.concatenate([chars[:, :1], down[:, :-1]], axis=1))
        num_molecules = molecules.shape[1]
        molecule_mask = mask[:, :num_molecules * rate].reshape(batch, num_molecules, rate).any(-1)
        probes.update(initial_encoder=chars, molecules=molecules, molecule_mask=molecule_mask,
                      blocks=[initial])
        for i in range(cfg.num_layers):
            molecules, block = EncoderLayer(lc, name=f"layer_{i}")(molecules, molecule_mask)
            probes["blocks"].append(block)
        both = jnp.concatenate([chars, upsample(molecules, seq_len, rate)], axis=-1)
        width = cfg.upsampling_kernel_size
        padded = jnp.pad(both, ((0, 0), ((width - 1) // 2, width - 1 - (width - 1) // 2), (0, 0)))
        up = gelu_exact(Conv1D(lc, width, name="upsample_conv")(padded))
        probes["upsampled"] = nn.LayerNorm(epsilon=lc.norm_eps, name="upsample_norm")(up)
        out, final = EncoderLayer(lc, name="final_layer")(probes["upsampled"], mask)
        probes["blocks"].append(final)
        probes["final_hidden"] = out
        return out, probes


# --------------------------------------------------------------------------------------------
# Weights

def _bert_layer_names(hf: str) -> dict[str, str]:
    return {"query": hf + "attention.self.query", "key": hf + "attention.self.key",
            "value": hf + "attention.self.value", "out": hf + "attention.output.dense",
            "attention_norm": hf + "attention.output.LayerNorm",
            "fc_in": hf + "intermediate.dense", "fc_out": hf + "output.dense",
            "mlp_norm": hf + "output.LayerNorm"}


def _conv_params(read: TensorReader, name: str, d_in: int, d_out: int, width: int):
    """torch Conv1d weight (out, in, width) → kernel (width, in, out)."""
    weight = read.get(name + ".weight", (d_out, d_in, width))
    return {"kernel": None if weight is None else np.ascontiguousarray(weight.transpose(2, 1, 0)),
            "bias": read.get(name + ".bias", (d_out,))}


def convert(tensors: dict[str, np.ndarray], config: CanineConfig, source: str = WEIGHTS_FILE
            ) -> tuple[dict[str, Any], list[str]]:
    """Hugging Face CANINE tensors → ({"params": tree} for CanineEncoder, unused names)."""
    prefix = "canine." if ("char_embeddings.LayerNorm.weight" not in tensors and any(
        k.startswith("canine.") for k in tensors)) else ""
    read = TensorReader(tensors, prefix)
    lc = config.layer
    d, emb = lc.d_model, "char_embeddings."
    embeddings = {f"hash_embedding_{k}": {"embedding": read.get(
        f"{emb}HashBucketCodepointEmbedder_{k}.weight",
        (config.num_hash_buckets, d // config.num_hash_functions))}
        for k in range(config.num_hash_functions)}
    embeddings.update(
        position_embedding={"embedding": read.get(emb + "char_position_embeddings.weight",
                                                  (config.num_hash_buckets, d))},
        type_embedding={"embedding": read.get(emb + "token_type_embeddings.weight",
                                              (config.type_vocab_size, d))},
        embedding_norm=read.norm(emb + "LayerNorm", d))
    params: dict[str, Any] = {
        "embeddings": embeddings,
        "initial_layer": layer_params(read, _bert_layer_names("initial_char_encoder.layer.0."),
                                      lc),
        "downsample_conv": _conv_params(read, "chars_to_molecules.conv", d, d,
                                        config.downsampling_rate),
        "downsample_norm": read.norm("chars_to_molecules.LayerNorm", d),
        "upsample_conv": _conv_params(read, "projection.conv", 2 * d, d,
                                      config.upsampling_kernel_size),
        "upsample_norm": read.norm("projection.LayerNorm", d),
        "final_layer": layer_params(read, _bert_layer_names("final_char_encoder.layer.0."), lc),
    }
    for i in range(config.num_layers):
        params[f"layer_{i}"] = layer_params(read, _bert_layer_names(f"encoder.layer.{i}."), lc)
    unused = read.finish(source, rf"^{prefix}encoder\.layer\.(\d+)\.", config.num_layers)
    return {"params": jax.tree.map(jnp.asarray, params)}, unused


# --------------------------------------------------------------------------------------------
# The rest of the family interface (models/registry.py)

def state_labels(config: CanineConfig) -> tuple[str, ...]:
    """transformers' output_hidden_states order; the molecule states (deep encoder input and
    layers) upsampled to characters in `hidden_states_fn`."""
    return (("embeddings", "initial_encoder", "molecules")
            + tuple(f"layer_{i + 1}" for i in range(config.num_layers))
            + ("upsampled", "final_encoder"))


@functools.lru_cache(maxsize=8)
def apply_fn(config: CanineConfig) -> Callable[..., Any]:
    module = CanineEncoder(config)
    return jax.jit(lambda params, codes, mask=None: module.apply(params, codes, mask))


@functools.lru_cache(maxsize=8)
def hidden_states_fn(config: CanineConfig) -> Callable[..., jax.Array]:
    """jit(params, code points (B, L), token types (B, L), mask (B, L)) → (num_layers + 5, B, L,
    D) in `state_labels` order, molecule states repeated to characters (`upsample`)."""
    module = CanineEncoder(config)
    rate = config.downsampling_rate

    @jax.jit
    def forward(params, codes_BxL, types_BxL, mask_BxL):
        _, probes = module.apply(params, codes_BxL, mask_BxL, types_BxL)
        seq_len = codes_BxL.shape[1]
        molecule_states = [probes["molecules"]] + [b["resid_post"]
                                                   for b in probes["blocks"][1:-1]]
        return jnp.stack([probes["embeddings"], probes["initial_encoder"]]
                         + [_char_resolution(m, seq_len, rate) for m in molecule_states]
                         + [probes["upsampled"], probes["final_hidden"]])

    return forward


def _char_resolution(molecules_BxMxD, seq_len: int, rate: int) -> jax.Array:
    """Each character gets the molecule of its window, as `upsample` (step 6) gives them, except
    character 0 ([CLS]), which gets molecule 0 (the [CLS] molecule) instead of molecule 1."""
    return jnp.concatenate([molecules_BxMxD[:, :1],
                            upsample(molecules_BxMxD, seq_len, rate)[:, 1:]], axis=1)


def init_params(config: CanineConfig, key: jax.Array) -> dict[str, Any]:
    """Hugging Face's init: N(0, initializer_range²) for every kernel, convolution and embedding,
    zero biases, LayerNorm γ = 1, β = 0."""
    length = 2 * config.downsampling_rate
    return _init_fn(config)(key, jnp.zeros((1, length), jnp.int32))


@functools.lru_cache(maxsize=8)
def _init_fn(config: CanineConfig) -> Callable[..., Any]:
    return jax.jit(CanineEncoder(config).init)


def embedding_matrices(params: dict[str, Any], config: CanineConfig
                       ) -> dict[str, np.ndarray | None]:
    """The hash-shard tables side by side are not a per-character matrix: the input embedding
    reported is the concatenation of the shards over bucket ids (num_hash_buckets, D)."""
    tree = params["params"]["embeddings"]
    shards = [np.asarray(tree[f"hash_embedding_{k}"]["embedding"])
              for k in range(config.num_hash_functions)]
    return {"input": np.concatenate(shards, axis=1), "output": None, "final_norm_scale": None}


def summary(config: CanineConfig) -> dict[str, Any]:
    lc = config.layer
    return {"num_layers": config.num_layers, "d_model": lc.d_model, "num_heads": lc.num_heads,
            "d_ff": lc.d_ff, "vocab_size": config.num_hash_buckets, "max_len": config.max_len,
            "num_hash_functions": config.num_hash_functions,
            "downsampling_rate": config.downsampling_rate,
            "local_transformer_stride": config.local_stride,
            "untrained_init": f"normal(0, {lc.init_std}^2) kernels, convolutions and "
                              "embeddings, zero biases, LayerNorm 1/0"}


def pad_token_id(hf_config: dict[str, Any]) -> int:
    """CANINE pads with code point 0 (config.json pad_token_id); padding is masked anyway."""
    pad = hf_config.get("pad_token_id")
    return pad if isinstance(pad, int) and not isinstance(pad, bool) else PAD
