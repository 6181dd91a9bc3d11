"""Four 128 MiB tensors read with different layouts (connections x part size), beside curl.

The large-tensor table of ``run.py`` compares our default layout (16 MiB parts on up to 8
connections) and curl's (a request per tensor, four connections). This script asks which of the
two settings decides: each ``CONNECTIONSxMIB`` layout is a ``ReadOptions(max_concurrency=...,
part_size_bytes=...)``, run with ``curl --parallel`` in the same rounds (the tools taking turns,
each run in its own process), on nginx when it is installed.

Usage: python benchmarks/parallel_layouts.py [--rounds N] [--layouts 8x16 4x32 8x64 4x128]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import nginx
import run

OURS = (
    "import remotetensors as rt\nrt.safe_open, rt.HttpOptions\n",
    "o = rt.ReadOptions(max_concurrency={connections}, part_size_bytes={mib} << 20)\n"
    "with rt.safe_open(URL, options=o) as f: d = f.get_tensors(f.keys())\n",
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--layouts", nargs="+", default=["8x16", "8x32", "8x64", "4x32", "4x128"])
    args = parser.parse_args()
    tools = {
        "curl --parallel --parallel-max 4": run.PARALLEL_TOOLS["curl --parallel --parallel-max 4"]
    }
    for layout in args.layouts:
        connections, mib = (int(x) for x in layout.split("x"))
        requests = run.PARALLEL_COUNT * -(-run.PARALLEL_MIB // mib)
        tools[f"{connections} connections, {mib} MiB parts ({requests} requests)"] = (
            OURS[0],
            OURS[1].format(connections=connections, mib=mib),
        )
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        path = run.write_parallel_tensors(root)
        size = run.PARALLEL_COUNT * run.PARALLEL_MIB * 2**20
        with nginx.serving(root) as served, run.serving(root, 0) as fallback:
            server: run.StaticServer = served or fallback
            rows = run.big_tensor(server, path, size, tools, run.PARALLEL_SETUP, rounds=args.rounds)
    print(
        f"Machine: {run.machine()}; served by {'nginx' if served else 'aiohttp'}; "
        f"{args.rounds} rounds\n"
    )
    print(run.big_rows(rows, counts=True))


if __name__ == "__main__":
    main()
