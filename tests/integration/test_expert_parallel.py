"""Expert parallel: on a Mixtral-shaped model, each rank of a real ``torch.distributed`` job
(gloo, spawned processes) holds only its experts and reads only their bytes, counted at the
server (one static server per rank).

Two ways a rank holds its experts: the stacked ``[experts, ...]`` tensors of transformers'
in-memory Mixtral sharded on dim 0 (``Shard(0)``: a rank's experts are one range), and a module
holding only its experts' per-expert tensors under the names ``save_pretrained`` writes
(``block_sparse_moe.experts.{e}.w1.weight``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

import remotetensors as rt
from tests.distributed import header_bytes, run_job
from tests.servers import Log, static_server
from tests.torch_checkpoints import accelerate, safetensors_torch, torch, transformers

KiB = 1024
MIXTRAL = {
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 64,
}
WORLD = 2


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Mixtral-shaped model with seeded random weights, twice: ``per-expert/`` as
    ``save_pretrained`` writes it (three shards, a tensor per expert), ``stacked/`` as the
    in-memory model holds it (a ``[experts, ...]`` tensor per layer and projection)."""
    folder = tmp_path_factory.mktemp("mixtral")
    torch.manual_seed(11)
    model = transformers.MixtralForCausalLM(transformers.MixtralConfig(**MIXTRAL)).eval()
    model.save_pretrained(folder / "per-expert", max_shard_size="300KB")
    assert len(list((folder / "per-expert").glob("*.safetensors"))) == 3
    (folder / "stacked").mkdir()
    state = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    safetensors_torch.save_file(state, folder / "stacked" / "model.safetensors")
    model.config.save_pretrained(folder / "stacked")
    return folder


@pytest.fixture
def per_rank(mixtral: Path) -> Iterator[list[tuple[str, Log]]]:
    with ExitStack() as stack:
        yield [stack.enter_context(static_server(mixtral)) for _ in range(WORLD)]


def _mine(rank: int) -> list[int]:
    """The experts rank ``rank`` holds: a contiguous block, as a Shard(0) chunk is."""
    per = MIXTRAL["num_local_experts"] // WORLD
    return list(range(rank * per, (rank + 1) * per))


class _ExpertMlp(torch.nn.Module):  # type: ignore[misc]
    """One expert as ``save_pretrained`` names it: ``w1`` (gate), ``w2`` (down), ``w3`` (up)."""

    def __init__(self) -> None:
        super().__init__()
        hidden, inner = MIXTRAL["hidden_size"], MIXTRAL["intermediate_size"]
        self.w1 = torch.nn.Linear(hidden, inner, bias=False)
        self.w2 = torch.nn.Linear(inner, hidden, bias=False)
        self.w3 = torch.nn.Linear(hidden, inner, bias=False)


class _MyExperts(torch.nn.Module):  # type: ignore[misc]
    """Only ``experts`` of every layer, under the checkpoint's names."""

    def __init__(self, experts: list[int]) -> None:
        super().__init__()
        self.model = torch.nn.Module()
        layers = []
        for _ in range(MIXTRAL["num_hidden_layers"]):
            layer = torch.nn.Module()
            layer.block_sparse_moe = torch.nn.Module()
            layer.block_sparse_moe.experts = torch.nn.ModuleDict(
                {str(e): _ExpertMlp() for e in experts}
            )
            layers.append(layer)
        self.model.layers = torch.nn.ModuleList(layers)


def _expert_parallel(rank: int, world: int, job: dict[str, Any]) -> dict[str, Any]:
    from safetensors import safe_open
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    out: dict[str, Any] = {}
    # Stacked experts, Shard(0) on a 1-D mesh: the rest of the model plain (replicated).
    mesh = init_device_mesh("cpu", (world,))
    with accelerate.init_empty_weights():
        model = transformers.MixtralForCausalLM(transformers.MixtralConfig(**MIXTRAL)).eval()
    for layer in model.model.layers:
        experts = layer.mlp.experts
        for attribute in ("gate_up_proj", "down_proj"):
            stacked = getattr(experts, attribute)
            placed = distribute_tensor(stacked.data, mesh, [Shard(0)])
            setattr(experts, attribute, torch.nn.Parameter(placed))
    rt.load_into(model, job["stacked"][rank])
    reference: Any = safe_open(job["stacked_file"], "pt")
    wrong, held = [], 0
    for name, tensor in model.state_dict().items():
        full = reference.get_tensor(name)
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        if "experts" in name:
            full = full[_mine(rank)]
        if not torch.equal(local, full):
            wrong.append(name)
        held += local.numel() * local.element_size()
    out["stacked"] = {"wrong": wrong, "held": held}

    # Only this rank's experts, per-expert tensors: nothing else is read.
    mine = _MyExperts(_mine(rank))
    report = rt.load_into(mine, job["per_expert"][rank], strict=False)
    files: dict[str, Any] = {}
    for path in Path(job["per_expert_folder"]).glob("*.safetensors"):
        handle: Any = safe_open(path, "pt")
        files.update(dict.fromkeys(handle.keys(), handle))
    wrong = [
        name
        for name, tensor in mine.state_dict().items()
        if not torch.equal(tensor, files[name].get_tensor(name))
    ]
    held = sum(t.numel() * t.element_size() for t in mine.state_dict().values())
    out["per_expert"] = {"wrong": wrong, "held": held, "missing": report.missing}
    return out


def test_each_rank_reads_only_its_experts(mixtral: Path, per_rank: list[tuple[str, Log]]) -> None:
    stacked_headers = header_bytes(f"{per_rank[0][0]}/stacked/", per_rank[0][1])
    per_expert_headers = header_bytes(f"{per_rank[0][0]}/per-expert/", per_rank[0][1])
    results = run_job(
        WORLD,
        _expert_parallel,
        {
            "stacked": [f"{url}/stacked/" for url, _ in per_rank],
            "stacked_file": str(mixtral / "stacked" / "model.safetensors"),
            "per_expert": [f"{url}/per-expert/" for url, _ in per_rank],
            "per_expert_folder": str(mixtral / "per-expert"),
        },
    )
    for rank, result in enumerate(results):
        assert result["stacked"]["wrong"] == [], rank
        assert result["per_expert"]["wrong"] == [], rank
        assert result["per_expert"]["missing"] == ()
        log = per_rank[rank][1]
        stacked = sum(e.sent_bytes for e in log.for_path("/stacked/"))
        per_expert = sum(e.sent_bytes for e in log.for_path("/per-expert/"))
        assert stacked <= 1.1 * result["stacked"]["held"] + stacked_headers, rank
        assert per_expert <= 1.1 * result["per_expert"]["held"] + per_expert_headers, rank
