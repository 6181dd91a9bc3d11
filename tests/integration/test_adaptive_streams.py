"""Streams that adapt to the link (``reading/streams.py``, ``reading/inflight.py``), on loopback.

A paced server (``tests/rawservers.py``'s :class:`Paced`) gives the two shapes of link that
decide the number of streams: one that caps each connection (nginx's ``limit_rate``, a WAN, S3:
more connections carry more) and one whose throughput more connections cannot raise (two cores
on loopback, where the CPU is the bound). The reader, at its defaults, must grow past the
streams it keeps on the second. Tests count streams (answers in flight at the server, and its
connections) and bytes, never times: the pace only shapes what the controller measures.

The scale is shrunk so that a read takes about a second: parts of 256 KiB (the defaults' 8 MiB
at a few MB/s would take minutes), at paces of a few MB/s per connection, far below what two
cores do, so that the pace and nothing else is what the controller sees (a window lasts about
a part's time, 128 ms, long beside a loaded machine's scheduling noise).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import remotetensors as rt
from remotetensors.reading import streams
from remotetensors.reading.links import LinkMemory
from remotetensors.sources.cache.store import CacheStore
from tests.hub_standin import HubStandIn
from tests.rawservers import Paced, RawServer
from tests.reference import write_reference

KIB = 1024


@pytest.fixture
def small_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller's parts at 256 KiB to start with, and down to 256 KiB."""
    monkeypatch.setattr(streams, "START_PART_BYTES", 256 * KIB)
    monkeypatch.setattr(streams, "MIN_PART_BYTES", 256 * KIB)


def tensor_file(mib: int, seed: int = 0) -> tuple[bytes, np.ndarray]:
    w = np.random.default_rng(seed).standard_normal(mib * 256 * KIB).astype(np.float32)
    return write_reference({"w": w}), w


@pytest.mark.usefixtures("small_scale")
def test_streams_grow_past_a_link_that_more_streams_cannot_widen(
    serve: Callable[..., RawServer],
) -> None:
    per_connection = 2e6  # bytes per second
    capped_data, capped_w = tensor_file(32)
    capped = Paced(capped_data, per_connection=per_connection)
    capped_server = serve(capped)
    # The same total as START_STREAMS capped connections, however many connections share it.
    flat_data, flat_w = tensor_file(4, seed=1)
    flat = Paced(flat_data, total=streams.START_STREAMS * per_connection)
    flat_server = serve(flat)

    with rt.safe_open(f"{capped_server.url}/m.safetensors") as f:
        assert np.array_equal(f.get_tensor("w"), capped_w)
    with rt.safe_open(f"{flat_server.url}/m.safetensors") as f:
        assert np.array_equal(f.get_tensor("w"), flat_w)

    # Where more connections carry more, the streams doubled while that paid: past 4x the start.
    assert capped.peak >= 4 * streams.START_STREAMS, capped.peak
    assert capped_server.connections >= 4 * streams.START_STREAMS
    # Where they do not, one step up was tried, measured, and undone.
    assert flat.peak <= 2 * streams.START_STREAMS, flat.peak
    assert capped.peak > flat.peak
    # Every byte once, whatever the streams: the first window, then the rest.
    assert capped.sent == len(capped_data)
    assert flat.sent == len(flat_data)


@pytest.mark.usefixtures("small_scale")
def test_explicit_options_pin_the_streams_and_parts(serve: Callable[..., RawServer]) -> None:
    data, w = tensor_file(4)
    paced = Paced(data, per_connection=2e6)
    server = serve(paced)
    options = rt.ReadOptions(max_concurrency=3, part_size_bytes=256 * KIB)
    with rt.safe_open(f"{server.url}/m.safetensors", options=options) as f:
        assert np.array_equal(f.get_tensor("w"), w)
    assert paced.peak == 3  # where growth pays, the pin holds
    ranges = [r.range for r in server.requests[1:]]
    assert all(r is not None and r[1] - r[0] <= 256 * KIB for r in ranges)
    assert paced.sent == len(data)


@pytest.mark.usefixtures("small_scale")
def test_pinned_streams_still_adapt_the_parts_within_the_cap(
    serve: Callable[..., RawServer],
) -> None:
    data, w = tensor_file(4)
    server = serve(Paced(data, per_connection=8e6))
    options = rt.ReadOptions(max_concurrency=2, max_bytes_in_flight=256 * KIB)
    with rt.safe_open(f"{server.url}/m.safetensors", options=options) as f:
        assert np.array_equal(f.get_tensor("w"), w)
    ranges = [r.range for r in server.requests[1:]]
    assert all(r is not None and r[1] - r[0] <= 128 * KIB for r in ranges)  # 2 x 128 KiB


