"""fetch_into reads a request that serves several destinations straight into them when they lie
back to back in one buffer as in the file (no scratch), and through scratch otherwise."""

from __future__ import annotations

import itertools

import pytest

from remotetensors.options import ReadOptions
from remotetensors.ranges import ByteRange
from remotetensors.reading.fetch import Target, fetch_into, fetch_into_blocking
from remotetensors.sources.base import ByteSource, Prefix

DATA = bytes(range(256)) * 64  # 16 KiB


class Recording(ByteSource):
    """Serves ``DATA``; records each read's start, length and the object its buffer exports."""

    def __init__(self) -> None:
        self.reads: list[tuple[int, int, object]] = []

    @property
    def location(self) -> str:
        return "memory"

    async def open_prefix(self, length: int) -> Prefix:
        return Prefix(DATA[:length], len(DATA), None)

    async def read_into(self, start: int, buffer: memoryview) -> None:
        self.reads.append((start, buffer.nbytes, buffer.obj))
        buffer[:] = DATA[start : start + buffer.nbytes]

    def read_into_now(self, start: int, buffer: memoryview) -> None:
        self.reads.append((start, buffer.nbytes, buffer.obj))
        buffer[:] = DATA[start : start + buffer.nbytes]


def _tiled(staging: bytearray, cuts: list[int], base: int = 100) -> list[Target]:
    """Targets for file bytes ``[base + cuts[i], base + cuts[i + 1])``, at the same offsets
    of ``staging`` (back to back), given in reverse order."""
    view = memoryview(staging)
    return [
        Target(ByteRange(base + a, base + b), view[a:b])
        for a, b in reversed(list(itertools.pairwise(cuts)))
    ]


async def test_back_to_back_destinations_take_one_request_and_no_scratch() -> None:
    staging = bytearray(4096)
    source = Recording()
    await fetch_into(source, _tiled(staging, [0, 10, 700, 701, 3000]), options=ReadOptions())
    assert len(source.reads) == 1
    start, length, owner = source.reads[0]
    assert (start, length) == (100, 3000)
    assert owner is staging  # read into the destinations' own buffer
    assert staging[:3000] == DATA[100:3100]
    assert staging[3000:] == bytes(1096)  # nothing beyond the destinations written


def test_back_to_back_destinations_blocking() -> None:
    staging = bytearray(4096)
    source = Recording()
    fetch_into_blocking(
        source.read_into_now, _tiled(staging, [0, 10, 700, 3000]), options=ReadOptions()
    )
    assert [(s, n) for s, n, _ in source.reads] == [(100, 3000)]
    assert source.reads[0][2] is staging
    assert staging[:3000] == DATA[100:3100]


@pytest.mark.parametrize(
    "case", ["a gap in the file", "apart in memory", "another buffer", "out of order"]
)
async def test_other_layouts_go_through_scratch(case: str) -> None:
    staging = bytearray(4096)
    other = bytearray(4096)
    view = memoryview(staging)
    if case == "a gap in the file":  # the gap's bytes belong to no destination
        targets = [
            Target(ByteRange(100, 110), view[0:10]),
            Target(ByteRange(120, 130), view[20:30]),
        ]
    elif case == "apart in memory":
        targets = [
            Target(ByteRange(100, 110), view[0:10]),
            Target(ByteRange(110, 120), view[64:74]),
        ]
    elif case == "another buffer":
        targets = [
            Target(ByteRange(100, 110), view[0:10]),
            Target(ByteRange(110, 120), memoryview(other)[10:20]),
        ]
    else:  # back to back in memory, but the second file range first
        targets = [
            Target(ByteRange(110, 120), view[0:10]),
            Target(ByteRange(100, 110), view[10:20]),
        ]
    source = Recording()
    await fetch_into(source, targets, options=ReadOptions())
    assert len(source.reads) == 1  # still one request
    assert source.reads[0][2] is not staging  # through a buffer of its own
    for target in targets:
        assert bytes(target.buffer) == DATA[target.range.start : target.range.end]
    if case == "a gap in the file":
        assert staging[10:20] == bytes(10)
