"""CPU a model spends when its lazily opened shards get their final offsets.

Usage: python benchmarks/lazy_shards.py [--shards 160] [--tensors 600] [--repeat 3]

A model known from the hub's metadata endpoint holds provisional offsets for each shard until
the shard's 8-byte length is read; then the model's table takes that shard's final offsets
(``AsyncModel._file_opened``). This times those updates alone, for every shard in turn, on a
synthetic model (no IO: the shards' own reads are not included), and prints the best CPU time.
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

from remotetensors.index import FileIndex, ModelIndex, Row, TensorTable, placed
from remotetensors.models.model import AsyncModel

SHIFT = 108  # where the data starts once the length is known (any shift will do)
TENSOR_BYTES = 64


def shard_rows(shards: int, tensors: int) -> dict[str, dict[str, Row]]:
    """Shard name -> its rows (tensor name -> row), offsets from 0."""
    return {
        f"model-{s + 1:05d}-of-{shards:05d}.safetensors": {
            f"model.layers.{s}.t{i}": (
                "F32",
                (4, 4),
                TENSOR_BYTES * i,
                TENSOR_BYTES * (i + 1),
                None,
            )
            for i in range(tensors)
        }
        for s in range(shards)
    }


def file_index(rows: dict[str, Row], shift: int) -> FileIndex:
    moved = {n: (d, shape, a + shift, b + shift, f) for n, (d, shape, a, b, f) in rows.items()}
    return FileIndex(TensorTable(moved), None, 100, SHIFT + TENSOR_BYTES * len(rows))


def one_run(shards: int, tensors: int) -> float:
    """CPU seconds of every shard's update, in turn."""
    by_shard = shard_rows(shards, tensors)
    rows = {n: placed(r, shard) for shard, own in by_shard.items() for n, r in own.items()}
    provisional = {shard: file_index(own, 0) for shard, own in by_shard.items()}
    model = SimpleNamespace(index=ModelIndex(provisional, TensorTable(rows), None))
    final = {shard: file_index(own, SHIFT) for shard, own in by_shard.items()}
    started = time.process_time()
    for shard, index in final.items():
        AsyncModel._file_opened(model, shard, index)  # type: ignore[arg-type]
    elapsed = time.process_time() - started
    first = next(iter(by_shard.values()))
    name = next(iter(first))
    assert model.index.tensors[name].start == first[name][2] + SHIFT
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=160)
    parser.add_argument("--tensors", type=int, default=600, help="tensors per shard")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    best = min(one_run(args.shards, args.tensors) for _ in range(args.repeat))
    print(
        f"{args.shards} shards x {args.tensors} tensors: {best * 1000:.1f} ms of CPU "
        f"(best of {args.repeat}) for the model's offset updates"
    )


if __name__ == "__main__":
    main()