# --- every source reads through the controller ---------------------------------------------------


@pytest.fixture
def windows(monkeypatch: pytest.MonkeyPatch, small_scale: None) -> list[object]:
    """Every window a controller is shown."""
    seen: list[object] = []
    real = streams.StreamController.observe

    def observe(self: streams.StreamController, window: streams.Window) -> streams.Setting:
        seen.append(window)
        return real(self, window)

    monkeypatch.setattr(streams.StreamController, "observe", observe)
    return seen


def read_all(location: str, expected: np.ndarray) -> int:
    """Read tensor ``w`` at the defaults; the requests it took (the header window's too).
    Without the controller, one request of 16 MiB would have read what follows the window."""
    with rt.safe_open(location) as f:
        assert np.array_equal(f.get_tensor("w"), expected)
        return int(f.traffic.requests)


SPLIT = 8
"""At least this many requests: the tensor read in the controller's parts."""


def test_a_local_file_reads_through_the_controller(tmp_path: Path, windows: list[object]) -> None:
    data, w = tensor_file(20)  # over 16 MiB: not read in the calling thread
    path = tmp_path / "m.safetensors"
    path.write_bytes(data)
    assert read_all(str(path), w) >= SPLIT
    assert windows


def test_an_fsspec_file_reads_through_the_controller(windows: list[object]) -> None:
    import fsspec

    data, w = tensor_file(4)
    fsspec.filesystem("memory").pipe("/adaptive/m.safetensors", data)
    try:
        assert read_all("memory://adaptive/m.safetensors", w) >= SPLIT
    finally:
        fsspec.filesystem("memory").rm("/adaptive/m.safetensors")
    assert windows


def test_an_http_file_reads_through_the_controller(
    serve: Callable[..., RawServer], windows: list[object]
) -> None:
    data, w = tensor_file(4)
    server = serve(Paced(data))
    assert read_all(f"{server.url}/m.safetensors", w) >= SPLIT
    assert windows


def test_a_hub_file_reads_through_the_controller(
    hub: HubStandIn, monkeypatch: pytest.MonkeyPatch, windows: list[object]
) -> None:
    data, w = tensor_file(4)
    hub.add("org/m", {"model.safetensors": data})
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    assert read_all("hf://org/m/model.safetensors", w) >= SPLIT
    assert windows


FIRST_WINDOW = """
import json, sys
import remotetensors as rt
from remotetensors.reading import streams
streams.START_PART_BYTES = streams.MIN_PART_BYTES = 256 * 1024  # the tests' scale
first = []
observe = streams.StreamController.observe
def first_setting(self, window):
    if not first:
        first.append(self.setting)
    return observe(self, window)
streams.StreamController.observe = first_setting
with rt.safe_open(sys.argv[1], options=rt.ReadOptions(cache=sys.argv[2] == "cache")) as f:
    f.get_tensor("w")
print(json.dumps([first[0].streams, first[0].part_size_bytes]))
"""


def first_window(location: str, cache: bool) -> tuple[int, int]:
    """The setting of a fresh process's first window, reading ``location`` at the defaults
    (``cache``) or with ``ReadOptions(cache=False)``."""
    done = subprocess.run(
        [sys.executable, "-c", FIRST_WINDOW, location, "cache" if cache else "no-cache"],
        capture_output=True,
        text=True,
        check=True,
    )
    streams_, part = json.loads(done.stdout)
    return streams_, part


def test_a_second_process_starts_where_the_first_left_the_link(
    serve: Callable[..., RawServer], own_cache: Path
) -> None:
    data, _ = tensor_file(16)
    server = serve(Paced(data, per_connection=2e6))
    location = f"{server.url}/m.safetensors"
    start = (streams.START_STREAMS, 256 * KIB)
    assert first_window(location, cache=True) == start  # nothing known of the link yet

    # The capped link taught more streams than the start; the folder keeps it for the origin.
    learnt = LinkMemory(CacheStore(own_cache)).recall(server.url.rstrip("/"))
    assert learnt is not None
    assert learnt.streams > streams.START_STREAMS
    # The next process's first window is at that setting (it still adapts from there).
    assert first_window(location, cache=True) == (learnt.streams, learnt.part_size_bytes)
    # Without the cache, nothing is kept or used: the start, as for an unknown link.
    assert first_window(location, cache=False) == start
