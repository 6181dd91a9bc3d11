"""The bintensors header parser against the reference bintensors package."""

from __future__ import annotations

import struct
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from bintensors.numpy import save as bt_save
from hypothesis import example, given
from hypothesis import strategies as st

from remotetensors.errors import HeaderError, HeaderErrorKind
from remotetensors.formats import parse_any_header
from remotetensors.formats.bintensors import DTYPE_ORDER
from remotetensors.formats.safetensors import header_length
from remotetensors.index import FileIndex
from tests.reference import ReferenceView, bincode_varint, bintensors_read

K = HeaderErrorKind


def ours(data: bytes, location: str = "x.bt") -> FileIndex | HeaderErrorKind:
    try:
        n = header_length(data[:64], file_size=len(data), location=location)
        return parse_any_header(data[8 : 8 + n], file_size=len(data), location=location)
    except HeaderError as exc:
        return exc.kind


def assert_agrees(data: bytes) -> FileIndex | HeaderErrorKind:
    expected, got = bintensors_read(data), ours(data)
    if isinstance(expected, ReferenceView):
        assert isinstance(got, FileIndex), f"reference accepts, we reject with {got}"
        assert got.format == "bintensors"
        assert set(got.tensors) == set(expected.tensors)
        for name, (dtype, shape, payload) in expected.tensors.items():
            info = got.tensors[name]
            assert (info.dtype, info.shape) == (dtype, shape)
            assert data[info.start : info.end] == payload
    else:
        assert got == expected, f"reference says {expected}, we say {got}"
    return got


def every_dtype() -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(3)
    values = rng.standard_normal(12).astype(np.float32)
    return {
        "bool": values > 0,
        "u8": rng.integers(0, 255, 5).astype(np.uint8),
        "i8": rng.integers(-9, 9, 5).astype(np.int8),
        "f8_e5m2": values.astype(ml_dtypes.float8_e5m2),
        "f8_e4m3": values.astype(ml_dtypes.float8_e4m3fn),
        "i16": rng.integers(-9, 9, (2, 3)).astype(np.int16),
        "u16": rng.integers(0, 9, 3).astype(np.uint16),
        "f16": values.astype(np.float16),
        "bf16": values.astype(ml_dtypes.bfloat16).reshape(3, 4),
        "i32": rng.integers(-9, 9, 3).astype(np.int32),
        "u32": rng.integers(0, 9, 3).astype(np.uint32),
        "f32": values.reshape(2, 6),
        "f64": values.astype(np.float64),
        "i64": rng.integers(-9, 9, 3).astype(np.int64),
        "u64": rng.integers(0, 9, 3).astype(np.uint64),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }


def written(tensors: dict[str, Any], metadata: dict[str, str] | None = None) -> bytes:
    return bytes(bt_save(tensors, metadata=metadata))


@pytest.mark.parametrize("metadata", [None, {}, {"b": "2", "a": "1"}])
def test_every_dtype_and_metadata_kinds(metadata: dict[str, str] | None) -> None:
    index = assert_agrees(written(every_dtype(), metadata))
    assert isinstance(index, FileIndex)
    assert index.metadata == metadata
    assert {i.dtype for i in index.tensors.values()} == set(DTYPE_ORDER)


@pytest.mark.parametrize("count", [250, 251, 65535, 65536])
def test_varint_boundaries_in_shapes_and_offsets(count: int) -> None:
    data = written({"a": np.zeros(count, np.uint8), "b": np.zeros((1, count), np.int8)})
    index = assert_agrees(data)
    assert isinstance(index, FileIndex)
    assert index.tensors["b"].shape == (1, count)


def test_varint_at_two_to_the_32_by_hand() -> None:
    # A tensor of 2**32 elements would be 4 GiB; a zero-size one has a dimension of 2**32.
    header = (
        b"\x00"
        + bincode_varint(1)
        + bincode_varint(1)
        + b"a"
        + bincode_varint(1)  # U8
        + bincode_varint(2)
        + bincode_varint(2**32)
        + bincode_varint(0)
        + bincode_varint(0)
        + bincode_varint(0)
    )
    header += b" " * (-len(header) % 8)
    index = assert_agrees(struct.pack("<Q", len(header)) + header)
    assert isinstance(index, FileIndex)
    assert index.tensors["a"].shape == (2**32, 0)


def test_long_names_and_many_tensors() -> None:
    tensors = {("n" * 300) + str(i): np.full(i % 5, i, np.int32) for i in range(300)}
    index = assert_agrees(written(tensors))
    assert isinstance(index, FileIndex)
    assert len(index) == 300


