"""Loading a checkpoint into a torch module: remotetensors.load_into against what users do today,
side by side in one run.

Usage: python benchmarks/torch_load.py [--repeat 5] [--models minilm large] [--latency-ms 0]

Models (written fresh each run, seeded random weights, F32 as published): ``minilm``, the
architecture of sentence-transformers/all-MiniLM-L6-v2 (a 91 MB file, with ``position_ids`` as
the published one has), and ``large``, BERT-large's (1.34 GB).

What is timed (wall time of the call; the module is built before the clock, the same way for
every tool; one untimed round warms every tool up, then the rounds alternate the tools, and the tables give
medians):

- ``hf://``, from the benchmarks' hub stand-in (``benchmarks/server.py``, its own process, the
  resolve protocol without a CDN redirect), into a model built under
  ``accelerate.init_empty_weights()``:
  - remotetensors: ``rt.load_into(model, "hf://bench/NAME")``;
  - huggingface_hub + safetensors: ``hf_hub_download`` into a fresh cache folder, then
    ``safetensors.torch.load_file`` and ``model.load_state_dict(state, assign=True)``.
- a local file (page cache warm), into a model already materialized (random init):
  - remotetensors: ``rt.load_into(model, path)`` (in place);
  - safetensors: ``safetensors.torch.load_model(model, path, strict=False)``;
  and into a model on meta: ``rt.load_into`` against ``load_file`` + ``load_state_dict(...,
  assign=True)``.

Each run also records the peak resident memory it added (``VmHWM``, reset before each run
through ``/proc/self/clear_refs`` where the kernel allows; large allocations are mappings of
their own, see :data:`MMAP_THRESHOLD`), and every result is checked against the reference
tensors. Tensors that ``load_file`` returns are views of the file's mapping (read on first use,
counted in the page cache rather than as allocations).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from accelerate import init_empty_weights
from safetensors.torch import load_file, load_model, save_file
from transformers import BertConfig, BertModel

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from run import machine, serving, table  # noqa: E402  (the benchmarks' server, own process)

import remotetensors as rt  # noqa: E402

MINILM: dict[str, Any] = {
    "hidden_size": 384,
    "intermediate_size": 1536,
    "num_attention_heads": 12,
    "num_hidden_layers": 6,
}
LARGE: dict[str, Any] = {
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
}
CONFIGS = {"minilm": MINILM, "large": LARGE}


def config_of(name: str) -> BertConfig:
    return BertConfig(vocab_size=30522, max_position_embeddings=512, **CONFIGS[name])


def write_model(folder: Path, name: str) -> dict[str, torch.Tensor]:
    """FOLDER/bench/NAME/model.safetensors (and config.json); returns the state written."""
    torch.manual_seed(0)
    model = BertModel(config_of(name))
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state["embeddings.position_ids"] = model.embeddings.position_ids.clone()
    target = folder / "bench" / name
    target.mkdir(parents=True)
    save_file(state, target / "model.safetensors")
    model.config.to_json_file(target / "config.json")
    return state


def rss(field: str) -> int:
    """A field of /proc/self/status, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def reset_peak() -> None:
    with contextlib.suppress(OSError):  # the peak stays the process's own then
        Path("/proc/self/clear_refs").write_text("5")


def measured(fn: Callable[[], Any]) -> tuple[float, int, Any]:
    """Wall seconds and peak resident bytes added by one call, and its result."""
    gc.collect()
    reset_peak()
    before = rss("VmRSS")
    started = time.perf_counter()
    result = fn()
    wall = time.perf_counter() - started
    return wall, rss("VmHWM") - before, result


def check(model: Any, state: dict[str, torch.Tensor]) -> None:
    for name, tensor in model.state_dict().items():
        if not torch.equal(tensor, state[name]):
            raise AssertionError(f"{name} differs")


