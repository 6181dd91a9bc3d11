"""The collective step of filling DTensors (see :mod:`.torch_shards`). Every rank runs the same
plan (the same module, the same headers), so their collectives match.

- The ranks agree that every one of them read its part before any rows move (and slab by slab
  while they move), so a rank that failed never leaves the others waiting in an exchange it
  will not join (:func:`all_ranks_read`).
- A row-wise shard (one ``Shard(d)``, ``d > 0``, on one mesh dimension) is made from the
  ``Shard(0)`` rows of every rank of that dimension, exchanged point to point: a slab of rows at
  a time as they are read (:func:`shards_in_slabs`, ``load_into``), or all the rows read at once
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
    rank's answer): a collective that every rank calls at the same steps of a load of DTensors
    (once the tensors are streamed, then once a round of row-wise slabs), on the ``device`` its
    backend serves (gloo: the CPU). True without a process group."""
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
    import torch.distributed as dist

    if exchange_dim(sharding) is None or not (dist.is_available() and dist.is_initialized()):
        return None
    whole = _RowWise(sharding, box.dtype, box.dtype, box.device, slab_bytes=None)
    whole.exchange(box, 0)
    return whole.shard


class _RowWise:
    """One row-wise shard being made (see :func:`shards_in_slabs`): where its rows and columns
    are on each rank of its mesh dimension, and the shard the slabs fill."""

    def __init__(
        self,
        sharding: Sharding,
        dtype: torch.dtype,
        stored: torch.dtype,
        device: torch.device,
        *,
        slab_bytes: int | None,
    ) -> None:
        """``dtype``: the shard's; ``stored``: the rows' as read (converted on arrival);
        ``slab_bytes``: the most bytes of rows a slab holds (None: all of them at once)."""
        import torch

        mesh_dim = exchange_dim(sharding)
        assert mesh_dim is not None
        self.dim = sharding.placements[mesh_dim].dim
        shape, mesh = sharding.shape, sharding.mesh
        self.shape, self.dtype, self.stored, self.device = shape, dtype, stored, device
        self.group = mesh.get_group(mesh_dim)
        self.ranks, self.me = mesh.size(mesh_dim), mesh.get_local_rank(mesh_dim)
        self.rows = [chunk(shape[0], self.ranks, j) for j in range(self.ranks)]
        self.columns = [chunk(shape[self.dim], self.ranks, j) for j in range(self.ranks)]
        self.row_bytes = stored.itemsize * math.prod(shape[1:])
        # Rows a slab takes of each rank's rows: the same on every rank (the whole shape's).
        most = max(length for _, length in self.rows)
        self.per_slab = most or 1
        if slab_bytes is not None:
            self.per_slab = max(1, slab_bytes // max(1, self.row_bytes))
        local = list(shape)
        local[self.dim] = self.columns[self.me][1]
        self.shard = torch.empty(local, dtype=dtype, device=device)

    def slabs(self) -> list[tuple[int, int]]:
        """(first row, at most bytes) of each slab, in order: rows ``[first, first + n)`` of
        every rank's rows."""
        most = max(length for _, length in self.rows)
        return [
            (first, min(self.per_slab, most - first) * self.row_bytes)
            for first in range(0, most, self.per_slab)
        ]

    def taken(self, rank: int, first: int) -> int:
        """How many of ``rank``'s rows the slab starting at ``first`` holds."""
        return max(0, min(self.per_slab, self.rows[rank][1] - first))

    def exchange(self, slab: torch.Tensor, first: int) -> None:
        """Put this rank's columns of its slab in the shard, send every other rank its
        columns, and receive this rank's columns of theirs (pairs of peers, point to point)."""
        import torch
        import torch.distributed as dist

        dim, rows, columns, me = self.dim, self.rows, self.columns, self.me
        converted = self.dtype != self.stored
        slab = slab.to(self.device)
        count = self.taken(me, first)
        self.shard.narrow(0, rows[me][0] + first, count).copy_(slab.narrow(dim, *columns[me]))
        for step in range(1, self.ranks):
            to, source = (me + step) % self.ranks, (me - step) % self.ranks
            sent = slab.narrow(dim, *columns[to]).contiguous()
            place = self.shard.narrow(0, rows[source][0] + first, self.taken(source, first))
            received = torch.empty_like(place, dtype=self.stored) if converted else place
            operations = []
            if sent.numel():
                peer = dist.get_global_rank(self.group, to)
                operations.append(dist.P2POp(dist.isend, sent, peer, self.group))
            if received.numel():
                peer = dist.get_global_rank(self.group, source)
                operations.append(dist.P2POp(dist.irecv, received, peer, self.group))
            for work in dist.batch_isend_irecv(operations) if operations else ():
                work.wait()
            if converted:
                place.copy_(received)


async def shards_in_slabs(
    model: AsyncModel, reads: list[Read], slab_bytes: int
) -> list[torch.Tensor]:
    """The ``Shard(d)`` shards of row-wise ``reads`` (see :func:`.torch_shards.exchange_dim`),
    in order, their rows read and exchanged a slab at a time: a rank holds the shards, the
    slabs of one round (at most ``slab_bytes``) and a block of one of them, never its rows
    whole beside its shards. Slab ``(first, n)`` of a tensor is rows ``[first, first + n)`` of
    every rank's ``Shard(0)`` rows (``n`` from the whole tensor's shape, the same on every rank).
    Slabs are taken into rounds in order, as many as ``slab_bytes`` holds: each rank reads its
    parts of a round's slabs together (ranges read concurrently), the ranks agree that all did,
    then exchange slab by slab.

    Raises:
        RemoteTensorsError: this rank's read failed (its own error), or another rank's did.
    """
    import torch

    from ..errors import RemoteTensorsError
    from ..reading.file import TensorPiece

    if not reads:
        return []
    made = []
    for read in reads:
        assert read.sharding is not None
        made.append(
            _RowWise(read.sharding, read.dtype, read.file_dtype, read.device, slab_bytes=slab_bytes)
        )
    rounds: list[list[tuple[str, _RowWise, int]]] = [[]]
    held = 0
    for read, one in zip(reads, made, strict=True):
        for first, nbytes in one.slabs():
            if rounds[-1] and held + nbytes > slab_bytes:
                rounds.append([])
                held = 0
            rounds[-1].append((read.checkpoint_name, one, first))
            held += nbytes
    device = reads[0].device
    for slabs in rounds:
        tensors, pieces = [], []
        for name, one, first in slabs:
            count = one.taken(one.me, first)
            slab = torch.empty((count, *one.shape[1:]), dtype=one.stored)
            tensors.append(slab)
            if count:
                offset = (one.rows[one.me][0] + first) * one.row_bytes
                data = slab.reshape(-1).view(torch.uint8).numpy().data
                pieces.append(TensorPiece(name, offset, data))
        failure: BaseException | None = None
        try:
            if pieces:
                await model.read_into(pieces)
        except (RemoteTensorsError, OSError) as exc:
            failure = exc
        if not all_ranks_read(failure is None, device):
            if failure is not None:
                raise failure
            raise RemoteTensorsError("another rank failed to read its rows of a row-wise tensor")
        for (_, one, first), slab in zip(slabs, tensors, strict=True):
            one.exchange(slab, first)
        del tensors
    return [one.shard for one in made]
