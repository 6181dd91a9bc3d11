"""A model as a read-only Zarr v3 store, against loopback servers: every dtype exact, slices
as numpy's, byte ranges of chunk keys, coalescing, dask, read-only, a file that changes."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import remotetensors as rt
from remotetensors.dtypes import DTYPES, pack
from tests.reference import ReferenceView, raw_file, reference_read, write_reference
from tests.servers import FaultyServer

zarr = pytest.importorskip("zarr", reason="the zarr extra is not installed")
from zarr.abc.store import (  # noqa: E402
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    SuffixByteRequest,
)
from zarr.core.buffer import default_buffer_prototype  # noqa: E402

HEADER_PART = (0, rt.ReadOptions().header_window_bytes)


def every_dtype() -> tuple[bytes, dict[str, np.ndarray[Any, Any]]]:
    """A file with a tensor of every dtype we read (random bit patterns: NaNs, infinities and
    subnormals included), rows that the chunks do not divide, a 3-D one, a scalar and an empty
    one; and the arrays it holds."""
    rng = np.random.default_rng(32)
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    for i, (name, dt) in enumerate(DTYPES.items()):
        # Even row counts: the reference wants sub-byte tensors to end on a byte. F4's rows of
        # 7 values are 28 bits, so its chunks hold even numbers of rows.
        shape = (26, 7) if name == "F4" else (24 + 2 * i, 6)
        count = math.prod(shape)
        if dt.packed:
            codes = rng.integers(0, 2**dt.bits, count).astype(np.uint8)
            arrays[name.lower()] = codes.view(dt.numpy).reshape(shape)
        elif name == "BOOL":
            arrays["bool"] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            raw = rng.integers(0, 256, count * dt.numpy.itemsize, dtype=np.uint8)
            arrays[name.lower()] = raw.view(dt.numpy).reshape(shape)
    arrays["cube"] = rng.standard_normal((7, 4, 3)).astype(ml_dtypes.bfloat16)
    arrays["scalar"] = np.array(-2.25, dtype=np.float64)
    arrays["empty"] = np.zeros((0, 5), dtype=np.float32)
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    payload = b""
    for name, array in arrays.items():
        dt = next(d for d in DTYPES.values() if d.numpy == array.dtype)
        data = pack(array, dt).tobytes() if dt.packed else array.tobytes()
        header[name] = {
            "dtype": dt.name,
            "shape": list(array.shape),
            "data_offsets": [len(payload), len(payload) + len(data)],
        }
        payload += data
    return raw_file(json.dumps(header), payload, pad=True), arrays


def same(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> bool:
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


@pytest.fixture
def every(faulty: FaultyServer) -> Iterator[tuple[rt.Model, dict[str, np.ndarray[Any, Any]]]]:
    data, arrays = every_dtype()
    view = reference_read(data)
    assert isinstance(view, ReferenceView)  # the reference accepts the file ...
    for name, array in arrays.items():  # ... and sees the bytes the arrays were written from
        dt = DTYPES[view.tensors[name][0]]
        assert view.tensors[name][2] == (
            pack(array, dt).tobytes() if dt.packed else array.tobytes()
        )
    with rt.open_model(faulty.put("every.safetensors", data)) as m:
        yield m, arrays


def test_every_tensor_of_every_dtype_reads_as_the_reference(
    every: tuple[rt.Model, dict[str, np.ndarray[Any, Any]]],
) -> None:
    m, arrays = every
    group = zarr.open_group(m.as_zarr_store(chunk_bytes=64), mode="r")
    assert sorted(group.array_keys()) == sorted(arrays)
    assert group.attrs["metadata"] == {"format": "pt"}
    for name, want in arrays.items():
        array = group[name]
        assert array.metadata.dimension_names == tuple(f"{name}.dim_{i}" for i in range(want.ndim))
        if want.ndim and want.size:
            assert array.nchunks > 1, name  # chunked along rows
        assert same(array[...], want), name


@pytest.mark.parametrize(
    "index",
    [
        np.s_[3:17],
        np.s_[-5:],
        np.s_[::3, 1:4],
        np.s_[7],
        np.s_[2:40:4, ::2],
        np.s_[5:6, 5],
        np.s_[30:10],
    ],
    ids=str,
)
def test_slices_equal_numpy(
    every: tuple[rt.Model, dict[str, np.ndarray[Any, Any]]], index: Any
) -> None:
    m, arrays = every
    group = zarr.open_group(m.as_zarr_store(chunk_bytes=48), mode="r")
    for name in ("f32", "bf16", "f8_e4m3", "f4", "f6_e3m2", "bool", "c64", "i64"):
        assert same(group[name][index], arrays[name][index]), (name, index)
    assert same(group["cube"][1:5, ::2, 2], arrays["cube"][1:5, ::2, 2])


def test_opening_reads_nothing_and_a_slice_reads_only_its_chunks_in_one_request(
    faulty: FaultyServer,
) -> None:
    rng = np.random.default_rng(1)
    big = rng.standard_normal((4000, 100)).astype(np.float32)  # 400 rows a 160 KB chunk
    faulty.put("big.safetensors", write_reference({"w": big, "b": big[0]}))
    with rt.open_model(f"{faulty.url}/f/big.safetensors") as m:
        start = m.tensors["w"].start
        faulty.log.clear()
        store = m.as_zarr_store(chunk_bytes=160_000, coalesce_window_seconds=0.5)
        w = zarr.open_group(store, mode="r")["w"]
        assert w.chunks == (400, 100)
        assert faulty.log.entries == []  # metadata from the header: no request
        # Rows 1000:2700 touch chunks 2..6: five chunks, adjacent, read as one range.
        assert same(w[1000:2700], big[1000:2700])
        assert faulty.log.ranges() == [(start + 800 * 400, start + 2800 * 400)]
        # Ten rows: one chunk, never the matrix.
        faulty.log.clear()
        assert same(w[3010:3020], big[3010:3020])
        assert faulty.log.ranges() == [(start + 2800 * 400, start + 3200 * 400)]


async def test_byte_ranges_of_chunk_keys_read_only_those_bytes(faulty: FaultyServer) -> None:
    rng = np.random.default_rng(2)
    w = rng.standard_normal((300, 250)).astype(np.float32)  # 1000-byte rows
    faulty.put("w.safetensors", write_reference({"w": w}))
    with rt.open_model(f"{faulty.url}/f/w.safetensors") as m:
        start = m.tensors["w"].start
        store = m.as_zarr_store(chunk_bytes=64_000, coalesce_window_seconds=0)
        proto = default_buffer_prototype()
        raw = w.tobytes()
        chunk = raw[64_000 * 2 : 64_000 * 3]
        requests: list[tuple[ByteRequest | None, int]] = [
            (RangeByteRequest(10, 30), 10),
            (OffsetByteRequest(63_990), 63_990),
            (SuffixByteRequest(7), 64_000 - 7),
            (None, 0),
        ]
        for request, first in requests:
            faulty.log.clear()
            got = await store.get("w/c/2/0", proto, request)
            want = chunk[first : 30 if first == 10 else None]
            assert got is not None
            assert got.to_bytes() == want, request
            lo = start + 128_000 + first
            assert faulty.log.ranges() == [(lo, lo + len(want))], request
        # The last chunk (rows 256..299) is padded with zeros past the tensor's last row;
        # nothing is read for the padding.
        faulty.log.clear()
        last = await store.get("w/c/4/0", proto, RangeByteRequest(40_000, 64_000))
        assert last is not None
        assert last.to_bytes() == raw[296_000:] + bytes(20_000)
        assert faulty.log.ranges() == [(start + 296_000, start + 300_000)]
        faulty.log.clear()
        tail = await store.get("w/c/4/0", proto, SuffixByteRequest(100))
        assert tail is not None
        assert tail.to_bytes() == bytes(100)
        assert faulty.log.entries == []
        document = await store.get("w/zarr.json", proto, RangeByteRequest(0, 20))
        assert document is not None
        assert document.to_bytes() == b'{"zarr_format": 3, "'
        assert await store.getsize("w/c/1/0") == 64_000
        assert await store.get("w/c/5/0", proto) is None  # past the grid
        assert await store.get("w/c/1/1", proto) is None  # the other axis is whole
        assert await store.get("w/c/01/0", proto) is None
        assert await store.get("nope/zarr.json", proto) is None
        assert await store.exists("w/c/4/0")
        assert not await store.exists("w/c/5/0")
        assert [k async for k in store.list_dir("")] == ["zarr.json", "w"]
        assert [k async for k in store.list_dir("w")] == ["zarr.json", "c"]
        assert [k async for k in store.list_dir("w/c")] == ["0", "1", "2", "3", "4"]
        keys = [k async for k in store.list()]
        assert keys == ["zarr.json", "w/zarr.json", *(f"w/c/{i}/0" for i in range(5))]


def test_dask_from_zarr_computes_a_reduction_equal_to_numpys(faulty: FaultyServer) -> None:
    da = pytest.importorskip("dask.array", reason="the dask extra is not installed")
    rng = np.random.default_rng(3)
    ints = rng.integers(-(2**40), 2**40, (777, 13)).astype(np.int64)
    floats = rng.standard_normal((500, 31)).astype(ml_dtypes.bfloat16)
    faulty.put("d.safetensors", write_reference({"ints": ints, "floats": floats}))
    with rt.open_model(f"{faulty.url}/f/d.safetensors") as m:
        store = m.as_zarr_store(chunk_bytes=4096)
        lazy = da.from_zarr(store, component="ints")
        assert lazy.numblocks[0] > 1
        assert (lazy.sum(axis=0).compute() == ints.sum(axis=0)).all()
        f = da.from_zarr(store, component="floats").astype(np.float64)
        np.testing.assert_allclose(
            (f**2).sum(axis=1).compute(), (floats.astype(np.float64) ** 2).sum(axis=1), rtol=1e-12
        )


def test_the_store_is_read_only(
    every: tuple[rt.Model, dict[str, np.ndarray[Any, Any]]],
) -> None:
    m, arrays = every
    store = m.as_zarr_store()
    group = zarr.open_group(store, mode="r")
    with pytest.raises(ValueError, match="read-only"):
        group["f32"][0, 0] = 1.0
    with pytest.raises(rt.ReadOnlyStoreError, match="read-only") as caught:
        asyncio.run(store.set("f32/c/0/0", default_buffer_prototype().buffer.from_bytes(b"x")))
    assert "every.safetensors" in str(caught.value)
    with pytest.raises(ValueError, match="read-only"):
        zarr.open_group(store, mode="w")
    with pytest.raises(ValueError, match="read-only"):
        group.create_array("new", shape=(2,), dtype="f4")
    with pytest.raises(rt.ReadOnlyStoreError):
        store.with_read_only(False)
    assert store.with_read_only(True) == store
    assert same(group["f32"][...], arrays["f32"])  # and nothing changed


def test_a_file_changed_under_an_open_store_raises_never_wrong_bytes(faulty: FaultyServer) -> None:
    rng = np.random.default_rng(4)
    before = rng.standard_normal((512, 128)).astype(np.float32)  # beyond the header window
    faulty.put("m.safetensors", write_reference({"w": before}))
    with rt.open_model(f"{faulty.url}/f/m.safetensors") as m:
        w = zarr.open_group(m.as_zarr_store(chunk_bytes=16_384), mode="r")["w"]
        assert same(w[200:210], before[200:210])
        faulty.put("m.safetensors", write_reference({"w": before + 1}))  # same size, new bytes
        with pytest.raises(rt.RemoteFileChangedError, match=r"m\.safetensors"):
            w[300:310]
        with pytest.raises(rt.RemoteFileChangedError):
            w[...]


def test_a_sharded_model_and_a_hub_model_known_from_its_metadata_endpoint(
    faulty: FaultyServer, hub: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(5)
    one: dict[str, np.ndarray[Any, Any]] = {"a": rng.standard_normal((90, 7)).astype(np.float32)}
    two: dict[str, np.ndarray[Any, Any]] = {
        "b": rng.integers(0, 9, (40, 3)).astype(np.uint8),
        "s": np.array(3, dtype=np.int32),
    }
    index = {
        "metadata": {},
        "weight_map": {"a": "m-1.safetensors", "b": "m-2.safetensors", "s": "m-2.safetensors"},
    }
    files = {
        "m-1.safetensors": write_reference(one),
        "m-2.safetensors": write_reference(two),
        "model.safetensors.index.json": json.dumps(index).encode(),
    }
    for name, data in files.items():
        faulty.put(name, data)
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    hub.add("org/sharded", files)
    for location in (f"{faulty.url}/f/", "hf://org/sharded"):
        with rt.open_model(location) as m:
            group = zarr.open_group(m.as_zarr_store(chunk_bytes=100), mode="r")
            for name, want in {**one, **two}.items():
                assert same(group[name][...], want), (location, name)
            assert group["b"].attrs["file"] == "m-2.safetensors"
    # The hub's shards were known from its metadata endpoint, opened by the first chunk read.
    assert any("safetensors-metadata" in e.path for e in hub.log.entries)


async def test_an_async_model_serves_zarrs_async_api_on_its_own_loop(
    every: tuple[rt.Model, dict[str, np.ndarray[Any, Any]]], faulty: FaultyServer
) -> None:
    _, arrays = every
    async with rt.open_model_async(f"{faulty.url}/f/every.safetensors") as m:
        store = m.as_zarr_store(chunk_bytes=64)
        group = await zarr.api.asynchronous.open_group(store=store, mode="r")
        array = await group.getitem("bf16")
        assert same(await array.getitem((slice(4, 20),)), arrays["bf16"][4:20])
        # From another thread, zarr's sync API crosses to this loop and back.
        sync_group = zarr.open_group(store, mode="r")
        got = await asyncio.to_thread(lambda: sync_group["f8_e5m2"][...])
        assert same(got, arrays["f8_e5m2"])
