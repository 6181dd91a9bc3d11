"""The PyTorch zip (``formats/torch_zip``, ``formats/torch_bin``) against files ``torch.save``
wrote, with ``torch.load(weights_only=True)`` as the oracle; no IO beyond memory."""

from __future__ import annotations

import io
import struct
import zipfile
from typing import Any

import numpy as np
import pytest

import remotetensors as rt
from remotetensors.formats.torch_bin import TorchIndex, read_bin
from remotetensors.formats.torch_zip import HeldBytes, NeedBytes
from tests.torch_bin_files import as_zip64, legacy_bin, loaded, saved, torch

DTYPES = [
    torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64, torch.uint16,
    torch.uint32, torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2,
]  # fmt: skip


def index_of(data: bytes, *, window: int | None = None) -> tuple[TorchIndex, int]:
    """The index of ``data``, read as a remote reader would: a suffix of ``window`` bytes
    (all of it by default), then what :func:`read_bin` asks for. Also the reads it took."""
    start = 0 if window is None else max(0, len(data) - window)
    held = HeldBytes(len(data), [(start, data[start:])])
    for reads in range(10):
        step = read_bin(held, location="x.bin")
        if not isinstance(step, NeedBytes):
            return step, reads
        held = held.with_bytes(step.start, data[step.start : step.end])
    raise AssertionError("no index after 10 reads")


def tensors_of(data: bytes, found: TorchIndex) -> dict[str, np.ndarray[Any, Any]]:
    """Every tensor, from the file's bytes where the index puts it (strided ones laid out)."""
    result = {}
    for name, info in found.index.tensors.items():
        place = found.places[name]
        place.check(data[place.header_start : place.start], location="x.bin")
        items = np.frombuffer(data[info.start : info.end], dtype=info.dtype_info.numpy)
        view = found.strided.get(name)
        if view is None:
            result[name] = items.reshape(info.shape)
        else:
            step = info.dtype_info.numpy.itemsize
            strides = tuple(s * step for s in view.stride)
            result[name] = np.lib.stride_tricks.as_strided(items, view.shape, strides)
    return result


def flat(value: Any, name: str = "") -> dict[str, Any]:
    """The tensors in ``value`` (a state dict, perhaps nested), named by their path."""
    if isinstance(value, torch.Tensor):
        return {name: value}
    if not isinstance(value, (dict, list, tuple)):
        return {}
    items = value.items() if isinstance(value, dict) else enumerate(value)
    found: dict[str, Any] = {}
    for key, item in items:
        found.update(flat(item, f"{name}.{key}" if name else str(key)))
    return found


def assert_same(data: bytes, found: TorchIndex) -> None:
    """The index and values agree with torch.load's."""
    reference = flat(loaded(data))
    ours = tensors_of(data, found)
    assert sorted(ours) == sorted(reference)
    for name, expected in reference.items():
        expected = expected.detach()
        info = found.index.tensors[name]
        assert info.shape == tuple(expected.shape), name
        as_bytes = (
            expected.contiguous().view(-1).view(torch.uint8).numpy() if expected.numel() else []
        )
        assert np.ascontiguousarray(ours[name]).reshape(-1).view(np.uint8).tobytes() == bytes(
            as_bytes
        ), name
    assert found.index.num_parameters == sum(t.numel() for t in reference.values())


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


def rezipped(data: bytes, change: Any = None, **kwargs: Any) -> bytes:
    """``data``'s members written again by Python's zipfile (no data descriptors, no
    alignment); ``change(name, bytes)`` may replace a member's bytes."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", **kwargs) as target:
        for info in source.infolist():
            member = source.read(info.filename)
            target.writestr(info.filename, change(info.filename, member) if change else member)
    return out.getvalue()


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
