"""The CANINE family (CanineModel / CanineFor* checkpoints, e.g. canine-s and canine-c): Hugging
Face config translation, name table and forward (no torch), following transformers' CanineModel
step by step:

  1. characters: Unicode code points, [CLS] = U+E000, [SEP] = U+E001 (`encode_text`);
  2. hash embeddings: for the k-th of `num_hash_functions` primes p_k, the bucket
     ((id + 1) · p_k) mod num_hash_buckets indexes a table of width D / num_hash_functions; the
     shards are concatenated, plus token-type and character-position embeddings, LayerNorm;
  3. the initial shallow encoder: one post-LN BERT block with local attention
     (`BlockConfig.local_chunk`), each chunk of `local_transformer_stride` characters attending
     only to itself;
  4. downsampling: a strided convolution (kernel = stride = downsampling_rate) → GELU; its last
     output is dropped and the [CLS] character state is put in front → LayerNorm: M = ⌊L/r⌋
     molecules; in a right-padded batch each input keeps its own ⌊length/r⌋ molecules (those it
     has run alone) and the rest are masked (transformers max-pools the character mask over
     windows of r, pairing window m with molecule m although molecule m ≥ 1 comes from window
     m − 1, so a padded input attends to one more molecule than alone, and its states depend on
     the batch: up to 3–4 apart in canine-s);
  5. the deep Transformer: num_hidden_layers post-LN BERT blocks over the molecules;
  6. upsampling: molecules 1 … M−1 each repeated r times, the last repeated r + L mod r times,
     concatenated with the initial encoder's output (2D channels) → convolution of width
     upsampling_kernel_size with zero padding ((K−1)//2 before, the rest after) → GELU →
     LayerNorm; in a padded batch, each input's molecules are repeated up to its own length
     (`molecule_index`) and its padded positions are zeros, as the convolution's padding alone;
  7. the final shallow encoder: one post-LN BERT block with full attention.
The pooler and heads are not used. transformers' output_hidden_states and output_attentions list
the initial encoder's input and output, the deep encoder's input and outputs (molecules) and the
final encoder's input and output; every one equals `transformers.CanineModel` in float32 within
1e-4, each input of a padded batch as transformers gives it alone (tests/test_families_encoders.py;
for the local layer, every chunk's attention, where transformers returns the first chunk's
only). The untrained baseline is Hugging Face's init:
N(0, initializer_range²) for every kernel, convolution and embedding, zero biases, LayerNorm 1/0.

The hidden states (`hidden_states`, in `state_labels` order) are at character resolution, the
molecule states upsampled as step 6 does, except that the [CLS] character keeps the [CLS]
molecule (so the characters of one molecule share one state: pairs of them have cosine 1 and
weigh in the anisotropy metrics); the forward's probes keep the deep blocks at molecule
resolution ("molecule_mask").

Name mapping ("canine." prefix accepted):
  char_embeddings.HashBucketCodepointEmbedder_k     hash_embedding_k
  char_embeddings.{char_position,token_type}_embeddings, LayerNorm
                                                    position_embedding, type_embedding, embedding_norm
  initial_char_encoder.layer.0 / final_char_encoder.layer.0 / encoder.layer.i
                                                    initial_layer / final_layer / layer_i (bert.LAYER_NAMES)
  chars_to_molecules.conv (D, D, r), LayerNorm      downsample_conv.kernel (r, D, D), downsample_norm
  projection.conv (D, 2D, K), LayerNorm             upsample_conv.kernel (K, 2D, D), upsample_norm
"""
from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.config import BlockConfig, require
from anisotropy_jax.models.families.bert import LAYER_NAMES
from anisotropy_jax.models.block import Block
from anisotropy_jax.models.formats.checkpoint import (CONFIG_FILE, WEIGHTS_FILE, PretrainedError,
                                              TensorReader, config_errors, detect_prefix)
from anisotropy_jax.models.family import Family, TextEncoder, block_summary
from anisotropy_jax.models.layers import gelu_exact, layer_norm, matmul_settings

PRIMES = (31, 43, 59, 61, 73, 97, 103, 113, 137, 149, 157, 173, 181, 193, 211, 223)
CLS, SEP, PAD = 0xE000, 0xE001, 0
# Parameter → Hugging Face module: the three encoders' blocks (BERT's names, bert.LAYER_NAMES,
# under these prefixes; "{i}": deep layer i), the two convolutions (torch Conv1d weights
# (out, in, width)) and their LayerNorms.
LAYER_PREFIXES = {"initial_layer": "initial_char_encoder.layer.0.",
                  "final_layer": "final_char_encoder.layer.0.", "layer_{i}": "encoder.layer.{i}."}
