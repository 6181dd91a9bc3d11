"""``traffic`` counts the same reads the same way on every path: a local file read in the
calling thread, the same file through the event loop, fsspec's memory filesystem and HTTP.

A request is one read asked of the source (a header window, a range), its bytes those it
delivered; what differs between paths is only where the bytes come from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest

import remotetensors as rt
from remotetensors.reading.window import WHOLE_FILE_BYTES
from remotetensors.sources.base import Traffic
from tests.reference import write_reference
from tests.servers import FaultyServer

# Past WHOLE_FILE_BYTES, so the sync API reads a local file as it reads any other (header
# window, then ranges) instead of whole on open. Named so that "big" lies first in the data
# (it starts inside the first window) and the small ones after it, beyond the window.
TENSORS: dict[str, np.ndarray[Any, Any]] = {
    "big": np.arange(WHOLE_FILE_BYTES // 4 + 1000, dtype=np.float32),
    "z_a": np.full(300, 1, np.float32),
    "z_b": np.full((20, 7), 2, np.int64),
    "z_c": np.full(50, 3, np.float16),
}


def same_reads(f: rt.safe_open) -> Traffic:
    """The reads every path makes; returns what they cost."""
    assert f.get_tensor("z_a").tobytes() == TENSORS["z_a"].tobytes()
    got = f.get_tensors(["z_b", "z_c"])
    assert got["z_c"].tobytes() == TENSORS["z_c"].tobytes()
    assert f.get_slice("big")[10:20].tobytes() == TENSORS["big"][10:20].tobytes()
    assert f.get_tensor("big").tobytes() == TENSORS["big"].tobytes()
    return f.traffic


@pytest.fixture(scope="module")
def data() -> bytes:
    return write_reference(TENSORS)


@pytest.fixture
def locations(
    data: bytes, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[dict[str, Callable[[], rt.safe_open]]]:
    path = tmp_path / "m.safetensors"
    path.write_bytes(data)
    memory = fsspec.filesystem("memory")
    in_memory = f"/traffic-{abs(hash(request.node.nodeid))}/m.safetensors"
    memory.pipe(in_memory, data)
    server = FaultyServer()
    url = server.put("m.safetensors", data)
    try:
        yield {
            "local": lambda: rt.safe_open(path),
            "file-url": lambda: rt.safe_open(path.as_uri()),
            "memory": lambda: rt.safe_open(f"memory://{in_memory}"),
            "http": lambda: rt.safe_open(url),
        }
    finally:
        server.stop()
        memory.rm(in_memory)


def test_the_same_reads_cost_the_same_on_every_path(
    locations: dict[str, Callable[[], rt.safe_open]],
) -> None:
    counts: dict[str, tuple[int, int]] = {}
    for name, opening in locations.items():
        with opening() as f:
            traffic = same_reads(f)
            counts[name] = (traffic.requests, traffic.bytes)
    assert counts["local"][0] == 4  # as counted by test_the_async_local_path_counts_alike
    assert counts["local"][1] > TENSORS["big"].nbytes
    assert len(set(counts.values())) == 1, counts


async def test_the_async_local_path_counts_alike(
    locations: dict[str, Callable[[], rt.safe_open]], tmp_path: Path
) -> None:
    async with rt.open_async(tmp_path / "m.safetensors") as f:
        await f.get_tensor("z_a")
        await f.get_tensors(["z_b", "z_c"])
        await f.get_slice("big")[10:20]
        await f.get_tensor("big")
        counted = (f.traffic.requests, f.traffic.bytes)
    # The window; z_a; z_b and z_c in one coalesced read; the slice lies in the window; the
    # rest of big.
    assert counted[0] == 4
    with locations["http"]() as g:
        assert (same_reads(g).requests, g.traffic.bytes) == counted


def test_a_small_local_file_counts_its_whole_read(tmp_path: Path) -> None:
    small = {"a": np.arange(100_000, dtype=np.float32), "b": np.ones(10, np.float32)}
    path = tmp_path / "small.safetensors"
    path.write_bytes(write_reference(small))
    with rt.safe_open(path) as f:
        opened: Any = (f.traffic.requests, f.traffic.bytes)
        assert opened == (2, path.stat().st_size)  # the first window, then the rest at once
        assert f.get_tensor("a").tobytes() == small["a"].tobytes()
        assert (f.traffic.requests, f.traffic.bytes) == opened  # served from those bytes
