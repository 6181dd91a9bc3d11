"""PyTorch ``.bin`` files (``torch.save``'s zip) over any source, read by ranges and never
unpickled.

What crosses the network to open one: a suffix request for the file's last
``ReadOptions.header_window_bytes`` (the zip's end records and, mostly, its central directory),
one more for the rest of the directory when it is longer, and one for ``data.pkl`` near the
start (:func:`read_bin_header`; :mod:`..formats.torch_bin` says what is needed at each step).
Tensor bytes are then ranges of the file, as for safetensors: a tensor's storage bytes from its
storage offset, tensors sharing a storage reading its bytes once (the read plan merges
overlapping ranges), and a tensor that is a strided view of its storage read as the span it
covers and laid out in C order here.

A storage's bytes are where the zip's directory predicts them (:mod:`..formats.torch_zip`); the
first read of a storage also fetches its local header (a few dozen bytes just before it, in the
same request) and checks the prediction, so a zip laid out otherwise fails, never gives wrong
bytes.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import HeaderError, HeaderErrorKind, LayoutError
from ..formats.torch_bin import StoragePlace, TorchIndex, read_bin
from ..formats.torch_zip import HeldBytes, NeedBytes
from ..index import MAX_EXPANDED_BYTES, MAX_EXPANSION, TensorInfo
from ..options import ReadOptions
from ..ranges import ByteRange
from ..sources.cache.source import read_metadata
from .assemble import OutputArray
from .fetch import Target, fetch_into_blocking
from .file import LOCAL_CHUNK_BYTES, AsyncTensorFile, TensorPiece, _chunk_reads
from .frameworks import convert
from .slicing import plan_slice

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    import numpy.typing as npt

    from ..formats.torch_globals import TensorRef
    from ..sources.base import ByteSource, Prefix

__all__ = ["AsyncTorchFile", "open_torch_file", "read_bin_header"]

MAX_HEADER_READS = 8
"""Requests after the first that a header may take (it needs at most four: the end records,
the directory, ``data.pkl``, the first bytes of a file that is no zip)."""


async def read_bin_header(
    source: ByteSource, window_bytes: int, *, first: Prefix | None = None
) -> tuple[HeldBytes, TorchIndex]:
    """Read what indexes a ``torch.save`` file: its zip end records, central directory and
    ``data.pkl``; the one place that fetches them, so that they can be kept (a cache holds
    the bytes and parses them again with :func:`..formats.torch_bin.read_bin`).

    Args:
        source: the file, not opened yet (unless ``first`` is given).
        window_bytes: the size of the first request, a suffix of the file.
        first: the file's first bytes when the source was opened with a prefix (its name did
            not say it is a torch file); the end is then read next.

    Returns:
        The bytes fetched, and the index they give.

    Raises:
        HeaderError: the file is not a ``torch.save`` zip (legacy format included), or its
            pickle is malformed or names a global outside the allowed ones.
        and whatever the source raises.
    """
    # Every byte that indexes the file goes through read_metadata, so the persistent cache
    # keeps it and serves it the next time, the opening included (sources/cache/source.py).
    if first is None:
        suffix = await source.open_suffix(window_bytes)
        opening, size = (suffix.start, suffix.data), suffix.size
    else:
        opening, size = (0, first.data), first.size
    held = HeldBytes(size, [opening])
    for _ in range(MAX_HEADER_READS + 1):
        step = read_bin(held, location=source.location)
        if not isinstance(step, NeedBytes):
            await _keep_opening(source, opening, step)
            return held, step
        data = await read_metadata(source, step.start, step.end)
        held = held.with_bytes(step.start, data)
    raise HeaderError(
        HeaderErrorKind.INVALID_ZIP,
        f"the zip's index was not complete after {MAX_HEADER_READS} reads",
        location=source.location,
    )


async def _keep_opening(source: ByteSource, opening: tuple[int, bytes], found: TorchIndex) -> None:
    """Declare the opening window's bytes that index the file (those before the first storage
    and after the last: ``data.pkl``, the directory, the end records) as metadata, so a cache
    keeps them and never the tensor bytes the window also caught."""
    start, data = opening
    end = start + len(data)
    places = list(found.places.values())
    first_data = min((p.header_start for p in places), default=end)
    last_data = max((p.start + p.nbytes for p in places), default=start)
    if start < first_data:
        await read_metadata(source, start, min(end, first_data), held=data)
    if last_data < end:
        cut = max(start, last_data)
        await read_metadata(source, cut, end, held=data[cut - start :])


async def open_torch_file(
    source: ByteSource,
    *,
    options: ReadOptions,
    framework: str,
    first: Prefix | None = None,
) -> AsyncTorchFile:
    """Read a ``torch.save`` file's header (see :func:`read_bin_header`) and return it open."""
    held, found = await read_bin_header(source, options.header_window_bytes, first=first)
    return AsyncTorchFile(source, found, held.prefix(), options=options, framework=framework)


