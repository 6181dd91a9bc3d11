"""How tensors become Zarr arrays: chunk rows, byte ranges, names and dtypes (no IO)."""

from __future__ import annotations

import math

import pytest

from remotetensors.dtypes import DTYPES
from remotetensors.index import TensorInfo
from remotetensors.integrations.zarr.dtypes import ZARR_DTYPES
from remotetensors.integrations.zarr.layout import group_attributes, plan_arrays

pytest.importorskip("zarr", reason="the zarr extra is not installed")


def info(
    name: str, dtype: str, shape: tuple[int, ...], start: int = 0, file: str = "m"
) -> TensorInfo:
    nbytes = DTYPES[dtype].nbytes(math.prod(shape))
    return TensorInfo(name, dtype, shape, start, start + nbytes, file=file)


def test_chunks_are_whole_rows_of_about_chunk_bytes_each_a_byte_range() -> None:
    t = info("w", "F32", (1000, 10))  # rows of 40 bytes
    array = plan_arrays({"w": t}, chunk_bytes=400).arrays["w"]
    assert array.rows == 10
    assert array.chunk_shape == (10, 10)
    assert array.chunk_count == 100
    assert array.chunk_nbytes == 400
    assert array.chunk_rows(99) == (990, 1000)
    assert array.file_bytes(*array.chunk_rows(3)) == (1200, 400)
    assert array.chunk_key(3, "/") == "c/3/0"
    assert array.chunk_key(3, ".") == "c.3.0"
    # A tensor smaller than a chunk is one chunk of all its rows, not a padded one.
    small = plan_arrays({"w": info("w", "F32", (3, 10))}, chunk_bytes=400).arrays["w"]
    assert (small.rows, small.chunk_count, small.chunk_nbytes) == (3, 1, 120)
    # A row larger than chunk_bytes is still a chunk.
    big = plan_arrays({"w": t}, chunk_bytes=7).arrays["w"]
    assert (big.rows, big.chunk_count) == (1, 1000)


