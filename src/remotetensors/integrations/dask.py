"""Tensors as Dask arrays whose chunks are byte-range reads (``pip install "remotetensors[dask]"``).

``to_dask`` builds a lazy ``dask.array.Array`` from an open file or model without reading any
tensor data. Its graph holds one :class:`RemoteTensor` per tensor: the file's
:class:`~remotetensors.sources.recipe.SourceRecipe` (location, credentials, version pin), the
tensor's header entry and the read options. A worker process that computes a chunk opens the
file once (one small request that checks the version pin), keeps it, with its connection pool,
for every later chunk of that file, and reads the chunk's rows with one coalesced range read
into the chunk's array. No scheduler of our own: Dask decides where each chunk is read.

Chunks are whole rows along the first axis, about ``chunk_bytes`` each. Slicing the Dask array
before computing reads only the rows of the chunks it touches.
"""

from __future__ import annotations

import asyncio
import math
import os
import pickle
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import DTYPES
from ..errors import MissingDependencyError, UnsupportedDtypeError
from ..models.sync import run_sync
from ..ranges import ByteRange
from ..reading.assemble import OutputArray
from ..reading.fetch import Target, fetch_into
from ..redact import redact_url
from ..sources.reopen import reopen

if TYPE_CHECKING:
    from collections.abc import Iterable

    import dask.array as da
    import dask.bag as db
    import numpy.typing as npt

    from ..index import TensorInfo
    from ..models.scan import ScanResult
    from ..options import ReadOptions
    from ..sources.base import ByteSource
    from ..sources.http.client import Client
    from ..sources.recipe import SourceRecipe


def _dask_array() -> Any:
    try:
        import dask.array
    except ImportError as exc:
        raise MissingDependencyError(
            'to_dask needs dask: pip install "remotetensors[dask]"', name="dask"
        ) from exc
    return dask.array


