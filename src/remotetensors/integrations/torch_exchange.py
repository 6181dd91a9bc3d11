"""The collective step of filling DTensors (see :mod:`.torch_shards`). Every rank runs the same
plan (the same module, the same headers), so their collectives match.

- The ranks agree that every one of them read its part before any rows move (and slab by slab
  while they move), so a rank that failed never leaves the others waiting in an exchange it
  will not join (:func:`all_ranks_read`).
- A row-wise shard (one ``Shard(d)``, ``d > 0``, on one mesh dimension) is made from the
  ``Shard(0)`` rows of every rank of that dimension, exchanged point to point: a slab of rows at
  a time as they are read (:func:`shard_in_slabs`, ``load_into``), or all the rows read at once
  (:func:`exchanged_rows`, the DCP reader). Anything else goes through DTensor's
  ``redistribute``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .torch_shards import chunk, dtensor_class, exchange_dim

if TYPE_CHECKING:
    import torch

    from ..models.model import AsyncModel
    from .torch_plan import Read
    from .torch_shards import Sharding


def process_rank() -> int | None:
    """This process's rank in the default process group; None outside one."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    return int(dist.get_rank())


def sharded_device(module: torch.nn.Module) -> torch.device | None:
    """The device of the mesh of ``module``'s first DTensor (a CUDA mesh: this process's
    device), where the ranks' agreement travels; None when the module holds no DTensor."""
    import torch

    dtensor = dtensor_class()
    if dtensor is None:
        return None
    for tensor in (*module.parameters(), *module.buffers()):
        if isinstance(tensor, dtensor):
            placed: Any = tensor  # a DTensor (mypy narrows to the class object's instances)
            kind = placed.device_mesh.device_type
            if kind == "cuda":
                return torch.device(kind, torch.cuda.current_device())
            return torch.device(kind)
    return None


