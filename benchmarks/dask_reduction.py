"""A full reduction over a sharded model: Dask on 1 and 2 worker processes vs one process.

Usage: python benchmarks/dask_reduction.py [--size-gib 2] [--shards 8] [--latency-ms 0]

Writes a sharded F32 model of about SIZE GiB, serves it with ``benchmarks/server.py`` (aiohttp's
static handler in its own process) and computes the L2 norm of every row of every tensor:
- ``get_tensors``: ``rt.open_model(url).get_tensors("*")`` in one process, then numpy;
- ``dask, N worker(s)``: ``m.to_dask("*")`` computed on a ``distributed.LocalCluster`` of N
  worker processes (2 threads each), chunks of 64 MiB.
For each: wall time (open to result), bytes and requests the server answered, and peak RSS of
the process (per worker for Dask). Each configuration runs in a fresh process. Prints a
Markdown report; ``--out FILE`` also writes it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from run import machine, serving, table
from safetensors.numpy import save_file

ROW = 4096  # F32 elements per row: 16 KiB rows
TENSORS_PER_SHARD = 4

# Runs in a fresh process: prints elapsed seconds, the norms' checksum and the peak RSS (KiB).
CHILD = """
import sys, time, json
import numpy as np
import remotetensors as rt

def hwm():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1])
    return 0

url, workers = sys.argv[1], int(sys.argv[2])
if workers == 0:
    start = time.perf_counter()
    with rt.open_model(url) as m:
        arrays = m.get_tensors('*')
    total = sum(float(np.sqrt((a.astype(np.float64) ** 2).sum(axis=1)).sum()) for a in arrays.values())
    elapsed = time.perf_counter() - start
    print(json.dumps({'seconds': elapsed, 'checksum': total, 'peak_kib': [hwm()]}))
else:
    import dask.array as da
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=workers, threads_per_worker=2, processes=True,
                      dashboard_address='127.0.0.1:0', silence_logs=40) as cluster, Client(cluster) as client:
        start = time.perf_counter()
        with rt.open_model(url) as m:
            arrays = m.to_dask('*')
        norms = [da.sqrt((a.astype(np.float64) ** 2).sum(axis=1)).sum() for a in arrays.values()]
        total = float(sum(client.compute(norms, sync=True)))
        elapsed = time.perf_counter() - start
        peaks = list(client.run(hwm).values())
    print(json.dumps({'seconds': elapsed, 'checksum': total, 'peak_kib': peaks}))
"""


def write_model(root: Path, size_gib: float, shards: int) -> int:
    """A sharded F32 model of about ``size_gib`` GiB under ``root/files/dask``; its bytes."""
    folder = root / "files" / "dask"
    folder.mkdir(parents=True)
    rows = max(1, int(size_gib * 2**30 / (shards * TENSORS_PER_SHARD * ROW * 4)))
    rng = np.random.default_rng(0)
    weight_map = {}
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        tensors = {
            f"layers.{s}.w{t}": rng.standard_normal((rows, ROW), dtype=np.float32)
            for t in range(TENSORS_PER_SHARD)
        }
        save_file(tensors, str(folder / name))
        weight_map.update(dict.fromkeys(tensors, name))
    index = {"metadata": {}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return shards * TENSORS_PER_SHARD * rows * ROW * 4


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-gib", type=float, default=2.0)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        print("writing the model ...", file=sys.stderr)
        nbytes = write_model(root, args.size_gib, args.shards)
        with serving(root, args.latency_ms) as server:
            url = f"{server.url}/files/dask/"
            checksums = []
            for label, workers in [
                ("get_tensors, one process", 0),
                ("dask, 1 worker", 1),
                ("dask, 2 workers", 2),
            ]:
                print(f"{label} ...", file=sys.stderr)
                server.stats()  # reset the counters
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, url, str(workers)],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                result = json.loads(out.strip().splitlines()[-1])
                stats = server.stats()
                checksums.append(result["checksum"])
                peaks = ", ".join(f"{kib / 1024:.0f}" for kib in result["peak_kib"])
                rows.append(
                    [
                        label,
                        f"{result['seconds']:.2f}",
                        f"{nbytes / result['seconds'] / 1e9:.2f}",
                        f"{stats['bytes'] / 2**20:.1f}",
                        str(stats["requests"]),
                        peaks,
                    ]
                )
            assert max(checksums) - min(checksums) <= 1e-6 * abs(checksums[0]), checksums
    report = "\n".join(
        [
            f"# Full reduction over a sharded model, {time.strftime('%Y-%m-%d %H:%M')}",
            "",
            f"Machine: {machine()}",
            f"Model: {args.shards} shards, {nbytes / 2**30:.2f} GiB of F32 ({nbytes:,} bytes of "
            f"tensors); {args.latency_ms:g} ms added per request; server: benchmarks/server.py "
            "(aiohttp static, its own process).",
            "",
            table(
                [
                    "configuration",
                    "seconds",
                    "GB/s",
                    "MiB served",
                    "requests",
                    "peak RSS MiB (per process)",
                ],
                rows,
            ),
            "",
        ]
    )
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
