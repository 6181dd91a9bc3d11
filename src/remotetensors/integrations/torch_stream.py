"""Reading planned tensors into torch tensors, with a bound on the bytes in flight.

Each tensor's bytes land in its final tensor: straight into its storage when the file's bytes
are already what it holds (same dtype, in host memory), else through a staging buffer from
which they are converted (another dtype) or copied (another device) piece by piece. A tensor
is cut into pieces of at most ``batch_bytes``; consecutive pieces of small tensors share one
batch, read as one coalesced plan. ``max_in_flight_bytes`` is split into lanes, each running
one batch at a time with its own staging buffer (pinned host memory when tensors go to a CUDA
device), so at most ``max_in_flight_bytes`` are asked for and not yet in their final place,
whatever the size of one tensor, and at most that much is held in staging and in the buffers
requests pass through (see :meth:`_Lane.runs`). A tensor is done when its last piece is in
place; only then is it handed on (see :class:`Streamer`).

A tensor that is a strided view of its storage in the file (a transposed or expanded weight in
a PyTorch ``.bin``: see :class:`~remotetensors.index.TensorLayout`) is read in pieces along its
dimension of largest stride, each piece the span of the file that holds a run of indices along
it, staged and copied into the tensor through a view of the staged bytes at the tensor's
strides: its elements end in order, within the same bound.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import LayoutError
from ..reading.fetch import gather_or_cancel
from ..reading.file import TensorPiece

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import torch

    from ..models.model import AsyncModel
    from .torch_plan import Read

DEFAULT_MAX_IN_FLIGHT_BYTES = 256 * 1024 * 1024
"""Bytes asked for and not yet in their final tensor, at most, by default."""

MIN_IN_FLIGHT_BYTES = 64 * 1024
"""The smallest bound accepted: below it, requests would be too small to be worth sending."""

LANES = 8
"""Lanes the bound is split into: batches read at once (the default request concurrency),
so that the next batch is on the wire while one is being converted or copied."""

ALIGN = 64
"""Pieces sit at offsets of a staging buffer that are multiples of this (any element size)."""

ALONE_BYTES = 1024 * 1024
"""A piece read straight into its tensor that is at least this long is asked for alone: a
request costs little next to a megabyte's transfer, while one plan with its neighbours would
merge them into a part read through a temporary buffer (a fresh allocation, one more copy).
Smaller pieces of a batch share one plan, so small tensors still cost one request together."""

THREAD_COPY_BYTES = 1024 * 1024
"""A conversion or copy of at least this many bytes runs in a worker thread, so that the event
loop keeps receiving the other lanes' bytes meanwhile."""


