"""Strided get_slice over HTTP and from local files: the reference's bytes, the covering span's
bytes at most on the network, and memory that does not grow with the number of elements."""

from __future__ import annotations

import itertools
import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open as reference_open

import remotetensors as rt
from remotetensors.reading.slicing import plan_slice
from tests.reference import raw_file, write_reference
from tests.servers import FaultyServer

S = slice
KEYS = [
    (S(None), S(None, None, 2)),
    S(None, None, 3),
    (S(None, None, 2), S(None, None, 2)),
    (S(1, None, 4), S(3, 60, 5)),
    (S(2, 50, 7), 9),
    (Ellipsis, S(1, None, 3)),
]


def tensors() -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(11)
    return {
        "f32": rng.standard_normal((64, 96)).astype(np.float32),
        "bf16": rng.standard_normal((60, 80)).astype(ml_dtypes.bfloat16),
        "u8": rng.integers(0, 255, (70, 65)).astype(np.uint8),
    }


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, bytes, dict[str, np.ndarray[Any, Any]]]:
    arrays = tensors()
    data = write_reference(arrays)
    path = tmp_path / "m.safetensors"
    path.write_bytes(data)
    return path, data, arrays


def assert_reference_bytes(f: Any, path: Path, arrays: dict[str, np.ndarray[Any, Any]]) -> None:
    with reference_open(str(path), "numpy") as ref:
        for (name, full), key in itertools.product(arrays.items(), KEYS):
            got = f.get_slice(name)[key]
            expected = ref.get_slice(name)[key]
            assert got.dtype == full.dtype, (name, key)
            assert got.shape == expected.shape == full[key].shape, (name, key)
            assert got.tobytes() == expected.tobytes() == full[key].tobytes(), (name, key)
            assert got.flags.c_contiguous
            assert got.flags.writeable


def test_local_strided_slices_equal_the_reference(
    written: tuple[Path, bytes, dict[str, np.ndarray[Any, Any]]],
) -> None:
    path, _, arrays = written
    with rt.safe_open(path) as f:
        assert_reference_bytes(f, path, arrays)


def test_strided_slices_over_http_equal_the_reference_and_fetch_within_the_covering_span(
    faulty: FaultyServer, written: tuple[Path, bytes, dict[str, np.ndarray[Any, Any]]]
) -> None:
    path, data, arrays = written
    url = faulty.put("m.safetensors", data)
    options = rt.ReadOptions(header_window_bytes=1024)
    with rt.safe_open(url, options=options) as f:
        assert_reference_bytes(f, path, arrays)
        for (name, full), key in itertools.product(arrays.items(), KEYS):
            faulty.log.clear()
            assert f.get_slice(name)[key].tobytes() == full[key].tobytes()
            covering = plan_slice(f.index.tensors[name], key).covering
            seen = sorted(faulty.log.ranges())
            assert all(covering.start <= a and b <= covering.end for a, b in seen), (name, key)
            assert all(a[1] <= b[0] for a, b in itertools.pairwise(seen)), "a byte twice"
            assert faulty.log.total_bytes <= covering.length
            # These tensors are far below a part: every gap is bridged, one request.
            assert len(seen) == 1, (name, key, seen)


def test_rows_far_apart_fetch_only_the_rows(faulty: FaultyServer) -> None:
    rows = np.arange(40 * 20_000, dtype=np.float32).reshape(40, 20_000)  # rows of 80 kB
    data = write_reference({"w": rows})
    url = faulty.put("rows.safetensors", data)
    window = 1024  # the first request's bytes, held since the open
    with rt.safe_open(url, options=rt.ReadOptions(header_window_bytes=window)) as f:
        start = f.index.tensors["w"].start
        faulty.log.clear()
        got = f.get_slice("w")[::10]
    assert got.tobytes() == rows[::10].tobytes()
    row = 80_000
    expected = [(max(window, start + i * row), start + i * row + row) for i in (0, 10, 20, 30)]
    assert sorted(faulty.log.ranges()) == expected


def test_a_large_strided_read_goes_chunk_by_chunk_within_its_budget(faulty: FaultyServer) -> None:
    # 2 MiB covering, a budget of 2 x 32 KiB of scratch: the spans come in chunks of 64 KiB
    # (the least a gather chunk holds), each byte of the covering span at most once.
    full = np.arange(512 * 1024, dtype=np.float32).reshape(512, 1024)
    data = write_reference({"w": full})
    url = faulty.put("big.safetensors", data)
    options = rt.ReadOptions(header_window_bytes=1024, part_size_bytes=32 * 1024, max_concurrency=2)
    with rt.safe_open(url, options=options) as f:
        info = f.index.tensors["w"]
        faulty.log.clear()
        got = f.get_slice("w")[:, 1::2]
    assert got.tobytes() == full[:, 1::2].tobytes()
    seen = sorted(faulty.log.ranges())
    assert all(b - a <= options.fixed_part_size_bytes for a, b in seen)
    assert all(x[1] <= y[0] for x, y in itertools.pairwise(seen))
    assert info.start + 4 <= seen[0][0]
    assert seen[-1][1] <= info.end
    assert info.nbytes - 64 * 1024 < faulty.log.total_bytes <= info.nbytes


def test_sub_byte_strided_slices_over_http(faulty: FaultyServer) -> None:
    codes = np.random.default_rng(2).integers(0, 16, 8 * 12).astype(np.uint8)
    packed = bytes((codes[0::2] | (codes[1::2] << 4)).tolist())
    header = json.dumps({"f4": {"dtype": "F4", "shape": [8, 12], "data_offsets": [0, 48]}})
    url = faulty.put("f4.safetensors", raw_file(header, packed, pad=True))
    values = codes.reshape(8, 12)
    with rt.safe_open(url) as f:
        keys: list[Any] = [
            S(None, None, 3),
            (S(1, None, 2), S(2, 10)),
            (S(None, None, 2), S(4, 12)),
        ]
        for key in keys:
            got = f.get_slice("f4")[key]
            assert got.dtype == np.dtype(ml_dtypes.float4_e2m1fn)
            assert got.view(np.uint8).tobytes() == values[key].tobytes(), key
        with pytest.raises(rt.SliceError, match="byte boundary"):
            f.get_slice("f4")[:, ::2]


@pytest.mark.parametrize("where", ["local", "http"])
def test_a_strided_read_holds_the_result_and_one_covering_span_at_most(
    where: str, faulty: FaultyServer, tmp_path: Path
) -> None:
    # Before, planning [:, ::2] made a byte range, a buffer view and a target per element:
    # 45 MiB of Python objects for this 1 MiB tensor, and seconds of CPU.
    full = np.arange(512 * 512, dtype=np.float32).reshape(512, 512)
    data = write_reference({"w": full})
    path = tmp_path / "w.safetensors"
    path.write_bytes(data)
    location = str(path) if where == "local" else faulty.put("w.safetensors", data)
    with rt.safe_open(location) as f:
        f.get_slice("w")[0:1]  # connections and first-use imports before measuring
        whole, whole_peak = peak_memory(lambda: f.get_tensor("w"))
        got, peak = peak_memory(lambda: f.get_slice("w")[:, ::2])
    assert got.tobytes() == full[:, ::2].tobytes()
    # The covering span here is the whole tensor: at most what reading it whole holds, and
    # the result beside it.
    assert whole.nbytes == full.nbytes
    assert peak < whole_peak + got.nbytes + 64 * 1024


def peak_memory(read: Callable[[], Any]) -> tuple[Any, int]:
    """What ``read`` returns, and the most memory it held at once (bytes, every thread)."""
    tracemalloc.start()
    try:
        result = read()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak
