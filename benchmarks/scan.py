"""A 300-repo parameter scan: ``rt.scan`` against a loop over huggingface_hub's
``get_safetensors_metadata``, on the loopback hub of ``benchmarks/server.py`` (which serves the
resolve protocol and the one-call safetensors-metadata endpoint) at 0 and 50 ms per request.

Usage:  python benchmarks/scan.py [--repos 300] [--latency-ms 0 50]

Reports wall time, requests the server saw, and 429 answers (the loopback hub sets no limit, so
429s are 0 here; the rate limiter is exercised by tests/integration/test_scan.py). Two thirds of
the repos hold one file, one third a 4-shard checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import serving

import remotetensors as rt


def write_repos(root: Path, count: int) -> list[str]:
    rng = np.random.default_rng(0)
    repos = []
    for i in range(count):
        folder = root / "bench" / f"r{i}"
        folder.mkdir(parents=True)
        if i % 3:
            save_file(
                {f"w{j}": rng.random((16, 16), np.float32) for j in range(4)},
                str(folder / "model.safetensors"),
            )
        else:
            weight_map = {}
            for s in range(4):
                name = f"model-{s + 1:05d}-of-00004.safetensors"
                tensors = {f"l{s}.w{j}": rng.random((16, 16), np.float32) for j in range(3)}
                save_file(tensors, str(folder / name))
                weight_map.update(dict.fromkeys(tensors, name))
            (folder / "model.safetensors.index.json").write_text(
                json.dumps({"metadata": {}, "weight_map": weight_map})
            )
        repos.append(f"bench/r{i}")
    return repos


def ours(url: str, repos: list[str]) -> dict[str, int]:
    os.environ["HF_ENDPOINT"] = url
    # A first contact: the persistent cache has its own benchmark (cache.py).
    options = rt.ReadOptions(read_configs=False, progress=False, cache=False)
    counts = {}
    for result in rt.scan(
        [f"hf://{r}" for r in repos], concurrency=16, token=False, options=options
    ):
        assert result.summary is not None, result.error
        counts[result.location[len("hf://") :]] = result.summary.stored_parameters
    return counts


def theirs(url: str, repos: list[str], cache: Path) -> dict[str, int]:
    from huggingface_hub import HfApi, constants

    constants.HF_HUB_CACHE = str(cache)
    api = HfApi(endpoint=url, token=False)
    return {r: sum(api.get_safetensors_metadata(r).parameter_count.values()) for r in repos}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repos", type=int, default=300)
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0, 50])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repos = write_repos(root, args.repos)
        (root / "files").mkdir()  # the server also serves a static folder
        print("| latency | tool | time (s) | requests | 429s |\n|---|---|---|---|---|")
        for latency in args.latency_ms:
            with serving(root, latency) as server:
                results: dict[str, dict[str, int]] = {}
                runs: list[tuple[str, Callable[[], dict[str, int]]]] = [
                    ("remotetensors scan (16 at once)", partial(ours, server.url, repos)),
                    ("huggingface_hub loop", partial(theirs, server.url, repos, root / "c")),
                ]
                for tool, run in runs:
                    server.stats()
                    started = time.perf_counter()
                    results[tool] = run()
                    elapsed = time.perf_counter() - started
                    stats = server.stats()
                    print(
                        f"| {latency:g} ms | {tool} | {elapsed:.2f} | {stats['requests']} | 0 |",
                        flush=True,
                    )
                first, second = results.values()
                assert first == second, "the two tools disagree"


if __name__ == "__main__":
    main()
