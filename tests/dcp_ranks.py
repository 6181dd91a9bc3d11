"""What each rank does in the tests of ``remotetensors.dcp.StorageReader``
(``tests/integration/test_dcp.py``), run by :func:`tests.distributed.run_job` in spawned
processes: build a state dict of DTensors over a CPU mesh, ``dcp.load`` it through our reader,
and hand back what it found (which local shards differ from the reference, the bytes it holds
locally, what the reader counted).

The reference is the checkpoint's own files on the local disk, read with ``safetensors``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.hf_storage import HuggingFaceStorageWriter
from torch.distributed.checkpoint.planner import ReadItem
from torch.distributed.checkpoint.state_dict_loader import load
from torch.distributed.checkpoint.state_dict_saver import save
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Placement, Replicate, Shard, distribute_tensor

from remotetensors.dcp import StorageReader
from remotetensors.options import ReadOptions
from remotetensors.sources.http.client import HttpOptions

EXTRA = "not.in.the.checkpoint"
"""A state dict entry the checkpoint lacks: ``allow_partial_load`` leaves it as it was."""


@dataclass(frozen=True)
class Case:
    """One ``dcp.load`` on every rank.

    Attributes:
        name: sent as ``X-Case`` with every HTTP request, to count them per case.
        location: where the reader reads.
        reference: a local folder holding the same tensors (every ``*.safetensors`` of it).
        mesh: the CPU mesh's shape (``(world,)`` or ``(2, 2)``).
        options: the reader's read options.
        save_first: a folder to write the reference into first with DCP's own safetensors
            writer (``save_distributed=True``: each rank its ``Shard(0)`` chunks), read back.
        exchange: the reader's ``exchange``.
        share_headers: the reader's ``share_headers``.
        fail_rank: a rank whose planner fails to give the norm's tensor (a read that fails
            there, and not on the others).
    """

    name: str
    location: str
    reference: str
    mesh: tuple[int, ...]
    options: ReadOptions | None = None
    save_first: str | None = None
    exchange: bool = True
    fail_rank: int | None = None
    share_headers: bool = True


@dataclass(frozen=True)
class Outcome:
    """What one rank found in one case."""

    case: str
    rank: int
    wrong: list[str]
    local_bytes: int
    header_requests: int
    header_bytes: int
    data_requests: int
    data_bytes: int
    extra_untouched: bool
    error: str


def reference_tensors(folder: str) -> dict[str, torch.Tensor]:
    """Every tensor of every ``*.safetensors`` file of ``folder``, as ``safetensors`` reads it."""
    tensors: dict[str, torch.Tensor] = {}
    for path in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(path, framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                tensors[name] = f.get_tensor(name)
    return tensors


def placements(name: str, ndim: int, mesh_ndim: int) -> list[Placement]:
    """Tensor parallel as Llama shards it on a 1-D mesh: column-parallel projections and the
    embeddings on dim 0, row-parallel ones on dim 1, norms replicated; on a 2-D mesh, 2-D
    weights on both dimensions and vectors replicated on the first."""
    if mesh_ndim == 2:
        return [Shard(0), Shard(1)] if ndim == 2 else [Replicate(), Shard(0)]
    if ndim < 2:
        return [Replicate()]
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        return [Shard(1)]
    return [Shard(0)]


def load_cases(rank: int, world: int, cases: list[Case]) -> list[Outcome]:
    """Run every case on this rank (all ranks run them in the same order)."""
    return [_load_case(rank, case) for case in cases]


def _load_case(rank: int, case: Case) -> Outcome:
    mesh = init_device_mesh("cpu", case.mesh)
    reference = reference_tensors(case.reference)
    if case.save_first is not None:
        saved = {
            name: distribute_tensor(tensor, mesh, [Shard(0)] * len(case.mesh))
            for name, tensor in reference.items()
        }
        save(saved, storage_writer=HuggingFaceStorageWriter(case.save_first, save_distributed=True))
    state: dict[str, Any] = {}
    expected: dict[str, torch.Tensor] = {}
    for name, tensor in reference.items():
        where = placements(name, tensor.dim(), len(case.mesh))
        state[name] = distribute_tensor(torch.zeros_like(tensor), mesh, where)
        expected[name] = distribute_tensor(tensor, mesh, where).to_local()
    state[EXTRA] = torch.full((3,), 7.0)
    reader = StorageReader(
        case.location,
        options=case.options,
        http_options=HttpOptions(headers={"X-Rank": str(rank), "X-Case": case.name}),
        exchange=case.exchange,
        share_headers=case.share_headers,
    )
    planner = (
        _FailingPlanner(allow_partial_load=True)
        if rank == case.fail_rank
        else DefaultLoadPlanner(allow_partial_load=True)
    )
    error = ""
    try:
        load(state, storage_reader=reader, planner=planner)
    except CheckpointException as exc:  # every rank raises, with the coordinator's error
        error = f"{type(exc.failures[rank][0]).__name__}: {exc.failures[rank][0]}"
    wrong = [name for name in expected if not torch.equal(state[name].to_local(), expected[name])]
    local = sum(t.numel() * t.element_size() for t in expected.values())
    return Outcome(
        case.name,
        rank,
        wrong,
        local,
        reader.header_traffic.requests,
        reader.header_traffic.bytes,
        reader.data_traffic.requests,
        reader.data_traffic.bytes,
        bool(torch.equal(state[EXTRA], torch.full((3,), 7.0))),
        error,
    )


class _FailingPlanner(DefaultLoadPlanner):
    """A planner that fails to give the final norm's tensor: this rank's read fails."""

    def resolve_tensor(self, read_item: ReadItem) -> torch.Tensor:
        if read_item.dest_index.fqn == "model.norm.weight":
            raise RuntimeError("injected: this rank cannot take model.norm.weight")
        tensor: torch.Tensor = super().resolve_tensor(read_item)
        return tensor
