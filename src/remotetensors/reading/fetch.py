"""Executing a read plan: concurrent single-range reads straight into their destinations.

Each requested range has a destination buffer. Bytes already held in memory (the first window of
the file) are copied from there; the rest is planned by :func:`~remotetensors.ranges.plan_reads`
in small parts (:attr:`.inflight.RequestsInFlight.granule_bytes`) and fetched as requests of one or
several consecutive parts, up to the part size that the stream budget (a file's, or a model's,
shared by all of its calls) says now, as many at once as it allows: the budget measures the
requests and its controller adapts both numbers to the link (:mod:`.streams`), unless
``ReadOptions`` pins them. A request that is exactly one destination's bytes is read straight
into it, and so is a request that serves several destinations which lie back to back in one
buffer, in file order, with nothing between them (a caller's staging buffer laid out as the
file is: a scatter read with no scratch); any other request (bridging a gap, or serving
destinations apart in memory) goes through a temporary buffer of its length and is copied out.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..ranges import ByteRange, Part, plan_reads
from ..status import counting_bytes, counting_retries
from .inflight import RequestsInFlight, Ticket
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
    budget: RequestsInFlight | None = None,
) -> None:
    """Fill every target's buffer with its bytes of the file.

    Args:
        source: where the bytes come from.
        targets: ranges and their destinations, in any order; ranges may overlap.
        options: the gap limit, and the streams and part size of a call given no budget.
        cached_prefix: bytes ``[0, len(cached_prefix))`` of the file, already in memory.
        budget: the requests in flight that this call shares with others (the file's or the
            model's), sized by its controller; by default one of its own, from ``options``.

    Raises:
        whatever the source raises; on error, the remaining reads are cancelled (and the
        budget's streams halved: see :mod:`.streams`).
    """
    remaining = _beyond_prefix(targets, cached_prefix)
    if not remaining:
        return
    if budget is None:
        budget = RequestsInFlight.for_options(options, source.location)
    plan = plan_reads(
        [t.range for t in remaining],
        max_gap_bytes=options.max_gap_bytes,
        part_size_bytes=budget.granule_bytes,
    )
    enabled = wanted(options.progress)
    shown = bar(
        total=plan.fetched_bytes,
        unit="B",
        description=source.location.rsplit("/", 1)[-1],
        enabled=enabled,
    )

    async def run(parts: list[Part]) -> None:
        counted = _PartBytes(shown, parts[-1].range.end - parts[0].range.start)
        if enabled:  # per-read counting only when someone watches
            with counting_bytes(counted):
                await _fetch_parts(source, parts, remaining)
        else:
            await _fetch_parts(source, parts, remaining)
        counted.finish()

    queue = deque(plan.parts)
    budget.queue(plan.fetched_bytes)  # until taken: the shares of the last requests count it
    tasks: list[asyncio.Task[None]] = []
    failed: list[bool] = []

    def ended(ticket: Ticket, length: int, task: asyncio.Task[None]) -> None:
        # Here, not in run(): a task cancelled before it began never runs its body, and its
        # stream must come back all the same.
        if task.cancelled():
            budget.give_back(ticket)
        elif task.exception() is not None:
            failed.append(True)
            budget.release(ticket, 0, failed=True)
        else:
            budget.release(ticket, length)

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
            with counting_retries(budget.count_retry):
                while queue:
                    ticket = await budget.acquire()
                    if failed:  # a request failed: start no more, raise its error below
                        budget.give_back(ticket)
                        break
                    # A read that fits in one part is one request (a small read split among
                    # the streams would cost requests and save nothing); a longer one shares
                    # its last bytes among them (see RequestsInFlight.request_limit).
                    whole = plan.fetched_bytes <= budget.setting.part_size_bytes
                    limit = budget.setting.part_size_bytes if whole else budget.request_limit()
                    parts = _take(queue, limit)
                    budget.unqueue(parts[-1].range.end - parts[0].range.start)
                    task = asyncio.ensure_future(run(parts))
                    task.add_done_callback(
                        functools.partial(ended, ticket, parts[-1].range.end - parts[0].range.start)
                    )
                    tasks.append(task)
                await asyncio.gather(*tasks)
    except BaseException:
        await _cancel_all(tasks)
        raise
    finally:
        budget.unqueue(sum(part.range.length for part in queue))  # never taken
        shown.close()


def _take(queue: deque[Part], limit: int) -> list[Part]:
    """The next request: the first part of ``queue``, and the parts after it that continue it
    (contiguous in the file, and the same kind: straight into the same destination, or
    through scratch), while the request stays within ``limit`` bytes."""
    parts = [queue.popleft()]
    first = parts[0].direct_target
    total = parts[0].range.length
    while queue:
        following = queue[0]
        direct = following.direct_target
        if (
            following.range.start != parts[-1].range.end
            or total + following.range.length > limit
            or (direct is None) != (first is None)
            or (direct is not None and first is not None and direct.request != first.request)
        ):
            break
        parts.append(queue.popleft())
        total += following.range.length
    return parts


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
        part_size_bytes=options.fixed_part_size_bytes,
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
            together = _back_to_back([part], remaining)
            if together is not None:
                read_into(part.range.start, together)
                continue
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
        await _cancel_all(tasks)
        raise


async def _cancel_all(tasks: Sequence[asyncio.Task[None]]) -> None:
    """Cancel ``tasks`` and wait until every one has ended (their errors are the caller's)."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _fetch_parts(source: ByteSource, parts: list[Part], targets: Sequence[Target]) -> None:
    """One request for ``parts`` (see :func:`_take`): straight into their destination, or
    into the destinations it serves when they lie back to back in memory as in the file
    (:func:`_back_to_back`), else through scratch, copied out part by part."""
    start, end = parts[0].range.start, parts[-1].range.end
    direct = parts[0].direct_target
    if direct is not None:
        buffer = targets[direct.request].buffer
        await source.read_into(
            start, buffer[direct.request_offset : direct.request_offset + end - start]
        )
        return
    together = _back_to_back(parts, targets)
    if together is not None:
        await source.read_into(start, together)
        return
    view = memoryview(bytearray(end - start))
    await source.read_into(start, view)
    for part in parts:
        _copy_pieces(view[part.range.start - start : part.range.end - start], part, targets)


def _back_to_back(parts: Sequence[Part], targets: Sequence[Target]) -> memoryview | None:
    """One view of the destinations' own memory that the bytes of ``parts`` (consecutive in
    the file) can be read into as they are, or None: when the parts' pieces tile them (no gap,
    no overlap) and lie back to back, in file order, in one buffer (the same exporting object),
    so that reading into the view writes exactly the pieces' bytes and nothing else."""
    start, end = parts[0].range.start, parts[-1].range.end
    owner: object = None
    origin = 0
    at = start
    for part in parts:
        for piece in part.pieces:
            if part.range.start + piece.part_offset != at:
                return None  # a gap or an overlap: bytes that no destination takes once
            buffer = targets[piece.request].buffer
            address = _address(buffer)
            if address is None:
                return None
            address += piece.request_offset
            if owner is None:
                owner, origin = buffer.obj, address
            elif buffer.obj is not owner or address != origin + at - start:
                return None
            at += piece.length
    if at != end or owner is None:
        return None
    whole = memoryview(owner)  # type: ignore[arg-type]  # the exporter of a memoryview
    base = _address(whole)
    if base is None or not whole.c_contiguous:
        return None
    whole = whole.cast("B")
    offset = origin - base
    if offset < 0 or offset + end - start > whole.nbytes:
        return None
    return whole[offset : offset + end - start]


def _address(buffer: memoryview) -> int | None:
    """Where ``buffer``'s first byte lies in memory; None for a read-only or empty one (no
    read goes there) or one not of single bytes."""
    if buffer.readonly or buffer.nbytes == 0 or not buffer.c_contiguous:
        return None
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))
