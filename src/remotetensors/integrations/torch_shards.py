"""Which bytes of a checkpoint tensor one rank reads to fill its shard of a DTensor. Pure: no IO
and no process group (the mesh's shape and this rank's coordinate in, a box of the tensor out).

A DTensor's local shard is a box of the whole tensor (its offsets and sizes along each
dimension, as DTensor chunks it). In a row-major file, a box that splits only the first
dimension (``Shard(0)``) is one run of bytes; a box that splits another dimension
(``Shard(1)``: a row-wise parallel weight) is a run per row, each as short as a row divided by
the ranks. Reading those runs one request each costs a round trip per row, and covering them
with their holes reads every other rank's bytes too. So a rank reads the box it would hold were
every ``Shard(d)`` a ``Shard(0)`` (one run, the same number of elements as its own shard when the
split is even), and the ranks exchange the rows into the module's placements (see
:mod:`.torch_exchange`): each byte of the checkpoint crosses the network once for the whole job,
in one request per tensor and rank (a slab of rows at a time where the bound asks).
``Replicate()`` is read whole on every rank, as it must be held.

A tensor stored as a strided view (a transposed weight in a PyTorch ``.bin``) has no row-major
runs to split: each rank reads it whole (``Replicate()``) and keeps its part, a local copy.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import FrameworkError

if TYPE_CHECKING:
    from collections.abc import Sequence

    import torch

    from ..index import TensorInfo


@dataclass(frozen=True, slots=True)
class Sharding:
    """How one rank reads its part of a DTensor and makes the module's placements of it.

    Attributes:
        mesh: the DTensor's ``DeviceMesh``.
        placements: the module's placements (one per mesh dimension).
        read_placements: the placements the rank reads (see the module): every ``Shard(d)`` of
            a row-major tensor as ``Shard(0)``; all ``Replicate()`` for a strided one.
        shape: the whole tensor's shape.
        offsets: where the box read starts along each dimension, in elements.
        box: the box's sizes along each dimension (a dimension of 0: nothing to read).
    """

    mesh: Any
    placements: tuple[Any, ...]
    read_placements: tuple[Any, ...]
    shape: tuple[int, ...]
    offsets: tuple[int, ...]
    box: tuple[int, ...]

    @property
    def exchanged(self) -> bool:
        """Whether the ranks exchange rows after reading (the read is not the module's shard)."""
        return self.read_placements != self.placements

    @property
    def stride(self) -> tuple[int, ...]:
        """The whole tensor's row-major strides, in elements."""
        strides = [1] * len(self.shape)
        for i in range(len(self.shape) - 2, -1, -1):
            strides[i] = strides[i + 1] * self.shape[i + 1]
        return tuple(strides)


def sharding_of(target: torch.Tensor, info: TensorInfo, name: str) -> Sharding | None:
    """How this rank reads ``info`` into ``target``, None when ``target`` is no DTensor.

    Raises:
        FrameworkError: a placement a checkpoint cannot fill (``Partial``: a sum of the ranks'
            values; ``_StridedShard``), or a rank outside the tensor's mesh.
    """
    dtensor = dtensor_class()
    if dtensor is None or not isinstance(target, dtensor):
        return None
    placed: Any = target  # a DTensor (torch's stubs type module tensors as Tensor)
    mesh = placed.device_mesh
    placements = tuple(placed.placements)
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        raise FrameworkError(f"{name}: this rank is not in the DTensor's mesh {mesh}")
    read = read_placements(placements, info, name)
    box, offsets = local_box(info.shape, tuple(mesh.shape), tuple(coordinate), read)
    return Sharding(mesh, placements, read, tuple(info.shape), offsets, box)


def read_placements(placements: Sequence[Any], info: TensorInfo, name: str) -> tuple[Any, ...]:
    """The placements a rank reads for the module's ``placements`` (see the module).

    Raises:
        FrameworkError: a placement that is neither ``Shard`` nor ``Replicate``.
    """
    from torch.distributed.tensor import Replicate, Shard

    read: list[Any] = []
    for placement in placements:
        if type(placement) is Shard:
            read.append(Shard(0) if info.row_major else Replicate())
        elif isinstance(placement, Replicate):
            read.append(placement)
        else:
            raise FrameworkError(
                f"{name}: a DTensor placed {placement!r} cannot be filled from a checkpoint "
                "(only Shard(d) and Replicate() can); load it replicated and redistribute"
            )
    return tuple(read)


def local_box(
    shape: tuple[int, ...],
    mesh_shape: tuple[int, ...],
    coordinate: tuple[int, ...],
    placements: Sequence[Any],
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The sizes and offsets (in elements, per dimension) of the shard at ``coordinate`` of a
    tensor of ``shape`` placed by ``placements`` on a mesh of ``mesh_shape``: DTensor's own
    chunking (``torch.chunk``'s: uneven shards are the last ones, some maybe empty)."""
    from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset

    sizes, offsets = _compute_local_shape_and_global_offset(
        shape, mesh_shape, list(coordinate), list(placements)
    )
    return tuple(int(n) for n in sizes), tuple(int(n) for n in offsets)


def box_bytes(info: TensorInfo, offsets: tuple[int, ...], box: tuple[int, ...]) -> int:
    """The offset in bytes, into ``info``'s stored bytes, of a box that is one run of them
    (it splits the first dimension at most).

    Raises:
        ValueError: the box splits another dimension (not one run).
    """
    if any(o != 0 for o in offsets[1:]) or box[1:] != info.shape[1:]:
        raise ValueError(f"box {box} at {offsets} of {info.shape} is not one run of bytes")
    if not info.shape:
        return 0
    return info.dtype_info.nbytes(offsets[0] * math.prod(info.shape[1:]))


def dtensor_class() -> type | None:
    """``DTensor``, or None when no DTensor can exist in this process: ``torch.distributed.
    tensor`` was never imported (a DTensor is made through it), or this torch has no
    ``torch.distributed``. Importing it costs tens of MiB and a fraction of a second, which a
    load of plain tensors must not pay."""
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None) if module is not None else None


def exchange_dim(sharding: Sharding) -> int | None:
    """The mesh dimension along which the ranks exchange rows for ``sharding``, when it is one
    ``Shard(d)`` (``d > 0``) of a row-major tensor read as ``Shard(0)`` on one mesh dimension,
    the others ``Replicate()``: the rows can then be exchanged slab by slab, point to point.
    None otherwise (nothing to exchange, or shards on several mesh dimensions)."""
    from torch.distributed.tensor import Replicate, Shard

    sharded = [m for m, p in enumerate(sharding.placements) if not isinstance(p, Replicate)]
    if len(sharded) != 1 or sharding.read_placements[sharded[0]] != Shard(0):
        return None
    mesh_dim = sharded[0]
    placement = sharding.placements[mesh_dim]
    return mesh_dim if type(placement) is Shard and placement.dim > 0 else None


def chunk(size: int, chunks: int, index: int) -> tuple[int, int]:
    """Chunk ``index`` of ``size`` elements cut as DTensor cuts a ``Shard`` (``torch.chunk``'s
    sizes): its start and length."""
    from torch.distributed.tensor import Shard

    length, start = Shard.local_shard_size_and_offset(size, chunks, index)
    return int(start), int(length)
