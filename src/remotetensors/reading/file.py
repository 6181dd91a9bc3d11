"""The async file reader: one header window, then only the bytes a caller asks for."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import hooks
from ..dtypes import DTYPES
from ..errors import (
    FileClosedError,
    LayoutError,
    ShardNotOpenedError,
    TensorNotFoundError,
    did_you_mean,
)
from ..options import DEFAULT_CHUNK_BYTES, ReadOptions
from ..ranges import ByteRange
from ..sources.base import CountingSource, Traffic
from .assemble import OutputArray
from .fetch import Target, fetch_into, fetch_into_blocking
from .frameworks import check_framework, convert
from .inflight import RequestsInFlight
from .slicing import SliceChunk, plan_slice

LOCAL_CHUNK_BYTES = 256 * 1024
"""Largest gather chunk of a slice read in the calling thread (see
:meth:`AsyncTensorFile.read_slice_now`): the scratch buffer stays in the core's cache, so the
copies into it and out of it are cheaper than through memory (a 4 MiB slice of a local file
read in 256 KiB chunks takes 60% of the time of one read)."""

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    import dask.array as da
    import numpy.typing as npt

    from ..index import FileIndex, TensorInfo
    from ..sources.base import ByteSource
    from ..sources.recipe import SourceRecipe


@dataclass(frozen=True, slots=True)
class TensorPiece:
    """Bytes ``[offset, offset + len(buffer))`` of tensor ``name``'s stored bytes go into
    ``buffer`` (a writable memoryview of exactly that many bytes, owned by the caller).

    The stored bytes of a tensor that is not row-major (see
    :attr:`~remotetensors.index.TensorInfo.row_major`) are the span from its first element to
    its last, not its elements in order: a piece of one is refused unless ``as_stored`` says
    that the caller lays the elements out itself, from :attr:`TensorInfo.layout`."""

    name: str
    offset: int
    buffer: memoryview
    as_stored: bool = False


class AsyncTensorFile:
    """An open safetensors file: its validated index, and tensors fetched on demand.

    Create it with :func:`remotetensors.open_async`. ``keys()``, ``offset_keys()``,
    ``metadata()`` and ``index`` are plain; methods that fetch data are coroutines. Reads of
    several tensors are planned together: coalesced, split and fetched concurrently.
    """

    def __init__(
        self,
        source: ByteSource,
        index: FileIndex,
        prefix: bytes | bytearray,
        *,
        options: ReadOptions,
        framework: str = "numpy",
    ) -> None:
        self._source = source
        self._set_index(index)
        self._prefix = prefix
        self._options = options
        self._framework = check_framework(framework)
        self._closed = False
        # One budget of requests in flight for every call on this file (or, once a model
        # shares its own, on every file of the model): concurrent calls do not multiply it,
        # and what one call measured of the link sizes the next.
        self._in_flight = RequestsInFlight.for_options(options, source.location)

    @property
    def read_options(self) -> ReadOptions:
        """How this file is read (gap, part size, concurrency)."""
        return self._options

    def share_in_flight(self, budget: RequestsInFlight) -> None:
        """Count this file's requests in flight against ``budget`` (a model's, shared by its
        files) instead of the file's own."""
        self._in_flight = budget

    def _set_index(self, index: FileIndex) -> None:
        self._index = index
        self._rows = index.tensors.rows()  # name -> row, for the lean path of get_tensor_now
        # The lean paths below read rows as they are: a format with layouts goes the async
        # way, whose every path asks the layout.
        self._lean = not index.tensors.layouts()

    # --- what the header says ----------------------------------------------------------------

    @property
    def location(self) -> str:
        """Where the file is, as given."""
        return self._source.location

    @property
    def index(self) -> FileIndex:
        """The validated header: tensors, metadata, sizes."""
        return self._index

    @property
    def traffic(self) -> Traffic:
        """What crossed the network for this file so far: requests, bytes, seconds."""
        source = self._source
        return source.traffic if isinstance(source, CountingSource) else Traffic()

    def keys(self) -> list[str]:
        """Tensor names, sorted."""
        self._check_open()
        return self._index.keys()

    def offset_keys(self) -> list[str]:
        """Tensor names in data order."""
        self._check_open()
        return self._index.offset_keys()

    def metadata(self) -> dict[str, Any] | None:
        """The header's ``__metadata__``, or None; a GGUF file's typed key/value metadata."""
        self._check_open()
        meta = self._index.metadata
        return None if meta is None else dict(meta)

    def info(self, name: str) -> TensorInfo:
        """The header entry of tensor ``name``.

        Raises:
            TensorNotFoundError: the file has no such tensor.
        """
        self._check_open()
        try:
            return self._index.tensors[name]
        except KeyError:
            raise TensorNotFoundError(
                f"File does not contain tensor {name} ({self.location})"
                f"{did_you_mean(name, self._index.tensors)}",
                name=name,
            ) from None

    # --- data ------------------------------------------------------------------------------------

    async def get_tensor(self, name: str) -> Any:
        """Fetch one tensor: a writable C-contiguous array of its dtype and shape."""
        return (await self.get_tensors([name]))[name]

    async def get_tensors(self, names: Iterable[str] | None = None) -> dict[str, Any]:
        """Fetch several tensors in one plan (coalesced, split, concurrent).

        Args:
            names: which tensors; all of them, in data order, when None.

        Returns:
            name -> array, in the order of ``names``.
        """
        wanted = list(self.offset_keys() if names is None else dict.fromkeys(names))
        infos = [self.row_major_info(name, "get_tensors") for name in wanted]
        outputs = [OutputArray(info.dtype_info, info.shape) for info in infos]
        targets = [
            Target(ByteRange(info.start, info.end), out.buffer)
            for info, out in zip(infos, outputs, strict=True)
        ]
        await self._fetch(targets)
        return {
            info.name: convert(out.result(), info.dtype, self._framework)
            for info, out in zip(infos, outputs, strict=True)
        }

    async def read_into(self, pieces: Sequence[TensorPiece]) -> None:
        """Fill caller-given buffers with stored bytes of tensors, in one plan (coalesced,
        split, concurrent, under the file's budget of requests in flight): for code that owns
        its destinations (a torch tensor's storage, a staging buffer). Nothing is converted.

        Raises:
            TensorNotFoundError: a piece names a tensor the file does not hold.
            LayoutError: a piece of a tensor that is not row-major, without ``as_stored``.
            ValueError: a piece reaches beyond its tensor's bytes.
            whatever the source raises; on error, the remaining reads are cancelled.
        """
        await self._fetch(self._targets(pieces))

    def row_major_info(self, name: str, path: str) -> TensorInfo:
        """The header entry of ``name`` for a ``path`` that reads its bytes as its elements in
        row-major order: the one check every such path makes.

        Raises:
            TensorNotFoundError: the file has no such tensor.
            LayoutError: the tensor is not row-major in the file (a strided view).
        """
        info = self.info(name)
        if not info.row_major:
            assert info.layout is not None
            raise LayoutError(
                f"{self.location}: tensor {name} (shape {list(info.shape)}, strides "
                f"{list(info.layout.strides)}) is a strided view of its storage, not one "
                f"row-major range of the file, which {path} reads; get_tensor and slices "
                "gather its elements"
            )
        return info

    def offsets_confirmed(self, names: Iterable[str]) -> bool:
        """Whether where the bytes of ``names`` start is certain (always, but for a format
        whose offsets are predicted: see :attr:`~remotetensors.index.TensorLayout.predicted`).
        Reads through this file confirm what they read; code that reads the ranges itself
        (``to_dask`` workers, kerchunk references) needs :meth:`confirm_offsets` first."""
        return True

    async def confirm_offsets(self, names: Iterable[str]) -> None:
        """Make where the bytes of ``names`` start certain (nothing to do here; see
        :meth:`offsets_confirmed`)."""

    def _targets(self, pieces: Sequence[TensorPiece]) -> list[Target]:
        """The file's byte ranges of ``pieces``, each with its buffer."""
        targets = []
        for piece in pieces:
            info = (
                self.info(piece.name)
                if piece.as_stored
                else self.row_major_info(piece.name, "read_into")
            )
            end = piece.offset + len(piece.buffer)
            if piece.offset < 0 or end > info.nbytes:
                raise ValueError(
                    f"{self.location}: bytes [{piece.offset}, {end}) of tensor {piece.name} "
                    f"asked, but it holds {info.nbytes} bytes"
                )
            start = info.start + piece.offset
            targets.append(Target(ByteRange(start, start + len(piece.buffer)), piece.buffer))
        return targets

    @property
    def reads_now(self) -> bool:
        """Whether the source reads without an event loop (a local file), so that
        :meth:`read_into_now` can read."""
        return self._source.blocking() is not None

    def read_into_now(self, pieces: Sequence[TensorPiece]) -> bool:
        """:meth:`read_into` in the calling thread when the source reads without an event loop
        (a local file); else False, having read nothing. Each piece is one positioned read
        straight into its buffer (one that starts in the bytes held since the open is copied
        from them): a ``preadv`` costs microseconds, nothing is worth coalescing. Not a second
        bridge: nothing here waits on a loop. Safe to call from several threads at once.

        Raises:
            TensorNotFoundError, ValueError: as :meth:`read_into`.
            RemoteFileChangedError: the file changed since it was opened.
        """
        blocking = self._source.blocking()
        if blocking is None:
            return False
        self._check_open()
        for target in self._targets(pieces):
            fetch_into_blocking(
                blocking.read_into_now, [target], options=self._options, cached_prefix=self._prefix
            )
        return True

    def get_tensor_now(self, name: str) -> Any | None:
        """:meth:`get_tensor` in the calling thread, when that is cheaper (see below); else None.

        The per-tensor path of code written for safetensors (``f.get_tensor(k)`` in a loop):
        one lookup, one allocation, one ``preadv``, nothing planned.
        """
        blocking = self._source.blocking()
        if blocking is None or not self._lean:
            return None
        self._check_open()
        row = self._rows.get(name)
        if row is not None:
            # The common case at a few microseconds: a tensor of a byte-aligned dtype, copied
            # from the bytes held since the open or read straight into its array after them;
            # no TensorInfo, no plan. One that straddles the two takes the general way below.
            dtype_name, shape, start, end, _ = row
            numpy_dtype = _WHOLE_BYTE_DTYPES[dtype_name]
            if numpy_dtype is not None and end - start <= self._options.fixed_part_size_bytes:
                array: Any = None
                if end <= len(self._prefix):  # a small local file is read whole on open
                    count = (end - start) // numpy_dtype.itemsize
                    array = np.frombuffer(self._prefix, numpy_dtype, count, start)
                    array = array.reshape(shape).copy()  # its own, writable, C-contiguous
                elif start >= len(self._prefix):
                    storage = np.empty(end - start, np.uint8)
                    if end > start:
                        blocking.read_into_now(start, storage.data)
                    array = storage.view(numpy_dtype).reshape(shape)
                if array is not None:
                    if self._framework == "numpy":
                        return array
                    return convert(array, dtype_name, self._framework)
        info = self.info(name)
        if info.end - info.start > self._options.fixed_part_size_bytes:
            return None
        out = OutputArray(info.dtype_info, info.shape)
        if info.start < len(self._prefix):
            target = Target(ByteRange(info.start, info.end), out.buffer)
            fetch_into_blocking(
                blocking.read_into_now, [target], options=self._options, cached_prefix=self._prefix
            )
        elif info.end > info.start:
            blocking.read_into_now(info.start, out.buffer)
        return convert(out.result(), info.dtype, self._framework)

    def get_tensors_now(self, names: Iterable[str] | None = None) -> dict[str, Any] | None:
        """:meth:`get_tensors` in the calling thread, when that is the cheaper way; else None.

        It is when the source reads without an event loop (a local file) and the tensors are
        small (at most :attr:`ReadOptions.fixed_part_size_bytes` in all): a ``preadv`` of a
        few kilobytes takes microseconds, a round trip to the IO thread tens. Larger reads
        return None and go the async way, which spreads them over worker threads. The sync
        facade uses this; it is not a second bridge, as nothing here waits on a loop: it is
        a plain blocking read.
        """
        blocking = self._source.blocking()
        if blocking is None or not self._lean:
            return None
        wanted = list(self.offset_keys() if names is None else dict.fromkeys(names))
        if len(self._prefix) >= self._index.file_size:
            # The whole file is in memory (see WHOLE_FILE_BYTES): tensor by tensor, no plan.
            return {name: self.get_tensor_now(name) for name in wanted}
        infos = [self.info(name) for name in wanted]
        if sum(info.end - info.start for info in infos) > self._options.fixed_part_size_bytes:
            return None
        outputs = [OutputArray(info.dtype_info, info.shape) for info in infos]
        targets = [
            Target(ByteRange(info.start, info.end), out.buffer)
            for info, out in zip(infos, outputs, strict=True)
        ]
        self._check_open()
        fetch_into_blocking(
            blocking.read_into_now, targets, options=self._options, cached_prefix=self._prefix
        )
        return {
            info.name: convert(out.result(), info.dtype, self._framework)
            for info, out in zip(infos, outputs, strict=True)
        }

    def recipe(self) -> SourceRecipe:
        """How to open this file again, at the version read here: its URL (a hub file's at the
        pinned commit) or path, size and validator.

        Raises:
            NotImplementedError: the file was opened on an fsspec filesystem object.
            RuntimeError: the file has not been opened yet (a shard known only from the hub's
                metadata endpoint, see :mod:`.hub_onecall`).
        """
        return self._source.recipe()

    async def get_tensor_bytes(self, name: str) -> npt.NDArray[np.uint8]:
        """Fetch a tensor's bytes as stored in the file (1-D uint8; packed for F4 and F6)."""
        info = self.info(name)
        raw = np.empty(info.nbytes, dtype=np.uint8)
        await self._fetch([Target(ByteRange(info.start, info.end), raw.data)])
        return raw

    def get_slice(self, name: str) -> AsyncTensorSlice:
        """A lazy view of tensor ``name``; index it and await the result to fetch only that."""
        return AsyncTensorSlice(self, self.info(name))

    def to_dask(self, name: str, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> da.Array:
        """Tensor ``name`` as a lazy Dask array whose chunks (about ``chunk_bytes`` of whole
        rows each) are range reads; workers in other processes read this same file version.

        Raises:
            TensorNotFoundError: the file has no such tensor.
            LayoutError: the tensor is not one row-major range of the file.
            ShardNotOpenedError: where its bytes start is not confirmed yet
                (:meth:`confirm_offsets`).
            MissingDependencyError: dask is not installed (``pip install "remotetensors[dask]"``).
        """
        info = self.row_major_info(name, "to_dask")
        if not self.offsets_confirmed([name]):
            raise ShardNotOpenedError(
                f"{self.location}: where the bytes of {name} start is predicted from the "
                "file's index and confirmed by reading it, which to_dask cannot wait for: "
                "await file.confirm_offsets(names) or model.open_shards(names) first (any "
                "read of it does it too; the sync Model does it for you)"
            )
        array: da.Array = hooks.call(
            "tensor_to_dask", self._source.recipe(), info, self._options, chunk_bytes=chunk_bytes
        )
        return array

    async def _read_slice(self, info: TensorInfo, index: Any) -> Any:
        """Fetch ``info[index]``: runs far apart, or long, straight into the result; the spans
        covering a strided selection through a scratch buffer of at most the bytes that the
        streams fetch at once (``part_size_bytes * max_concurrency`` where both are pinned),
        chunk after chunk, picked out by numpy (see :meth:`SlicePlan.chunks`).

        Raises:
            SliceError: an index the reference rejects.
        """
        self._check_open()
        if not info.row_major:
            self.row_major_info(info.name, "this slice read")  # raises LayoutError
        plan = plan_slice(info, index)
        options = self._options
        chunks = plan.chunks(
            max_gap_bytes=options.max_gap_bytes,
            chunk_bytes=self._in_flight.setting.bytes_in_flight,
        )
        out = OutputArray(info.dtype_info, plan.shape)
        for targets, then in _chunk_reads(chunks, out):
            await self._fetch(targets)
            then()
        return convert(out.result(), info.dtype, self._framework)

    def read_slice_now(self, info: TensorInfo, index: Any) -> Any | None:
        """:meth:`_read_slice` in the calling thread, when that is cheaper; else None.

        It is when the source reads without an event loop (a local file), unless the slice is
        read straight into the result and is larger than
        :attr:`ReadOptions.fixed_part_size_bytes` (worker threads
        then read its parts in parallel, on the async path). A strided selection is gathered
        through a scratch buffer of :data:`LOCAL_CHUNK_BYTES` here.

        Raises:
            SliceError: an index the reference rejects.
        """
        blocking = self._source.blocking()
        if blocking is None or not self._lean:
            return None
        self._check_open()
        plan = plan_slice(info, index)
        chunks = plan.chunks(
            max_gap_bytes=self._options.max_gap_bytes, chunk_bytes=LOCAL_CHUNK_BYTES
        )
        if chunks and chunks[0].direct and plan.nbytes > self._options.fixed_part_size_bytes:
            return None
        out = OutputArray(info.dtype_info, plan.shape)
        for targets, then in _chunk_reads(chunks, out):
            fetch_into_blocking(
                blocking.read_into_now, targets, options=self._options, cached_prefix=self._prefix
            )
            then()
        return convert(out.result(), info.dtype, self._framework)

    async def _fetch(self, targets: list[Target]) -> None:
        self._check_open()
        await fetch_into(
            self._source,
            targets,
            options=self._options,
            cached_prefix=self._prefix,
            budget=self._in_flight,
        )

    # --- lifetime ------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise FileClosedError(f"File is closed ({self.location})")

    def close_now(self) -> bool:
        """:meth:`aclose` in the calling thread if the source allows; whether it did."""
        blocking = self._source.blocking()
        if blocking is None:
            return False
        self._closed = True
        blocking.close_now()
        return True

    async def aclose(self) -> None:
        """Release the source's connections; later calls raise FileClosedError."""
        if not self._closed:
            self._closed = True
            await self._source.aclose()

    async def __aenter__(self) -> AsyncTensorFile:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _repr_html_(self) -> str:
        name = self.location.rstrip("/").rsplit("/", 1)[-1]
        tensors = self._index.tensors.values()
        return str(hooks.call("tensors_html", self.location, tensors, traffic={name: self.traffic}))

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._index)} tensors"
        return f"<AsyncTensorFile {self.location} ({state})>"


