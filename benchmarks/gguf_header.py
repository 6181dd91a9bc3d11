"""GGUF headers: remotetensors over HTTP against llama.cpp's gguf package on a downloaded copy.

Usage: python benchmarks/gguf_header.py [--latency-ms 0 50] [--data-mib 256] [--repeat 3]

Writes a GGUF whose header is about 10 MB (a 120,000-token vocabulary with scores and types, and
180,000 merges, as llama.cpp's converter lays them out) followed by ``--data-mib`` of Q8_0 tensor
data, serves it from ``benchmarks/server.py`` in its own process, and times, per latency:

- remotetensors: ``safe_open(url)`` and reading the metadata and tensor infos (requests and bytes
  as counted by the server);
- gguf: downloading the file (httpx, streamed to disk), then ``gguf.GGUFReader`` on the copy and
  reading every field's contents (what it takes that package to answer the same question);
- both parsers on a local copy (no network), for the CPU side alone.

Best of ``--repeat`` runs (the gguf reader runs once: it takes seconds). Machine and date first.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import numpy as np

import remotetensors as rt
from remotetensors.formats.gguf import parse_header

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import serving


def best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def write_file(path: Path, data_mib: int) -> None:
    import gguf

    rng = np.random.default_rng(0)
    words = [
        "".join(chr(97 + int(c)) for c in rng.integers(0, 26, int(n)))
        for n in rng.integers(1, 24, 300_000)
    ]
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_context_length(8192)
    writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q8_0))
    writer.add_tokenizer_model("gpt2")
    tokens = [f"{i}{w}" for i, w in enumerate(words[:120_000])]
    writer.add_token_list(tokens)
    writer.add_token_types([1] * len(tokens))
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_merges([f"{a} {b}" for a, b in itertools.pairwise(words[:180_001])])
    rows = data_mib * 1024 * 1024 // 34 // 128
    for i in range(8):
        values = rng.standard_normal((max(rows // 8, 1), 4096)).astype(np.float32)
        writer.add_tensor(
            f"blk.{i}.w",
            gguf.quants.quantize(values, gguf.GGMLQuantizationType.Q8_0),
            raw_dtype=gguf.GGMLQuantizationType.Q8_0,
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 50.0])
    parser.add_argument("--data-mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import gguf

    print(f"# {time.strftime('%Y-%m-%d')} {platform.platform()} cpus={os.cpu_count()}")
    with tempfile.TemporaryDirectory() as folder:
        files = Path(folder) / "files"
        files.mkdir()
        path = files / "model.gguf"
        write_file(path, args.data_mib)
        header = parse_header(path.read_bytes())
        size = path.stat().st_size
        print(
            f"file {size / 1e6:.1f} MB, header {header.header_end / 1e6:.2f} MB, "
            f"{len(header.metadata['tokenizer.ggml.tokens']):,} tokens, "
            f"{len(header.metadata['tokenizer.ggml.merges']):,} merges, gguf {version('gguf')}"
        )

        def ours_local() -> None:
            with rt.safe_open(path) as f:
                f.metadata()

        def ref_local() -> None:
            reader = gguf.GGUFReader(path)
            for fld in reader.fields.values():
                fld.contents()

        print("| where | tool | seconds | requests | MB moved |")
        print("|---|---|---|---|---|")
        print(
            f"| local | remotetensors safe_open + metadata | {best(ours_local, args.repeat):.3f} | - | - |"
        )
        print(f"| local | gguf.GGUFReader + fields' contents | {best(ref_local, 1):.3f} | - | - |")
        for latency in args.latency_ms:
            with serving(Path(folder), latency) as server:
                url = f"{server.url}/files/model.gguf"

                def ours_remote() -> None:
                    with rt.safe_open(url) as f:
                        f.metadata()

                ours = best(ours_remote, args.repeat)
                server.stats()
                ours_remote()
                moved = server.stats()
                copy = Path(folder) / "copy.gguf"

                def download_and_read() -> None:
                    with httpx.stream("GET", url) as response, copy.open("wb") as out:
                        for chunk in response.iter_bytes(1 << 20):
                            out.write(chunk)
                    ref_local()

                started = time.perf_counter()
                download_and_read()
                theirs = time.perf_counter() - started
                theirs_moved = server.stats()
                print(
                    f"| HTTP {latency:g} ms | remotetensors safe_open + metadata | {ours:.3f} | "
                    f"{moved['requests']} | {moved['bytes'] / 1e6:.1f} |"
                )
                print(
                    f"| HTTP {latency:g} ms | download + gguf.GGUFReader | {theirs:.3f} | "
                    f"{theirs_moved['requests']} | {theirs_moved['bytes'] / 1e6:.1f} |"
                )


if __name__ == "__main__":
    main()