@dataclass(frozen=True, slots=True)
class StagingLanes:
    """``max_in_flight_bytes`` as ``lanes`` batches of at most ``batch_bytes`` each.

    A lane holds at most ``batch_bytes`` at once, whatever its batch needs: its staging buffer
    and every buffer that its requests are read into on the way (see :meth:`_Lane.runs`)."""

    batch_bytes: int
    lanes: int

    @classmethod
    def of(cls, max_in_flight_bytes: int) -> StagingLanes:
        """Split a bound in bytes into lanes.

        Raises:
            ValueError: a bound below :data:`MIN_IN_FLIGHT_BYTES`.
        """
        if max_in_flight_bytes < MIN_IN_FLIGHT_BYTES:
            raise ValueError(
                f"max_in_flight_bytes must be at least {MIN_IN_FLIGHT_BYTES}, "
                f"got {max_in_flight_bytes}"
            )
        batch = max_in_flight_bytes // LANES // ALIGN * ALIGN
        return cls(batch, max_in_flight_bytes // batch)


class Filling:
    """One planned read in progress: its destination and the pieces still out."""

    def __init__(self, read: Read) -> None:
        self.read = read
        self.pieces_left = 0
        self._tensor: torch.Tensor | None = None
        self._direct: memoryview | None = None
        info = read.info
        self.strides: tuple[int, ...] | None = None  # of a strided view (see the module)
        self.dim = 0  # its dimension of largest stride, along which it is cut
        if not info.row_major:
            assert info.layout is not None
            self.strides = info.layout.strides
            self.dim = _outer_dim(info.shape, self.strides)

    @property
    def tensor(self) -> torch.Tensor:
        """The contiguous tensor the bytes end in, made on first use: the module's own when
        it is filled in place and contiguous, else a new one of the read's dtype and device."""
        if self._tensor is None:
            import torch

            read = self.read
            landing = read.landing()
            if landing is not None:
                self._tensor = landing
            else:
                self._tensor = torch.empty(read.info.shape, dtype=read.dtype, device=read.device)
            direct = self._tensor.device.type == "cpu" and self._tensor.dtype == read.file_dtype
            if direct and self.strides is None:
                flat = self._tensor.reshape(-1).view(torch.uint8)
                self._direct = flat.numpy().data
        return self._tensor

    @property
    def direct(self) -> memoryview | None:
        """The destination's own bytes, when the file's bytes land there as they are."""
        _ = self.tensor
        return self._direct


@dataclass(frozen=True, slots=True)
class Piece:
    """Bytes ``[offset, offset + length)`` of one tensor's stored bytes; of a strided one,
    the span holding its indices ``[first, stop)`` along its :attr:`Filling.dim`."""

    filling: Filling
    offset: int
    length: int
    first: int = 0
    stop: int = 0


def batches(fillings: Sequence[Filling], batch_bytes: int) -> list[list[Piece]]:
    """Cut the tensors into pieces of at most ``batch_bytes`` (whole elements) and group
    consecutive pieces into batches whose aligned sizes add up to at most ``batch_bytes``.
    Sets each filling's count of pieces. Tensors of no bytes get no piece.

    Raises:
        LayoutError: a strided tensor one index of whose outer dimension spans more than
            ``batch_bytes`` of the file.
    """
    out: list[list[Piece]] = []
    current: list[Piece] = []
    used = 0
    for filling in fillings:
        for piece in _pieces(filling, batch_bytes):
            aligned = -(-piece.length // ALIGN) * ALIGN
            if current and used + aligned > batch_bytes:
                out.append(current)
                current, used = [], 0
            current.append(piece)
            filling.pieces_left += 1
            used += aligned
    if current:
        out.append(current)
    return out


def _pieces(filling: Filling, batch_bytes: int) -> list[Piece]:
    """``filling``'s stored bytes in pieces of at most ``batch_bytes``: whole elements of a
    row-major tensor; runs of indices along the outer dimension of a strided one."""
    info = filling.read.info
    itemsize = filling.read.file_dtype.itemsize
    if filling.strides is None:
        step = batch_bytes // itemsize * itemsize
        return [
            Piece(filling, offset, min(step, info.nbytes - offset))
            for offset in range(0, info.nbytes, step)
        ]
    if info.nbytes == 0:
        return []
    shape, strides, dim = info.shape, filling.strides, filling.dim
    # Elements from an index's first element to its last, the other dimensions all covered.
    pairs = enumerate(zip(shape, strides, strict=True))
    rest = 1 + sum((n - 1) * s for i, (n, s) in pairs if i != dim)
    limit = batch_bytes // itemsize
    if rest > limit:
        raise LayoutError(
            f"{filling.read.checkpoint_name} is a strided view (shape {list(shape)}, strides "
            f"{list(strides)}) one index of which spans {rest * itemsize} bytes of the file, "
            f"more than a batch of the bound ({batch_bytes} bytes): raise max_in_flight_bytes "
            f"to at least {rest * itemsize * LANES}"
        )
    size, stride = shape[dim], strides[dim]
    run = size if stride == 0 else min(size, (limit - rest) // stride + 1)
    return [
        Piece(
            filling,
            first * stride * itemsize,
            ((min(first + run, size) - 1 - first) * stride + rest) * itemsize,
            first,
            min(first + run, size),
        )
        for first in range(0, size, run)
    ]


def _outer_dim(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """The dimension of largest stride among those of more than one index (0 when none)."""
    dims = [i for i, n in enumerate(shape) if n > 1] or [0]
    return max(dims, key=lambda i: strides[i])


class Streamer:
    """Reads fillings from a model, lane by lane, and hands each finished one to ``done``.

    ``done`` is called on the event loop, once per filling, after its every byte is in its
    tensor (for a CUDA destination: after the copies have completed). On error the other
    lanes are cancelled and the error raised; fillings not handed to ``done`` are unfinished.
    """

    def __init__(
        self, model: AsyncModel, staging: StagingLanes, done: Callable[[Filling], None]
    ) -> None:
        self._model = model
        self._staging = staging
        self._done = done
        self._local = model.reads_now

    async def run(self, fillings: Sequence[Filling]) -> None:
        """Read every filling (in the given order, up to ``lanes`` batches at once)."""
        queue = collections.deque(batches(fillings, self._staging.batch_bytes))
        for filling in fillings:
            if filling.pieces_left == 0:  # no bytes: nothing to wait for
                _ = filling.tensor
                self._done(filling)
        pinned = any(f.read.device.type == "cuda" for f in fillings) and _cuda_available()
        lanes = [_Lane(self._staging.batch_bytes, pinned) for _ in range(self._staging.lanes)]
        await gather_or_cancel([self._drain(queue, lane) for lane in lanes])

    async def _drain(self, queue: collections.deque[list[Piece]], lane: _Lane) -> None:
        while queue:
            await self._batch(queue.popleft(), lane)

    async def _batch(self, batch: list[Piece], lane: _Lane) -> None:
        def request(piece: Piece, at: int | None) -> TensorPiece:
            filling = piece.filling
            if at is None:
                direct = filling.direct
                assert direct is not None
                buffer = direct[piece.offset : piece.offset + piece.length]
            else:
                buffer = lane.buffer(at, piece.length)
            read = filling.read
            return TensorPiece(
                read.checkpoint_name,
                read.box_offset + piece.offset,
                buffer,
                filling.strides is not None,
            )

        def goes_alone(piece: Piece) -> bool:
            return piece.filling.direct is not None and piece.length >= ALONE_BYTES

        alone = [request(piece, None) for piece in batch if goes_alone(piece)]
        runs = lane.runs([p for p in batch if not goes_alone(p)], merged=not self._local)
        for i, run in enumerate(runs):
            together = [request(piece, at) for piece, at in run]
            first = alone if i == 0 else []
            if self._local:
                # A local file: the batch's positioned reads in one worker thread, lanes in
                # parallel; a trip through the event loop per read would cost more than the
                # read.
                await asyncio.to_thread(self._model.read_into_now, [*first, *together])
            else:
                reads = [self._model.read_into([one]) for one in first]
                if together:
                    reads.append(self._model.read_into(together))
                await gather_or_cancel(reads)
            staged = [(piece, at) for piece, at in run if at is not None]
            if staged:
                await _place(staged, lane)  # before the next run fills the staging buffer
        for piece in batch:
            piece.filling.pieces_left -= 1
            if piece.filling.pieces_left == 0:
                self._done(piece.filling)


class _Lane:
    """One batch at a time, with a staging buffer of ``capacity`` bytes made on first use
    (pinned when tensors go to a CUDA device, so copies to it run without a bounce)."""

    def __init__(self, capacity: int, pinned: bool) -> None:
        self._capacity = capacity
        self._pinned = pinned
        self._staging: torch.Tensor | None = None
        self._bytes: memoryview | None = None

    @property
    def staging(self) -> torch.Tensor:
        if self._staging is None:
            import torch

            self._staging = torch.empty(self._capacity, dtype=torch.uint8, pin_memory=self._pinned)
            self._bytes = self._staging.numpy().data
        return self._staging

    def buffer(self, at: int, length: int) -> memoryview:
        _ = self.staging
        assert self._bytes is not None
        return self._bytes[at : at + length]

    def runs(self, pieces: list[Piece], *, merged: bool) -> list[list[tuple[Piece, int | None]]]:
        """``pieces`` (read together, not alone) in runs read one after another, each by one
        plan: every piece with its offset in the staging buffer, or None when its bytes go
        straight into its tensor. There is always one run, empty when ``pieces`` is.

        A plan reads a request that serves several pieces into them only when they lie back
        to back in one buffer as in the file; any other (a gap or an overlap between them,
        pieces apart in memory) is read into a buffer of its length first. So when ``merged``
        (requests may serve several pieces: not a local file's positioned reads) and the
        pieces of each file are back to back in it, every piece is staged, laid out as the
        file is (a piece starts a new 64-byte-aligned stretch only where its elements would
        not be aligned): no request then takes a buffer of its own. Otherwise the spans of
        a file whose pieces are not back to back count as passing through such buffers, and a
        run ends before the staging it uses and those spans would exceed the capacity: the
        lane holds at most ``capacity`` bytes at once.
        """

        def where(piece: Piece) -> tuple[str, int, int]:
            info = piece.filling.read.info
            start = info.start + piece.offset
            return info.file or "", start, start + piece.length

        def aligned(at: int) -> int:
            return -(-at // ALIGN) * ALIGN

        if not merged or len(pieces) < 2:
            # Each piece read alone: straight into its tensor when it can be, else staged.
            alone: list[tuple[Piece, int | None]] = []
            free = 0
            for piece in pieces:
                if piece.filling.direct is not None:
                    alone.append((piece, None))
                else:
                    alone.append((piece, free))
                    free = aligned(free + piece.length)
            return [alone]
        order = sorted(pieces, key=where)
        places = [where(piece) for piece in order]
        tiled = all(
            places[i][0] != places[i + 1][0] or places[i][2] == places[i + 1][1]
            for i in range(len(places) - 1)
        )
        runs: list[list[tuple[Piece, int | None]]] = []
        run: list[tuple[Piece, int | None]] = []
        used = passed = 0  # staging bytes used; bytes of closed spans that pass through
        span: tuple[str, int, int, bool] | None = None  # (file, start, end, passes through)
        last: tuple[str, int, int | None] | None = None  # (file, end, end in staging or None)
        for piece, (file, start, end) in zip(order, places, strict=True):
            while True:
                at: int | None = None
                ends_at = used
                if piece.filling.direct is None or tiled:
                    at = used
                    follows = last is not None and last[0] == file and last[1] == start
                    if not follows or at % piece.filling.read.file_dtype.itemsize:
                        at = aligned(used)
                    ends_at = at + piece.length
                back_to_back = (
                    last is not None
                    and last[0] == file
                    and last[1] == start
                    and at is not None
                    and last[2] == at
                )
                if span is not None and span[0] == file:
                    grown = (file, span[1], max(span[2], end), span[3] or not back_to_back)
                    closed = passed
                else:
                    grown = (file, start, end, False)
                    closed = passed + (span[2] - span[1] if span is not None and span[3] else 0)
                through = closed + (grown[2] - grown[1] if grown[3] else 0)
                if run and ends_at + through > self._capacity:
                    runs.append(run)  # this piece starts the next run, from nothing held
                    run, used, passed, span, last = [], 0, 0, None, None
                    continue
                run.append((piece, at))
                used, passed, span = ends_at, closed, grown
                last = (file, end, ends_at if at is not None else None)
                break
        runs.append(run)
        return runs


async def _place(staged: list[tuple[Piece, int]], lane: _Lane) -> None:
    """Convert or copy each staged piece into its tensor; wait for device copies to finish
    before the lane's staging buffer is filled again."""
    devices: set[Any] = set()
    for piece, at in staged:
        read = piece.filling.read
        itemsize = read.file_dtype.itemsize
        source = lane.staging[at : at + piece.length].view(read.file_dtype)
        if piece.filling.strides is not None:
            await _place_strided(piece, source)
            continue
        first = piece.offset // itemsize
        destination = piece.filling.tensor.view(-1)[first : first + source.numel()]
        if destination.device.type == "cuda":
            if source.dtype == destination.dtype:
                destination.copy_(source, non_blocking=True)
            else:
                # The file's bytes cross as they are and are converted on the device (a
                # temporary of one piece there): copy_ would convert on the host, in this
                # thread, into pageable memory, before a copy that then blocks.
                destination.copy_(source.to(destination.device, non_blocking=True))
            devices.add(destination.device)
        elif piece.length >= THREAD_COPY_BYTES:
            await asyncio.to_thread(destination.copy_, source)
        else:
            destination.copy_(source)
    for device in devices:
        await _synchronized(device)


async def _place_strided(piece: Piece, source: torch.Tensor) -> None:
    """Copy the indices ``[piece.first, piece.stop)`` of a strided tensor from ``source``, the
    span of the file holding them (in its file's dtype), into their place in the tensor:
    through a view of the span at the tensor's strides, converted by the copy. To a CUDA
    device the span crosses as it is and the view is taken there."""
    filling = piece.filling
    assert filling.strides is not None
    shape = list(filling.read.info.shape)
    shape[filling.dim] = piece.stop - piece.first
    destination = filling.tensor.narrow(filling.dim, piece.first, piece.stop - piece.first)
    if destination.device.type == "cuda":
        source = source.to(destination.device, non_blocking=True)
    view = source.as_strided(shape, filling.strides, source.storage_offset())
    if destination.device.type == "cuda":
        destination.copy_(view, non_blocking=True)
        await _synchronized(destination.device)
    elif piece.length >= THREAD_COPY_BYTES:
        await asyncio.to_thread(destination.copy_, view)
    else:
        destination.copy_(view)


async def _synchronized(device: Any) -> None:
    """Wait, in a worker thread, until the copies queued on ``device`` so far have run."""
    import torch

    event = torch.cuda.Event()  # type: ignore[no-untyped-call]
    event.record(torch.cuda.current_stream(device))
    await asyncio.to_thread(event.synchronize)


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())