def run_model(name: str, folder: Path, repeat: int, url: str) -> list[list[str]]:
    state = write_model(folder, name)
    path = folder / "bench" / name / "model.safetensors"
    path.read_bytes()  # the page cache warm for the local rows
    size = path.stat().st_size
    config = config_of(name)
    real = BertModel(config)  # the materialized model the in-place rows fill
    os.environ["HF_ENDPOINT"] = url
    caches = Path(tempfile.mkdtemp(prefix="hub-cache-"))

    def meta_model() -> Any:
        with init_empty_weights():
            return BertModel(config)

    def hub_ours(model: Any) -> Any:
        rt.load_into(model, f"hf://bench/{name}", token=False)
        return model

    def hub_theirs(model: Any) -> Any:
        from huggingface_hub import hf_hub_download

        cache = Path(tempfile.mkdtemp(dir=caches))
        local = hf_hub_download(
            f"bench/{name}", "model.safetensors", cache_dir=cache, token=False, endpoint=url
        )
        model.load_state_dict(load_file(local), assign=True, strict=False)
        shutil.rmtree(cache)
        return model

    def local_ours(model: Any) -> Any:
        rt.load_into(model, path)
        return model

    def local_theirs(model: Any) -> Any:
        load_model(model, path, strict=False)
        return model

    def local_theirs_assign(model: Any) -> Any:
        model.load_state_dict(load_file(path), assign=True, strict=False)
        return model

    rows: list[tuple[str, str, Callable[[Any], Any], Callable[[], Any]]] = [
        ("hf://, model on meta", "remotetensors load_into", hub_ours, meta_model),
        (
            "hf://, model on meta",
            "hf_hub_download + load_file + load_state_dict",
            hub_theirs,
            meta_model,
        ),
        ("local, model materialized", "remotetensors load_into", local_ours, lambda: real),
        ("local, model materialized", "safetensors.torch.load_model", local_theirs, lambda: real),
        ("local, model on meta", "remotetensors load_into", local_ours, meta_model),
        (
            "local, model on meta",
            "load_file + load_state_dict(assign=True)",
            local_theirs_assign,
            meta_model,
        ),
    ]
    walls: dict[int, list[float]] = {i: [] for i in range(len(rows))}
    peaks: dict[int, list[int]] = {i: [] for i in range(len(rows))}
    for round_ in range(repeat + 1):  # round 0 warms every tool up (imports, threads): untimed
        for i, (_, _, fn, build) in enumerate(rows):
            model = build()
            wall, peak, loaded = measured(functools.partial(fn, model))
            check(loaded, state)
            if round_:
                walls[i].append(wall)
                peaks[i].append(peak)
            del model, loaded
    shutil.rmtree(caches, ignore_errors=True)
    out: list[list[str]] = []
    for i, (workload, tool, _, _) in enumerate(rows):
        median = statistics.median(walls[i])
        out.append(
            [
                name,
                workload,
                tool,
                f"{median * 1000:.0f}",
                f"{min(walls[i]) * 1000:.0f}",
                f"{size / median / 1e9:.2f}",
                f"{statistics.median(peaks[i]) / 2**20:.0f}",
            ]
        )
    return out


MMAP_THRESHOLD = "262144"
"""glibc's ``MALLOC_MMAP_THRESHOLD_`` for the run: every allocation above 256 KiB is its own
mapping, given back when freed. Without it, a model freed after one run leaves its tensors
(those below glibc's dynamic threshold, up to 32 MiB) resident in the heap, and the next run
reuses pages already faulted in: its time would miss the page faults a fresh process pays, and
its peak memory would not show what it allocated."""


def main() -> None:
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") != MMAP_THRESHOLD:
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--models", nargs="+", default=["minilm", "large"], choices=CONFIGS)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args()
    print(
        f"# {time.strftime('%Y-%m-%d')} {machine()}, torch {torch.__version__}, "
        f"{args.repeat} rounds, latency {args.latency_ms:g} ms",
        flush=True,
    )
    header = ["model", "workload", "tool", "median ms", "best ms", "GB/s (median)", "peak MiB"]
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "files").mkdir()
        with serving(Path(folder), args.latency_ms) as server:
            for name in args.models:
                rows += [
                    list(row) for row in run_model(name, Path(folder), args.repeat, server.url)
                ]
    print(table(header, rows))


if __name__ == "__main__":
    main()