def all_ranks_read(read_here: bool, device: torch.device) -> bool:
    """Whether every rank of the default process group read its part (``read_here`` is this
    rank's answer): a collective that every rank calls once per load of DTensors, on the
    ``device`` its backend serves (gloo: the CPU). True without a process group."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return read_here
    flag = torch.tensor([1 if read_here else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def placed(sharding: Sharding, local: torch.Tensor) -> Any:
    """The DTensor of ``sharding``'s placements made from ``local``, this rank's box of the
    tensor: as it is when the box is the shard, else with the rows exchanged between the ranks
    (collectives: see :func:`exchanged_rows`, else DTensor's ``redistribute``)."""
    if not sharding.exchanged:
        return dtensor(sharding, local, sharding.placements)
    shard = exchanged_rows(local, sharding)
    if shard is not None:
        return dtensor(sharding, shard, sharding.placements)
    whole = dtensor(sharding, local, sharding.read_placements)
    return whole.redistribute(sharding.mesh, sharding.placements)


def dtensor(sharding: Sharding, local: torch.Tensor, placements: tuple[Any, ...]) -> Any:
    """The DTensor whose local tensor on this rank is ``local``, placed by ``placements`` on
    ``sharding``'s mesh (no collective)."""
    import torch
    from torch.distributed.tensor import DTensor

    return DTensor.from_local(
        local,
        sharding.mesh,
        placements,
        run_check=False,
        shape=torch.Size(sharding.shape),
        stride=sharding.stride,
    )


def exchanged_rows(box: torch.Tensor, sharding: Sharding) -> torch.Tensor | None:
    """This rank's ``Shard(d)`` shard made from ``box``, its ``Shard(0)`` rows, by sending each
    other rank of the mesh dimension its columns of them and receiving its own columns of
    theirs, one pair of peers at a time: a rank holds its box, its shard and one block of
    columns in flight (DTensor's ``redistribute`` on gloo, which has no all-to-all, gathers the
    whole tensor on every rank). None where the placements are not one ``Shard(d)`` of a
    row-major tensor on one mesh dimension, the others ``Replicate()`` (then ``redistribute``).
    """
    import torch
    import torch.distributed as dist

    mesh_dim = exchange_dim(sharding)
    if mesh_dim is None or not (dist.is_available() and dist.is_initialized()):
        return None
    dim = sharding.placements[mesh_dim].dim
    mesh = sharding.mesh
    group = mesh.get_group(mesh_dim)
    ranks = mesh.size(mesh_dim)
    me = mesh.get_local_rank(mesh_dim)
    rows = [chunk(sharding.shape[0], ranks, j) for j in range(ranks)]
    columns = [chunk(sharding.shape[dim], ranks, j) for j in range(ranks)]
    shape = list(sharding.shape)
    shape[dim] = columns[me][1]
    shard = torch.empty(shape, dtype=box.dtype, device=box.device)
    shard.narrow(0, *rows[me]).copy_(box.narrow(dim, *columns[me]))
    for step in range(1, ranks):
        to, source = (me + step) % ranks, (me - step) % ranks
        sent = box.narrow(dim, *columns[to]).contiguous()  # my rows of its columns
        received = shard.narrow(0, *rows[source])  # its rows of my columns: contiguous
        operations = []
        if sent.numel():
            peer = dist.get_global_rank(group, to)
            operations.append(dist.P2POp(dist.isend, sent, peer, group))
        if received.numel():
            peer = dist.get_global_rank(group, source)
            operations.append(dist.P2POp(dist.irecv, received, peer, group))
        for work in dist.batch_isend_irecv(operations) if operations else ():
            work.wait()
    return shard


async def shard_in_slabs(model: AsyncModel, read: Read, slab_bytes: int) -> torch.Tensor:
    """This rank's ``Shard(d)`` shard of ``read``'s tensor (see :func:`.torch_shards.
    exchange_dim`), its rows read and exchanged a slab at a time, so that a rank holds the
    shard, one slab of at most ``slab_bytes`` and one block of it: its rows are never held
    whole beside the shard. Slab ``s`` is rows ``[s * n, (s + 1) * n)`` of every rank's
    ``Shard(0)`` rows (``n`` from the whole tensor's shape, the same on every rank); each rank
    reads its slab (one range), the ranks agree that all did, then each sends every other rank
    its columns of the slab and receives its own columns of theirs.

    Raises:
        RemoteTensorsError: this rank's read failed (its own error), or another rank's did.
    """
    import torch
    import torch.distributed as dist

    from ..errors import RemoteTensorsError
    from ..reading.file import TensorPiece

    sharding = read.sharding
    assert sharding is not None
    mesh_dim = exchange_dim(sharding)
    assert mesh_dim is not None
    dim = sharding.placements[mesh_dim].dim
    mesh, shape = sharding.mesh, sharding.shape
    group = mesh.get_group(mesh_dim)
    ranks, me = mesh.size(mesh_dim), mesh.get_local_rank(mesh_dim)
    rows = [chunk(shape[0], ranks, j) for j in range(ranks)]
    columns = [chunk(shape[dim], ranks, j) for j in range(ranks)]
    row_bytes = read.info.dtype_info.nbytes(math.prod(shape[1:]))
    per_slab = max(1, slab_bytes // max(1, row_bytes))
    local = list(shape)
    local[dim] = columns[me][1]
    shard = torch.empty(local, dtype=read.dtype, device=read.device)
    converted = read.dtype != read.file_dtype

    def taken(rank: int, first: int) -> int:  # rows of ``rank``'s in the slab starting there
        return max(0, min(per_slab, rows[rank][1] - first))

    for first in range(0, max(length for _, length in rows), per_slab):
        count = taken(me, first)
        slab = torch.empty((count, *shape[1:]), dtype=read.file_dtype)
        failure: BaseException | None = None
        if count:
            piece = TensorPiece(
                read.checkpoint_name,
                (rows[me][0] + first) * row_bytes,
                slab.reshape(-1).view(torch.uint8).numpy().data,
            )
            try:
                await model.read_into([piece])
            except (RemoteTensorsError, OSError) as exc:
                failure = exc
        if not all_ranks_read(failure is None, read.device):
            if failure is not None:
                raise failure
            raise RemoteTensorsError(
                f"{read.checkpoint_name}: another rank failed to read its rows of it"
            )
        slab = slab.to(read.device)
        shard.narrow(0, rows[me][0] + first, count).copy_(slab.narrow(dim, *columns[me]))
        for step in range(1, ranks):
            to, source = (me + step) % ranks, (me - step) % ranks
            sent = slab.narrow(dim, *columns[to]).contiguous()
            place = shard.narrow(0, rows[source][0] + first, taken(source, first))
            received = torch.empty_like(place, dtype=read.file_dtype) if converted else place
            operations = []
            if sent.numel():
                peer = dist.get_global_rank(group, to)
                operations.append(dist.P2POp(dist.isend, sent, peer, group))
            if received.numel():
                peer = dist.get_global_rank(group, source)
                operations.append(dist.P2POp(dist.irecv, received, peer, group))
            for work in dist.batch_isend_irecv(operations) if operations else ():
                work.wait()
            if converted:
                place.copy_(received)
        del slab
    return shard
