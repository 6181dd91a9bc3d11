"""Tensors of a checkpoint one by one, in file order, fetched ahead within a bound.

:func:`iter_tensors` is for code that converts or shards as it goes: it yields ``(name,
tensor)`` while the next tensors are on the wire, holding at most ``max_in_flight_bytes`` of
tensors fetched and not yet handed out. A producer on the event loop fetches consecutive
tensors in groups (one coalesced plan each) once the bytes held have room for them; the
consumer gives a tensor's bytes back to the bound when it asks for the next one.

The bound counts what the library holds, not the bytes in the file (see :class:`_Cost`):
the stored bytes read, the buffer a coalesced request is read into before its bytes are
copied out, the array handed out when it is not the stored bytes themselves (GGUF's quantized
types come out as float32, up to 20 times their blocks; F4 and F6 unpacked to a byte per
element) and what decoding one tensor takes while it runs. Once a group is decoded, each tensor
keeps only its array's bytes until it is handed out.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..models.model import load_model
from ..models.sync import run_sync
from ..options import ReadOptions
from ..reading.frameworks import check_framework
from ..reading.gguf import is_quantized
from .torch_stream import DEFAULT_MAX_IN_FLIGHT_BYTES, StagingLanes

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Generator, Iterable, Mapping

    from ..index import TensorInfo
    from ..models.model import AsyncModel
    from ..sources.http.client import HttpOptions


def iter_tensors(
    location: str | os.PathLike[str],
    names: str | Iterable[str] | None = None,
    *,
    framework: str = "pt",
    max_in_flight_bytes: int = DEFAULT_MAX_IN_FLIGHT_BYTES,
    options: ReadOptions | None = None,
    http_options: HttpOptions | None = None,
    storage_options: Mapping[str, Any] | None = None,
    token: str | bool | None = None,
    revision: str | None = None,
) -> Generator[tuple[str, Any], None, None]:
    """Yield ``(name, tensor)`` for the checkpoint's tensors in file order (shard by shard, by
    offset), fetching ahead while the caller works, with at most ``max_in_flight_bytes`` held
    by the library at once: bytes read, buffers they pass through, arrays decoded from them
    (dequantized, unpacked) and not yet yielded. A tensor that needs more than that alone is
    read alone, once nothing else is held; the tensor last yielded counts until the next one
    is asked for.

    Args:
        location: any location :func:`remotetensors.open_model` opens.
        names: which tensors: a list of names, or one name or glob pattern; all when None.
            Yielded in file order whatever the order given.
        framework: ``"pt"`` (torch tensors; BF16 and F8 as torch's dtypes) or ``"numpy"``.
        max_in_flight_bytes: bytes the library holds for tensors not yet handed out, at most
            (see above).
        options, http_options, storage_options, token, revision: as for
            :func:`remotetensors.open_model`.

    Closing the iterator early (``break``) cancels what is in flight and closes the files.

    Raises:
        TensorNotFoundError: a name the checkpoint does not hold (before any data request).
        FrameworkError: an unknown framework, or ``"pt"`` without torch.
        UnsupportedDtypeError: a dtype the framework cannot hold (F4, F6 in torch), on reaching
            it.
        ValueError: ``max_in_flight_bytes`` below 64 KiB.
    """
    tensors = iter_tensors_async(
        location,
        names,
        framework=framework,
        max_in_flight_bytes=max_in_flight_bytes,
        options=options,
        http_options=http_options,
        storage_options=storage_options,
        token=token,
        revision=revision,
    )
    try:
        while True:
            item = run_sync(_next(tensors))
            if item is None:
                return
            yield item
    finally:
        run_sync(tensors.aclose())


async def _next(tensors: AsyncGenerator[tuple[str, Any], None]) -> tuple[str, Any] | None:
    """The next item of ``tensors``, or None at its end (a coroutine for the bridge)."""
    try:
        return await tensors.__anext__()
    except StopAsyncIteration:
        return None


async def iter_tensors_async(
    location: str | os.PathLike[str],
    names: str | Iterable[str] | None = None,
    *,
    framework: str = "pt",
    max_in_flight_bytes: int = DEFAULT_MAX_IN_FLIGHT_BYTES,
    options: ReadOptions | None = None,
    http_options: HttpOptions | None = None,
    storage_options: Mapping[str, Any] | None = None,
    token: str | bool | None = None,
    revision: str | None = None,
) -> AsyncGenerator[tuple[str, Any], None]:
    """:func:`iter_tensors` for code that runs an event loop: ``async for name, t in ...``."""
    staging = StagingLanes.of(max_in_flight_bytes)  # checked before anything is opened
    limit = staging.batch_bytes * staging.lanes
    model = await load_model(
        location,
        options=options or ReadOptions(read_configs=False),
        http_options=http_options,
        storage_options=storage_options,
        token=token,
        revision=revision,
        framework=framework,
    )
    try:
        wanted = model.keys() if names is None else model.select(names)
        files = {name: i for i, name in enumerate(model.files)}
        infos = sorted(
            (model.tensors[name] for name in wanted),
            key=lambda info: (files.get(info.file or "", 0), info.start),
        )
        holding = _BytesHeld(limit)
        queue: asyncio.Queue[tuple[str, Any, int] | BaseException | None] = asyncio.Queue()
        kind = check_framework(framework)
        costs = [_Cost.of(info, kind) for info in infos]
        producer = asyncio.ensure_future(
            _produce(model, _groups(costs, max(1, limit // 4)), holding, queue)
        )
        try:
            while True:
                got = await queue.get()
                if got is None:
                    break
                if isinstance(got, BaseException):
                    raise got
                name, tensor, held = got
                yield name, tensor
                holding.release(held)  # handed out: no longer ours to count
        finally:
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)
    finally:
        await model.aclose()


PACKED_DECODING_BYTES_PER_ELEMENT = 8
"""Bytes per element that unpacking F4 or F6 (and, for torch's F4, packing it again) holds
while it runs, the result included: unpacking F6 peaks at 7.75 (groups widened to 32 bits)."""

DEQUANTIZING_FACTOR = 3
"""What dequantizing one GGUF tensor holds while it runs, in float32 results: the ``gguf``
package's dequantizers peak at 2.3 to 2.7 times their result, the result included."""


@dataclass(frozen=True, slots=True)
class _Cost:
    """What reading one tensor holds, in bytes.

    Attributes:
        info: the tensor.
        stored: its bytes in the file, read into a buffer of their own.
        produced: the array handed out when it is not that buffer (dequantized or unpacked,
            made while the buffer is still held); 0 when it is the buffer itself.
        decoding: the most that making ``produced`` holds at once, the result included.
    """

    info: TensorInfo
    stored: int
    produced: int
    decoding: int

    @classmethod
    def of(cls, info: TensorInfo, framework: str) -> _Cost:
        """The cost of ``info`` handed out to ``framework`` (``"numpy"`` or ``"pt"``)."""
        stored = info.nbytes
        elements = info.num_elements
        if is_quantized(info.dtype):  # float32, whatever the framework
            return cls(info, stored, 4 * elements, DEQUANTIZING_FACTOR * 4 * elements)
        if info.dtype_info.packed:
            # numpy gets a byte per element; torch's F4 the packed bytes again, made anew.
            produced = elements if framework == "numpy" else stored
            return cls(info, stored, produced, PACKED_DECODING_BYTES_PER_ELEMENT * elements)
        return cls(info, stored, 0, 0)

    @property
    def kept(self) -> int:
        """Bytes held from the end of its group's decoding until it is handed out."""
        return self.produced or self.stored


def _group_cost(group: list[_Cost]) -> int:
    """What reading and decoding ``group`` holds at its peak: every tensor's stored bytes and
    array, and the larger of the buffers its coalesced requests pass through (a request that
    serves several tensors is read into a buffer of its length first: at most their span in
    each file) and the decoding of one tensor (tensors are decoded one after another, after
    the last byte is in)."""
    spans: dict[str | None, tuple[int, int, int]] = {}
    for cost in group:
        info = cost.info
        first, last, count = spans.get(info.file, (info.start, info.end, 0))
        spans[info.file] = (min(first, info.start), max(last, info.end), count + 1)
    through = sum(last - first for first, last, count in spans.values() if count > 1)
    decoding = max(cost.decoding - cost.produced for cost in group)
    return sum(c.stored + c.produced for c in group) + max(through, decoding)


def _groups(costs: list[_Cost], batch_bytes: int) -> list[list[_Cost]]:
    """Consecutive tensors in groups that hold at most ``batch_bytes`` at their peak (see
    :func:`_group_cost`); a tensor that holds more alone is a group of its own."""
    out: list[list[_Cost]] = []
    for cost in costs:
        if out and _group_cost([*out[-1], cost]) <= batch_bytes:
            out[-1].append(cost)
        else:
            out.append([cost])
    return out


async def _produce(
    model: AsyncModel,
    groups: list[list[_Cost]],
    holding: _BytesHeld,
    queue: asyncio.Queue[tuple[str, Any, int] | BaseException | None],
) -> None:
    """Fetch the groups in order, each once the bytes held have room for its peak; queue each
    tensor with the bytes it keeps until handed out, then None (or the error that stopped
    it)."""
    try:
        for group in groups:
            peak = _group_cost(group)
            held = await holding.acquire(peak)
            arrays = await model.get_tensors([cost.info.name for cost in group])
            # Decoded: the stored bytes of decoded tensors and the passing buffers are gone;
            # each tensor keeps its array's bytes (of a group held at the limit, its share).
            kept = [cost.kept * held // peak for cost in group]
            holding.release(held - sum(kept))
            for cost, keep in zip(group, kept, strict=True):
                queue.put_nowait((cost.info.name, arrays[cost.info.name], keep))
        queue.put_nowait(None)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        queue.put_nowait(exc)


class _BytesHeld:
    """Bytes held at once, at most ``limit``; a request larger than the limit takes all of it
    (it waits until nothing else is held). First come, first served."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._held = 0
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []

    async def acquire(self, nbytes: int) -> int:
        """Wait until ``nbytes`` (at most the limit) fit; returns what is held, to release."""
        wanted = min(nbytes, self._limit)
        if not self._waiting and self._held + wanted <= self._limit:
            self._held += wanted
            return wanted
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((wanted, future))
        await future
        return wanted

    def release(self, nbytes: int) -> None:
        self._held -= nbytes
        while self._waiting and self._held + self._waiting[0][0] <= self._limit:
            wanted, future = self._waiting.pop(0)
            self._held += wanted
            if not future.done():
                future.set_result(None)