def test_packed_dtypes_start_every_chunk_on_a_byte_and_unpack_one_value_a_byte() -> None:
    # F4 rows of 7 values are 28 bits: only pairs of rows end on a byte.
    array = plan_arrays({"q": info("q", "F4", (9, 7))}, chunk_bytes=21).arrays["q"]
    assert array.rows % 2 == 0
    assert array.chunk_nbytes == array.rows * 7  # one byte per value in the chunk
    offset, length = array.file_bytes(*array.chunk_rows(1))
    assert (offset, length) == (array.rows * 7 // 2, array.rows * 7 // 2)
    last = array.chunk_rows(array.chunk_count - 1)
    assert last[1] == 9  # the odd last row: its half byte is the tensor's last


def test_references_never_reach_past_the_end_of_the_file() -> None:
    # 1000 rows in chunks of 27: the last chunk reads 26 rows past the tensor, fine while
    # that many bytes follow it in the file; short of that, the rows per chunk divide 1000.
    t = info("w", "F32", (1000, 10), start=100)
    inside = plan_arrays({"w": t}, chunk_bytes=27 * 40, file_sizes={"m": t.end + 26 * 40})
    assert inside.arrays["w"].rows == 27
    for after in (0, 25 * 40):
        short = plan_arrays({"w": t}, chunk_bytes=27 * 40, file_sizes={"m": t.end + after})
        assert short.arrays["w"].rows == 25
    prime = info("p", "F32", (1009, 10))
    assert (
        plan_arrays({"p": prime}, chunk_bytes=400, file_sizes={"m": prime.end}).arrays["p"].rows
        == 1
    )
    # The store pads in memory: no divisor needed.
    assert plan_arrays({"w": t}, chunk_bytes=27 * 40).arrays["w"].rows == 27


def test_scalars_and_empty_tensors() -> None:
    plan = plan_arrays(
        {"s": info("s", "F64", ()), "e": info("e", "F32", (0, 3)), "z": info("z", "I8", (4, 0))},
        chunk_bytes=64,
    )
    s, e, z = plan.arrays["s"], plan.arrays["e"], plan.arrays["z"]
    assert (s.chunk_shape, s.chunk_count, s.chunk_key(0, "/"), s.dims) == ((), 1, "c", ())
    assert s.file_bytes(0, 1) == (0, 8)
    assert (e.chunk_shape, e.chunk_count) == ((1, 3), 0)
    assert (z.chunk_shape, z.chunk_count) == ((4, 1), 0)


def test_what_zarr_cannot_express_is_left_out_with_the_reason() -> None:
    tensors = {
        "ok": info("ok", "BF16", (2, 2)),
        "q": TensorInfo("q", "Q4_K", (256,), 0, 144, file="m"),  # a GGUF block-quantized kind
        "f4": info("f4", "F4", (4, 4)),
        "__x": info("__x", "F32", (1,)),
        "a/../b": info("a/../b", "F32", (1,)),
        "back\\slash": info("back\\slash", "F32", (1,)),
    }
    store = plan_arrays(tensors, chunk_bytes=64)
    why = dict(store.left_out)
    assert set(store.arrays) == {"ok", "f4"}  # the store unpacks F4 itself
    assert "Q4_K has no Zarr data type" in why["q"]
    assert "'__'" in why["__x"]
    assert "'..'" in why["a/../b"]
    assert "backslash" in why["back\\slash"]
    refs = plan_arrays(tensors, chunk_bytes=64, file_sizes={"m": 10**6})
    assert "packed 4 bits apiece" in dict(refs.left_out)["f4"]
    assert set(refs.arrays) == {"ok"}
    taken = plan_arrays(tensors, chunk_bytes=64, usable=lambda d: d.v3 != "bfloat16")
    assert "registered by another library" in dict(taken.left_out)["ok"]


def test_slashes_make_groups_and_a_name_cannot_be_array_and_group() -> None:
    tensors = {
        "a": info("a", "F32", (2,)),
        "a/b": info("a/b", "F32", (2,)),
        "g/x": info("g/x", "F32", (2,)),
        "g/h/y": info("g/h/y", "F32", (2,)),
        "top": info("top", "F32", (2,)),
    }
    plan = plan_arrays(tensors, chunk_bytes=64)
    assert set(plan.arrays) == {"a", "g/x", "g/h/y", "top"}
    assert plan.groups == {"": ["a", "g", "top"], "g": ["x", "h"], "g/h": ["y"]}
    assert "parent path" in dict(plan.left_out)["a/b"]
    # The other order: the group first, then an array of the group's name.
    other = plan_arrays({"g/x": tensors["g/x"], "g": info("g", "F32", (2,))}, chunk_bytes=64)
    assert "an array and a group" in dict(other.left_out)["g"]


def test_dimension_names_are_the_tensors_own_and_never_a_variables_name() -> None:
    tensors = {"w": info("w", "F32", (2, 3)), "w.dim_1": info("w.dim_1", "F32", (5,))}
    plan = plan_arrays(tensors, chunk_bytes=64)
    assert plan.arrays["w"].dims == ("w.dim_0", "w.dim_1_")
    assert plan.arrays["w.dim_1"].dims == ("w.dim_1.dim_0",)


def test_metadata_documents() -> None:
    array = plan_arrays({"w": info("w", "BF16", (5, 3))}, chunk_bytes=12).arrays["w"]
    v3 = array.v3_metadata("/")
    assert v3["data_type"] == "bfloat16"
    assert v3["chunk_grid"]["configuration"]["chunk_shape"] == [2, 3]
    assert v3["codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}}]
    assert v3["dimension_names"] == ["w.dim_0", "w.dim_1"]
    assert v3["attributes"] == {"stored_dtype": "BF16", "file": "m"}
    zarray, zattrs = array.v2_metadata()
    assert zarray["dtype"] == "bfloat16"
    assert zarray["fill_value"] is None
    assert zattrs["_ARRAY_DIMENSIONS"] == ["w.dim_0", "w.dim_1"]
    # F8_E4M3 is e4m3fn: the registry's float8_e4m3 has infinities, so it is not that name.
    assert ZARR_DTYPES["F8_E4M3"].v3 == "float8_e4m3fn"
    assert set(ZARR_DTYPES) == set(DTYPES)


def test_group_attributes_redact_and_keep_only_text_metadata() -> None:
    attrs = group_attributes("https://user:secret@host/m.safetensors", {"format": "pt"})
    assert "secret" not in str(attrs)
    assert attrs["metadata"] == {"format": "pt"}
    assert "metadata" not in group_attributes("x", {"tokens": ["a", "b"]})
    with pytest.raises(ValueError, match="chunk_bytes"):
        plan_arrays({}, chunk_bytes=0)
