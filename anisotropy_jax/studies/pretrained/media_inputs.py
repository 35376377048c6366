"""Images and audio for the pretrained study (`--config.inputs=DIR`; docs/CROSS_MODAL.md): the
inputs of an image or audio model, read and checked before anything is compiled, as the batches of
the study's one forward loop (`states.ForwardBatch`): every token is measured (patch and prefix
tokens, spatial positions of a CNN stage, pooled features, 20 ms audio frames) but Whisper's
padding.

Inputs (`load`): a folder of PNG/JPEG images or of WAV files (`inputs`; the first `num_inputs`,
sorted by name), or the offline defaults: scikit-image's photographs (`image_files`), and
`num_inputs` Shakespeare lines (`speech_lines`) spoken by espeak-ng (synthetic speech) into a
temporary folder (`default_speech`), or, where espeak-ng is not installed, as many speech-like
formant clips (formant.synthesize_formant_speech, numpy only); `source` says which. Every file
is read before any computation; a bad one (unreadable image, non-WAV file, unsupported sample
rate, empty folder) gives one line "inputs: <file>: ...". Degenerate ones are measured, and
`warnings` names them (`media.media_warnings`: identical images or clips as the model sees them,
an image of one colour, a silent or constant clip), one line each, for the study to print.

How each family is fed (`FEEDERS`, by family name):
  vit, resnet   pixels (B, 3, H, W) per preprocessor_config.json, `batch_size` images a batch;
  whisper       the 30 s log-mel window (`whisper_features`); only the frames covering speech
                are measured (`whisper_speech_mask`), not the zero padding;
  wav2vec2      each waveform alone (batch 1, its own length cut to whole 0.5 s: padding would
                enter the group norm of the feature encoder), every frame measured; brought to
                zero mean and unit variance where preprocessor_config.json sets do_normalize
                (media.normalize_waveform).
"""
from __future__ import annotations

import dataclasses
import math
import pathlib
import tempfile
from typing import Any, Callable, Sequence

import numpy as np

from anisotropy_jax import corpus, media
from anisotropy_jax.configs.pretrained import PretrainedConfig
from anisotropy_jax.models.families import whisper
from anisotropy_jax.studies.pretrained.states import ForwardBatch, TokenStates

RATE = 16_000  # every audio family here takes 16 kHz
HALF_SECOND = RATE // 2
WHISPER_SAMPLES_PER_TOKEN = 320  # hop 160 × conv stride 2 at 16 kHz: one token per 20 ms
WHISPER_SAMPLES = 480_000  # 30 s at 16 kHz: Whisper's fixed input window
SKIMAGE_SOURCE = "scikit-image 0.26.0 sample photographs (media.SKIMAGE_PHOTOS)"
ESPEAK_SOURCE = "espeak-ng (synthetic speech) of Shakespeare sentences, 5-20 words"
FORMANT_SOURCE = ("numpy formant synthesiser (espeak-ng not installed): speech-like vowel and "
                  "fricative clips, one per Shakespeare sentence of 5-20 words (its word count)")
SPEECH_SOURCES = {"espeak-ng": ESPEAK_SOURCE, "formant": FORMANT_SOURCE}


@dataclasses.dataclass(frozen=True)
class MediaInputs:
    """Checked inputs of an image/audio model: the forward loop's batches, one line per input,
    and where they come from."""

    modality: str
    batches: list[ForwardBatch]
    names: list[str]
    source: str
    warnings: tuple[str, ...] = ()  # identical or constant inputs (`media.media_warnings`)


# --------------------------------------------------------------------------------------------
# Offline inputs

def image_files(inputs: str | pathlib.Path | None = None, limit: int | None = None
                ) -> list[pathlib.Path]:
    """The images of `inputs` (sorted; MediaError naming an empty or missing folder), or
    scikit-image's photographs; the first `limit`."""
    paths = (media.skimage_sample_images() if inputs is None
             else media.list_files(inputs, media.IMAGE_SUFFIXES, "images"))
    return paths[:limit]


def default_images(model_dir: str | pathlib.Path | None = None,
                   inputs: str | pathlib.Path | None = None, limit: int | None = None
                   ) -> np.ndarray:
    """(N, 3, H, W): the images of `inputs` (or scikit-image's photographs; the first `limit`),
    preprocessed per `model_dir`/preprocessor_config.json (media.image_preprocessing)."""
    return media.load_images(image_files(inputs, limit), media.image_preprocessing(model_dir))


def speech_lines(num: int = 16, seed: int = 0) -> list[str]:
    """The default utterances: `num` Shakespeare sentences of 5–20 words drawn with `seed`."""
    sentences = corpus.split_sentences(corpus.shakespeare_speeches(), min_words=5, max_words=20)
    return corpus.sample_sentences(sentences, num, seed)


def default_speech(folder: str | pathlib.Path, num: int = 16, seed: int = 0,
                   inputs: str | pathlib.Path | None = None, rate: int = RATE
                   ) -> list[np.ndarray]:
    """Waveforms at `rate`: the WAV files of `inputs` (the first `num`), or the `num`
    `speech_lines` spoken by espeak-ng (or the formant synthesiser without it:
    media.speech_source) into `folder`."""
    if inputs is None:
        paths = media.synthesize_speech(speech_lines(num, seed), folder, seed=seed)
    else:
        paths = media.list_files(inputs, media.AUDIO_SUFFIXES, "audio files")[:num]
    return media.load_audio(paths, rate)