CONV_NAMES = {"downsample_conv": "chars_to_molecules.conv", "upsample_conv": "projection.conv"}
NORM_NAMES = {"downsample_norm": "chars_to_molecules.LayerNorm",
              "upsample_norm": "projection.LayerNorm"}


@dataclasses.dataclass(frozen=True)
class CanineConfig:
    """`block`: the deep blocks and the final one; the initial block differs only in its local
    chunks (`shallow_block`)."""

    block: BlockConfig
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
        require(self.block.d_model % self.num_hash_functions == 0, "hidden_size",
                f"{self.block.d_model} is not divisible by num_hash_functions="
                f"{self.num_hash_functions}")

    @property
    def shallow_block(self) -> BlockConfig:
        return self.block.replace(local_chunk=self.local_stride)


def config_from_hf(hf_config: dict[str, Any], precision: str = "highest",
                   source: str = CONFIG_FILE) -> CanineConfig:
    """A Hugging Face CANINE config.json → CanineConfig (PretrainedError naming what is wrong).
    Defaults of absent keys are transformers.CanineConfig's."""
    if hf_config.get("hidden_act", "gelu") != "gelu":
        raise PretrainedError(f"{source}: unsupported hidden_act={hf_config['hidden_act']!r} "
                              "(supported: 'gelu')")
    get = lambda key, default: int(hf_config.get(key, default))  # noqa: E731
    with config_errors(source):
        block = BlockConfig(
            d_model=get("hidden_size", 768), num_heads=get("num_attention_heads", 12),
            d_ff=get("intermediate_size", 3072), norm_position="post",
            layer_norm_eps=float(hf_config.get("layer_norm_eps", 1e-12)), activation="gelu",
            init="bert", init_std=float(hf_config.get("initializer_range", 0.02)),
            precision=precision)
        buckets = get("num_hash_buckets", 16384)
        return CanineConfig(
            block=block, num_layers=get("num_hidden_layers", 12),
            num_hash_functions=get("num_hash_functions", 8), num_hash_buckets=buckets,
            max_len=min(get("max_position_embeddings", 16384), buckets),
            type_vocab_size=get("type_vocab_size", 16),
            downsampling_rate=get("downsampling_rate", 4),
            upsampling_kernel_size=get("upsampling_kernel_size", 4),
            local_stride=get("local_transformer_stride", 128))


def encode_text(text: str) -> list[int]:
    """CanineTokenizer without padding or truncation: [CLS] code points [SEP]."""
    return [CLS] + [ord(c) for c in text] + [SEP]


