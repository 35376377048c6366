"""Per-layer anisotropy of the vision and speech families on offline inputs (docs/MODALITIES.md).

`measure(...)` runs a loaded model (registry interface: `hidden_states_fn`, `state_labels`,
`init_params`) and its untrained re-initialisation on images or audio and returns the per-layer
average cosine similarity over all tokens of all inputs (tokens = patches and prefix tokens,
spatial positions of a CNN stage, or 20 ms audio frames), optionally over a token mask (Whisper:
only the frames that cover speech, not the 30 s padding). `default_images` and
`default_speech` build the offline inputs (`speech_lines`: the sentences spoken);
`whisper_features` turns waveforms into Whisper's 30 s log-mel windows and the speech-frame mask.
The pretrained study uses these for image and audio models (`--config.inputs=DIR`,
anisotropy_jax/studies/pretrained/media_inputs.py).
"""
from __future__ import annotations

import math
import pathlib
from types import ModuleType
from typing import Any, Sequence

import jax
import numpy as np

from anisotropy_jax import corpus, media, metrics
from anisotropy_jax.models import whisper

WHISPER_SAMPLES_PER_TOKEN = 320  # hop 160 × conv stride 2 at 16 kHz: one token per 20 ms
WHISPER_SAMPLES = 480_000  # 30 s at 16 kHz: Whisper's fixed input window


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
                   inputs: str | pathlib.Path | None = None, rate: int = 16000
                   ) -> list[np.ndarray]:
    """Waveforms at `rate`: the WAV files of `inputs` (the first `num`), or the `num`
    `speech_lines` spoken by espeak-ng into `folder`."""
    if inputs is None:
        paths = media.synthesize_speech(speech_lines(num, seed), folder)
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


def layer_cosines(states: Any, mask_BxL: np.ndarray | None = None) -> list[float]:
    """Average cosine of every state (B, L, D) over all its tokens (those of the mask if given;
    a state with another token count, e.g. pooled features, ignores the mask)."""
    out = []
    for state in states:
        state = np.asarray(state)
        mask = mask_BxL if mask_BxL is not None and mask_BxL.shape == state.shape[:2] else None
        out.append(float(metrics.average_cosine_similarity(state, mask)))
    return out


def measure(family: ModuleType, config: Any, params: Any, inputs: np.ndarray, seed: int = 0,
            mask_BxL: np.ndarray | None = None, batch_size: int = 4) -> dict[str, Any]:
    """{"labels", "trained", "untrained"}: per-state average cosine of the model and of its
    re-initialisation (`family.init_params(config, key(seed))`), batches of `batch_size`."""
    forward = family.hidden_states_fn(config)
    untrained = family.init_params(config, jax.random.key(seed))
    result: dict[str, Any] = {"labels": list(family.state_labels(config))}
    for name, p in (("trained", params), ("untrained", untrained)):
        if p is None:
            continue
        chunks = [forward(p, inputs[i:i + batch_size]) for i in range(0, len(inputs), batch_size)]
        states = [np.concatenate([np.asarray(c[k]) for c in chunks]) for k in range(len(chunks[0]))]
        result[name] = layer_cosines(states, mask_BxL)
    return result
