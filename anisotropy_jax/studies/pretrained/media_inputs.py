"""Images and audio for the pretrained study (`--config.inputs=DIR`; docs/MODALITIES.md): the
inputs of an image or audio model, read and checked before anything is compiled, then run in
batches, keeping every token (patch and prefix tokens, spatial positions of a CNN stage, pooled
features, 20 ms audio frames) as the pretrained study's token cloud of each hidden state.

Inputs (`load`): a folder of PNG/JPEG images or of WAV files (`inputs`; the first
`num_inputs`, sorted by name), or the offline defaults of `studies.modalities`: scikit-image's
photographs, and `num_inputs` Shakespeare lines spoken by espeak-ng (synthetic speech) into a
temporary folder. Every file is read before any computation; a bad one (unreadable image,
non-WAV file, unsupported sample rate, empty folder) gives one line "inputs: <file>: ...".

How each family is fed (`FEEDERS`, by family module):
  vit, resnet   pixels (B, 3, H, W) per preprocessor_config.json, `batch_size` images a batch;
  whisper       the 30 s log-mel window; only the frames covering speech are measured
                (`modalities.whisper_speech_mask`), not the zero padding;
  wav2vec2      each waveform alone (batch 1, its own length cut to whole 0.5 s: padding would
                enter the group norm of the feature encoder), every frame measured.
"""
from __future__ import annotations

import dataclasses
import pathlib
import tempfile
from types import ModuleType
from typing import Any, Callable, Iterable

import jax
import numpy as np

from anisotropy_jax import media
from anisotropy_jax.config import PretrainedConfig
from anisotropy_jax.studies import modalities
from anisotropy_jax.studies.pretrained.states import METRIC_NAMES, cloud_metrics

RATE = 16_000  # every audio family here takes 16 kHz
HALF_SECOND = RATE // 2
SKIMAGE_SOURCE = "scikit-image 0.26.0 sample photographs (media.SKIMAGE_PHOTOS)"
ESPEAK_SOURCE = "espeak-ng (synthetic speech) of Shakespeare sentences, 5-20 words"


@dataclasses.dataclass(frozen=True)
class MediaInputs:
    """Checked inputs of an image/audio model: batches of (model input, token mask (B, L) or
    None = every token, input index (B,)), one line per input, and where they come from."""

    modality: str
    batches: list[tuple[np.ndarray, np.ndarray | None, np.ndarray]]
    names: list[str]
    source: str


@dataclasses.dataclass(frozen=True)
class MediaStates:
    """Per hidden state: the measured tokens (N_s, D_s) and the input each comes from (N_s,),
    sorted by input (states may differ in token count and width: CNN stages)."""

    layers: list[np.ndarray]
    input_index: list[np.ndarray]


def _chunks(n: int, size: int) -> list[np.ndarray]:
    return [np.arange(i, min(i + size, n)) for i in range(0, n, size)]


def _images(config: Any, model_dir: pathlib.Path, pc: PretrainedConfig):
    paths = modalities.image_files(pc.inputs or None, pc.num_inputs)
    pixels = media.load_images(paths, media.image_preprocessing(model_dir))
    return ([(pixels[i], None, i) for i in _chunks(len(pixels), pc.batch_size)],
            [p.name for p in paths])


def _audio(pc: PretrainedConfig) -> tuple[list[np.ndarray], list[str]]:
    if pc.inputs:
        paths = media.list_files(pc.inputs, media.AUDIO_SUFFIXES, "audio files")[:pc.num_inputs]
        return media.load_audio(paths, RATE), [p.name for p in paths]
    lines = modalities.speech_lines(pc.num_inputs, pc.seed)
    with tempfile.TemporaryDirectory(prefix="anisotropy_jax_speech_") as folder:
        return modalities.default_speech(folder, pc.num_inputs, pc.seed, rate=RATE), lines


def _whisper(config: Any, model_dir: pathlib.Path, pc: PretrainedConfig):
    waves, names = _audio(pc)
    mel, mask = modalities.whisper_features(waves, config.num_mel_bins,
                                            config.max_source_positions)
    return [(mel[i], mask[i], i) for i in _chunks(len(waves), pc.batch_size)], names


def _waveforms(config: Any, model_dir: pathlib.Path, pc: PretrainedConfig):
    waves, names = _audio(pc)
    short = [n for n, w in zip(names, waves) if w.size < HALF_SECOND]
    if short:
        raise media.MediaError(f"{short[0]}: shorter than 0.5 s")
    return [(w[None, :w.size // HALF_SECOND * HALF_SECOND], None, np.array([i]))
            for i, w in enumerate(waves)], names


FEEDERS: dict[str, Callable[..., Any]] = {"vit": _images, "resnet": _images,
                                          "whisper": _whisper, "wav2vec2": _waveforms}


def load(family: ModuleType, config: Any, model_dir: pathlib.Path | None, pc: PretrainedConfig
         ) -> MediaInputs:
    """The inputs of an image/audio model (module docstring). MediaError "inputs: ..." (one
    line, naming the file or folder) before anything is computed."""
    name = family.name
    if name not in FEEDERS:
        raise media.MediaError(f"model_dir: no input feeder for the {name} family")
    try:
        batches, names = FEEDERS[name](config, model_dir, pc)
    except media.MediaError as e:
        raise media.MediaError(f"inputs: {e}") from None
    modality = family.modality
    default = SKIMAGE_SOURCE if modality == "image" else ESPEAK_SOURCE
    return MediaInputs(modality, batches, names, pc.inputs or default)


def collect_states(forward: Callable[..., Any], params: Any, inputs: MediaInputs,
                   progress: Callable[[Iterable], Iterable] | None = None) -> MediaStates:
    """Runs every batch through `forward` (a family's hidden_states_fn) and keeps the measured
    tokens of every state (on the host)."""
    layers: list[list[np.ndarray]] = []
    index: list[list[np.ndarray]] = []
    batches = progress(inputs.batches) if progress is not None else inputs.batches
    for x, mask, rows in batches:
        states = jax.device_get(forward(params, x))
        for s, state in enumerate(states):
            state = np.asarray(state, np.float32)
            keep = (mask if mask is not None and mask.shape == state.shape[:2]
                    else np.ones(state.shape[:2], bool))
            if s == len(layers):
                layers.append([])
                index.append([])
            layers[s].append(state[keep])
            index[s].append(np.broadcast_to(np.asarray(rows)[:, None], keep.shape)[keep])
    return MediaStates([np.concatenate(x) for x in layers], [np.concatenate(i) for i in index])


def state_metrics(states: MediaStates, key: jax.Array, num_pairs: int
                  ) -> dict[str, list[float | None]]:
    """Every metric of METRIC_NAMES per state (`states.cloud_metrics`; the same pairs' key)."""
    out: dict[str, list[float | None]] = {name: [] for name in METRIC_NAMES}
    for x_NxD, input_N in zip(states.layers, states.input_index):
        for name, value in cloud_metrics(x_NxD, input_N, key, num_pairs).items():
            out[name].append(value)
    return out


def data_summary(inputs: MediaInputs, states: MediaStates) -> dict[str, Any]:
    """results.json "data" of an image/audio run."""
    return {"modality": inputs.modality, "inputs_source": inputs.source,
            "num_inputs": len(inputs.names), "inputs": inputs.names,
            "input_shapes": sorted({tuple(x.shape) for x, _, _ in inputs.batches}),
            "num_tokens_measured": [int(x.shape[0]) for x in states.layers]}
