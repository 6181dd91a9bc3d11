"""Total and active parameters of four mixtures of experts, against hf-mem on the same headers.

Usage:  python benchmarks/moe_count.py [--repeat 5]

Writes Mixtral-8x7B, Qwen3-30B-A3B, DeepSeek-V3 and gpt-oss-20b (their published configs and
real shapes, as ``tests/moe_models.py`` builds them) as sparse sharded checkpoints in a temporary
folder: each shard is its header and a hole, so a 671B model takes megabytes of disk. For each,
in rounds that alternate the tools:

- **remotetensors**: ``open_model(folder)`` (the index, every shard header and config.json read
  from the local disk), then ``num_parameters`` and ``num_active_parameters``;
- **hf-mem 0.5.6** (``--experimental``'s parsing, called as a library on the same files: its CLI
  reads from the hub only): each shard's header read and ``json.loads``-ed, then
  ``parse_safetensors_metadata`` and ``parse_moe_metadata``; its active figure is its base plus
  the experts used per token times one expert (it prints those parts, not one active number).

Prints the answers beside the published figures, and the median wall and CPU time of each tool.
Then what the MoE pass costs inside the count: the median CPU time of ``count_parameters`` over
each model's tensors (headers already parsed), and of ``find_experts`` alone within it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from hf_mem.safetensors.metadata import (  # noqa: E402
    parse_moe_metadata,
    parse_safetensors_metadata,
)
from run import machine, table  # noqa: E402
from tests import moe_models as mm  # noqa: E402
from tests.quantized import Spec  # noqa: E402
from tests.unit.test_moe import FAMILIES, build  # noqa: E402

import remotetensors as rt  # noqa: E402
from remotetensors.index import Row, TensorTable  # noqa: E402
from remotetensors.quantization import count_parameters  # noqa: E402
from remotetensors.quantization.moe import find_experts  # noqa: E402

SHARDS = {"mixtral": 19, "qwen3": 16, "deepseek": 163, "gpt-oss": 3}
"""Shards of each published checkpoint."""


def ours(folder: Path) -> tuple[int, int | None]:
    with rt.open_model(folder) as model:
        return model.num_parameters, model.num_active_parameters


def theirs(folder: Path) -> tuple[int, int | None]:
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    headers: dict[str, dict[str, Any]] = {}
    for shard in sorted(set(index["weight_map"].values())):
        with (folder / shard).open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            headers[shard] = json.loads(f.read(length))
    total = parse_safetensors_metadata(headers).param_count
    try:
        moe = parse_moe_metadata(headers, config)
    except RuntimeError:  # experts that are not uniform, or numbered unlike the config
        return total, None
    if moe is None or moe.active_expert_count is None:
        return total, None
    return (
        total,
        moe.base_model.param_count + moe.active_expert_count * moe.expert_template.param_count,
    )


def timed(fn: Any, folder: Path) -> tuple[float, float, tuple[int, int | None]]:
    started, cpu = time.perf_counter(), time.process_time()
    answer = fn(folder)
    return time.perf_counter() - started, time.process_time() - cpu, answer


def table_of(spec: Spec) -> TensorTable:
    """The tensors as a fresh table (offsets laid out one after another), as a header gives."""
    rows: dict[str, Row] = {}
    offset = 0
    for name, (dtype, shape) in spec.items():
        size = mm.nbytes(spec, [name])
        rows[name] = (dtype, shape, offset, offset + size, None)
        offset += size
    return TensorTable(rows)


def pass_cost(spec: Spec, config: dict[str, Any], repeat: int) -> tuple[float, float]:
    """Median CPU seconds of the whole count and of the MoE pass alone."""
    whole, moe = [], []
    for _ in range(repeat):
        table = table_of(spec)
        started = time.process_time()
        count = count_parameters(table, config)
        whole.append(time.process_time() - started)
        names = [n for n in table if "experts." in n]
        raw = None if count.quantization is None else dict(count.tensors.raw_items())
        started = time.process_time()
        find_experts(names, table, raw, config)
        moe.append(time.process_time() - started)
    return statistics.median(whole), statistics.median(moe)


def billions(value: int | None) -> str:
    return "—" if value is None else f"{value / 1e9:.2f}B"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"# {time.strftime('%Y-%m-%d')}: {machine()}\n")
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for family in FAMILIES:
            config, _, spec, total, active = build(family)
            folder = mm.write_model(Path(root) / family, spec, config, shards=SHARDS[family])
            results: dict[str, list[tuple[float, float, tuple[int, int | None]]]] = {
                "remotetensors": [],
                "hf-mem": [],
            }
            for _ in range(args.repeat):  # alternated, so other work on the machine hits both
                results["remotetensors"].append(timed(ours, folder))
                results["hf-mem"].append(timed(theirs, folder))
            published = FAMILIES[family][4]
            for tool, runs in results.items():
                answer_total, answer_active = runs[-1][2]
                rows.append(
                    [
                        family,
                        f"{published[0]}B / {published[1]}B",
                        tool,
                        billions(answer_total),
                        billions(answer_active),
                        "yes" if (answer_total, answer_active) == (total, active) else "no",
                        f"{statistics.median(r[0] for r in runs) * 1000:.0f}",
                        f"{statistics.median(r[1] for r in runs) * 1000:.0f}",
                    ]
                )
    headers = ["model", "card", "tool", "total", "active", "equals the oracle", "wall ms", "CPU ms"]
    print(table(headers, rows))
    costs = []
    for family in FAMILIES:
        config, _, spec, _, _ = build(family)
        whole, moe = pass_cost(spec, config, args.repeat)
        costs.append([family, f"{len(spec):,}", f"{whole * 1000:.0f}", f"{moe * 1000:.0f}"])
    print()
    print(table(["model", "tensors", "count_parameters CPU ms", "of which experts ms"], costs))


if __name__ == "__main__":
    main()