def text_encoder(hf_config: dict[str, Any]) -> TextEncoder:
    """CANINE checkpoints ship no tokenizer.json: `encode_text`; ids are code points, hashed into
    the embedding (not rows of a table)."""
    del hf_config
    return TextEncoder("CanineTokenizer (code points, [CLS] U+E000, [SEP] U+E001)",
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


def molecule_index(num_molecules_B: jax.Array, seq_len: int, rate: int) -> jax.Array:
    """(B, seq_len): the molecule transformers' _repeat_molecules gives each character of an
    input with `num_molecules` molecules (molecules 1 … M−1 repeated `rate` times, the last one
    `rate + L mod r` times): min(p // rate + 1, M − 1), whatever the batch's padded length."""
    return jnp.minimum(jnp.arange(seq_len)[None] // rate + 1, num_molecules_B[:, None] - 1)


def upsample(molecules_BxMxD: jax.Array, index_BxL: jax.Array) -> jax.Array:
    """Molecule states at character resolution (`molecule_index`) → (B, L, D)."""
    return jnp.take_along_axis(molecules_BxMxD, index_BxL[..., None], axis=1)


class Conv1D(nn.Module):
    """torch.nn.Conv1d over (B, L, C) with kernel (width, C, D) and bias (D,), no padding."""

    config: BlockConfig
    width: int
    stride: int = 1

    @nn.compact
    def __call__(self, x_BxLxC):
        block = self.config
        kernel = self.param("kernel", nn.initializers.normal(block.init_std),
                            (self.width, x_BxLxC.shape[-1], block.d_model), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (block.d_model,), jnp.float32)
        return _conv(x_BxLxC, kernel, bias, self.stride, matmul_settings(block)[1])


class CanineEmbeddings(nn.Module):
    """Hash embeddings of the code points + token type + character position → LayerNorm."""

    config: CanineConfig

    @nn.compact
    def __call__(self, codes_BxL, types_BxL):
        cfg, block = self.config, self.config.block
        init = nn.initializers.normal(block.init_std)
        shard = block.d_model // cfg.num_hash_functions
        x = jnp.concatenate([nn.Embed(cfg.num_hash_buckets, shard, embedding_init=init,
                                      name=f"hash_embedding_{k}")(
            ((codes_BxL + 1) * p) % cfg.num_hash_buckets)
            for k, p in enumerate(PRIMES[:cfg.num_hash_functions])], axis=-1)
        x = x + nn.Embed(cfg.type_vocab_size, block.d_model, embedding_init=init,
                         name="type_embedding")(types_BxL)
        x = x + nn.Embed(cfg.num_hash_buckets, block.d_model, embedding_init=init,
                         name="position_embedding")(jnp.arange(codes_BxL.shape[1]))[None]
        return layer_norm(block, "embedding_norm")(x.astype(jnp.float32))


class CanineEncoder(nn.Module):
    """code points (B, L) → (final characters (B, L, D), probes {"embeddings",
    "initial_encoder", "molecules", "molecule_mask", "upsampled", "blocks": [initial block,
    deep blocks…, final block], "final_hidden"})."""

    config: CanineConfig

    @nn.compact
    def __call__(self, codes_BxL, key_mask_BxL=None, token_types_BxL=None):
        cfg, block = self.config, self.config.block
        batch, seq_len = codes_BxL.shape
        rate = cfg.downsampling_rate
        if seq_len < rate:
            raise ValueError(f"CANINE needs at least downsampling_rate={rate} characters, "
                             f"got {seq_len}")
        mask = jnp.ones((batch, seq_len), bool) if key_mask_BxL is None else key_mask_BxL
        types = jnp.zeros_like(codes_BxL) if token_types_BxL is None else token_types_BxL
        probes: dict[str, Any] = {"embeddings": CanineEmbeddings(cfg, name="embeddings")(
            codes_BxL, types)}
        chars, initial = Block(cfg.shallow_block, name="initial_layer")(
            probes["embeddings"], mask)
        down = gelu_exact(Conv1D(block, rate, rate, name="downsample_conv")(chars))
        molecules = layer_norm(block, "downsample_norm")(
            jnp.concatenate([chars[:, :1], down[:, :-1]], axis=1))
        # Each input's own molecules: ⌊length / r⌋ of them, as when it runs alone (right
        # padding); a molecule whose window holds its last characters and padding is masked.
        num_real = jnp.maximum(mask.sum(-1) // rate, 1)
        molecule_mask = jnp.arange(molecules.shape[1])[None] < num_real[:, None]
        probes.update(initial_encoder=chars, molecules=molecules, molecule_mask=molecule_mask,
                      blocks=[initial])
        for i in range(cfg.num_layers):
            molecules, block_probes = Block(block, name=f"layer_{i}")(molecules, molecule_mask)
            probes["blocks"].append(block_probes)
        both = jnp.concatenate(
            [chars, upsample(molecules, molecule_index(num_real, seq_len, rate))], axis=-1)
        both = jnp.where(mask[..., None], both, 0.0)  # padding reads as the conv's zero padding
        width = cfg.upsampling_kernel_size
        padded = jnp.pad(both, ((0, 0), ((width - 1) // 2, width - 1 - (width - 1) // 2), (0, 0)))
        up = gelu_exact(Conv1D(block, width, name="upsample_conv")(padded))
        probes["upsampled"] = layer_norm(block, "upsample_norm")(up)
        out, final = Block(block, name="final_layer")(probes["upsampled"], mask)
        probes["blocks"].append(final)
        probes["final_hidden"] = out
        return out, probes


def state_labels(config: CanineConfig) -> tuple[str, ...]:
    """transformers' output_hidden_states order; the molecule states (deep encoder input and
    layers) upsampled to characters in `hidden_states`."""
    return (("embeddings", "initial_encoder", "molecules")
            + tuple(f"layer_{i + 1}" for i in range(config.num_layers))
            + ("upsampled", "final_encoder"))


def hidden_states(probes: dict[str, Any], config: CanineConfig) -> jax.Array:
    """(num_layers + 5, B, L, D) in `state_labels` order, the molecule states at character
    resolution: each character gets the molecule of its window, as `upsample` (step 6) gives
    them, except character 0 ([CLS]), which gets molecule 0 (the [CLS] molecule) instead of
    molecule 1."""
    seq_len, rate = probes["embeddings"].shape[1], config.downsampling_rate
    index = molecule_index(probes["molecule_mask"].sum(-1), seq_len, rate).at[:, 0].set(0)
    molecule_states = [probes["molecules"]] + [b["resid_post"] for b in probes["blocks"][1:-1]]
    return jnp.stack([probes["embeddings"], probes["initial_encoder"]]
                     + [upsample(m, index) for m in molecule_states]
                     + [probes["upsampled"], probes["final_hidden"]])


# --------------------------------------------------------------------------------------------
# Weights

def convert(tensors: dict[str, np.ndarray], config: CanineConfig, source: str = WEIGHTS_FILE
            ) -> tuple[dict[str, Any], list[str]]:
    """Hugging Face CANINE tensors → ({"params": tree} for CanineEncoder, unused names)."""
    read = TensorReader(tensors, detect_prefix(tensors, "char_embeddings.LayerNorm.weight",
                                               ("canine.",)))
    block, d, emb = config.block, config.block.d_model, "char_embeddings."
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
    params: dict[str, Any] = {"embeddings": embeddings}
    conv_shapes = {"downsample_conv": (d, d, config.downsampling_rate),
                   "upsample_conv": (d, 2 * d, config.upsampling_kernel_size)}
    for name, hf_name in CONV_NAMES.items():
        weight = read.get(hf_name + ".weight", conv_shapes[name])  # → kernel (width, in, out)
        params[name] = {"kernel": None if weight is None else np.ascontiguousarray(
            weight.transpose(2, 1, 0)), "bias": read.get(hf_name + ".bias", (d,))}
    params.update({name: read.norm(hf_name, d) for name, hf_name in NORM_NAMES.items()})
    for name, prefix in LAYER_PREFIXES.items():
        for i in range(config.num_layers) if "{i}" in name else (None,):
            params[name.format(i=i)] = read.block(
                {path: prefix.format(i=i) + hf for path, hf in LAYER_NAMES.items()}, block)
    return read.finish(params, source, r"encoder\.layer\.(\d+)\.", config.num_layers)


def embedding_matrices(params: dict[str, Any], config: CanineConfig
                       ) -> dict[str, np.ndarray | None]:
    """The hash-shard tables side by side are not a per-character matrix: the input embedding
    reported is the concatenation of the shards over bucket ids (num_hash_buckets, D)."""
    tree = params["params"]["embeddings"]
    shards = [np.asarray(tree[f"hash_embedding_{k}"]["embedding"])
              for k in range(config.num_hash_functions)]
    return {"input": np.concatenate(shards, axis=1), "output": None, "final_norm_scale": None}


def summary(config: CanineConfig) -> dict[str, Any]:
    return block_summary(
        config.block, config.num_layers, config.num_hash_buckets, config.max_len,
        f"normal(0, {config.block.init_std}^2) kernels, convolutions and embeddings, zero "
        "biases, LayerNorm 1/0", num_hash_functions=config.num_hash_functions,
        downsampling_rate=config.downsampling_rate, local_transformer_stride=config.local_stride)


CONFIG_KEYS = frozenset({
    "hidden_size", "num_attention_heads", "intermediate_size", "layer_norm_eps", "hidden_act",
    "initializer_range", "num_hash_buckets", "num_hidden_layers", "num_hash_functions",
    "max_position_embeddings", "type_vocab_size", "downsampling_rate", "upsampling_kernel_size",
    "local_transformer_stride", "tie_word_embeddings"})  # no LM head here

FAMILY = Family(
    name="canine", model_types=("canine",), module=CanineEncoder, config_from_hf=config_from_hf,
    convert=convert, num_layers=lambda cfg: cfg.num_layers, summary=summary,
    embedding_matrices=embedding_matrices, takes_token_types=True,
    # the shortest input: two molecules
    example_input=lambda cfg: jnp.zeros((1, 2 * cfg.downsampling_rate), jnp.int32),
    text_encoder=text_encoder, hidden_states=hidden_states, state_labels=state_labels,
    config_keys=CONFIG_KEYS)
