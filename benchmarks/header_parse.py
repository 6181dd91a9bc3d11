"""Header parsing CPU: remotetensors' parser against plain ``json.loads`` of the same bytes.

Usage: python benchmarks/header_parse.py [--repeat 5]

Two headers written by the reference writer: "wide" (7,000 tensors, ~843 kB) and "huge"
(100,000 tensors, ~12 MB). For each, the best CPU time of ``parse_header`` (validation and index
included) and of ``json.loads`` alone (which validates nothing), rounds interleaved, and the ratio.
Also how often each path of the parser ran (fast path or strict fallback).
"""

from __future__ import annotations

import argparse
import json
import struct
import time

import numpy as np
from safetensors.numpy import save

from remotetensors.formats import safetensors as fmt


def header_of(count: int) -> tuple[bytes, int]:
    data = save(
        {
            f"model.encoder.block.{i // 7}.layer.{i % 7}.attention.projection.weight": np.zeros(
                (2, 2), np.float16
            )
            for i in range(count)
        }
    )
    n = struct.unpack_from("<Q", data)[0]
    return data[8 : 8 + n], len(data)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for label, count in (("wide", 7_000), ("huge", 100_000)):
        header, size = header_of(count)
        ours: list[float] = []
        plain: list[float] = []
        for _ in range(args.repeat):
            started = time.process_time()
            fmt.parse_header(header, file_size=size)
            ours.append(time.process_time() - started)
            started = time.process_time()
            json.loads(header)
            plain.append(time.process_time() - started)
        fast = fmt._read_json_fast(header.decode()) is not None
        print(
            f"{label:5s} {count:7d} tensors {len(header) / 1e6:6.2f} MB  "
            f"parse_header {min(ours) * 1000:7.1f} ms  json.loads {min(plain) * 1000:7.1f} ms  "
            f"ratio {min(ours) / min(plain):4.2f}  ({'fast path' if fast else 'strict path'}, "
            f"decoder {fmt._loads.__module__})"
        )


if __name__ == "__main__":
    main()