class AsyncTensorSlice:
    """``get_slice`` of the async reader: shape and dtype at once, data on ``await view[...]``."""

    def __init__(self, file: AsyncTensorFile, info: TensorInfo) -> None:
        self._file = file
        self._info = info

    def get_shape(self) -> list[int]:
        """The tensor's shape."""
        return list(self._info.shape)

    def get_dtype(self) -> str:
        """The header's dtype name (``"BF16"``)."""
        return self._info.dtype

    async def __getitem__(self, index: Any) -> Any:
        return await self._file._read_slice(self._info, index)

    def get_now(self, index: Any) -> Any | None:
        """``view[index]`` in the calling thread when that is cheaper, else None (see
        :meth:`AsyncTensorFile.read_slice_now`)."""
        return self._file.read_slice_now(self._info, index)


def _chunk_reads(
    chunks: list[SliceChunk], out: OutputArray
) -> Iterator[tuple[list[Target], Callable[[], None]]]:
    """The reads of a slice, to run in order: each chunk's targets, and what to run once its
    bytes are in (gather the runs from the scratch buffer into ``out``; nothing for a direct
    chunk, whose targets are ``out``'s own bytes). One scratch buffer serves every chunk."""
    scratch = np.empty(max((c.fetched_bytes for c in chunks if not c.direct), default=0), np.uint8)
    result = np.frombuffer(out.buffer, dtype=np.uint8)
    for chunk in chunks:
        if chunk.direct:
            buffer = out.buffer[chunk.out_start : chunk.out_start + chunk.out_bytes]
        else:
            buffer = scratch.data[: chunk.fetched_bytes]
        length = chunk.span_bytes
        targets = [
            Target(span, buffer[i * length : (i + 1) * length])
            for i, span in enumerate(chunk.spans())
        ]
        yield targets, _nothing if chunk.direct else partial(chunk.gather, scratch, result)


def _nothing() -> None:
    """What a direct chunk needs once its bytes are in: nothing."""


class _WholeByteDtypes(dict[str, Any]):
    """Dtype name -> numpy dtype for the dtypes stored a whole number of bytes per element (the
    lean path's); ``None`` for the others. Resolved on first use (ml_dtypes is imported then)."""

    def __missing__(self, name: str) -> Any:
        dt = DTYPES.get(name)
        self[name] = found = None if dt is None or dt.packed else dt.numpy
        return found


_WHOLE_BYTE_DTYPES = _WholeByteDtypes()
