"""What reading config.json costs: opening and counting a model with and without its configs.

Usage:  python benchmarks/config_cost.py [--latency-ms 0 50] [--repeat 7]

Serves three models through the hub protocol of ``benchmarks/server.py`` (its own process, with
added latency per request): a GPTQ checkpoint in one file, the same in 8 shards, and a plain
BF16 model in 8 shards. Each is opened ``repeat`` times with ``open_model("hf://…")`` and its
true count read, once as shipped (``config.json`` and ``quantization_config.json`` asked for in
the discovery round) and once with ``ReadOptions(read_configs=False)`` (the count then relies on
the tensors alone). Prints requests, bytes and the median wall time of each, and the CPU time of
:func:`remotetensors.quantization.count_parameters` over a DeepSeek-sized tensor list.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from run import Server, machine, serving, table  # noqa: E402
from tests import quantized as q  # noqa: E402

import remotetensors as rt  # noqa: E402
from remotetensors.index import TensorInfo  # noqa: E402
from remotetensors.quantization import count_parameters  # noqa: E402

ARCH = q.Arch(hidden=512, intermediate=1536, heads=8, kv_heads=4, head_dim=64, vocab=4096, layers=8)


def write(root: Path) -> dict[str, int]:
    """The three models under root/bench/…; returns each one's float-model count."""
    gptq_spec, gptq_config = q.gptq(ARCH)
    models = {
        "gptq-single": (gptq_spec, gptq_config, 1),
        "gptq-sharded": (gptq_spec, gptq_config, 8),
        "plain-sharded": (q.float_spec(ARCH), ARCH.config(), 8),
    }
    for name, (spec, config, shards) in models.items():
        folder = root / "bench" / name
        folder.mkdir(parents=True)
        for file, data in q.files_for(spec, config, shards=shards).items():
            (folder / file).write_bytes(data)
    return dict.fromkeys(models, q.float_count(ARCH))


def measure(
    server: Server, repo: str, repeat: int, *, configs: bool = True
) -> tuple[float, dict[str, int], int]:
    os.environ["HF_ENDPOINT"] = server.url
    times = []
    stats: dict[str, int] = {}
    count = 0
    for _ in range(repeat):
        server.stats()  # reset
        started = time.perf_counter()
        options = rt.ReadOptions(read_configs=configs)
        with rt.open_model(f"hf://bench/{repo}", token=False, options=options) as model:
            count = model.num_parameters
        times.append(time.perf_counter() - started)
        stats = server.stats()
    return statistics.median(times), stats, count


def big_tensor_list() -> dict[str, TensorInfo]:
    """DeepSeek-V3's shape of checkpoint: 61 layers of 256 experts, GPTQ-packed."""
    arch = replace(
        q.Arch(hidden=7168, intermediate=18432, heads=128, kv_heads=128, head_dim=128),
        vocab=129280,
        layers=61,
        experts=256,
        expert_intermediate=2048,
        shared_experts=True,
    )
    spec, _ = q.gptq(arch)
    infos: dict[str, TensorInfo] = {}
    for name, (dtype, shape) in spec.items():
        infos[name] = TensorInfo(name, dtype, shape, 0, 0)
    return infos


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 50.0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(f"Machine: {machine()} (shared with other work while measured)\n")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "files").mkdir()  # the server also serves plain files from here
        expected = write(Path(folder))
        for latency in args.latency_ms:
            with serving(Path(folder), latency) as server:
                measure(server, "gptq-single", 1)  # warm imports and the server
                for repo in expected:
                    with_time, with_stats, with_count = measure(server, repo, args.repeat)
                    bare_time, bare_stats, bare_count = measure(
                        server, repo, args.repeat, configs=False
                    )
                    assert with_count == bare_count == expected[repo], (repo, with_count)
                    rows.append(
                        [
                            f"{latency:g}",
                            repo,
                            f"{with_stats['requests']} / {bare_stats['requests']}",
                            f"{with_stats['bytes']:,} / {bare_stats['bytes']:,}",
                            f"{with_time * 1000:.1f} / {bare_time * 1000:.1f}",
                        ]
                    )
    headers = ["latency ms", "model", "requests (with / without)", "bytes", "median ms"]
    print(table(headers, rows))
    infos = big_tensor_list()
    _, config = q.gptq(q.Arch())
    elapsed = []
    for _ in range(3):
        started = time.perf_counter()
        result = count_parameters(infos, config)
        elapsed.append(time.perf_counter() - started)
    print(
        f"\ncount_parameters over {len(infos):,} tensors (DeepSeek-V3 shape, GPTQ): "
        f"best of 3 {min(elapsed) * 1000:.0f} ms, {result.total:,} parameters"
    )


if __name__ == "__main__":
    main()
