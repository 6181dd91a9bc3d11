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

    from .torch_plan import Read


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


def placed(read: Read, local: torch.Tensor) -> Any:
    """The DTensor of the module's placements made from ``local``, this rank's box of the
    tensor: as it is when the box is the shard, else redistributed (a collective)."""
    import torch
    from torch.distributed.tensor import DTensor

    sharding = read.sharding
    assert sharding is not None
    whole = DTensor.from_local(
        local,
        sharding.mesh,
        sharding.read_placements,
        run_check=False,
        shape=torch.Size(sharding.shape),
        stride=sharding.stride,
    )
    if sharding.exchanged:
        whole = whole.redistribute(sharding.mesh, sharding.placements)
    return whole
