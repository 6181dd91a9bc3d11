"""PyTorch ``.bin`` without download: counting parameters and reading one tensor, beside what a
user does today (download the files with huggingface_hub, then ``torch.load``).

Usage:  python benchmarks/torch_bin.py [--latency-ms 0 50] [--rounds 3]

Serves two repos through the hub protocol of ``benchmarks/server.py`` (its own process, with
added latency per request): all-MiniLM-L6-v2's architecture saved by ``torch.save`` as one
``pytorch_model.bin`` (90.9 MB; a transformers ``BertModel`` from the model's config, seeded
random weights, as ``tests/torch_bin_files.py`` builds it), and the same state dict in three
shards with ``pytorch_model.bin.index.json`` as transformers 4 shards it. Per latency, the tools
take turns in each of ``rounds`` rounds (so that a slow spell of the shared machine falls on
all of them), and each workload reports its median wall time, requests and body bytes:

- count: ``open_model("hf://…").num_parameters`` / ``hf_hub_download`` of every ``.bin`` (into a
  fresh cache each time) then ``torch.load(weights_only=True)`` and the sum of ``numel``;
- one tensor (``encoder.layer.3.attention.self.query.weight``, 590 kB): ``get_tensor`` / the
  same download and load, then that tensor.

Every tool must agree on the count and the tensor's bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from run import Server, machine, serving, table  # noqa: E402
from tests.torch_bin_files import (  # noqa: E402
    MINILM_CONFIG,
    minilm_bin,
    minilm_state,
    shard_like_transformers,
    torch,
)

import remotetensors as rt  # noqa: E402

QUERY = "encoder.layer.3.attention.self.query.weight"
REPOS = {"minilm-bin": ["pytorch_model.bin"]}


def write(root: Path) -> None:
    """The two repos under root/bench/…."""
    single = root / "bench" / "minilm-bin"
    single.mkdir(parents=True)
    (single / "pytorch_model.bin").write_bytes(minilm_bin())
    (single / "config.json").write_text(json.dumps(MINILM_CONFIG))
    sharded = root / "bench" / "minilm-bin-sharded"
    sharded.mkdir()
    files = shard_like_transformers(minilm_state(), max_shard_bytes=30_000_000)
    for name, data in files.items():
        (sharded / name).write_bytes(data)
    (sharded / "config.json").write_text(json.dumps(MINILM_CONFIG))
    REPOS["minilm-bin-sharded"] = sorted(n for n in files if n.endswith(".bin"))


def ours_count(server: Server, repo: str) -> tuple[int, Any]:
    with rt.open_model(f"hf://bench/{repo}", token=False) as model:
        return model.num_parameters, None


def ours_tensor(server: Server, repo: str) -> tuple[int, Any]:
    with rt.open_model(f"hf://bench/{repo}", token=False) as model:
        return model.num_parameters, model.get_tensor(QUERY)


def downloaded(server: Server, repo: str) -> dict[str, Any]:
    """What a user does today: download every ``.bin`` and load it (weights_only)."""
    from huggingface_hub import hf_hub_download

    state: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as cache:
        for name in REPOS[repo]:
            path = hf_hub_download(
                f"bench/{repo}", name, cache_dir=cache, endpoint=server.url, token=False
            )
            state.update(torch.load(path, weights_only=True, map_location="cpu"))
    return state


def theirs_count(server: Server, repo: str) -> tuple[int, Any]:
    return sum(t.numel() for t in downloaded(server, repo).values()), None


def theirs_tensor(server: Server, repo: str) -> tuple[int, Any]:
    state = downloaded(server, repo)
    return sum(t.numel() for t in state.values()), state[QUERY].numpy()


TOOLS: dict[str, dict[str, Callable[[Server, str], tuple[int, Any]]]] = {
    "count": {"remotetensors": ours_count, "hf_hub_download + torch.load": theirs_count},
    "one tensor": {"remotetensors": ours_tensor, "hf_hub_download + torch.load": theirs_tensor},
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 50.0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    print(f"Machine: {machine()} (shared with other work while measured)\n")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "files").mkdir()  # the server also serves plain files from here
        write(Path(folder))
        for latency in args.latency_ms:
            with serving(Path(folder), latency) as server:
                os.environ["HF_ENDPOINT"] = server.url
                for repo in REPOS:
                    for workload, tools in TOOLS.items():
                        for tool in tools.values():
                            tool(server, repo)  # warm imports, connections and the page cache
                        times: dict[str, list[float]] = {name: [] for name in tools}
                        traffic: dict[str, dict[str, int]] = {}
                        answers: dict[str, tuple[int, Any]] = {}
                        for _ in range(args.rounds):
                            for name, tool in tools.items():
                                server.stats()  # reset
                                started = time.perf_counter()
                                answers[name] = tool(server, repo)
                                times[name].append(time.perf_counter() - started)
                                traffic[name] = server.stats()
                        counts = {answer[0] for answer in answers.values()}
                        assert len(counts) == 1, (repo, workload, answers)
                        arrays = [a[1] for a in answers.values() if a[1] is not None]
                        assert all((a == arrays[0]).all() for a in arrays), (repo, workload)
                        for name in tools:
                            rows.append(
                                [
                                    f"{latency:g}",
                                    repo,
                                    workload,
                                    name,
                                    f"{traffic[name]['requests']}",
                                    f"{traffic[name]['bytes']:,}",
                                    f"{statistics.median(times[name]) * 1000:.1f}",
                                ]
                            )
    headers = ["latency ms", "repo", "workload", "tool", "requests", "bytes", "median ms"]
    print(table(headers, rows))


if __name__ == "__main__":
    main()