def test_non_shortest_varints_are_accepted() -> None:
    header = b"\x00\x01\x01a\x01\x01\xfb\x02\x00\x00\xfc\x02\x00\x00\x00"
    header += b" " * (-len(header) % 8)
    assert isinstance(assert_agrees(struct.pack("<Q", len(header)) + header + b"xy"), FileIndex)


CASES: dict[str, tuple[bytes, HeaderErrorKind | None]] = {
    "bad option tag": (b"\x02\x00", K.INVALID_BINCODE),
    "dtype 15": (b"\x00\x01\x01a\x0f\x00\x00\x00", K.INVALID_BINCODE),
    "dtype u64 form": (
        b"\x00\x01\x01a\xfd" + b"\x01" + b"\x00" * 7 + b"\x00\x00\x00",
        K.INVALID_BINCODE,
    ),
    "varint tag 254": (b"\x00\x01\x01a\x01\x01\xfe\x00\x01", K.INVALID_BINCODE),
    "bad utf-8": (b"\x00\x01\x01\xff\x01\x00\x00\x00", K.INVALID_BINCODE),
    "truncated": (b"\x00\x01\x01", K.INVALID_BINCODE),
    "allocation guard": (b"\x00\xfc" + struct.pack("<I", 1_388_889), K.INVALID_BINCODE),
    "just under the guard": (b"\x00\xfc" + struct.pack("<I", 1_388_888), K.INVALID_BINCODE),
    "metadata guard": (b"\x01\xfc" + struct.pack("<I", 2_083_334), K.INVALID_BINCODE),
    "duplicate names": (b"\x00\x02\x01a\x01\x00\x00\x01\x01a\x01\x00\x01\x02", K.DUPLICATE_NAME),
    "hole": (b"\x00\x01\x01a\x01\x00\x01\x02", K.INVALID_OFFSET),
    "wrong size": (b"\x00\x01\x01a\x01\x01\x02\x00\x01", K.INVALID_TENSOR_INFO),
    "overflow": (b"\x00\x01\x01a\x0b\x02\xfd" + b"\x00" * 7 + b"\x80\x04\x00\x00", K.OVERFLOW),
    "incomplete": (b"\x00\x01\x01a\x01\x00\x00\x01", K.INCOMPLETE_BUFFER),
    "empty header": (b"", K.INVALID_BINCODE),
    "no tensors": (b"\x00\x00", None),
    "duplicate metadata keys": (b"\x01\x02\x01k\x01v\x01k\x01w\x00", None),
    "padding ignored": (b"\x00\x01\x01a\x01\x00\x00\x01xyz", None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_table_agrees_with_reference(name: str) -> None:
    header, expected = CASES[name]
    data_len = 1 if name in ("padding ignored",) else 0
    data = struct.pack("<Q", len(header)) + header + b"d" * data_len
    got = assert_agrees(data)
    if expected is None:
        assert isinstance(got, FileIndex)
    else:
        assert got == expected


def test_errors_name_the_location() -> None:
    header = b"\x00\x01\x01a\x0f\x00\x00\x00"
    with pytest.raises(HeaderError, match=r"m\.bt: invalid bincode header: dtype index 15"):
        parse_any_header(header, file_size=8 + len(header), location="m.bt")


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    names = draw(st.lists(st.text("abc", min_size=1, max_size=3), max_size=4, unique=True))
    tensors = {
        n: np.zeros(
            draw(st.lists(st.integers(0, 3), max_size=2)),
            draw(st.sampled_from([np.int8, np.float32, np.int64])),
        )
        for n in names
    }
    metadata = draw(
        st.none()
        | st.dictionaries(st.text("kv", max_size=2), st.text("xy", max_size=2), max_size=2)
    )
    data = bytearray(written(tensors, metadata))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, max(0, len(data) - 1)))
        kind = draw(st.sampled_from(["replace", "insert", "delete", "truncate", "extend"]))
        if kind == "replace" and data:
            data[at] = draw(
                st.sampled_from([0, 1, 2, 3, 8, 14, 15, 250, 251, 252, 253, 254, 255, 0x20])
            )
        elif kind == "insert":
            data[at:at] = bytes([draw(st.integers(0, 255))])
        elif kind == "delete" and data:
            del data[at]
        elif kind == "truncate":
            del data[draw(st.integers(0, len(data))) :]
        else:
            data += draw(st.binary(min_size=1, max_size=4))
    return bytes(data)


@given(mutated())
# Whitespace, then not ``{``: not a safetensors header, so a .bt file's error is bintensors'.
@example(b"\x08\x00\x00\x00\x00\x00\x00\x00      \x00\x00")
def test_mutated_headers_agree(data: bytes) -> None:
    assert_agrees(data)
