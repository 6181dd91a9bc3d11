"""Strided slices: remotetensors' get_slice against safetensors' get_slice on a local file, and
what a read of the same slice moves over HTTP.

Usage: python benchmarks/strided_slices.py [--sizes 1024 4096] [--repeat 7] [--http-repeat 3]

For each size N, writes an N x N F32 tensor with the reference writer, reads it once (the page
cache is warm), opens it once with each tool, and times ``f.get_slice("w")[key]`` for each key
below, the tools alternating within each round so that load from other work on the machine hits
both alike: median and best wall time of each, and the ratio of the medians (ours over the
reference's). Then the same slices over loopback HTTP (``benchmarks/server.py`` in its own
process, no added latency): best wall time, and the requests and body bytes the server counted
for one read, against the covering span (first selected byte to last). Every result is checked
byte for byte against numpy slicing of the whole tensor. Machine and date first.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import safe_open as reference_open
from safetensors.numpy import save_file

import remotetensors as rt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import serving


def keys(size: int) -> dict[str, Any]:
    """The slices timed, by label."""
    return {
        "[:, ::2]": (slice(None), slice(None, None, 2)),
        "[::2, ::2]": (slice(None, None, 2), slice(None, None, 2)),
        "[::3]": slice(None, None, 3),
        "[1::4, 3:N-1:5]": (slice(1, None, 4), slice(3, size - 1, 5)),
    }


def covering_bytes(full: np.ndarray[Any, Any], key: Any) -> int:
    """Bytes from the first selected element to one past the last."""
    flat = np.arange(full.size, dtype=np.int64).reshape(full.shape)[key]
    return int(flat.max() - flat.min() + 1) * full.itemsize


def slice_of(f: Any, key: Any) -> Any:
    return f.get_slice("w")[key]


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def local_rows(path: Path, full: np.ndarray[Any, Any], size: int, repeat: int) -> None:
    with reference_open(str(path), "numpy") as ref, rt.safe_open(path) as ours:
        for label, key in keys(size).items():
            expected = np.ascontiguousarray(full[key]).tobytes()
            assert ours.get_slice("w")[key].tobytes() == expected, label
            assert ref.get_slice("w")[key].tobytes() == expected, label
            times: dict[str, list[float]] = {"safetensors": [], "remotetensors": []}
            for _ in range(repeat):
                for tool, f in (("safetensors", ref), ("remotetensors", ours)):
                    times[tool].append(timed(partial(slice_of, f, key)))
            medians = {tool: statistics.median(t) for tool, t in times.items()}
            print(
                f"local {size}x{size} {label:16s} "
                + "  ".join(
                    f"{tool} median {medians[tool] * 1000:8.2f} ms best "
                    f"{min(times[tool]) * 1000:8.2f} ms"
                    for tool in times
                )
                + f"  ratio {medians['remotetensors'] / medians['safetensors']:5.2f}"
            )


def http_rows(folder: Path, name: str, full: np.ndarray[Any, Any], size: int, repeat: int) -> None:
    with serving(folder, 0.0) as server, rt.safe_open(f"{server.url}/files/{name}") as f:
        for label, key in keys(size).items():
            best = float("inf")
            for _ in range(repeat):
                server.stats()  # reset the counts
                best = min(best, timed(partial(slice_of, f, key)))
                counts = server.stats()
            assert f.get_slice("w")[key].tobytes() == np.ascontiguousarray(full[key]).tobytes()
            print(
                f"http  {size}x{size} {label:16s} best {best * 1000:8.2f} ms  "
                f"{counts['requests']} requests  {counts['bytes'] / 2**20:7.2f} MiB moved, "
                f"covering span {covering_bytes(full, key) / 2**20:7.2f} MiB, "
                f"result {full[key].nbytes / 2**20:7.2f} MiB"
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--http-repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"# {time.strftime('%Y-%m-%d')} {platform.platform()} cpus={os.cpu_count()}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "files").mkdir()
        for size in args.sizes:
            name = f"w{size}.safetensors"
            path = folder / "files" / name
            full = np.random.default_rng(size).standard_normal((size, size)).astype(np.float32)
            save_file({"w": full}, str(path))
            path.read_bytes()  # warm the page cache
            local_rows(path, full, size, args.repeat)
            http_rows(folder, name, full, size, args.http_repeat)


if __name__ == "__main__":
    main()
