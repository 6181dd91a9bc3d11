"""Start-up cost: ``import remotetensors`` and ``remotetensors --help`` against the baseline the
issue names, ``python -c "import numpy, httpx"``.

Usage: python benchmarks/import_cost.py [--repeat 9]

Each command runs in a fresh interpreter, rounds interleaved so that machine noise hits all of
them alike; measured is the CPU time of the child (user + system, from ``getrusage``), which
other work on the machine disturbs less than wall time. Prints the median and minimum of each
and the ratio of medians to the baseline.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys

COMMANDS = {
    "numpy+httpx (baseline)": [sys.executable, "-c", "import numpy, httpx"],
    "import remotetensors": [sys.executable, "-c", "import remotetensors"],
    "remotetensors --help": [
        shutil.which("remotetensors") or sys.executable,
        *([] if shutil.which("remotetensors") else ["-m", "remotetensors"]),
        "--help",
    ],
    # What a first real use adds: the package and the code that opens a model.
    "import + rt.open_model": [
        sys.executable,
        "-c",
        "import remotetensors as rt; rt.open_model",
    ],
}


def child_cpu(argv: list[str]) -> float:
    """CPU seconds (user + system) of one run of ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=os.environ)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.repeat):
        for name, argv in COMMANDS.items():
            times[name].append(child_cpu(argv))
    base = statistics.median(times["numpy+httpx (baseline)"])
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"{name:24s} CPU median {median * 1000:6.0f} ms  min {min(values) * 1000:6.0f} ms  "
            f"ratio(median) {median / base:4.2f}"
        )


if __name__ == "__main__":
    main()
