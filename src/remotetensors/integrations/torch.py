"""Checkpoints into torch modules, reading only the bytes they need (``pip install torch``).

:func:`load_into` fills a module's parameters and persistent buffers from a checkpoint at any
location we read (one file or shards; the hub, HTTP, fsspec, local): the module's names are
matched to the headers and every name, shape and dtype is checked before any tensor data is
asked for; then only the tensors the module holds are read, from only the shards that hold them,
straight into their final tensors, with at most ``max_in_flight_bytes`` asked for and not yet in
place (see :mod:`.torch_stream`). :mod:`.torch_iter` hands tensors out one by one in file
order under the same kind of bound, for code that converts or shards as it goes.
"""

from __future__ import annotations

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
from .torch_exchange import (
    all_ranks_read,
    dtensor,
    placed,
    process_rank,
    sharded_device,
    shards_in_slabs,
)
from .torch_plan import LISTED_NAMES, module_slots, plan_load, restore_ties, tied_groups
from .torch_shards import exchange_dim
from .torch_stream import DEFAULT_MAX_IN_FLIGHT_BYTES, Filling, StagingLanes, Streamer

if TYPE_CHECKING:
    from collections.abc import Mapping

    import torch

    from ..models.model import AsyncModel
    from ..sources.http.client import HttpOptions
    from .torch_plan import LoadPlan, Read, Slot
    from .torch_shards import Sharding


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
        bytes_read: bytes received for this load: headers and tensor data, all files (in a
            distributed job: by this rank).
        seconds: wall time of the whole call, opening included.
        rank: this process's rank in the default ``torch.distributed`` process group; None
            outside one.
        sharded: loaded names that are DTensors, filled with this rank's shard.
        tensor_bytes: bytes of tensor data this rank asked for: whole tensors, and for
            DTensors the box it read (its shard's size, or the rows it exchanged for it).
    """

    location: str
    loaded: tuple[str, ...]
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]
    converted: tuple[str, ...]
    left_on_meta: tuple[str, ...]
    bytes_read: int
    seconds: float
    rank: int | None = None
    sharded: tuple[str, ...] = ()
    tensor_bytes: int = 0


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
            the CPU (in a module of DTensors: their mesh's device) and real ones stay where
            they are. A CUDA device is filled through a pinned staging buffer within the bound.
            DTensors always end on their mesh's device, each rank holding its shard.
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
    staging = StagingLanes.of(max_in_flight_bytes)
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
    restore_ties(module)
    # A module of DTensors loads with the other ranks: every rank says whether it read its
    # part before any rows are exchanged, also when it failed before reading (see
    # .torch_exchange), so that no rank waits for one that has given up.
    mesh_device = sharded_device(module)
    if meta_device is None:
        meta_device = mesh_device  # the module's plain meta tensors go where its shards go
    try:
        model = await load_model(location, **open_kwargs)
    except Exception:
        if mesh_device is not None:
            all_ranks_read(False, mesh_device)
        raise
    try:
        return await _load(
            module, model, staging, began, strict, prefix, dtype, where, meta_device, mesh_device
        )
    finally:
        await model.aclose()


async def _load(
    module: torch.nn.Module,
    model: AsyncModel,
    staging: StagingLanes,
    began: float,
    strict: bool,
    prefix: str,
    dtype: torch.dtype | None,
    where: torch.device | None,
    meta_device: str | int | torch.device | None,
    mesh_device: torch.device | None,
) -> LoadReport:
    """Plan, read and install, once the checkpoint is open (see :func:`load_checkpoint`)."""
    loaded: set[str] = set()
    exchanged: set[int] = set()  # fillings whose rows the ranks exchange once all are read

    def done(filling: Filling) -> None:
        sharding = filling.read.sharding
        if sharding is not None and sharding.exchanged:
            exchanged.add(id(filling))
            return
        _install(filling)
        loaded.update(slot.name for slot in filling.read.slots)

    plan: LoadPlan | None = None
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
        # Row-wise shards are read slab by slab as their rows are exchanged, after the rest.
        fillings = [Filling(read) for read in plan.reads if not _in_slabs(read)]
        await Streamer(model, staging, done).run(fillings)
    except Exception as exc:
        if mesh_device is not None:
            all_ranks_read(False, mesh_device)  # so the other ranks stop too
        if plan is None or not isinstance(exc, (RemoteTensorsError, OSError)):
            raise
        raise _incomplete(_report(model, plan, module, loaded, began), plan, exc) from exc
    if mesh_device is not None and not all_ranks_read(True, mesh_device):
        cause = RemoteTensorsError("another rank of the process group failed to load its part")
        raise _incomplete(_report(model, plan, module, loaded, began), plan, cause)
    slab_bytes = staging.batch_bytes * staging.lanes // 2  # slabs and a block of one: the bound
    row_wise = [read for read in plan.reads if _in_slabs(read)]  # in plan order, on every rank
    try:
        shards = await shards_in_slabs(model, row_wise, slab_bytes)
    except (RemoteTensorsError, OSError) as exc:
        raise _incomplete(_report(model, plan, module, loaded, began), plan, exc) from exc
    for read, shard in zip(row_wise, shards, strict=True):
        sharding = _sharding(read)
        _put_shard(read, dtensor(sharding, shard, sharding.placements))
        loaded.update(slot.name for slot in read.slots)
    for filling in fillings:  # in plan order, the same on every rank
        if id(filling) in exchanged:
            _install(filling)
            loaded.update(slot.name for slot in filling.read.slots)
    if where is not None:
        _move_the_rest(module, where, loaded)
    return _report(model, plan, module, loaded, began)


def _install(filling: Filling) -> None:
    """Put a finished tensor in the module; one filled in place needs nothing, unless it was
    filled through a contiguous copy. A DTensor's box becomes a DTensor of the module's
    placements (its rows exchanged between the ranks when the box is not the shard)."""
    read = filling.read
    if read.sharding is not None:
        if read.landing() is None:
            _put_shard(read, placed(read.sharding, filling.tensor))
        return
    if not read.in_place:
        _put(read.slots, filling.tensor, requires_grad=read.target.requires_grad)
    elif not read.target.is_contiguous():
        read.target.detach().copy_(filling.tensor)


def _in_slabs(read: Read) -> bool:
    """Whether ``read`` is a row-wise shard whose rows are read and exchanged slab by slab."""
    return read.sharding is not None and exchange_dim(read.sharding) is not None


def _sharding(read: Read) -> Sharding:
    assert read.sharding is not None
    return read.sharding


def _put_shard(read: Read, tensor: Any) -> None:
    """Put a DTensor of the module's placements in the module: into its own DTensor's local
    shard when it is filled in place, else as a new parameter or buffer."""
    if read.in_place:
        target: Any = read.target  # a DTensor
        target.to_local().detach().copy_(tensor.to_local())
    else:
        _put(read.slots, tensor, requires_grad=read.target.requires_grad)


def _move_the_rest(module: torch.nn.Module, device: torch.device, loaded: set[str]) -> None:
    """Move the module's real tensors that the checkpoint did not fill to ``device`` (as
    ``module.to(device)`` would), keeping ties: ``device=`` means the whole module ends there."""
    for group in tied_groups(module_slots(module)):
        tensor = group[0].tensor
        if not (tensor.is_meta or tensor.device == device or group[0].name in loaded):
            _put(group, tensor.detach().to(device), requires_grad=tensor.requires_grad)


def _put(slots: tuple[Slot, ...], tensor: torch.Tensor, *, requires_grad: bool) -> None:
    """Put ``tensor`` under every name of a group: one Parameter for all of its parameter
    names (so a tie stays a tie), the tensor itself for buffer names (their persistence as
    it was)."""
    import torch

    parameter: torch.nn.Parameter | None = None
    for slot in slots:
        if slot.is_parameter:
            if parameter is None:
                parameter = torch.nn.Parameter(tensor, requires_grad=requires_grad)
            setattr(slot.owner, slot.attribute, parameter)
        else:
            slot.owner._buffers[slot.attribute] = tensor


def _report(
    model: AsyncModel, plan: LoadPlan, module: torch.nn.Module, loaded: set[str], began: float
) -> LoadReport:
    meta = {slot.name for slot in module_slots(module) if slot.tensor.is_meta}
    done = [read for read in plan.reads if read.slots[0].name in loaded]
    return LoadReport(
        location=model.location,
        loaded=tuple(name for name in plan.names if name in loaded),
        missing=plan.missing,
        unexpected=plan.unexpected,
        converted=tuple(name for name in plan.converted if name in loaded),
        left_on_meta=tuple(name for name in plan.names if name in meta),
        bytes_read=model.traffic.bytes,
        seconds=time.perf_counter() - began,
        rank=process_rank(),
        sharded=tuple(
            slot.name for read in done if read.sharding is not None for slot in read.slots
        ),
        tensor_bytes=sum(read.info.nbytes for read in done),
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
