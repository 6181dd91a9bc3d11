"""Range planning: every requested byte exactly once, limits respected, mapping back right."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remotetensors.ranges import ByteRange, coalesce, plan_reads, split

ranges = st.builds(lambda a, n: ByteRange(a, a + n), st.integers(0, 5000), st.integers(0, 700))


@given(
    requests=st.lists(ranges, max_size=25),
    max_gap=st.integers(0, 300),
    part_size=st.integers(1, 900),
)
def test_plan_carries_every_requested_byte_once(
    requests: list[ByteRange], max_gap: int, part_size: int
) -> None:
    plan = plan_reads(requests, max_gap_bytes=max_gap, part_size_bytes=part_size)
    file = bytes(i % 251 for i in range(6000))
    # Simulate the fetches, then rebuild every request from the pieces.
    rebuilt = [bytearray(r.length) for r in requests]
    filled = [[0] * r.length for r in requests]
    for part in plan.parts:
        assert 0 < part.range.length <= part_size
        fetched = file[part.range.start : part.range.end]
        for piece in part.pieces:
            dst = rebuilt[piece.request]
            dst[piece.request_offset : piece.request_offset + piece.length] = fetched[
                piece.part_offset : piece.part_offset + piece.length
            ]
            for k in range(piece.request_offset, piece.request_offset + piece.length):
                filled[piece.request][k] += 1
    for req, got, counts in zip(requests, rebuilt, filled, strict=True):
        assert bytes(got) == file[req.start : req.end]
        assert all(c == 1 for c in counts)
    # No part straddles an edge of a request at least a part long.
    for part in plan.parts:
        for r in requests:
            if r.length >= part_size:
                for edge in (r.start, r.end):
                    assert not part.range.start < edge < part.range.end
    # Parts are sorted and disjoint.
    for a, b in zip(plan.parts, plan.parts[1:], strict=False):
        assert a.range.end <= b.range.start
    # Only bridged gaps are fetched beyond the requested bytes.
    wanted: set[int] = set()
    for r in requests:
        wanted.update(range(r.start, r.end))
    fetched_bytes: set[int] = set()
    for part in plan.parts:
        fetched_bytes.update(range(part.range.start, part.range.end))
    assert wanted <= fetched_bytes
    extra = sorted(fetched_bytes - wanted)
    # Every fetched byte not asked for lies in a gap of at most max_gap between requested bytes.
    for x in extra:
        below = max((w for w in wanted if w < x), default=None)
        above = min((w for w in wanted if w > x), default=None)
        assert below is not None
        assert above is not None
        assert above - below - 1 <= max_gap


def test_adjacent_large_tensors_are_read_straight_into_their_buffers() -> None:
    # Four adjacent 128 MiB tensors, the first cut short by the bytes already held (the first
    # window): no part may need scratch and a copy.
    mib = 1024 * 1024
    held = 64 * 1024
    starts = [300 + i * 128 * mib for i in range(4)]
    requests = [ByteRange(max(s, held), s + 128 * mib) for s in starts]
    plan = plan_reads(requests, part_size_bytes=16 * mib)
    assert all(part.direct_target is not None for part in plan.parts)
    assert len(plan.parts) == 32
    # Small adjacent tensors still share parts.
    small = [ByteRange(i * 100, (i + 1) * 100) for i in range(50)]
    assert len(plan_reads(small, part_size_bytes=16 * mib).parts) == 1


def test_zero_length_requests_are_never_fetched() -> None:
    plan = plan_reads([ByteRange(10, 10), ByteRange(0, 0)], max_gap_bytes=100)
    assert plan.parts == ()
    assert plan.fetched_bytes == 0


def test_duplicates_and_nested_ranges_fetch_once() -> None:
    reqs = [ByteRange(0, 100), ByteRange(0, 100), ByteRange(20, 30)]
    plan = plan_reads(reqs, max_gap_bytes=0, part_size_bytes=1000)
    assert [p.range for p in plan.parts] == [ByteRange(0, 100)]
    assert sorted(p.request for p in plan.parts[0].pieces) == [0, 1, 2]


def test_direct_target_only_for_a_part_that_is_one_request() -> None:
    plan = plan_reads([ByteRange(0, 64)], max_gap_bytes=0, part_size_bytes=16)
    assert len(plan.parts) == 4
    assert all(p.direct_target is not None for p in plan.parts)
    plan = plan_reads([ByteRange(0, 10), ByteRange(12, 20)], max_gap_bytes=4)
    assert len(plan.parts) == 1
    assert plan.parts[0].direct_target is None


def test_gap_limit_decides_coalescing() -> None:
    reqs = [ByteRange(0, 10), ByteRange(20, 30)]
    assert coalesce(reqs, max_gap_bytes=10) == [ByteRange(0, 30)]
    assert coalesce(reqs, max_gap_bytes=9) == reqs


def test_split_is_even_and_bounded() -> None:
    parts = split(ByteRange(0, 100), part_size_bytes=30)
    assert [p.length for p in parts] == [25, 25, 25, 25]
    assert split(ByteRange(5, 5), part_size_bytes=3) == []


def test_byte_range_validates_and_renders_http_header() -> None:
    with pytest.raises(ValueError, match="invalid byte range"):
        ByteRange(5, 4)
    with pytest.raises(ValueError, match="invalid byte range"):
        ByteRange(-1, 4)
    assert ByteRange(0, 8).header_value() == "bytes=0-7"
