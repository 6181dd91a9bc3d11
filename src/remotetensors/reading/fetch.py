"""Executing a read plan: concurrent single-range reads straight into their destinations.

Each requested range has a destination buffer. Bytes already held in memory (the first window of
the file) are copied from there; the rest is planned by :func:`~remotetensors.ranges.plan_reads`
and fetched part by part, at most ``max_concurrency`` at once (a budget that a file, or a
model, shares between all of its calls). A part that is exactly one
destination's bytes is read straight into it; any other part (bridging a gap, or serving several
requests) goes through a temporary buffer of at most ``part_size_bytes`` and is copied out.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..ranges import ByteRange, Part, plan_reads
from ..status import counting_bytes
from .prefault import Populating
from .progress import Progress, bar, wanted

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Sequence

    from ..options import ReadOptions
    from ..sources.base import ByteSource


@dataclass(frozen=True, slots=True)
class Target:
    """Bytes ``range`` of the file go into ``buffer`` (of exactly ``range.length`` bytes)."""

    range: ByteRange
    buffer: memoryview


async def fetch_into(
    source: ByteSource,
    targets: Sequence[Target],
    *,
    options: ReadOptions,
    cached_prefix: bytes | bytearray = b"",
    in_flight: asyncio.Semaphore | None = None,
) -> None:
    """Fill every target's buffer with its bytes of the file.

    Args:
        source: where the bytes come from.
        targets: ranges and their destinations, in any order; ranges may overlap.
        options: gap and part size limits, and the concurrency of a call given no budget.
        cached_prefix: bytes ``[0, len(cached_prefix))`` of the file, already in memory.
        in_flight: the budget of requests in flight that this call shares with others (the
            file's or the model's); by default one of ``options.max_concurrency`` of its own.

    Raises:
        whatever the source raises; on error, the remaining reads are cancelled.
    """
    remaining = _beyond_prefix(targets, cached_prefix)
    if not remaining:
        return
    plan = plan_reads(
        [t.range for t in remaining],
        max_gap_bytes=options.max_gap_bytes,
        part_size_bytes=options.part_size_bytes,
    )
    limit = in_flight if in_flight is not None else asyncio.Semaphore(options.max_concurrency)
    enabled = wanted(options.progress)
    shown = bar(
        total=plan.fetched_bytes,
        unit="B",
        description=source.location.rsplit("/", 1)[-1],
        enabled=enabled,
    )

    async def run(part: Part) -> None:
        counted = _PartBytes(shown, part.range.length)
        async with limit:
            if enabled:  # per-read counting only when someone watches
                with counting_bytes(counted):
                    await _fetch_part(source, part, remaining)
            else:
                await _fetch_part(source, part, remaining)
        counted.finish()

    try:
        # Large destinations get their pages mapped on another core while the bytes arrive,
        # unless the source receives them in threads, which fault their own pages in parallel
        # (a populating thread then only competes with them for the cores). The plan reads in
        # file order; so does the populating thread.
        ahead = (
            []
            if source.receives_in_threads()
            else [t.buffer for t in sorted(remaining, key=lambda t: t.range.start)]
        )
        async with Populating(ahead):
            await gather_or_cancel([run(part) for part in plan.parts])
    finally:
        shown.close()


def fetch_into_blocking(
    read_into: Callable[[int, memoryview], None],
    targets: Sequence[Target],
    *,
    options: ReadOptions,
    cached_prefix: bytes | bytearray = b"",
) -> None:
    """:func:`fetch_into` in the calling thread, part after part, for a blocking ``read_into``.

    For local files, where a read is a ``preadv`` of a few microseconds and a trip through an
    event loop costs more than the read itself. Same plan, same copies, same errors.

    Raises:
        whatever ``read_into`` raises.
    """
    remaining = _beyond_prefix(targets, cached_prefix)
    if len(remaining) == 1:
        # The common case (one tensor): no plan needed, its bytes go straight into it.
        only = remaining[0]
        read_into(only.range.start, only.buffer)
        return
    if not remaining:
        return
    plan = plan_reads(
        [t.range for t in remaining],
        max_gap_bytes=options.max_gap_bytes,
        part_size_bytes=options.part_size_bytes,
    )
    for part in plan.parts:
        direct = part.direct_target
        if direct is not None:
            buffer = remaining[direct.request].buffer
            read_into(
                part.range.start,
                buffer[direct.request_offset : direct.request_offset + direct.length],
            )
        else:
            scratch = memoryview(bytearray(part.range.length))
            read_into(part.range.start, scratch)
            _copy_pieces(scratch, part, remaining)


def _beyond_prefix(targets: Sequence[Target], cached_prefix: bytes | bytearray) -> list[Target]:
    """Serve what lies inside the cached first window from memory; return what remains."""
    held = len(cached_prefix)
    remaining: list[Target] = []
    for target in targets:
        start, end = target.range.start, target.range.end
        if start < held:
            cut = min(end, held)
            target.buffer[: cut - start] = cached_prefix[start:cut]
            if end > cut:
                remaining.append(Target(ByteRange(cut, end), target.buffer[cut - start :]))
        elif end > start:
            remaining.append(target)
    return remaining


def _copy_pieces(view: memoryview, part: Part, targets: Sequence[Target]) -> None:
    for piece in part.pieces:
        dst = targets[piece.request].buffer
        dst[piece.request_offset : piece.request_offset + piece.length] = view[
            piece.part_offset : piece.part_offset + piece.length
        ]


class _PartBytes:
    """Moves a bar as a part's bytes arrive (sources that report them), in steps of at least
    ``STEP_BYTES`` so a fast download does not pay for a redraw per socket read; the rest of
    the part is counted when it completes, so each byte counts once whatever the source."""

    STEP_BYTES = 1 << 20

    def __init__(self, shown: Progress, length: int) -> None:
        self._shown = shown
        self._left = length
        self._pending = 0

    def __call__(self, nbytes: int) -> None:
        self._pending += nbytes
        if self._pending >= self.STEP_BYTES:
            self._flush()

    def _flush(self) -> None:
        step = min(self._pending, self._left)
        if step > 0:
            self._shown.update(step)
            self._left -= step
        self._pending = 0

    def finish(self) -> None:
        self._pending = self._left
        self._flush()


async def gather_or_cancel(coroutines: Sequence[Coroutine[Any, Any, None]]) -> None:
    """Run ``coroutines`` concurrently; on the first error cancel the rest, then raise it."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _fetch_part(source: ByteSource, part: Part, targets: Sequence[Target]) -> None:
    direct = part.direct_target
    if direct is not None:
        buffer = targets[direct.request].buffer
        await source.read_into(
            part.range.start, buffer[direct.request_offset : direct.request_offset + direct.length]
        )
        return
    view = memoryview(bytearray(part.range.length))
    await source.read_into(part.range.start, view)
    _copy_pieces(view, part, targets)
