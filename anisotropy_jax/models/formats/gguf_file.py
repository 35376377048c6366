"""A GGUF file's metadata and tensor index, read in one pass over its header.

The `gguf` package's GGUFReader makes a numpy memmap view for every element of every array, which
takes about 20 s for Gemma-3's 262,144-token vocabulary (and a few seconds for SmolLM2's). This
reader unpacks the header with `struct` from one bytes buffer (well under a second) and gives the
tensors as memmap slices shaped as GGUFReader shapes them, so that `gguf.quants.dequantize` reads
them alike. Little-endian GGUF versions 2 and 3 (llama.cpp's since 2023). The tests compare it
field by field and tensor by tensor with GGUFReader.
"""
from __future__ import annotations

import dataclasses
import pathlib
import struct
from typing import Any

import numpy as np

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
# GGUF value types → struct formats (little-endian); 8 is a string, 9 an array.
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
           11: "<q", 12: "<d"}
NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?",
         10: "<u8", 11: "<i8", 12: "<f8"}
STRING, ARRAY = 8, 9


class GGUFFormatError(ValueError):
    """The bytes are not a GGUF file this reader handles (bad magic, version, or truncated)."""


@dataclasses.dataclass(frozen=True)
class Tensor:
    """One tensor of the index: `shape` in GGUF order (the row length first, as GGUFReader's
    `shape`), `tensor_type` a gguf.GGMLQuantizationType, `data` the stored values: typed for
    F16/F32/F64/I8-I64 (numpy shape = reversed `shape`), else uint8 of shape (…, bytes per row)."""

    name: str
    shape: tuple[int, ...]
    tensor_type: Any
    data: np.ndarray


class _Cursor:
    """Reads little-endian GGUF values from a bytes buffer, advancing an offset."""

    def __init__(self, buffer: bytes | memoryview):
        self.buffer, self.offset = buffer, 0

    def scalar(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.buffer, self.offset)
        self.offset += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.scalar("<Q")
        end = self.offset + n
        if end > len(self.buffer):
            raise GGUFFormatError("truncated string")
        value = bytes(self.buffer[self.offset:end]).decode("utf-8", errors="replace")
        self.offset = end
        return value

    def value(self, kind: int) -> Any:
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            item, n = self.scalar("<I"), self.scalar("<Q")
            if item in NUMPY:  # a numeric array in one read
                dtype = np.dtype(NUMPY[item])
                end = self.offset + n * dtype.itemsize
                if end > len(self.buffer):
                    raise GGUFFormatError("truncated array")
                values = np.frombuffer(self.buffer, dtype, n, self.offset).tolist()
                self.offset = end
                return values
            return [self.value(item) for _ in range(n)]
        if kind not in SCALARS:
            raise GGUFFormatError(f"unknown value type {kind}")
        return self.scalar(SCALARS[kind])


def _tensor_data(memmap: np.ndarray, offset: int, shape: tuple[int, ...], kind: Any) -> np.ndarray:
    """The stored values of one tensor as GGUFReader gives them (see `Tensor.data`)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
    from gguf.quants import quant_shape_to_byte_shape

    typed = {T.F16: np.float16, T.F32: np.float32, T.F64: np.float64, T.I8: np.int8,
             T.I16: np.int16, T.I32: np.int32, T.I64: np.int64}
    n = int(np.prod(shape))
    numpy_shape = tuple(reversed(shape))
    if kind in typed:
        dtype = np.dtype(typed[kind])
        count = n
    else:
        block, size = GGML_QUANT_SIZES[kind]
        dtype, count = np.dtype(np.uint8), n * size // block
        numpy_shape = quant_shape_to_byte_shape(numpy_shape, kind)
    end = offset + count * dtype.itemsize
    if end > memmap.size:
        raise GGUFFormatError(f"tensor data ends at byte {end}, past the file's {memmap.size}")
    return memmap[offset:end].view(dtype).reshape(numpy_shape)


class GGUFFile:
    """`fields`: every metadata key → its value (int, float, bool, str, or a list of them), in
    file order; `tensors`: the tensor index, in file order. GGUFFormatError on a malformed file."""

    def __init__(self, path: str | pathlib.Path):
        from gguf import GGMLQuantizationType

        path = pathlib.Path(path)
        memmap = np.memmap(path, dtype=np.uint8, mode="r")
        cursor = _Cursor(memoryview(memmap))
        try:
            if bytes(cursor.buffer[:4]) != MAGIC:
                raise GGUFFormatError("not a GGUF file (bad magic)")
            cursor.offset = 4
            version = cursor.scalar("<I")
            if version not in VERSIONS:
                raise GGUFFormatError(f"GGUF version {version} (read: {VERSIONS}, little-endian)")
            n_tensors, n_fields = cursor.scalar("<Q"), cursor.scalar("<Q")
            self.fields: dict[str, Any] = {}
            for _ in range(n_fields):
                key = cursor.string()
                self.fields[key] = cursor.value(cursor.scalar("<I"))
            index = []
            for _ in range(n_tensors):
                name = cursor.string()
                dims = tuple(cursor.scalar("<Q") for _ in range(cursor.scalar("<I")))
                index.append((name, dims, GGMLQuantizationType(cursor.scalar("<I")),
                              cursor.scalar("<Q")))
        except struct.error as e:
            raise GGUFFormatError(f"truncated header ({e})") from None
        alignment = int(self.fields.get("general.alignment", DEFAULT_ALIGNMENT))
        if alignment <= 0 or alignment & (alignment - 1):
            raise GGUFFormatError(f"general.alignment={alignment} is not a power of two")
        start = -(-cursor.offset // alignment) * alignment
        if len({name for name, *_ in index}) != len(index):
            raise GGUFFormatError("duplicated tensor names")
        self.tensors = [Tensor(name, dims, kind, _tensor_data(memmap, start + offset, dims, kind))
                        for name, dims, kind, offset in index]
