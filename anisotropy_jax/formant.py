"""A numpy formant synthesiser of speech-like clips: the default speech where espeak-ng is not
installed (media.synthesize_speech; docs/CROSS_MODAL.md). Vowels (Peterson & Barney formants) with
formant glides, fricative noise bursts, a glottal pulse train with a falling pitch contour and
jitter, three cascaded two-pole resonators (Klatt 1980); deterministic from a seed. Not words.
"""
from __future__ import annotations

import math
import pathlib
import wave
from typing import Sequence

import numpy as np

# Formant synthesiser (the speech default without espeak-ng): (F1, F2, F3) Hz of ten English
# vowels (Peterson & Barney 1952, adult male averages) and the bandwidths of the three resonators.
VOWEL_FORMANTS = ((270, 2290, 3010), (390, 1990, 2550), (530, 1840, 2480), (660, 1720, 2410),
                  (730, 1090, 2440), (570, 840, 2410), (440, 1020, 2240), (300, 870, 2240),
                  (640, 1190, 2390), (490, 1350, 1690))
FORMANT_BANDWIDTHS = (60, 90, 120)
FORMANT_RATE = 16_000


def _resonate(x: np.ndarray, freq: np.ndarray, bandwidth: float, rate: int) -> np.ndarray:
    """A two-pole resonator (Klatt 1980) whose centre frequency follows `freq` sample by sample;
    unit gain at 0 Hz."""
    r = math.exp(-math.pi * bandwidth / rate)
    c = -r * r
    b = 2 * r * np.cos(2 * np.pi * freq / rate)
    a = 1 - b - c
    y = np.zeros_like(x)
    y1 = y2 = 0.0
    for n in range(x.size):  # ~1 s of 16 kHz a clip: fast enough in pure Python
        y1, y2 = a[n] * x[n] + b[n] * y1 + c * y2, y1
        y[n] = y1
    return y


def formant_waveform(words: int, rng: np.random.Generator, rate: int = FORMANT_RATE
                     ) -> np.ndarray:
    """A speech-like waveform (float in [-1, 1]): ~1.4 syllables a word of 0.12–0.22 s, each a
    random vowel (VOWEL_FORMANTS) with formant transitions from the previous one, some preceded
    by a fricative (high-passed noise burst); a glottal pulse train whose pitch falls from
    ~130 Hz to ~95 Hz over the utterance with a rise on stressed syllables, 1 % jitter; the
    source filtered by three cascaded resonators; 50 ms of silence at either end."""
    syllables = max(2, round(words * 1.4))
    durations = rng.uniform(0.12, 0.22, syllables)
    vowels = rng.integers(0, len(VOWEL_FORMANTS), syllables)
    fricative = rng.random(syllables) < 0.35
    stress = rng.random(syllables) < 0.3
    counts = (durations * rate).astype(int)
    total = int(counts.sum())
    # Formant tracks: each syllable glides over its first 30 % from the previous vowel.
    tracks = np.zeros((3, total))
    envelope = np.zeros(total)
    noise_gate = np.zeros(total)
    start, previous = 0, np.asarray(VOWEL_FORMANTS[vowels[0]], float)
    for count, vowel, fric in zip(counts, vowels, fricative):
        target = np.asarray(VOWEL_FORMANTS[vowel], float)
        glide = np.clip(np.arange(count) / (0.3 * count), 0, 1)
        tracks[:, start:start + count] = previous[:, None] + (target - previous)[:, None] * glide
        rise, fall = int(0.2 * count), int(0.3 * count)
        shape = np.ones(count)
        shape[:rise] = np.linspace(0, 1, rise)
        shape[count - fall:] = np.linspace(1, 0.05, fall)
        if fric:  # the first 25 % is a noise burst, the vowel starts after it
            burst = int(0.25 * count)
            noise_gate[start:start + burst] = np.hanning(burst)
            shape[:burst] = 0
        envelope[start:start + count] = shape
        start, previous = start + count, target
    # Pitch: a declining line, raised on stressed syllables, 1 % jitter; pulses where the phase
    # crosses an integer.
    t = np.arange(total) / total
    f0 = 130 - 35 * t
    f0 += 20 * np.repeat(stress.astype(float), counts) * np.sin(np.pi * np.concatenate(
        [np.arange(c) / c for c in counts]))
    f0 *= 1 + 0.01 * rng.standard_normal(total)
    phase = np.cumsum(f0 / rate)
    pulses = np.diff(np.floor(phase), prepend=0.0)
    glottal = np.convolve(pulses, np.hanning(int(0.004 * rate)), mode="same")  # soft pulses
    glottal -= np.convolve(glottal, np.ones(64) / 64, mode="same")  # no DC
    voiced = glottal * envelope
    for k in range(3):
        voiced = _resonate(voiced, tracks[k], FORMANT_BANDWIDTHS[k], rate)
    noise = np.diff(rng.standard_normal(total + 1)) * noise_gate  # first difference: high-passed
    signal = voiced / (np.abs(voiced).max() + 1e-9) + 0.25 * noise
    silence = np.zeros(int(0.05 * rate))
    signal = np.concatenate([silence, signal, silence])
    return 0.8 * signal / (np.abs(signal).max() + 1e-9)


def write_wav(path: str | pathlib.Path, samples: np.ndarray, rate: int) -> None:
    """Mono 16-bit PCM WAV of `samples` (float in [-1, 1])."""
    pcm = np.round(np.clip(samples, -1, 1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(pcm.tobytes())


def synthesize_formant_speech(lines: Sequence[str], folder: str | pathlib.Path, seed: int = 0
                              ) -> list[pathlib.Path]:
    """One speech-like WAV per line (`formant_waveform`, as many syllables as the line has words
    × 1.4; 16 kHz mono 16-bit) into `folder` as line_000.wav, …; deterministic in (`seed`, line
    index, word count); numpy only. Not words: vowels, fricatives and a pitch contour."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, line in enumerate(lines):
        path = folder / f"line_{i:03d}.wav"
        rng = np.random.default_rng([seed, i])
        write_wav(path, formant_waveform(len(line.split()), rng), FORMANT_RATE)
        paths.append(path)
    return paths
