"""Checkpoints into torch modules, reading only the bytes they need (``pip install torch``).

:func:`load_into` fills a module's parameters and persistent buffers from a checkpoint at any
location we read (one file or shards; the hub, HTTP, fsspec, local): the module's names are
matched to the headers and every name, shape and dtype is checked before any tensor data is
asked for; then only the tensors the module holds are read, from only the shards that hold them,
straight into their final tensors, with at most ``max_in_flight_bytes`` asked for and not yet in
place (see :mod:`.torch_stream`). :func:`iter_tensors` hands tensors out one by one in file order
under the same kind of bound, for code that converts or shards as it goes.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import (
    FrameworkError,
    IncompleteLoadError,
    MissingDependencyError,
    RemoteTensorsError,
)
from ..models.model import load_model
from ..models.sync import run_sync
from ..options import ReadOptions
from .torch_plan import LISTED_NAMES, module_slots, plan_load, restore_ties, tied_groups
from .torch_stream import DEFAULT_MAX_IN_FLIGHT_BYTES, Budget, Filling, Streamer

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Generator, Iterable, Mapping

    import torch

    from ..models.model import AsyncModel
    from ..sources.http.client import HttpOptions
    from .torch_plan import LoadPlan


@dataclass(frozen=True, slots=True)
class LoadReport:
    """What :func:`load_into` did.

    Attributes:
        location: the checkpoint (secrets redacted).
        loaded: module names filled from the checkpoint, in the module's order (every name of
            a tied group; a non-persistent buffer on meta that the checkpoint carried).
        missing: persistent module names the checkpoint lacks (``strict=False``; they keep
            what the module had, on meta for a module built empty).
        unexpected: checkpoint names (under ``prefix``) that no module name asks for.
        converted: loaded names whose dtype differs from the file's (converted on arrival).
        left_on_meta: names still on the meta device afterwards: missing ones, and the
            module's own non-persistent buffers that were on meta and not in the checkpoint.
        bytes_read: bytes received for this load: headers and tensor data, all files.
        seconds: wall time of the whole call, opening included.
    """

    location: str
    loaded: tuple[str, ...]
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]
    converted: tuple[str, ...]
    left_on_meta: tuple[str, ...]
    bytes_read: int
    seconds: float


def load_into(
    module: torch.nn.Module,
    location: str | os.PathLike[str],
    *,
    strict: bool = True,
    prefix: str = "",
    max_in_flight_bytes: int = DEFAULT_MAX_IN_FLIGHT_BYTES,
    device: str | int | torch.device | None = None,
    dtype: torch.dtype | None = None,
    options: ReadOptions | None = None,
    http_options: HttpOptions | None = None,
    storage_options: Mapping[str, Any] | None = None,
    token: str | bool | None = None,
    revision: str | None = None,
) -> LoadReport:
    """Fill ``module``'s parameters and persistent buffers from the checkpoint at ``location``.

    Reads only the tensors the module holds, from only the files that hold them. Every name,
    shape and dtype is checked against the headers before any tensor data is asked for.

    - A parameter or buffer on the meta device is replaced by a real tensor (as
      ``load_state_dict(..., assign=True)`` does; ``requires_grad`` is the module's); a real
      one on the target device, of the target dtype, is filled in place.
    - Tied names (an LM head that is the embedding) are read once and stay one tensor,
      whichever of them the checkpoint holds. A module that has ``tie_weights()`` (transformers
      models) is asked to tie first: one built under ``accelerate.init_empty_weights()`` has
      lost its ties.
    - Non-persistent buffers are the module's own: never missing, never unexpected, and left
      as the module made them (BERT's ``position_ids``), except one on the meta device that the
      checkpoint carries, which is filled from it.
    - dtypes: a tensor ends in the module's dtype (``dtype=``, for floating-point tensors),
      converted from the file's on arrival as ``load_state_dict`` converts (``Tensor.copy_``);
      BF16 and F8 arrive as torch's own dtypes. F4 and F6 have no torch dtype and are refused.
    - Bytes land in the final tensor's storage when the file holds what it holds; otherwise
      (another dtype, another device) through a staging buffer, piece by piece, within the
      bound. A real tensor that is not contiguous is the one exception: it is filled through
      a contiguous copy of its size.

    Args:
        module: the module to fill, built on the meta device or for real.
        location: a file, or a folder, repo or prefix holding one file or shards: any location
            :func:`remotetensors.open_model` opens.
        strict: raise when module names are missing from the checkpoint or checkpoint names
            are not in the module; with False they are reported. Shapes always raise.
        prefix: prepended to each module name to find it in the checkpoint: a lone layer
            fills from a whole model with ``prefix="encoder.layer.0."``; checkpoint names
            outside the prefix are not unexpected.
        max_in_flight_bytes: bytes asked for and not yet in their final tensor, at most. Peak
            memory is the module's tensors, plus this, plus a small constant, even for one
            tensor larger than the bound (it is read in parts, into its place).
        device: where tensors end (``"cuda"``, ``"cuda:1"``, ``1``, a ``torch.device``); every
            other real tensor of the module is moved there too. By default meta tensors go to
            the CPU and real ones stay where they are. A CUDA device is filled through a pinned
            staging buffer within the bound.
        dtype: the dtype floating-point tensors end in; by default the module's own.
        options: reading knobs (by default, the configs beside the weights are not read).
        http_options, storage_options, token, revision: as for
            :func:`remotetensors.open_model`.

    Returns:
        A :class:`LoadReport`.

    Raises:
        CheckpointMismatchError: a shape differs, or (``strict``) names are missing or
            unexpected; raised before any data request, every problem listed.
        UnsupportedDtypeError: a checkpoint dtype with no torch dtype, named; before any data.
        FrameworkError: an unusable ``device`` (CUDA asked for and not available, meta).
        IncompleteLoadError: reading failed part way; it names what was loaded and what was
            not, no name half-filled is claimed as loaded, and the cause is chained.
        MissingDependencyError: torch is not installed.
        NotFoundError, PermissionDeniedError, HeaderError, ...: opening the checkpoint failed.
        ValueError: ``max_in_flight_bytes`` below 64 KiB.
    """
    return run_sync(
        load_into_async(
            module,
            location,
            strict=strict,
            prefix=prefix,
            max_in_flight_bytes=max_in_flight_bytes,
            device=device,
            dtype=dtype,
            options=options,
            http_options=http_options,
            storage_options=storage_options,
            token=token,
            revision=revision,
        )
    )


async def load_into_async(
    module: torch.nn.Module,
    location: str | os.PathLike[str],
    *,
    strict: bool = True,
    prefix: str = "",
    max_in_flight_bytes: int = DEFAULT_MAX_IN_FLIGHT_BYTES,
    device: str | int | torch.device | None = None,
    dtype: torch.dtype | None = None,
    options: ReadOptions | None = None,
    http_options: HttpOptions | None = None,
    storage_options: Mapping[str, Any] | None = None,
    token: str | bool | None = None,
    revision: str | None = None,
) -> LoadReport:
    """:func:`load_into` for code that runs an event loop (same arguments, same result)."""
    return await load_checkpoint(
        module,
        location,
        strict=strict,
        prefix=prefix,
        max_in_flight_bytes=max_in_flight_bytes,
        device=device,
        meta_device=None,
        dtype=dtype,
        open_kwargs={
            "options": options or ReadOptions(read_configs=False),
            "http_options": http_options,
            "storage_options": storage_options,
            "token": token,
            "revision": revision,
        },
    )


async def load_checkpoint(
    module: torch.nn.Module,
    location: str | os.PathLike[str],
    *,
    strict: bool,
    prefix: str,
    max_in_flight_bytes: int,
    device: str | int | torch.device | None,
    meta_device: str | int | torch.device | None,
    dtype: torch.dtype | None,
    open_kwargs: dict[str, Any],
) -> LoadReport:
    """:func:`load_into_async` with the options of opening gathered in ``open_kwargs`` (the
    keyword arguments of :func:`~remotetensors.models.model.load_model`), and
    ``meta_device``: where meta tensors go when ``device`` is None (the drop-in's ``device=``
    means that and no more)."""
    began = time.perf_counter()
    torch = _torch()
    where = torch_device(device)
    budget = Budget.of(max_in_flight_bytes)
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
    restore_ties(module)
    model = await load_model(location, **open_kwargs)
    try:
        plan = plan_load(
            module,
            model.tensors,
            location=model.location,
            prefix=prefix,
            strict=strict,
            dtype=dtype,
            device=where,
            meta_device=torch_device(meta_device),
        )
        loaded: set[str] = set()

        def done(filling: Filling) -> None:
            _install(filling)
            loaded.update(slot.name for slot in filling.read.slots)

        fillings = [Filling(read) for read in plan.reads]
        try:
            await Streamer(model, budget, done).run(fillings)
        except (RemoteTensorsError, OSError) as exc:
            report = _report(model, plan, module, loaded, began)
            raise _incomplete(report, plan, exc) from exc
        if where is not None:
            _move_the_rest(module, where, loaded)
        return _report(model, plan, module, loaded, began)
    finally:
        await model.aclose()


def _install(filling: Filling) -> None:
    """Put a finished tensor in the module under every name of its group (one Parameter for
    all of them, so a tie stays a tie); a tensor filled in place needs nothing, unless it was
    filled through a contiguous copy."""
    import torch

    read = filling.read
    tensor = filling.tensor
    if read.in_place:
        if not read.target.is_contiguous():
            read.target.detach().copy_(tensor)
        return
    parameter: torch.nn.Parameter | None = None
    for slot in read.slots:
        if slot.is_parameter:
            if parameter is None:
                parameter = torch.nn.Parameter(tensor, requires_grad=slot.tensor.requires_grad)
            setattr(slot.owner, slot.attribute, parameter)
        else:
            slot.owner._buffers[slot.attribute] = tensor  # keeps its persistence as it was


def _move_the_rest(module: torch.nn.Module, device: torch.device, loaded: set[str]) -> None:
    """Move the module's real tensors that the checkpoint did not fill to ``device`` (as
    ``module.to(device)`` would), keeping ties: ``device=`` means the whole module ends there."""
    import torch

    for group in tied_groups(module_slots(module)):
        tensor = group[0].tensor
        if tensor.is_meta or tensor.device == device or group[0].name in loaded:
            continue
        moved = tensor.detach().to(device)
        parameter: torch.nn.Parameter | None = None
        for slot in group:
            if slot.is_parameter:
                if parameter is None:
                    parameter = torch.nn.Parameter(moved, requires_grad=tensor.requires_grad)
                setattr(slot.owner, slot.attribute, parameter)
            else:
                slot.owner._buffers[slot.attribute] = moved


def _report(
    model: AsyncModel, plan: LoadPlan, module: torch.nn.Module, loaded: set[str], began: float
) -> LoadReport:
    meta = {slot.name for slot in module_slots(module) if slot.tensor.is_meta}
    return LoadReport(
        location=model.location,
        loaded=tuple(name for name in plan.names if name in loaded),
        missing=plan.missing,
        unexpected=plan.unexpected,
        converted=tuple(name for name in plan.converted if name in loaded),
        left_on_meta=tuple(name for name in plan.names if name in meta),
        bytes_read=model.traffic.bytes,
        seconds=time.perf_counter() - began,
    )


def _incomplete(report: LoadReport, plan: LoadPlan, cause: BaseException) -> IncompleteLoadError:
    wanted = [slot.name for read in plan.reads for slot in read.slots]
    done = set(report.loaded)
    not_loaded = tuple(name for name in plan.names if name in set(wanted) - done)
    shown = ", ".join(not_loaded[:LISTED_NAMES])
    if len(not_loaded) > LISTED_NAMES:
        shown += f", ... ({len(not_loaded)} in all)"
    return IncompleteLoadError(
        f"{report.location}: reading stopped with {len(report.loaded)} of {len(wanted)} names "
        f"loaded ({cause}); not loaded: {shown}. The names not loaded keep what they had (a "
        "tensor filled in place may hold part of the new bytes); load again to finish",
        location=report.location,
        loaded=report.loaded,
        not_loaded=not_loaded,
        report=report,
    )


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


def _groups(infos: list[Any], batch_bytes: int) -> list[list[Any]]:
    """Consecutive tensors in batches of at most ``batch_bytes`` (a larger tensor alone)."""
    out: list[list[Any]] = []
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
    groups: list[list[Any]],
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


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise MissingDependencyError(
            'loading into torch modules needs torch: pip install "remotetensors[torch]"',
            name="torch",
        ) from exc
    return torch


def torch_device(device: str | int | torch.device | None) -> torch.device | None:
    """``device=`` as a torch device (an int is a CUDA device's index, as in safetensors).

    Raises:
        FrameworkError: not a device torch knows, the meta device, or CUDA without CUDA.
    """
    if device is None:
        return None
    torch = _torch()
    try:
        found = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise FrameworkError(f"device {device!r} is not a torch device: {exc}") from None
    if found.type == "meta":
        raise FrameworkError("device='meta' holds no data; load to 'cpu' or an accelerator")
    if found.type == "cuda" and not torch.cuda.is_available():
        raise FrameworkError(
            f"device {device!r} asked for, but this torch sees no CUDA device "
            f"(torch {torch.__version__})"
        )
    return found  # type: ignore[no-any-return]
