"""A model as a read-only Zarr v3 store (``pip install "remotetensors[zarr]"``).

:class:`CheckpointStore` is a ``zarr.abc.store.Store`` whose root group holds one array per
tensor (see :mod:`.layout`). Its metadata documents are made from the headers when the store is
made; nothing is read to open it. A chunk key is read through the model's own file objects
(:meth:`~remotetensors.reading.file.AsyncTensorFile.read_into`), so the reader's
retries, version pin, budget of requests in flight and coalescing apply: chunks that zarr asks
for together (it asks for those of one selection concurrently) are gathered for
``coalesce_window_seconds`` and read in one plan, adjacent ones in one request.

The model's files live on one event loop (the sync API's bridge loop, or the loop an
``AsyncModel`` was opened on); zarr calls the store on its own loop. Each read crosses to the
model's loop, and its bytes come back. A caller on the model's loop itself (zarr's async API
there) is served in place; the sync zarr API must then not be called from that loop's thread,
which the reads need free.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)

from ...dtypes import unpack
from ...errors import LeftOutWarning, ReadOnlyStoreError, warn_at_caller
from ...reading.file import TensorPiece
from .kinds import usable
from .layout import ArrayPlan, Plan, group_attributes, plan_arrays

if TYPE_CHECKING:
    from collections.abc import Coroutine

    import numpy.typing as npt
    from zarr.core.buffer import Buffer, BufferPrototype

    from ...models.model import AsyncModel
    from ...reading.file import AsyncTensorFile

T = TypeVar("T")

DEFAULT_COALESCE_WINDOW_SECONDS = 0.002
"""How long the store gathers chunk reads before it plans them together: zarr starts the reads
of one selection within microseconds of each other, a network read takes milliseconds."""


class CheckpointStore(Store):
    """A read-only Zarr v3 store of a model's tensors; make it with ``Model.as_zarr_store()``.

    Keys: ``zarr.json`` (the root group, with the checkpoint's metadata as attributes),
    ``<name>/zarr.json`` per tensor, ``<name>/c/<i>/0/...`` per chunk (``c`` for a scalar), and
    ``<group>/zarr.json`` for each group that a ``/`` in a tensor name makes.

    Raises (from reads): whatever the model's reads raise, among them
    :class:`~remotetensors.errors.RemoteFileChangedError` when a file changed since the model
    opened it (never bytes of another version); :class:`~remotetensors.errors.FileClosedError`
    once the model is closed. Every write raises :class:`~remotetensors.errors.ReadOnlyStoreError`.
    """

    def __init__(
        self,
        model: AsyncModel,
        *,
        loop: asyncio.AbstractEventLoop,
        chunk_bytes: int,
        coalesce_window_seconds: float = DEFAULT_COALESCE_WINDOW_SECONDS,
    ) -> None:
        """
        Args:
            model: the open model (its files read the chunks).
            loop: the loop the files live on.
            chunk_bytes: target bytes of a chunk, whole rows (see :mod:`.layout`).
            coalesce_window_seconds: how long chunk reads are gathered to be planned together.

        Warns:
            LeftOutWarning: per tensor that Zarr cannot express (named, with the reason).

        Raises:
            ValueError: ``chunk_bytes`` is not positive, or the window is negative.
        """
        if coalesce_window_seconds < 0:
            raise ValueError(f"coalesce_window_seconds must be >= 0, got {coalesce_window_seconds}")
        super().__init__(read_only=True)
        self._model = model
        self._loop = loop
        self._chunk_bytes = chunk_bytes
        self._plan = plan_arrays(model.tensors, chunk_bytes=chunk_bytes, usable=usable)
        for name, why in self._plan.left_out:
            warn_at_caller(LeftOutWarning(f"{model.location}: tensor {name} is left out: {why}"))
        self._documents = _documents(self._plan, model)
        self._reads = _Coalescer(coalesce_window_seconds)

    @property
    def plan(self) -> Plan:
        """The arrays, groups and left-out tensors of the store."""
        return self._plan

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, CheckpointStore)
            and other._model is self._model
            and other._chunk_bytes == self._chunk_bytes
        )

    def __hash__(self) -> int:
        return hash((id(self._model), self._chunk_bytes))

    def __repr__(self) -> str:
        return f"CheckpointStore({self._model.location}, {len(self._plan.arrays)} arrays)"

    def with_read_only(self, read_only: bool = False) -> CheckpointStore:
        """This store again (it only reads).

        Raises:
            ReadOnlyStoreError: for ``read_only=False``.
        """
        if not read_only:
            self._refuse("open the store for writing")
        clone = copy.copy(self)  # the same plan and documents; not opened, as zarr expects
        clone._is_open = False
        return clone

    # --- reads ------------------------------------------------------------------------------

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """The value of ``key`` (bytes ``byte_range`` of it), or None for a key not here.

        A chunk's bytes are read for this call only (the part ``byte_range`` names).
        """
        document = self._documents.get(key)
        if document is not None:
            start, end = _span(len(document), byte_range)
            value: Buffer = prototype.buffer.from_bytes(document[start:end])
            return value
        found = self._chunk(key)
        if found is None:
            return None
        array, index = found
        start, end = _span(array.chunk_nbytes, byte_range)
        data = await _on_loop(self._loop, self._read_chunk(array, index, start, end))
        chunk: Buffer = prototype.buffer.from_array_like(data)
        return chunk

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        """Each ``(key, byte_range)``'s value, in order; chunk reads planned together."""
        return list(await asyncio.gather(*(self.get(key, prototype, r) for key, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        return key in self._documents or self._chunk(key) is not None

    async def getsize(self, key: str) -> int:
        """Bytes of ``key``'s value, from the headers (nothing is read).

        Raises:
            FileNotFoundError: no such key.
        """
        document = self._documents.get(key)
        if document is not None:
            return len(document)
        found = self._chunk(key)
        if found is None:
            raise FileNotFoundError(key)
        return found[0].chunk_nbytes

    def _chunk(self, key: str) -> tuple[ArrayPlan, int] | None:
        """The array and chunk index ``key`` names, or None."""
        path, _, tail = key.rpartition("/c")
        array = self._plan.arrays.get(path)
        if array is None:
            return None
        if not array.shape:
            return (array, 0) if tail == "" and array.chunk_count else None
        parts = tail.split("/")
        if parts[0] != "" or len(parts) != len(array.shape) + 1:
            return None
        try:
            index = [int(p) for p in parts[1:]]
        except ValueError:
            return None
        if any(str(i) != p for i, p in zip(index, parts[1:], strict=True)):
            return None  # "01", "+1": not a key zarr makes
        if not 0 <= index[0] < array.chunk_count or any(index[1:]):
            return None
        return array, index[0]

    async def _read_chunk(
        self, array: ArrayPlan, index: int, start: int, end: int
    ) -> npt.NDArray[np.uint8]:
        """Bytes ``[start, end)`` of chunk ``index``'s encoding: the rows' bytes from the file
        (unpacked for F4/F6), zeros past the tensor's last row."""
        out = np.zeros(max(0, end - start), dtype=np.uint8)
        first, last = array.chunk_rows(index)
        if array.dtype.packed_in_file:
            # One value a byte in the chunk: the rows' packed bytes, unpacked, then cut.
            offset, length = array.file_bytes(first, last)
            raw = np.empty(length, dtype=np.uint8)
            await self._read(array, [TensorPiece(array.path, offset, raw.data)])
            values = (last - first) * array.row_values
            encoded = unpack(raw, array.info.dtype_info, values).view(np.uint8)
            stop = min(end, encoded.size)
            if stop > start:
                out[: stop - start] = encoded[start:stop]
            return out
        offset, length = array.file_bytes(first, last)
        stop = min(end, length)  # past the rows: the chunk's padding, zeros
        if stop > start:
            part = TensorPiece(array.path, offset + start, out.data[: stop - start])
            await self._read(array, [part])
        return out

    async def _read(self, array: ArrayPlan, parts: list[TensorPiece]) -> None:
        file = array.info.file
        assert file is not None
        await self._reads.read(self._model.file(file), parts)

    # --- listing ------------------------------------------------------------------------------

    @property
    def supports_listing(self) -> bool:
        return True

    async def list(self) -> AsyncIterator[str]:
        for key in self._documents:
            yield key
        for array, index in self._plan.chunks():
            yield f"{array.path}/{array.chunk_key(index, '/')}"

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        async for key in self.list():
            if key.startswith(prefix):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        """The names directly under ``prefix``: a group's ``zarr.json`` and members, an
        array's ``zarr.json`` and ``c``, a chunk folder's first chunk indexes."""
        path = prefix.rstrip("/")
        members = self._plan.groups.get(path)
        if members is not None:
            yield "zarr.json"
            for member in members:
                yield member
            return
        array = self._plan.arrays.get(path)
        if array is not None:
            yield "zarr.json"
            if array.chunk_count:
                yield "c"
            return
        seen: set[str] = set()
        async for key in self.list_prefix(path + "/"):
            head = key[len(path) + 1 :].split("/", 1)[0]
            if head not in seen:
                seen.add(head)
                yield head

    # --- writes: refused --------------------------------------------------------------------

    @property
    def supports_writes(self) -> bool:
        return False

    @property
    def supports_deletes(self) -> bool:
        return False

    @property
    def supports_consolidated_metadata(self) -> bool:
        return False

    def _check_writable(self) -> None:
        self._refuse("write")

    def _refuse(self, what: str) -> None:
        raise ReadOnlyStoreError(
            f"{self._model.location}: the Zarr store of a checkpoint only reads; cannot {what} "
            "(store was opened in read-only mode and does not support writing)"
        )

    async def set(self, key: str, value: Buffer) -> None:
        self._refuse(f"set {key!r}")

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        self._refuse(f"set {key!r}")

    async def delete(self, key: str) -> None:
        self._refuse(f"delete {key!r}")

    async def delete_dir(self, prefix: str) -> None:
        self._refuse(f"delete {prefix!r}")

    async def clear(self) -> None:
        self._refuse("clear the store")


def _documents(plan: Plan, model: AsyncModel) -> dict[str, bytes]:
    """Every metadata document of the hierarchy, as the bytes the store serves."""
    documents: dict[str, bytes] = {}
    for path in plan.groups:
        attributes = group_attributes(model.location, model.metadata) if path == "" else {}
        group = {"zarr_format": 3, "node_type": "group", "attributes": attributes}
        documents[f"{path}/zarr.json" if path else "zarr.json"] = _json(group)
    for path, array in plan.arrays.items():
        documents[f"{path}/zarr.json"] = _json(array.v3_metadata("/"))
    return documents


def _json(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, allow_nan=False).encode()


def _span(length: int, byte_range: ByteRequest | None) -> tuple[int, int]:
    """``byte_range`` of a value of ``length`` bytes as ``[start, end)``, cut to the value (as
    zarr's own stores cut it)."""
    if byte_range is None:
        return 0, length
    if isinstance(byte_range, RangeByteRequest):
        start, end = byte_range.start, byte_range.end
    elif isinstance(byte_range, OffsetByteRequest):
        start, end = byte_range.offset, length
    elif isinstance(byte_range, SuffixByteRequest):
        start, end = length - byte_range.suffix, length
    else:
        raise TypeError(f"unexpected byte range {byte_range!r}")
    start = min(max(0, start), length)
    return start, min(max(start, end), length)


async def _on_loop(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on ``loop`` and wait for it from the running loop (in place when that
    is ``loop``). Cancelling the wait cancels the work."""
    if asyncio.get_running_loop() is loop:
        return await coroutine
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, loop))


@dataclass(slots=True)
class _Waiting:
    file: AsyncTensorFile
    parts: list[TensorPiece]
    done: asyncio.Future[None]


class _Coalescer:
    """Gathers the reads that arrive within ``window_seconds`` of the first, then reads each
    file's in one call (one plan: coalesced, split, concurrent). Runs on the model's loop."""

    def __init__(self, window_seconds: float) -> None:
        self._window = window_seconds
        self._waiting: list[_Waiting] = []
        self._timer: asyncio.TimerHandle | None = None
        self._running: set[asyncio.Task[None]] = set()

    async def read(self, file: AsyncTensorFile, parts: list[TensorPiece]) -> None:
        loop = asyncio.get_running_loop()
        waiting = _Waiting(file, parts, loop.create_future())
        self._waiting.append(waiting)
        if self._timer is None:
            self._timer = loop.call_later(self._window, self._flush)
        await waiting.done

    def _flush(self) -> None:
        batch, self._waiting, self._timer = self._waiting, [], None
        by_file: dict[int, list[_Waiting]] = {}
        for waiting in batch:
            if not waiting.done.done():  # a cancelled wait reads nothing
                by_file.setdefault(id(waiting.file), []).append(waiting)
        for group in by_file.values():
            task = asyncio.ensure_future(self._run(group))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    @staticmethod
    async def _run(group: list[_Waiting]) -> None:
        try:
            await group[0].file.read_into([p for w in group for p in w.parts])
        except asyncio.CancelledError:
            for waiting in group:
                waiting.done.cancel()
            raise
        except Exception as exc:
            for waiting in group:
                if not waiting.done.done():
                    waiting.done.set_exception(exc)
            return
        for waiting in group:
            if not waiting.done.done():
                waiting.done.set_result(None)
