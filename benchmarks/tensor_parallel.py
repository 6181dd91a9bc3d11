"""Tensor-parallel loading, side by side in one run: the usual way (download, then torch's
``HuggingFaceStorageReader``) against remotetensors from ``hf://`` directly (``load_into`` and
``remotetensors.dcp.StorageReader``), the same ranks, the same state dict.

Usage: python benchmarks/tensor_parallel.py [--world 2] [--latency-ms 50] [--rounds 3]

The model: a Llama-shaped ``LlamaForCausalLM`` (hidden 1024, intermediate 4096, 4 layers,
vocabulary 8192, F32: 320 MiB), seeded random weights, written by ``save_pretrained`` in 100 MB
shards, served by the benchmarks' hub stand-in (``benchmarks/server.py``, its own process, the
resolve protocol, ``latency-ms`` added to every request), one server per rank so that each
rank's bytes are counted apart. Each rank builds the model under
``accelerate.init_empty_weights()`` and applies Llama's own tensor-parallel plan
(``config.base_model_tp_plan``: q, k, v, gate, up column-wise, o and down row-wise; the LM head
column-wise) with torch's ``parallelize_module`` on a 1-D CPU mesh (gloo). Then, timed from a
barrier to a barrier (the slowest rank's time to loaded), with a fresh cache folder each run:

- **download + torch's reader**: rank 0 ``huggingface_hub.snapshot_download`` (a fresh cache),
  every rank ``dcp.load(model.state_dict(), storage_reader=HuggingFaceStorageReader(path),
  planner=DefaultLoadPlanner(allow_partial_load=True))`` on the module materialised with
  ``to_empty`` (before the clock);
- **remotetensors dcp**: the same ``dcp.load`` with ``remotetensors.dcp.StorageReader(
  "hf://bench/tp-llama")``;
- **remotetensors load_into**: ``rt.load_into(module, "hf://bench/tp-llama")`` on the meta
  module.

After each run (not timed) every rank's local shards are compared with DTensor's own chunks of
the reference tensors (``safetensors.safe_open`` of the files): the tables say bit-exact or not.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pickle
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from run import machine, serving, table  # noqa: E402  (the benchmarks' server, own process)

REPO = "bench/tp-llama"
CONFIG: dict[str, Any] = {
    "vocab_size": 8192,
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "max_position_embeddings": 128,
    "tie_word_embeddings": False,
}
METHODS = ("download + torch's reader", "remotetensors dcp", "remotetensors load_into")


def write_model(root: Path) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = root / REPO
    torch.manual_seed(3)
    LlamaForCausalLM(LlamaConfig(**CONFIG)).save_pretrained(folder, max_shard_size="100MB")
    return folder


def tp_module(world: int) -> Any:
    from accelerate import init_empty_weights
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )
    from transformers import LlamaConfig, LlamaForCausalLM

    styles: dict[str, Any] = {
        "colwise": ColwiseParallel,
        "rowwise": RowwiseParallel,
        "colwise_gather_output": lambda: ColwiseParallel(output_layouts=Replicate()),
    }
    config = LlamaConfig(**CONFIG)
    plan = {f"model.{k}": styles[v]() for k, v in config.base_model_tp_plan.items()}
    plan.update({k: styles[v]() for k, v in LlamaForCausalLM._tp_plan.items()})
    with init_empty_weights():
        module: Any = LlamaForCausalLM(config)
    return parallelize_module(module, init_device_mesh("cpu", (world,)), plan)


def bit_exact(module: Any, folder: Path) -> bool:
    from safetensors import safe_open
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    files: dict[str, Any] = {}
    for path in folder.glob("*.safetensors"):
        handle: Any = safe_open(path, "pt")
        files.update(dict.fromkeys(handle.keys(), handle))
    for name, tensor in module.state_dict().items():
        if name not in files:
            continue
        full = files[name].get_tensor(name)
        if isinstance(tensor, DTensor):
            shape, offsets = compute_local_shape_and_global_offset(
                full.shape, tensor.device_mesh, tensor.placements
            )
            full = full[tuple(slice(o, o + n) for o, n in zip(offsets, shape, strict=True))]
            tensor = tensor.to_local()
        if not torch.equal(tensor, full):
            return False
    return True


def rank_main(rank: int, world: int, port: int, job: dict[str, Any], out: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        HF_ENDPOINT=job["urls"][rank],
        REMOTETENSORS_CACHE=job["caches"][rank],
    )
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.hf_storage import HuggingFaceStorageReader
    from torch.distributed.checkpoint.state_dict_loader import load

    import remotetensors as rt
    from remotetensors.dcp import StorageReader

    dist.init_process_group("gloo", rank=rank, world_size=world)
    method = job["method"]
    module = tp_module(world)
    if method != "remotetensors load_into":
        module.to_empty(device="cpu")
    planner = DefaultLoadPlanner(allow_partial_load=True)
    dist.barrier()
    began = time.perf_counter()
    if method == "download + torch's reader":
        from huggingface_hub import snapshot_download

        where: list[Any] = [None]
        if rank == 0:
            where = [snapshot_download(REPO, cache_dir=job["download"], token=False)]
        dist.broadcast_object_list(where, src=0)
        theirs = HuggingFaceStorageReader(where[0])
        load(module.state_dict(), storage_reader=theirs, planner=planner)
    elif method == "remotetensors dcp":
        ours = StorageReader(f"hf://{REPO}", token=False)
        load(module.state_dict(), storage_reader=ours, planner=planner)
    else:
        rt.load_into(module, f"hf://{REPO}", token=False)
    dist.barrier()
    seconds = time.perf_counter() - began
    exact = bit_exact(module, Path(job["folder"]))
    dist.destroy_process_group()
    (Path(out) / f"{rank}.pickle").write_bytes(pickle.dumps((seconds, exact)))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def one_run(world: int, servers: list[Any], folder: Path, method: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rt-tp-") as scratch:
        caches = [str(Path(scratch) / f"cache{r}") for r in range(world)]
        job = {
            "method": method,
            "urls": [server.url for server in servers],
            "caches": caches,
            "download": str(Path(scratch) / "hub"),
            "folder": str(folder),
        }
        for server in servers:
            server.stats()  # resets the counts
        spawn: Any = getattr(mp, "start_processes")  # noqa: B009 (untyped, unexported in the stubs)
        spawn(
            rank_main,
            args=(world, free_port(), job, scratch),
            nprocs=world,
            start_method="spawn",
        )
        results = [pickle.loads((Path(scratch) / f"{r}.pickle").read_bytes()) for r in range(world)]
    sent = [server.stats()["bytes"] for server in servers]
    return {
        "seconds": max(seconds for seconds, _ in results),
        "exact": all(exact for _, exact in results),
        "bytes": sent,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rt-tp-model-") as root:
        folder = write_model(Path(root))
        weights = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
        with contextlib.ExitStack() as stack:
            servers = [
                stack.enter_context(serving(Path(root), args.latency_ms)) for _ in range(args.world)
            ]
            runs: dict[str, list[dict[str, Any]]] = {method: [] for method in METHODS}
            for _ in range(args.rounds):
                for method in METHODS:  # the tools take turns
                    runs[method].append(one_run(args.world, servers, folder, method))
    rows = []
    for method, done in runs.items():
        per_rank = [statistics.median(run["bytes"][r] for run in done) for r in range(args.world)]
        rows.append(
            [
                method,
                f"{statistics.median(run['seconds'] for run in done):.2f}",
                f"{min(run['seconds'] for run in done):.2f}-{max(run['seconds'] for run in done):.2f}",
                ", ".join(f"{b / 2**20:.1f}" for b in per_rank),
                f"{sum(per_rank) / 2**20:.1f}",
                "yes" if all(run["exact"] for run in done) else "NO",
            ]
        )
    print(f"# Tensor-parallel loading ({args.world} ranks, gloo; {args.latency_ms:g} ms a request)")
    print()
    print(f"Machine: {machine()}. Model: {weights / 2**20:.0f} MiB of F32 weights in shards.")
    print(
        f"Command: python benchmarks/tensor_parallel.py --world {args.world} "
        f"--latency-ms {args.latency_ms:g} --rounds {args.rounds}"
    )
    print()
    headers = [
        "method",
        "time to loaded, median (s)",
        "min-max (s)",
        "MiB moved per rank",
        "MiB in all",
        "bit-exact",
    ]
    print(table(headers, rows))


if __name__ == "__main__":
    main()
