"""Local reads: remotetensors.safe_open vs safetensors.safe_open on the same file, one run.

Usage: python benchmarks/local_read.py [--size-mib 512] [--repeat 5]

Writes one line per tool: best and median wall time, and best CPU time, of get_tensor for one
big tensor, and of reading every tensor of a 2,000-tensor file (one call per tensor, as code
written for safetensors does, and one call for all), with the page cache warm (the file is read
once before timing). Rounds interleave the tools. Machine and date are printed first.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from safetensors import safe_open as reference_open
from safetensors.numpy import save_file

import remotetensors as rt


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU seconds (all threads of the process) of one call."""
    started, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - started, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"# {time.strftime('%Y-%m-%d')} {platform.platform()} cpus={os.cpu_count()}")
    with tempfile.TemporaryDirectory() as folder:
        big = Path(folder) / "big.safetensors"
        save_file({"w": np.ones(args.size_mib * 1024 * 1024 // 4, np.float32)}, str(big))
        many = Path(folder) / "many.safetensors"
        save_file({f"t{i}": np.full(256, i, np.float32) for i in range(2000)}, str(many))
        big.read_bytes()  # warm the page cache
        size = big.stat().st_size

        def ref_big() -> None:
            with reference_open(str(big), "numpy") as f:
                f.get_tensor("w")

        def ours_big() -> None:
            with rt.safe_open(big) as f:
                f.get_tensor("w")

        def ref_many() -> None:
            with reference_open(str(many), "numpy") as f:
                {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (not iterable)

        def ours_many_each() -> None:
            with rt.safe_open(many) as f:
                {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118

        def ours_many() -> None:
            with rt.safe_open(many) as f:
                f.get_tensors()

        rows = [
            ("safetensors big", ref_big),
            ("remotetensors big", ours_big),
            ("safetensors 2000 tensors, one call each", ref_many),
            ("remotetensors 2000 tensors, one call each", ours_many_each),
            ("remotetensors 2000 tensors, one call for all", ours_many),
        ]
        # Interleaved rounds, so that load from other work on the machine hits every tool alike.
        walls: dict[str, list[float]] = {label: [] for label, _ in rows}
        cpus: dict[str, list[float]] = {label: [] for label, _ in rows}
        for _ in range(args.repeat):
            for label, fn in rows:
                wall, cpu = timed(fn)
                walls[label].append(wall)
                cpus[label].append(cpu)
        for label, _ in rows:
            best, median = min(walls[label]), statistics.median(walls[label])
            rate = f" {size / best / 1e9:5.2f} GB/s" if "big" in label else ""
            print(
                f"{label:46s} best {best * 1000:7.1f} ms  median {median * 1000:7.1f} ms"
                f"  CPU best {min(cpus[label]) * 1000:7.1f} ms{rate}"
            )


if __name__ == "__main__":
    main()
