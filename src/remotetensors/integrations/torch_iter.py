"""Tensors of a checkpoint one by one, in file order, fetched ahead within a bound.

:func:`iter_tensors` is for code that converts or shards as it goes: it yields ``(name,
tensor)`` while the next tensors are on the wire, holding at most ``max_in_flight_bytes`` of
tensors fetched and not yet handed out. A producer on the event loop fetches consecutive
tensors in groups (one coalesced plan each) once the byte budget has room for them; the
consumer gives a tensor's bytes back to the budget when it asks for the next one.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

from ..models.model import load_model
from ..models.sync import run_sync
from ..options import ReadOptions
from .torch_stream import DEFAULT_MAX_IN_FLIGHT_BYTES, Budget

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
    offset), fetching ahead while the caller works, with at most ``max_in_flight_bytes`` of
    tensors fetched and not yet yielded (a tensor larger than that is fetched alone).

    Args:
        location: any location :func:`remotetensors.open_model` opens.
        names: which tensors: a list of names, or one name or glob pattern; all when None.
            Yielded in file order whatever the order given.
        framework: ``"pt"`` (torch tensors; BF16 and F8 as torch's dtypes) or ``"numpy"``.
        max_in_flight_bytes: bytes fetched and not yet handed out, at most.
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
    budget = Budget.of(max_in_flight_bytes)  # checked before anything is opened
    limit = budget.batch_bytes * budget.lanes
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
        budget_left = _ByteBudget(limit)
        queue: asyncio.Queue[tuple[str, Any, int] | BaseException | None] = asyncio.Queue()
        producer = asyncio.ensure_future(
            _produce(model, _groups(infos, max(1, limit // 4)), budget_left, queue)
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
                budget_left.release(held)  # handed out: no longer ours to count
        finally:
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)
    finally:
        await model.aclose()


def _groups(infos: list[TensorInfo], batch_bytes: int) -> list[list[TensorInfo]]:
    """Consecutive tensors in batches of at most ``batch_bytes`` (a larger tensor alone)."""
    out: list[list[TensorInfo]] = []
    used = 0
    for info in infos:
        if not out or used + info.nbytes > batch_bytes:
            out.append([])
            used = 0
        out[-1].append(info)
        used += info.nbytes
    return out


async def _produce(
    model: AsyncModel,
    groups: list[list[TensorInfo]],
    budget: _ByteBudget,
    queue: asyncio.Queue[tuple[str, Any, int] | BaseException | None],
) -> None:
    """Fetch the groups in order, each once the budget has room for it; queue the tensors,
    then None (or the error that stopped it)."""
    try:
        for group in groups:
            held = await budget.acquire(sum(info.nbytes for info in group))
            arrays = await model.get_tensors([info.name for info in group])
            for i, info in enumerate(group):
                # The group's hold is given back with its last tensor.
                queue.put_nowait((info.name, arrays[info.name], held if i == len(group) - 1 else 0))
        queue.put_nowait(None)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        queue.put_nowait(exc)


class _ByteBudget:
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
