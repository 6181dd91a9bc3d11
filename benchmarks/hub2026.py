"""The hub as it is in 2026 (issue 40): scans, re-scans and the header phase against the hub
stand-in of the tests in its 2026 shape (``tests/hub_standin.py``: large files redirected to a
signed CDN URL on another origin, API answers without ``X-Repo-Commit``), in one run.

Usage:  python benchmarks/hub2026.py [--repos 300] [--latency-ms 50] [--header-kb 650]

Reports, each figure with its requests:

1. a 300-repo scan (two thirds one file, one third a 4-shard checkpoint), then a second scan
   of the unchanged repos, then a third offline (``HF_HUB_OFFLINE=1``), with the persistent
   cache, at ``--latency-ms`` per request: time, requests per repo;
2. huggingface_hub's ``get_safetensors_metadata`` over the same repos on 32 threads;
3. counting one single-file model with a ``--header-kb`` header at 0 ms: remotetensors with a
   warm cache (a repo seen before) and a cold one, against ``get_safetensors_metadata``
   (median of 20 calls each).

The stand-in serves from a process of its own (aiohttp in Python: on a small machine its CPU
competes with the tools'); each tool's counts are checked against the others.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.hub_standin import HubStandIn

import remotetensors as rt
from remotetensors.options import DEFAULT_SCAN_CONCURRENCY
from remotetensors.sources.hub import repo as hub_repo


def fleet(hub: HubStandIn, count: int) -> dict[str, int]:
    """``count`` repos: location -> parameters."""
    rng = np.random.default_rng(0)
    expected = {}
    tensors: dict[str, np.ndarray[Any, Any]]
    for i in range(count):
        repo = f"bench/r{i}"
        if i % 3:
            tensors = {f"w{k}": rng.standard_normal((64, 64)).astype(np.float32) for k in range(8)}
            hub.add(repo, {"model.safetensors": save(tensors)})
        else:
            shards, weight_map = {}, {}
            tensors = {}
            for s in range(4):
                part = {
                    f"l{s}.w{k}": rng.standard_normal((32, 32)).astype(np.float16) for k in range(4)
                }
                name = f"model-{s + 1:05d}-of-00004.safetensors"
                shards[name] = save(part)
                weight_map.update(dict.fromkeys(part, name))
                tensors.update(part)
            import json

            index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
            hub.add(repo, {**shards, "model.safetensors.index.json": json.dumps(index).encode()})
        expected[repo] = sum(t.size for t in tensors.values())
    return expected


class Remote:
    """The stand-in in a child process, driven over a pipe: its endpoint, request counts and
    latency (the tools' requests cross a real process boundary, as to a real hub)."""

    def __init__(self, repos: int, header_kb: int) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self._pipe, theirs = context.Pipe()
        self._process = context.Process(target=_serve, args=(theirs, repos, header_kb))
        self._process.start()
        self.endpoint, self.expected = self._pipe.recv()

    def ask(self, command: str, value: float = 0.0) -> Any:
        self._pipe.send((command, value))
        return self._pipe.recv()

    def stop(self) -> None:
        self.ask("stop")
        self._process.join(10)


def _serve(pipe: Any, repos: int, header_kb: int) -> None:
    hub = HubStandIn("2026")
    expected = fleet(hub, repos)
    names = max(1, header_kb * 1000 // 90)
    header = {f"model.layers.{i}.mlp.weight_{i:06d}": np.zeros(2, np.float16) for i in range(names)}
    hub.add("bench/header", {"model.safetensors": save(header)})
    pipe.send((hub.endpoint, expected))
    while True:
        command, value = pipe.recv()
        if command == "clear":
            hub.log.clear()
            pipe.send(None)
        elif command == "count":
            pipe.send(len(hub.log.entries))
        elif command == "latency":
            hub.latency_seconds = value
            pipe.send(None)
        else:
            hub.stop()
            pipe.send(None)
            return


CONCURRENCY = DEFAULT_SCAN_CONCURRENCY  # rt.scan's default (--concurrency)


def ours(repos: list[str]) -> tuple[float, dict[str, int]]:
    started = time.perf_counter()
    counts = {}
    for result in rt.scan([f"hf://{r}" for r in repos], concurrency=CONCURRENCY, token=False):
        assert result.summary is not None, result.error
        counts[result.location[len("hf://") :]] = result.summary.stored_parameters
    return time.perf_counter() - started, counts


def theirs(endpoint: str, repos: list[str], threads: int) -> tuple[float, dict[str, int]]:
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=False)

    def one(repo: str) -> int:
        return sum(api.get_safetensors_metadata(repo).parameter_count.values())

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        counts = dict(zip(repos, pool.map(one, repos), strict=True))
    return time.perf_counter() - started, counts


def header_phase(hub: Remote, calls: int) -> list[tuple[str, float, float]]:
    """(tool, median seconds, requests per call) of counting the one-file model whose header
    is about ``--header-kb`` kB, at 0 ms."""
    from huggingface_hub import HfApi

    location = "hf://bench/header"
    rows = []

    def timed(tool: str, call: Any) -> None:
        times = []
        hub.ask("clear")
        for _ in range(calls):
            started = time.perf_counter()
            call()
            times.append(time.perf_counter() - started)
        rows.append((tool, statistics.median(times), hub.ask("count") / calls))

    def warm() -> None:
        with rt.open_model(location, token=False, options=rt.ReadOptions(read_configs=False)) as m:
            m.parameter_count()

    def cold() -> None:
        options = rt.ReadOptions(read_configs=False, cache=False)
        with rt.open_model(location, token=False, options=options) as m:
            m.parameter_count()

    warm()  # seen once: the cache holds its header at its commit
    timed("remotetensors, repo seen before", warm)
    timed("remotetensors, no cache", cold)
    api = HfApi(endpoint=hub.endpoint, token=False)
    timed(
        "huggingface_hub get_safetensors_metadata",
        lambda: api.get_safetensors_metadata("bench/header"),
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repos", type=int, default=300)
    parser.add_argument("--latency-ms", type=float, default=50)
    parser.add_argument("--header-kb", type=int, default=650)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_SCAN_CONCURRENCY,
        help="rt.scan's models at once (default: rt.scan's own)",
    )
    args = parser.parse_args()
    global CONCURRENCY
    CONCURRENCY = args.concurrency
    os.environ["REMOTETENSORS_CACHE"] = tempfile.mkdtemp(prefix="rt-hub2026-")
    os.environ["HF_HUB_CACHE"] = tempfile.mkdtemp(prefix="hf-hub2026-")
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ.pop("HF_TOKEN", None)
    hub_repo.resolve_token = lambda token: None
    hub = Remote(args.repos, args.header_kb)
    os.environ["HF_ENDPOINT"] = hub.endpoint
    try:
        expected: dict[str, int] = hub.expected
        repos = sorted(expected)
        hub.ask("latency", args.latency_ms / 1000)
        print(
            f"## {args.repos} repos at {args.latency_ms:g} ms per request "
            f"(rt.scan concurrency={CONCURRENCY})\n"
        )
        print("| tool | scan | time (s) | vs first | requests | per repo |")
        print("|---|---|---|---|---|---|")
        first = 0.0
        for label, offline in (("first", False), ("second", False), ("offline", True)):
            hub.ask("clear")
            if offline:
                os.environ["HF_HUB_OFFLINE"] = "1"
            seconds, counts = ours(repos)
            os.environ.pop("HF_HUB_OFFLINE", None)
            assert counts == expected, label
            first = first or seconds
            n = hub.ask("count")
            print(
                f"| remotetensors | {label} | {seconds:.2f} | {seconds / first:.2f}x | {n} "
                f"| {n / len(repos):.2f} |"
            )
        hub.ask("clear")
        seconds, counts = theirs(hub.endpoint, repos, threads=32)
        assert counts == expected
        n = hub.ask("count")
        print(
            f"| huggingface_hub, 32 threads | first | {seconds:.2f} | {seconds / first:.2f}x "
            f"(ours: {first / seconds:.2f}x theirs) | {n} | {n / len(repos):.2f} |"
        )
        hub.ask("latency", 0.0)
        print(f"\n## One file, a {args.header_kb} kB header, 0 ms (median of {args.calls})\n")
        print("| tool | time (ms) | requests per count |")
        print("|---|---|---|")
        rows = header_phase(hub, args.calls)
        for tool, seconds, requests in rows:
            print(f"| {tool} | {seconds * 1000:.1f} | {requests:.1f} |")
        hf = rows[-1][1]
        print(
            f"\nremotetensors (repo seen before) / huggingface_hub: {rows[0][1] / hf:.2f}x; "
            f"(no cache): {rows[1][1] / hf:.2f}x"
        )
    finally:
        hub.stop()


if __name__ == "__main__":
    main()
