"""The PyTorch zip (``formats/torch_zip``, ``formats/torch_bin``) against files ``torch.save``
wrote, with ``torch.load(weights_only=True)`` as the oracle; no IO beyond memory."""

from __future__ import annotations

import io
import struct
import zipfile
from typing import Any

import pytest

import remotetensors as rt
from remotetensors.formats.torch_zip import HeldBytes, NeedBytes
from tests.torch_bin_files import (
    as_zip64,
    assert_same,
    index_of,
    legacy_bin,
    rezipped,
    saved,
    tensors_of,
    torch,
)

DTYPES = [
    torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64, torch.uint16,
    torch.uint32, torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2,
]  # fmt: skip


def test_every_dtype_torch_saves() -> None:
    state = {str(dt): (torch.arange(12) % 5).reshape(3, 4).to(dt) for dt in DTYPES}
    data = saved(state)
    found, _ = index_of(data)
    assert_same(data, found)
    assert found.index.format == "pytorch"
    assert found.index.tensors["torch.bfloat16"].dtype == "BF16"
    assert found.index.tensors["torch.float8_e4m3fn"].dtype == "F8_E4M3"


def test_views_shared_storages_parameters_and_nesting() -> None:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    state: dict[str, Any] = {
        "base": base,
        "transposed": base.t(),
        "row": base[2],
        "columns": base[:, 1:3],
        "expanded": torch.ones(1, 5).expand(3, 5),
        "scalar": torch.tensor(7.0),
        "empty": torch.zeros(0, 3),
        "param": torch.nn.Parameter(torch.ones(2, 2)),
        "nested": {"inner": torch.full((2,), 3, dtype=torch.int16), "epoch": 3},
        "listed": [torch.ones(1), "text"],
    }
    data = saved(state)
    found, _ = index_of(data)
    assert_same(data, found)
    rows = found.index.tensors
    assert set(found.strided) == {"transposed", "columns", "expanded"}
    assert found.strided["expanded"].stride == (0, 1)
    # Views share their storage's bytes: the row is bytes of the base, from its offset.
    assert (rows["row"].start, rows["row"].end) == (
        rows["base"].start + 48,
        rows["base"].start + 72,
    )
    assert found.places["row"] == found.places["base"] == found.places["transposed"]
    assert list(rows) == sorted(rows, key=lambda n: (rows[n].start, rows[n].end))


def test_the_header_takes_a_suffix_and_one_read_for_the_pickle() -> None:
    data = saved({f"layer.{i}.w": torch.ones(64, 64) for i in range(20)})
    found, reads = index_of(data, window=4096)  # the end records and the whole directory
    assert reads == 1  # data.pkl (with byteorder), near the start
    assert_same(data, found)
    found, reads = index_of(data, window=40)  # only the EOCD: then the directory, then data.pkl
    assert reads == 2
    assert_same(data, found)


def test_zip64_archives() -> None:
    data = as_zip64(saved({"a": torch.arange(10.0), "b": torch.ones(3, 4, dtype=torch.bfloat16)}))
    assert zipfile.ZipFile(io.BytesIO(data)).testzip() is None  # a valid zip64 archive
    found, _ = index_of(data, window=200)
    assert_same(data, found)
    assert all(place.member.zip64 for place in found.places.values())


def test_archives_written_by_another_zip_writer() -> None:
    data = rezipped(saved({"a": torch.arange(10.0), "b": torch.ones(3, dtype=torch.int64)}))
    found, _ = index_of(data, window=100)
    assert_same(data, found)


def error_of(data: bytes, *, window: int | None = None) -> rt.HeaderError:
    with pytest.raises(rt.HeaderError) as caught:
        index_of(data, window=window)
    assert caught.value.location == "x.bin"
    return caught.value


def test_legacy_files_get_a_clear_error_from_either_end() -> None:
    data = legacy_bin()
    for window in (None, 64):
        error = error_of(data, window=window)
        assert error.kind is rt.HeaderErrorKind.LEGACY_TORCH_FORMAT
        assert "save it again" in str(error)


def test_files_that_are_no_torch_zip() -> None:
    assert error_of(b"not a zip at all" * 10).kind is rt.HeaderErrorKind.INVALID_ZIP
    assert error_of(b"").kind is rt.HeaderErrorKind.INVALID_ZIP
    state = saved({"a": torch.ones(100)})
    compressed = rezipped(state, compression=zipfile.ZIP_DEFLATED)
    assert "compressed" in str(error_of(compressed))
    missing = rezipped(state, lambda name, b: b)
    missing = _without(missing, "archive/data/0")
    assert "no member archive/data/0" in str(error_of(missing))
    short = rezipped(state, lambda name, b: b[:-4] if name.endswith("data/0") else b)
    assert "396 bytes in the archive, but the pickle says 400" in str(error_of(short))
    big = rezipped(state, lambda name, b: b"big" if name.endswith("byteorder") else b)
    assert "'big'-endian" in str(error_of(big))


def _without(data: bytes, name: str) -> bytes:
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            if info.filename != name:
                target.writestr(info.filename, source.read(info.filename))
    return out.getvalue()


def test_a_local_header_that_disagrees_with_the_prediction_is_an_error() -> None:
    data = bytearray(saved({"a": torch.arange(16.0)}))
    found, _ = index_of(bytes(data))
    place = found.places["a"]
    at = place.header_start + 28  # the local header's extra field length
    (extra,) = struct.unpack_from("<H", data, at)
    struct.pack_into("<H", data, at, extra - 4)  # its bytes would start 4 bytes earlier
    found, _ = index_of(bytes(data))  # the directory alone does not tell
    with pytest.raises(rt.HeaderError, match="puts its bytes at") as caught:
        tensors_of(bytes(data), found)
    assert caught.value.kind is rt.HeaderErrorKind.INVALID_ZIP


def test_held_bytes_merge_and_name_what_is_missing() -> None:
    held = HeldBytes(100, [(10, b"a" * 10), (30, b"b" * 10)]).with_bytes(15, b"c" * 10)
    assert held.regions == ((10, b"a" * 10 + b"c" * 5), (30, b"b" * 10))
    assert held.get(12, 22) == b"a" * 8 + b"cc"
    with pytest.raises(NeedBytes) as caught:
        held.get(20, 35)
    assert (caught.value.start, caught.value.end) == (25, 30)
    assert held.prefix() == b""
    assert HeldBytes(5, [(0, b"abc")]).prefix() == b"abc"