class AsyncTorchFile(AsyncTensorFile):
    """An open ``torch.save`` file: read like safetensors, its storages' local headers checked
    on their first read, its strided tensors laid out in C order (see the module)."""

    def __init__(
        self,
        source: ByteSource,
        found: TorchIndex,
        prefix: bytes,
        *,
        options: ReadOptions,
        framework: str = "numpy",
    ) -> None:
        super().__init__(source, found.index, prefix, options=options, framework=framework)
        self._strided = found.strided
        self._places = found.places
        storages = sorted({p.start: p for p in found.places.values()}.values(), key=_start)
        self._storages = storages
        self._storage_starts = [p.start for p in storages]
        self._checked: set[int] = set()  # starts of the storages whose local header agreed

    # --- reads, each storage checked once -----------------------------------------------------

    async def _fetch(self, targets: list[Target]) -> None:
        # The local headers of storages read for the first time come in the same plan: just
        # before their bytes, they join the same request.
        headers, check = self._header_reads(self._unchecked(t.range for t in targets))
        await super()._fetch([*targets, *headers])
        check()

    def _header_reads(
        self, places: Iterable[StoragePlace]
    ) -> tuple[list[Target], Callable[[], None]]:
        """The reads of the local headers of ``places``, and what checks them once read.

        The check raises HeaderError (INVALID_ZIP) for a storage whose bytes are not where the
        directory put them; the others are marked checked."""
        buffers = [
            (place, np.empty(place.start - place.header_start, np.uint8)) for place in places
        ]

        def check() -> None:
            for place, header in buffers:
                place.check(header.tobytes(), location=self.location)
                self._checked.add(place.start)

        targets = [Target(ByteRange(p.header_start, p.start), h.data) for p, h in buffers]
        return targets, check

    def _unchecked(self, ranges: Iterable[ByteRange]) -> list[StoragePlace]:
        """The storages holding ``ranges`` whose local header has not been checked yet."""
        found: dict[int, StoragePlace] = {}
        for span in ranges:
            i = bisect.bisect_right(self._storage_starts, span.start) - 1
            if span.length and i >= 0:
                place = self._storages[i]
                if place.start not in self._checked and span.end <= place.start + place.nbytes:
                    found[place.start] = place
        return list(found.values())

    async def confirm_offsets(self, names: Iterable[str]) -> None:
        """Check the local headers of the storages holding ``names`` (a few dozen bytes each,
        concurrently), which reads do on their own; :meth:`to_dask` and kerchunk references
        need it done first.

        Raises:
            HeaderError: INVALID_ZIP, a storage whose bytes are not where the directory put
                them.
        """
        wanted = {p.start: p for p in map(self._place, names) if p.start not in self._checked}
        if wanted:
            headers, check = self._header_reads(wanted.values())
            await super()._fetch(headers)
            check()

    def offsets_confirmed(self, names: Iterable[str]) -> bool:
        """Whether the local headers of the storages holding ``names`` have been checked."""
        return all(self._place(name).start in self._checked for name in names)

    def read_into_now(self, pieces: Sequence[TensorPiece]) -> bool:
        """As :meth:`AsyncTensorFile.read_into_now`, after checking (with positioned reads
        too) the local headers of the storages read for the first time.

        Raises:
            HeaderError: INVALID_ZIP, a storage whose bytes are not where the directory put
                them; and as :meth:`AsyncTensorFile.read_into_now`.
        """
        blocking = self._source.blocking()
        if blocking is None:
            return False
        self._check_open()
        places = []
        if len(self._checked) < len(self._storages):  # else nothing left to confirm
            places = self._unchecked(target.range for target in self._targets(pieces))
        if places:
            headers, check = self._header_reads(places)
            fetch_into_blocking(
                blocking.read_into_now, headers, options=self._options, cached_prefix=self._prefix
            )
            check()
        return super().read_into_now(pieces)

    def _place(self, name: str) -> StoragePlace:
        self.info(name)  # TensorNotFoundError for an unknown name
        return self._places[name]

    async def get_tensors(self, names: Iterable[str] | None = None) -> dict[str, Any]:
        wanted = list(self.offset_keys() if names is None else dict.fromkeys(names))
        if not any(name in self._strided for name in wanted):
            return await super().get_tensors(wanted)
        infos = [self.info(name) for name in wanted]
        for info in infos:
            if info.name in self._strided:
                _check_expansion(info, self.location)
        # One plan for all: contiguous tensors straight into their arrays, strided ones as the
        # span they cover, laid out afterwards.
        outputs: list[OutputArray | npt.NDArray[np.uint8]] = [
            np.empty(i.nbytes, np.uint8)
            if i.name in self._strided
            else OutputArray(i.dtype_info, i.shape)
            for i in infos
        ]
        await self._fetch(
            [
                Target(
                    ByteRange(i.start, i.end), o.buffer if isinstance(o, OutputArray) else o.data
                )
                for i, o in zip(infos, outputs, strict=True)
            ]
        )
        return {
            i.name: convert(
                o.result() if isinstance(o, OutputArray) else self._laid_out(i, o),
                i.dtype,
                self._framework,
            )
            for i, o in zip(infos, outputs, strict=True)
        }

    def _laid_out(self, info: TensorInfo, span: npt.NDArray[np.uint8]) -> Any:
        """Strided tensor ``info`` in C order, from the bytes of the span it covers."""
        return laid_out(self._strided[info.name], info.dtype_info.numpy, span)

    async def _read_slice(self, info: TensorInfo, index: Any) -> Any:
        """``info[index]``; a strided tensor's span is read whole and sliced here, with the
        reference's rules for the index.

        Raises:
            SliceError: an index the reference rejects.
        """
        if info.name not in self._strided:
            return await super()._read_slice(info, index)
        self._check_open()
        _check_expansion(info, self.location)  # the whole view is laid out first
        c_order = TensorInfo(
            info.name, info.dtype, info.shape, 0, info.dtype_info.nbytes(info.num_elements)
        )
        plan = plan_slice(c_order, index)  # before any read: a bad index fails at once
        span = np.empty(info.nbytes, np.uint8)
        await self._fetch([Target(ByteRange(info.start, info.end), span.data)])
        whole = self._laid_out(info, span).reshape(-1).view(np.uint8).data

        def from_memory(start: int, buffer: memoryview) -> None:
            buffer[:] = whole[start : start + len(buffer)]

        out = OutputArray(info.dtype_info, plan.shape)
        chunks = plan.chunks(max_gap_bytes=0, chunk_bytes=LOCAL_CHUNK_BYTES)
        for targets, then in _chunk_reads(chunks, out):
            fetch_into_blocking(from_memory, targets, options=self._options)
            then()
        return convert(out.result(), info.dtype, self._framework)


