"""Pure byte-range planning: coalesce nearby ranges, split big ones, map results back.

No IO happens here. A caller asks for a list of byte ranges (requests); :func:`plan_reads`
answers with the parts to fetch (each one single-range request) and, for each part, which bytes
of which request it carries, so every fetched byte can be put where it belongs.

Guarantees of a plan:
- every byte of every request is carried by exactly one piece (duplicated and nested requests
  each get their own pieces, fetched once);
- parts are sorted, disjoint, each at most ``part_size_bytes`` long and never empty;
- a part never straddles an edge of a request of at least ``part_size_bytes``, so each part of
  such a request carries that request alone (it can be read into its buffer with no copy);
- a gap of more than ``max_gap_bytes`` between requested bytes is never fetched, and ranges
  that are closer than that are fetched together (the waste per gap is at most the limit);
- zero-length requests need no fetch.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_MAX_GAP_BYTES = 32 * 1024
"""Default largest hole between two requested ranges that is fetched rather than skipped.

32 KiB costs about 3 ms at 100 Mbit/s, well under one round trip, and limits the waste."""

DEFAULT_PART_SIZE_BYTES = 16 * 1024 * 1024
"""Default largest single request; bigger ranges are split into parts fetched concurrently."""


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Bytes ``[start, end)`` of a file: ``start`` inclusive, ``end`` exclusive, absolute offsets.

    Raises:
        ValueError: on construction when ``start < 0`` or ``end < start``.
    """

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ValueError(f"invalid byte range [{self.start}, {self.end})")

    @property
    def length(self) -> int:
        """Number of bytes in the range."""
        return self.end - self.start

    def header_value(self) -> str:
        """The HTTP ``Range`` header value for this range (HTTP ranges are inclusive)."""
        if self.length == 0:
            raise ValueError("an empty range has no HTTP Range header")
        return f"bytes={self.start}-{self.end - 1}"


@dataclass(frozen=True, slots=True)
class Piece:
    """Bytes of one request carried by one part.

    Bytes ``[part_offset, part_offset + length)`` of the part are bytes
    ``[request_offset, request_offset + length)`` of request number ``request``.
    """

    request: int
    request_offset: int
    part_offset: int
    length: int


@dataclass(frozen=True, slots=True)
class Part:
    """One single-range fetch and the request bytes it carries (pieces in ascending order)."""

    range: ByteRange
    pieces: tuple[Piece, ...]

    @property
    def direct_target(self) -> Piece | None:
        """The piece when this part is exactly one request's bytes and nothing else, else None.

        Such a part can be read straight into the request's buffer, with no copy.
        """
        if len(self.pieces) == 1 and self.pieces[0].length == self.range.length:
            return self.pieces[0]
        return None


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """Parts to fetch for a list of requests; see the module docstring for the guarantees."""

    requests: tuple[ByteRange, ...]
    parts: tuple[Part, ...]

    @property
    def fetched_bytes(self) -> int:
        """Total bytes the parts fetch (requested bytes plus the gaps that were bridged)."""
        return sum(part.range.length for part in self.parts)


def coalesce(requests: Sequence[ByteRange], *, max_gap_bytes: int) -> list[ByteRange]:
    """Merge ranges whose gap is at most ``max_gap_bytes``; overlapping ranges always merge.

    Zero-length ranges are dropped. The result is sorted and disjoint.
    """
    if max_gap_bytes < 0:
        raise ValueError(f"max_gap_bytes must be >= 0, got {max_gap_bytes}")
    merged: list[ByteRange] = []
    for item in sorted((r for r in requests if r.length), key=lambda r: (r.start, r.end)):
        if merged and item.start - merged[-1].end <= max_gap_bytes:
            if item.end > merged[-1].end:
                merged[-1] = ByteRange(merged[-1].start, item.end)
        else:
            merged.append(item)
    return merged


def _cut(span: ByteRange, edges: Sequence[int]) -> list[ByteRange]:
    """``span`` cut at the ``edges`` (sorted offsets) that fall strictly inside it."""
    inner = edges[bisect.bisect_right(edges, span.start) : bisect.bisect_left(edges, span.end)]
    bounds = [span.start, *inner, span.end]
    return [ByteRange(a, b) for a, b in itertools.pairwise(bounds)]


def split(span: ByteRange, *, part_size_bytes: int) -> list[ByteRange]:
    """Cut a range into consecutive parts of at most ``part_size_bytes`` (the last may be less).

    Parts are of near-equal size, so concurrent fetches finish together.
    """
    if part_size_bytes <= 0:
        raise ValueError(f"part_size_bytes must be > 0, got {part_size_bytes}")
    if span.length == 0:
        return []
    count = -(-span.length // part_size_bytes)
    bounds = [span.start + span.length * i // count for i in range(count + 1)]
    return [ByteRange(a, b) for a, b in itertools.pairwise(bounds)]


def plan_reads(
    requests: Sequence[ByteRange],
    *,
    max_gap_bytes: int = DEFAULT_MAX_GAP_BYTES,
    part_size_bytes: int = DEFAULT_PART_SIZE_BYTES,
) -> ReadPlan:
    """Plan the fetches for ``requests``: coalesce, split, and map every byte back.

    Args:
        requests: the byte ranges wanted, in any order; duplicates, overlaps and empty ones allowed.
        max_gap_bytes: largest hole between requested bytes that is fetched to save a request.
        part_size_bytes: largest single fetch.

    Returns:
        A plan whose ``parts`` are sorted by offset; see the module docstring.
    """
    spans = coalesce(requests, max_gap_bytes=max_gap_bytes)
    # A part never straddles an edge of a request at least a part long: such a request's parts
    # are its own and go straight into its buffer. (Straddling one, a part would be read into
    # scratch and copied: for four adjacent 128 MiB tensors, three 16 MiB parts did.)
    edges = sorted({e for r in requests if r.length >= part_size_bytes for e in (r.start, r.end)})
    parts = [
        p
        for span in spans
        for segment in _cut(span, edges)
        for p in split(segment, part_size_bytes=part_size_bytes)
    ]
    # Sweep parts and requests (both by start) together; a request's pieces are its overlap with
    # each part it meets.
    order = sorted((i for i, r in enumerate(requests) if r.length), key=lambda i: requests[i].start)
    pieces: list[list[Piece]] = [[] for _ in parts]
    first_part = 0
    for index in order:
        req = requests[index]
        while parts[first_part].end <= req.start:
            first_part += 1
        p = first_part
        while p < len(parts) and parts[p].start < req.end:
            lo, hi = max(req.start, parts[p].start), min(req.end, parts[p].end)
            pieces[p].append(Piece(index, lo - req.start, lo - parts[p].start, hi - lo))
            p += 1
    return ReadPlan(
        tuple(requests),
        tuple(
            Part(r, tuple(sorted(ps, key=lambda x: (x.part_offset, x.request))))
            for r, ps in zip(parts, pieces, strict=True)
        ),
    )
