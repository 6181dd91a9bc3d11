"""Local reads: remotetensors.safe_open vs safetensors.safe_open on the same file, one run.

Usage: python benchmarks/local_read.py [--size-mib 512] [--repeat 5]

Writes one line per tool: best and median wall time of get_tensor for one big tensor, and of
reading every tensor of a 2,000-tensor file, with the page cache warm (the file is read once
before timing). Machine and date are printed first.
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


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times), statistics.median(times)


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
                for k in f.keys():  # noqa: SIM118 (safe_open is not iterable)
                    f.get_tensor(k)

        def ours_many() -> None:
            with rt.safe_open(many) as f:
                f.get_tensors()

        for label, fn in [
            ("safetensors big", ref_big),
            ("remotetensors big", ours_big),
            ("safetensors 2000 tensors", ref_many),
            ("remotetensors 2000 tensors", ours_many),
        ]:
            best, median = timed(fn, args.repeat)
            rate = f" {size / best / 1e9:.2f} GB/s" if "big" in label else ""
            print(f"{label:28s} best {best * 1000:8.1f} ms  median {median * 1000:8.1f} ms{rate}")


if __name__ == "__main__":
    main()