def laid_out(view: TensorRef, dtype: np.dtype[Any], span: npt.NDArray[np.uint8]) -> Any:
    """The strided ``view`` in C order, a new array of ``dtype``, from the bytes of the span
    it covers (``span``, from its first element). Strided over bytes, each element a row of
    its bytes: numpy strides only its own dtypes, not ml_dtypes' (BF16, F8)."""
    size = dtype.itemsize
    elements = np.lib.stride_tricks.as_strided(
        span, (*view.shape, size), (*(step * size for step in view.stride), 1)
    )
    return np.ascontiguousarray(elements).view(dtype).reshape(view.shape)


def _check_expansion(info: TensorInfo, location: str) -> None:
    """Refuse to lay out a strided ``info`` whose array would be far larger than the bytes the
    file holds for it (see :data:`~remotetensors.index.MAX_EXPANSION`).

    Raises:
        LayoutError: it would be.
    """
    allowed = max(MAX_EXPANSION * info.nbytes, MAX_EXPANDED_BYTES)
    if info.materialised_nbytes > allowed:
        strides = list(info.layout.strides) if info.layout is not None else None
        raise LayoutError(
            f"{location}: tensor {info.name} is an expanded view (shape {list(info.shape)}, "
            f"strides {strides}) of {info.nbytes} bytes of the file; laid out it would be "
            f"{info.materialised_nbytes} bytes, more than {MAX_EXPANSION} times what the file "
            f"holds for it and more than {MAX_EXPANDED_BYTES} bytes: refused"
        )


def _start(place: StoragePlace) -> int:
    return place.start
