"""What a link taught the stream controller, kept per origin (``reading/links.py``): in the
process, in the cache folder, and when it is forgotten; and how the controller and the
budget of requests in flight start from it and teach it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from remotetensors.options import ReadOptions
from remotetensors.reading.inflight import RequestsInFlight
from remotetensors.reading.links import (
    FORGET_AFTER_SECONDS,
    LinkMemory,
    memory_for,
    origin_of,
)
from remotetensors.reading.streams import (
    MIB,
    RESUME_WINDOWS,
    START_PART_BYTES,
    START_STREAMS,
    Setting,
    StreamController,
    Window,
)
from remotetensors.sources.cache import keys
from remotetensors.sources.cache.store import CacheStore
from tests.unit.test_streams import Clock


@pytest.mark.parametrize(
    ("location", "origin"),
    [
        ("http://127.0.0.1:8080/a/m.safetensors", "http://127.0.0.1:8080"),
        ("HTTPS://Example.COM/m.safetensors", "https://example.com:443"),
        ("http://example.com/m.safetensors", "http://example.com:80"),
        ("hf://org/model/model.safetensors", "hf://"),
        ("s3://bucket/key/m.safetensors", "s3://bucket"),
        ("gs://bucket/m.safetensors", "gs://bucket"),
        ("/tmp/m.safetensors", None),
        ("file:///tmp/m.safetensors", None),
    ],
)
def test_origins_are_what_a_link_is_shared_by(location: str, origin: str | None) -> None:
    assert origin_of(location) == origin


def test_a_setting_is_recalled_in_the_process_and_from_the_folder(tmp_path: Path) -> None:
    clock = Clock()
    memory = LinkMemory(CacheStore(tmp_path), clock=clock)
    assert memory.recall("http://h:1") is None
    memory.remember("http://h:1", Setting(16, 8 * MIB))
    assert memory.recall("http://h:1") == Setting(16, 8 * MIB)
    assert memory.recall("http://h:2") is None
    # Another process (a new memory on the same folder) starts where this one ended.
    assert LinkMemory(CacheStore(tmp_path), clock=clock).recall("http://h:1") == Setting(
        16, 8 * MIB
    )
    # An entry of the cache like the others: listed, and cleared with them.
    assert [(e.kind, e.shown) for e in CacheStore(tmp_path).entries()] == [("link", "http://h:1")]
    CacheStore(tmp_path).clear()
    assert LinkMemory(CacheStore(tmp_path), clock=clock).recall("http://h:1") is None


def test_a_setting_not_confirmed_for_a_day_is_forgotten(tmp_path: Path) -> None:
    clock = Clock()
    memory = LinkMemory(CacheStore(tmp_path), clock=clock)
    memory.remember("http://h:1", Setting(16, 8 * MIB))
    clock.now += FORGET_AFTER_SECONDS - 1
    assert memory.recall("http://h:1") == Setting(16, 8 * MIB)
    memory.remember("http://h:1", Setting(16, 8 * MIB))  # confirmed: its age starts again
    clock.now += FORGET_AFTER_SECONDS - 1
    assert memory.recall("http://h:1") == Setting(16, 8 * MIB)
    assert LinkMemory(CacheStore(tmp_path), clock=clock).recall("http://h:1") is not None
    clock.now += 2
    assert memory.recall("http://h:1") is None
    assert LinkMemory(CacheStore(tmp_path), clock=clock).recall("http://h:1") is None


def test_processes_writing_other_origins_keep_each_others(tmp_path: Path) -> None:
    first, second = LinkMemory(CacheStore(tmp_path)), LinkMemory(CacheStore(tmp_path))
    assert second.recall("http://a:1") is None  # read before the first wrote
    first.remember("http://a:1", Setting(4, 16 * MIB))
    second.remember("http://b:1", Setting(32, 4 * MIB))
    third = LinkMemory(CacheStore(tmp_path))
    assert third.recall("http://a:1") == Setting(4, 16 * MIB)
    assert third.recall("http://b:1") == Setting(32, 4 * MIB)


@pytest.mark.parametrize(
    "meta",
    [
        {},
        {"streams": "many", "part_size_bytes": MIB, "at": 1e6},
        {"streams": -1, "part_size_bytes": MIB, "at": 1e6},
        {"streams": 4, "part_size_bytes": None, "at": 1e6},
    ],
)
def test_an_entry_that_is_not_a_setting_is_no_memory_and_is_replaced(
    tmp_path: Path, meta: dict[str, object]
) -> None:
    CacheStore(tmp_path).put(keys.link("http://h:1"), {"kind": "link", **meta})
    memory = LinkMemory(CacheStore(tmp_path))
    assert memory.recall("http://h:1") is None
    memory.remember("http://h:1", Setting(2, MIB))
    assert LinkMemory(CacheStore(tmp_path)).recall("http://h:1") == Setting(2, MIB)


def test_a_folder_that_cannot_be_written_keeps_the_memory_in_the_process(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    memory = LinkMemory(CacheStore(blocker / "cache"))
    memory.remember("http://h:1", Setting(2, MIB))  # no error
    assert memory.recall("http://h:1") == Setting(2, MIB)
    assert LinkMemory(None).recall("http://h:1") is None  # a memory of no folder keeps nothing


# --- the controller and the budget ------------------------------------------------------------


def test_a_controller_learns_nothing_before_a_window_measures_it() -> None:
    controller = StreamController()
    assert controller.learnt is None
    controller.observe(Window(0, 1.0, saturated=False))
    assert controller.learnt is None
    controller.observe(Window(100 * MIB, 1.0))
    assert controller.learnt == Setting(START_STREAMS, START_PART_BYTES)  # kept, its trial out
    controller.observe(Window(MIB, 1.0, failures=1))  # a back-off: nothing measured yet
    assert controller.learnt is None


def test_a_learnt_start_is_held_then_climbed_from() -> None:
    start = Setting(32, 4 * MIB)
    controller = StreamController(start=start)
    assert controller.setting == start
    for _ in range(RESUME_WINDOWS - 1):
        assert controller.observe(Window(400 * MIB, 1.0)) == start
    # Then the climb resumes from there: more streams first.
    assert controller.observe(Window(400 * MIB, 1.0)) == Setting(64, 2 * MIB)


def test_a_learnt_start_is_fitted_to_the_bounds() -> None:
    controller = StreamController(start=Setting(1000, 64 * MIB), max_bytes_in_flight=64 * MIB)
    assert controller.setting.bytes_in_flight <= 64 * MIB
    assert controller.setting.streams <= 64


async def test_the_budget_starts_where_its_origin_left_off_and_teaches_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REMOTETENSORS_CACHE", str(tmp_path))
    location = "http://127.0.0.1:9/m.safetensors"
    first = RequestsInFlight.for_options(ReadOptions(), location)
    assert first.setting == Setting(START_STREAMS, START_PART_BYTES)
    tickets = [await first.acquire() for _ in range(first.setting.streams)]
    await asyncio.sleep(0.01)  # a window with every stream busy throughout: saturated
    for ticket in tickets:
        first.release(ticket, 16 * MIB)
    learnt = Setting(START_STREAMS, START_PART_BYTES)
    # In the folder, for the next process.
    assert LinkMemory(CacheStore(tmp_path)).recall("http://127.0.0.1:9") == learnt
    memory = memory_for(ReadOptions())
    assert memory is not None
    memory.remember("http://127.0.0.1:9", Setting(24, 4 * MIB))
    assert RequestsInFlight.for_options(ReadOptions(), location).setting == Setting(24, 4 * MIB)
    assert RequestsInFlight.for_options(ReadOptions(), "http://127.0.0.1:10/m").setting == learnt
    fresh = RequestsInFlight.for_options(ReadOptions(cache=False), location)
    assert fresh.setting == Setting(START_STREAMS, START_PART_BYTES)
