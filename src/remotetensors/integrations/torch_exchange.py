"""The collective step of filling DTensors (see :mod:`.torch_shards`): each rank has read its
box of every tensor; the ranks agree that every one of them did, then the tensors whose box is
not the module's shard are redistributed into the module's placements, one after another in
the plan's order. Every rank runs the same plan (the same module, the same headers), so their
collectives match; the agreement first means a rank that failed to read never leaves the
others waiting in an exchange it will not join.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

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

    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch built without distributed support
        return None
    for tensor in (*module.parameters(), *module.buffers()):
        if isinstance(tensor, DTensor):
            kind = tensor.device_mesh.device_type
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
    import torch
    from torch.distributed.tensor import DTensor

    placements = sharding.read_placements
    if sharding.exchanged:
        swapped = exchanged_rows(local, sharding)
        if swapped is not None:
            local, placements = swapped, sharding.placements
    whole = DTensor.from_local(
        local,
        sharding.mesh,
        placements,
        run_check=False,
        shape=torch.Size(sharding.shape),
        stride=sharding.stride,
    )
    if placements != sharding.placements:
        whole = whole.redistribute(sharding.mesh, sharding.placements)
    return whole


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
    from torch.distributed.tensor import Replicate, Shard

    sharded = [m for m, p in enumerate(sharding.placements) if not isinstance(p, Replicate)]
    if len(sharded) != 1 or sharding.read_placements[sharded[0]] != Shard(0):
        return None
    mesh_dim = sharded[0]
    dim = sharding.placements[mesh_dim].dim
    if dim == 0 or not (dist.is_available() and dist.is_initialized()):
        return None
    mesh = sharding.mesh
    group = mesh.get_group(mesh_dim)
    ranks = mesh.size(mesh_dim)
    me = mesh.get_local_rank(mesh_dim)
    rows = [_chunk(sharding.shape[0], ranks, j) for j in range(ranks)]
    columns = [_chunk(sharding.shape[dim], ranks, j) for j in range(ranks)]
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


def _chunk(size: int, chunks: int, index: int) -> tuple[int, int]:
    """Chunk ``index`` of ``size`` elements cut as DTensor cuts a ``Shard`` (``torch.chunk``'s
    sizes): its start and length."""
    from torch.distributed.tensor import Shard

    length, start = Shard.local_shard_size_and_offset(size, chunks, index)
    return int(start), int(length)