def whisper_features(waveforms: Sequence[np.ndarray], n_mels: int, num_tokens: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(log-mel (B, n_mels, 3000) of each waveform padded or cut to 30 s, speech-frame mask
    (B, num_tokens): `whisper_speech_mask`)."""
    mel = whisper.log_mel(np.stack([np.pad(w[:WHISPER_SAMPLES],
                                           (0, WHISPER_SAMPLES - w[:WHISPER_SAMPLES].size))
                                    for w in waveforms]), n_mels)
    return mel, whisper_speech_mask(waveforms, num_tokens)


def whisper_speech_mask(waveforms: Sequence[np.ndarray], num_tokens: int) -> np.ndarray:
    """(B, T) bool: encoder tokens whose 20 ms cover the waveform (the rest is zero padding)."""
    lengths = [min(num_tokens, math.ceil(w.size / WHISPER_SAMPLES_PER_TOKEN)) for w in waveforms]
    return np.arange(num_tokens)[None, :] < np.asarray(lengths)[:, None]


# --------------------------------------------------------------------------------------------
# The batches of each family

def _chunks(n: int, size: int) -> list[np.ndarray]:
    return [np.arange(i, min(i + size, n)) for i in range(0, n, size)]


# Each feeder returns (the batches, one name per input, the inputs to check for degenerate ones:
# the preprocessed images, or the waveforms at RATE).

def _images(config: Any, model_dir: pathlib.Path, pc: PretrainedConfig):
    paths = image_files(pc.inputs or None, pc.num_inputs)
    pixels = media.load_images(paths, media.image_preprocessing(model_dir))
    return ([ForwardBatch((pixels[i],), i) for i in _chunks(len(pixels), pc.batch_size)],
            [p.name for p in paths], list(pixels))


def _audio(pc: PretrainedConfig) -> tuple[list[np.ndarray], list[str]]:
    if pc.inputs:
        paths = media.list_files(pc.inputs, media.AUDIO_SUFFIXES, "audio files")[:pc.num_inputs]
        return media.load_audio(paths, RATE), [p.name for p in paths]
    lines = speech_lines(pc.num_inputs, pc.seed)
    with tempfile.TemporaryDirectory(prefix="anisotropy_jax_speech_") as folder:
        return default_speech(folder, pc.num_inputs, pc.seed), lines


def _whisper(config: Any, model_dir: pathlib.Path, pc: PretrainedConfig):
    waves, names = _audio(pc)
    mel, mask = whisper_features(waves, config.num_mel_bins, config.max_source_positions)
    return ([ForwardBatch((mel[i],), i, mask[i]) for i in _chunks(len(waves), pc.batch_size)],
            names, waves)


def _waveforms(config: Any, model_dir: pathlib.Path, pc: PretrainedConfig):
    waves, names = _audio(pc)
    short = [n for n, w in zip(names, waves) if w.size < HALF_SECOND]
    if short:
        raise media.MediaError(f"{short[0]}: shorter than 0.5 s")
    normalize = media.normalize_waveform if media.audio_normalization(model_dir) else None
    cut = [w[:w.size // HALF_SECOND * HALF_SECOND] for w in waves]
    return ([ForwardBatch(((normalize(w) if normalize else w)[None],), np.array([i]))
             for i, w in enumerate(cut)], names, waves)


FEEDERS: dict[str, Callable[..., Any]] = {"vit": _images, "resnet": _images,
                                          "whisper": _whisper, "wav2vec2": _waveforms}


def load(family: Any, config: Any, model_dir: pathlib.Path | None, pc: PretrainedConfig
         ) -> MediaInputs:
    """The inputs of an image/audio model (module docstring), with the warnings of its degenerate
    inputs. MediaError "inputs: ..." (one line, naming the file or folder) before anything is
    computed."""
    name = family.name
    if name not in FEEDERS:
        raise media.MediaError(f"model_dir: no input feeder for the {name} family")
    try:
        batches, names, checked = FEEDERS[name](config, model_dir, pc)
    except media.MediaError as e:
        raise media.MediaError(f"inputs: {e}") from None
    modality = family.modality
    default = SKIMAGE_SOURCE if modality == "image" else SPEECH_SOURCES[media.speech_source()]
    source = pc.inputs or default
    return MediaInputs(modality, batches, names, source,
                       tuple(media.media_warnings(modality, checked, names, source)))


def data_summary(inputs: MediaInputs, states: TokenStates) -> dict[str, Any]:
    """results.json "data" of an image/audio run."""
    return {"modality": inputs.modality, "inputs_source": inputs.source,
            "num_inputs": len(inputs.names), "inputs": inputs.names,
            "input_shapes": sorted({tuple(b.inputs[0].shape) for b in inputs.batches}),
            "num_tokens_measured": [int(x.shape[0]) for x in states.layers]}
