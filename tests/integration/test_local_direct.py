"""Local files through the sync API: opened and read in the calling thread, same answers.

The sync facade opens local files, reads small tensors and closes them without the IO thread
(a ``preadv`` is cheaper than the trip); large reads still go the async way. Counted here: how
often the bridge (``sync.run_sync``) is crossed. The reference package is the oracle for bytes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors import safe_open as reference_open
from safetensors.numpy import save_file

import remotetensors as rt
from remotetensors.models import sync
from remotetensors.reading import window


@pytest.fixture
def crossings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = sync.run_sync

    def counting(coroutine: Any) -> Any:
        seen.append(coroutine.__qualname__)
        return real(coroutine)

    monkeypatch.setattr(sync, "run_sync", counting)
    return seen


@pytest.fixture
def many(tmp_path: Path) -> Path:
    path = tmp_path / "many.safetensors"
    rng = np.random.default_rng(1)
    tensors: dict[str, Any] = {
        f"t{i}": rng.standard_normal((i % 5 + 1, 3)).astype(np.float32) for i in range(300)
    }
    tensors["ints"] = np.arange(7, dtype=np.int64)
    tensors["half"] = rng.standard_normal(9).astype(np.float16)
    save_file(tensors, str(path), metadata={"format": "np"})
    return path


def test_every_tensor_one_call_each_without_the_bridge(many: Path, crossings: list[str]) -> None:
    with rt.safe_open(many) as f, reference_open(str(many), "numpy") as ref:
        assert f.keys() == sorted(ref.keys())
        assert f.metadata() == ref.metadata()
        for name in ref.keys():  # noqa: SIM118 (safe_open is not iterable)
            got = f.get_tensor(name)
            expected = ref.get_tensor(name)
            assert got.dtype == expected.dtype
            assert got.shape == expected.shape
            assert np.array_equal(got, expected)
            assert got.flags.writeable
            assert got.flags.c_contiguous
    assert crossings == []


def test_all_and_some_in_one_call(many: Path, crossings: list[str]) -> None:
    with rt.safe_open(many.as_uri()) as f, reference_open(str(many), "numpy") as ref:
        everything = f.get_tensors()
        assert list(everything) == f.offset_keys()
        for name, array in everything.items():
            assert np.array_equal(array, ref.get_tensor(name))
        some = ["t299", "t0", "ints", "t150"]
        picked = f.get_tensors(iter(some))  # an iterator: read once only
        assert list(picked) == some
        for name in some:
            assert np.array_equal(picked[name], ref.get_tensor(name))
    assert crossings == []


def test_large_reads_still_take_the_async_path(tmp_path: Path, crossings: list[str]) -> None:
    path = tmp_path / "big.safetensors"
    big = np.arange(300_000, dtype=np.float32)
    save_file({"big": big, "small": np.ones(4, np.float32)}, str(path))
    options = rt.ReadOptions(part_size_bytes=1 << 20)
    with rt.safe_open(path, options=options) as f:
        assert np.array_equal(f.get_tensor("big"), big)
        assert np.array_equal(f.get_tensor("small"), np.ones(4, np.float32))
    assert crossings == ["AsyncTensorFile.get_tensor"]


@pytest.fixture
def many_big(tmp_path: Path) -> Path:
    """Small tensors in a file too big to be read whole on open (WHOLE_FILE_BYTES)."""
    path = tmp_path / "many_big.safetensors"
    # 50 x 3.6 kB: most of them past the default header window of 64 KiB.
    tensors: dict[str, Any] = {f"t{i}": np.full((3, 300), i, np.float32) for i in range(50)}
    tensors["zpad"] = np.zeros(window.WHOLE_FILE_BYTES, np.uint8)
    save_file(tensors, str(path))
    return path


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per ``os.preadv`` call (the local source's read)."""
    seen: list[int] = []
    real = os.preadv

    def counting(*args: Any) -> int:
        seen.append(1)
        return real(*args)

    monkeypatch.setattr(os, "preadv", counting)
    return seen


def test_a_small_file_is_read_whole_on_open(
    many: Path, reads: list[int], crossings: list[str]
) -> None:
    with rt.safe_open(many) as f, reference_open(str(many), "numpy") as ref:
        expected = {name: ref.get_tensor(name) for name in ref.keys()}  # noqa: SIM118
        many.write_bytes(b"\0" * many.stat().st_size)  # changed underneath: no matter
        for name, array in expected.items():
            assert np.array_equal(f.get_tensor(name), array)  # the version that was opened
    assert reads == []
    assert crossings == []


def test_small_tensors_of_a_big_file_are_read_one_call_each(
    many_big: Path, reads: list[int], crossings: list[str]
) -> None:
    with rt.safe_open(many_big) as f, reference_open(str(many_big), "numpy") as ref:
        for i in range(50):
            got = f.get_tensor(f"t{i}")
            assert np.array_equal(got, ref.get_tensor(f"t{i}"))
            assert got.flags.writeable
            assert got.flags.c_contiguous
    assert 0 < len(reads) <= 50  # the ones past the header window, one each
    assert crossings == []


def test_changed_file_closed_file_and_bad_header(many_big: Path, tmp_path: Path) -> None:
    # A small window, so that the data lies beyond the bytes held since the header was read.
    many = many_big
    f = rt.safe_open(many, options=rt.ReadOptions(header_window_bytes=4096))
    f.get_tensor("t1")
    many.write_bytes(many.read_bytes() + b"\0")
    with pytest.raises(rt.RemoteFileChangedError, match="changed since it was opened"):
        f.get_tensor("t2")
    f.close()
    with pytest.raises(rt.FileClosedError):
        f.get_tensor("t1")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes((12).to_bytes(8, "little") + b'{"a": NaN}  ')
    with pytest.raises(rt.HeaderError, match=r"bad\.safetensors"):
        rt.safe_open(bad)
    with pytest.raises(rt.NotFoundError):
        rt.safe_open(tmp_path / "absent.safetensors")