def rows_per_chunk(info: TensorInfo, chunk_bytes: int) -> int:
    """Rows of ``info`` in one chunk: about ``chunk_bytes``, at least one, whole rows, and a
    multiple that keeps every chunk start on a byte boundary (sub-byte dtypes pack 2 per byte).

    Raises:
        ValueError: ``chunk_bytes`` is not positive.
    """
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
    if not info.shape:
        return 1
    row_bits = math.prod(info.shape[1:]) * info.dtype_info.bits
    if row_bits == 0:
        return max(1, info.shape[0])
    align = 8 // math.gcd(row_bits, 8)  # rows whose bits make whole bytes
    rows = max(1, (chunk_bytes * 8) // row_bits)
    return max(align, rows - rows % align)


class RemoteTensor:
    """One tensor of one file, as an array-like Dask can slice: ``shape``, ``dtype``, ``ndim`` and
    ``__getitem__``, which reads the rows the index touches from wherever the file lives.

    It pickles to plain values (the recipe, the header entry, the read options), so it travels
    inside the task graph; its repr shows no credentials.
    """

    def __init__(self, recipe: SourceRecipe, info: TensorInfo, options: ReadOptions) -> None:
        self.recipe = recipe
        self.info = info
        # Workers show no progress bars; everything else reads as on the client.
        self.options = replace(options, progress=False)
        self.shape = info.shape
        self.dtype = info.dtype_info.numpy
        self.ndim = len(info.shape)

    def __repr__(self) -> str:
        return (
            f"RemoteTensor({self.info.name}, {self.info.dtype}{list(self.shape)}, {self.recipe!r})"
        )

    def __getitem__(self, index: Any) -> npt.NDArray[Any]:
        return run_sync(self.read(index))

    async def read(self, index: Any) -> npt.NDArray[Any]:
        """The values at ``index`` (ints and slices, as Dask passes them): the touched rows,
        widened to a byte boundary for sub-byte dtypes, in one plan of range reads, then cut
        in memory."""
        items = _normalize(index, self.shape)
        if not self.shape:
            return await self._rows(0, 1)
        first, rest = items[0], (slice(None), *items[1:])
        if isinstance(first, int):
            wanted = range(first, first + 1)
        else:
            wanted = range(*first.indices(self.shape[0]))
        if not wanted:
            nothing: npt.NDArray[Any] = np.empty((0, *self.shape[1:]), dtype=self.dtype)[rest]
            return nothing
        align = rows_per_chunk(self.info, 1)  # rows per byte boundary: 1 unless sub-byte
        lo, hi = min(wanted), max(wanted) + 1
        start_row = lo - lo % align
        rows = await self._rows(start_row, min(self.shape[0], hi + (-hi) % align))
        if isinstance(first, int):
            return np.ascontiguousarray(rows[first - start_row][tuple(items[1:])])
        stop = wanted.stop - start_row  # negative only for a step < 0 that runs to row 0
        local = slice(wanted.start - start_row, stop if stop >= 0 else None, wanted.step)
        return np.ascontiguousarray(rows[local][rest])

    async def _rows(self, start_row: int, end_row: int) -> npt.NDArray[Any]:
        info = self.info
        row_elems = math.prod(info.shape[1:]) if info.shape else 1
        dt = info.dtype_info
        first_byte = info.start + dt.nbytes(start_row * row_elems)
        shape = (end_row - start_row, *info.shape[1:]) if info.shape else ()
        out = OutputArray(dt, shape)
        if out.nbytes:
            source = await _opened(self.recipe)
            target = Target(ByteRange(first_byte, first_byte + out.nbytes), out.buffer)
            await fetch_into(source, [target], options=self.options, cached_prefix=b"")
        return out.result()


def _chunks(shape: tuple[int, ...], rows: int) -> tuple[tuple[int, ...], ...]:
    """Dask's chunks: ``rows`` rows at a time along the first axis, other axes whole."""
    if not shape:
        return ()
    full, last = divmod(shape[0], rows)
    first_axis = (rows,) * full + ((last,) if last or not full else ())
    return (first_axis, *((n,) for n in shape[1:]))


def _normalize(index: Any, shape: tuple[int, ...]) -> list[Any]:
    items = list(index) if isinstance(index, tuple) else [index]
    if any(item is Ellipsis or item is None for item in items) or len(items) > len(shape):
        raise IndexError(f"unsupported index for a remote tensor chunk: {index!r}")
    items += [slice(None)] * (len(shape) - len(items))
    result: list[Any] = []
    for item, dim in zip(items, shape, strict=True):
        if isinstance(item, slice):
            result.append(item if item.step is not None else slice(item.start, item.stop, 1))
        else:
            value = int(item)
            result.append(value + dim if value < 0 else value)
    return result


def _slices(items: list[Any], shape: tuple[int, ...]) -> list[tuple[slice, int]]:
    return [(s, n) for s, n in zip(items, shape, strict=True) if isinstance(s, slice)]


# --- one opened source per file and process, reused by every chunk the process reads --------

_pid = os.getpid()
_sources: dict[bytes, asyncio.Task[ByteSource]] = {}
_clients: dict[str, Client] = {}


async def _opened(recipe: SourceRecipe) -> ByteSource:
    """The process's open source for ``recipe`` (opened and pin-checked on first use)."""
    global _pid
    if os.getpid() != _pid:  # a forked child starts with a new bridge loop: forget the old one's
        _pid = os.getpid()
        _sources.clear()
        _clients.clear()
    key = pickle.dumps(recipe)
    task = _sources.get(key)
    if task is None:
        task = asyncio.ensure_future(reopen(recipe, client=_client_for(recipe)))
        _sources[key] = task
    try:
        return await asyncio.shield(task)
    except BaseException:
        if task.done() and _sources.get(key) is task:
            del _sources[key]  # a failed open is tried again by the next chunk (Dask retries)
        raise


def _client_for(recipe: SourceRecipe) -> Client | None:
    if recipe.kind != "http" or recipe.http_options is None:
        return None if recipe.kind != "http" else _shared_client(None)
    return _shared_client(recipe.http_options)


def _shared_client(options: Any) -> Client:
    from ..sources.http.client import HttpOptions

    options = options or HttpOptions()
    key = repr(options.client_key())  # all a client is made of: direct_reads included
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = options.new_client()
    return client


# --- building the arrays -----------------------------------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def tensor_to_dask(
    recipe: SourceRecipe, info: TensorInfo, options: ReadOptions, *, chunk_bytes: int
) -> da.Array:
    """A lazy Dask array of tensor ``info`` of the file ``recipe`` opens; no IO here.

    The graph's name holds the tensor name and a hash of the redacted location, version and byte
    range, never credentials.

    Raises:
        MissingDependencyError: dask is not installed.
        ValueError: ``chunk_bytes`` is not positive.
    """
    dask_array = _dask_array()
    from dask.base import tokenize

    if info.dtype not in DTYPES:  # GGUF's block-quantized types dequantize whole blocks
        raise UnsupportedDtypeError(
            f"{redact_url(recipe.location)}: tensor {info.name} is stored as {info.dtype}, "
            "which to_dask does not chunk (it reads safetensors dtypes); use get_tensor"
        )

    rows = rows_per_chunk(info, chunk_bytes)
    token = tokenize(
        redact_url(recipe.location), recipe.validator, recipe.size, info.start, info.end, rows
    )
    name = f"remotetensors-{_UNSAFE.sub('_', info.name)}-{token}"
    tensor = RemoteTensor(recipe, info, options)
    meta = np.empty((0,) * len(info.shape), dtype=tensor.dtype)
    result: da.Array = dask_array.from_array(
        tensor,
        chunks=_chunks(info.shape, rows),
        name=name,
        lock=False,
        fancy=False,
        asarray=True,
        meta=meta,
    )
    return result


# --- scans as Dask work ------------------------------------------------------------------------


def scan_bag(
    locations: Iterable[str | os.PathLike[str]],
    *,
    partition_size: int = 64,
    concurrency: int | None = None,
    **open_model_kwargs: Any,
) -> db.Bag:
    """:func:`remotetensors.scan` as a Dask bag of :class:`~remotetensors.models.scan.ScanResult`.

    Each partition of ``partition_size`` locations is scanned by one worker with ``scan``
    (``concurrency`` models at once); its requests go through that worker process's per-host
    rate limiters, shared by every partition the worker runs. Errors are results, as in
    ``scan``, so one bad location never fails the bag. Keyword arguments (``token``,
    ``storage_options``, ``options``, ...) travel inside the tasks, never in their names.

    Raises:
        MissingDependencyError: dask is not installed.
    """
    try:
        import dask.bag
    except ImportError as exc:
        raise MissingDependencyError(
            'scan_bag needs dask: pip install "remotetensors[dask]"', name="dask"
        ) from exc
    items = [os.fspath(location) for location in locations]
    bag: db.Bag = dask.bag.from_sequence(items, partition_size=partition_size)  # type: ignore[no-untyped-call]
    scanned: db.Bag = bag.map_partitions(  # type: ignore[no-untyped-call]
        _scan_partition, concurrency=concurrency, open_model_kwargs=open_model_kwargs
    )
    return scanned


def _scan_partition(
    locations: Iterable[str], concurrency: int | None, open_model_kwargs: dict[str, Any]
) -> list[ScanResult]:
    from ..models.scan import scan

    extra = {} if concurrency is None else {"concurrency": concurrency}
    return list(scan(locations, **extra, **open_model_kwargs))
