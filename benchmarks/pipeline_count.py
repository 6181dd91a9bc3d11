"""Counting a diffusers pipeline's parameters: each component's count and the total.

Usage:  python benchmarks/pipeline_count.py [--latency-ms 0 50] [--rounds 3]

Serves an SDXL-shaped pipeline through the hub protocol of ``benchmarks/server.py`` (its own
process, with added latency per request, the recursive file listing included): the real repo's
layout and tensor counts per component (text_encoder 196, text_encoder_2 517, unet 1,680, vae
248 tensors, each in one file, under diffusers' and transformers' names; ``model_index.json``, a
scheduler and two tokenizers without weights), with small tensors (64 x 64 F16) so a run stays
short: the real files are 13.9 GB, these 21 MB, so the download rows here are far cheaper than
on the real repo. Three ways, alternated in each round, median of the rounds:

- remotetensors: ``open_model("hf://bench/sdxl")``, then every component's count and the total;
- huggingface_hub, what a user without us does: ``hf_hub_download`` of ``model_index.json``
  and of each weighted component's weight file, counted with ``safetensors.safe_open``;
- fsspec, header reads scripted by hand (as ``benchmarks/run.py`` does for one model): read
  ``model_index.json``, then for each weighted component its file's 8-byte length and header,
  one component after the other.

Prints requests, bytes and wall time of each, and checks that all three agree.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from run import Server, machine, serving, table  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

COMPONENTS = {  # name -> (library, class, file, tensors), as in the SDXL base repo
    "text_encoder": ("transformers", "CLIPTextModel", "model.safetensors", 196),
    "text_encoder_2": (
        "transformers",
        "CLIPTextModelWithProjection",
        "model.safetensors",
        517,
    ),
    "unet": ("diffusers", "UNet2DConditionModel", "diffusion_pytorch_model.safetensors", 1680),
    "vae": ("diffusers", "AutoencoderKL", "diffusion_pytorch_model.safetensors", 248),
}
WITHOUT_WEIGHTS = {
    "scheduler": ("diffusers", "EulerDiscreteScheduler"),
    "tokenizer": ("transformers", "CLIPTokenizer"),
    "tokenizer_2": ("transformers", "CLIPTokenizer"),
}
WITHOUT_WEIGHTS_CLASSES = {cls for _, cls in WITHOUT_WEIGHTS.values()}
SAFETENSORS = {
    "diffusers": "diffusion_pytorch_model.safetensors",
    "transformers": "model.safetensors",
}
SHAPE = (64, 64)


def write(root: Path) -> dict[str, int]:
    """The pipeline under root/bench/sdxl; returns each component's count."""
    repo = root / "bench" / "sdxl"
    index: dict[str, object] = {
        "_class_name": "StableDiffusionXLPipeline",
        "_diffusers_version": "0.19.0",
        **{n: list(v[:2]) for n, v in COMPONENTS.items()},
        **{n: list(v) for n, v in WITHOUT_WEIGHTS.items()},
    }
    (repo).mkdir(parents=True)
    (repo / "model_index.json").write_text(json.dumps(index, indent=2))
    counts = {}
    for name, (_, cls, file, tensors) in COMPONENTS.items():
        folder = repo / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"_class_name": cls}))
        data = {f"{name}.block.{i}.weight": np.ones(SHAPE, np.float16) for i in range(tensors)}
        save_file(data, str(folder / file), {"format": "pt"})
        counts[name] = tensors * math.prod(SHAPE)
    for name in WITHOUT_WEIGHTS:
        (repo / name).mkdir()
        (repo / name / "config.json").write_text("{}")
    return counts


def ours(server: Server) -> dict[str, int]:
    import remotetensors as rt

    os.environ["HF_ENDPOINT"] = server.url
    with rt.open_model("hf://bench/sdxl", token=False) as m:
        return {n: c.num_parameters for n, c in m.components.items()} | {"total": m.num_parameters}


def weight_files(index: dict[str, Any]) -> list[tuple[str, str]]:
    """(component, its weight file) for each weighted component of ``model_index.json``, as a
    script written for this repo finds them: by its library and class."""
    return [
        (name, SAFETENSORS[entry[0]])
        for name, entry in index.items()
        if not name.startswith("_") and entry[1] not in WITHOUT_WEIGHTS_CLASSES
    ]


def hub_download(server: Server, cache: Path) -> dict[str, int]:
    from huggingface_hub import hf_hub_download
    from safetensors import safe_open

    def get(filename: str, subfolder: str | None = None) -> str:
        return hf_hub_download(
            "bench/sdxl",
            filename,
            subfolder=subfolder,
            endpoint=server.url,
            cache_dir=cache,
            token=False,
        )

    index = json.loads(Path(get("model_index.json")).read_text())
    counts = {}
    for name, file in weight_files(index):
        with safe_open(get(file, name), "numpy") as f:
            names = f.keys()
            counts[name] = sum(math.prod(f.get_slice(k).get_shape()) for k in names)
    return counts | {"total": sum(counts.values())}


def fsspec_headers(server: Server) -> dict[str, int]:
    import fsspec

    fs = fsspec.filesystem("http", skip_instance_cache=True)
    base = f"{server.url}/bench/sdxl/resolve/main"
    index = json.loads(fs.cat_file(f"{base}/model_index.json"))
    counts = {}
    for name, file in weight_files(index):
        url = f"{base}/{name}/{file}"
        n = int.from_bytes(fs.cat_file(url, start=0, end=8), "little")
        header = json.loads(fs.cat_file(url, start=8, end=8 + n))
        counts[name] = sum(math.prod(e["shape"]) for k, e in header.items() if k != "__metadata__")
    return counts | {"total": sum(counts.values())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 50.0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"Machine: {machine()} (shared with other work while measured)\n")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "files").mkdir()  # the server also serves plain files from here
        expected = write(root)
        expected["total"] = sum(expected.values())
        for latency in args.latency_ms:
            with serving(root, latency) as server:
                ways: dict[str, Callable[[], dict[str, int]]] = {
                    "remotetensors open_model": lambda: ours(server),
                    "huggingface_hub hf_hub_download": lambda: hub_download(
                        server, Path(tempfile.mkdtemp(dir=folder))
                    ),
                    "fsspec header reads, by hand": lambda: fsspec_headers(server),
                }
                ours(server)  # warm imports and the server
                seen: dict[str, list[tuple[float, dict[str, int]]]] = {w: [] for w in ways}
                for _ in range(args.rounds):
                    for way, fn in ways.items():
                        server.stats()  # reset
                        started = time.perf_counter()
                        counts = fn()
                        elapsed = time.perf_counter() - started
                        assert counts == expected, (way, counts, expected)
                        seen[way].append((elapsed, server.stats()))
                for way, results in seen.items():
                    stats = results[-1][1]
                    median = statistics.median(t for t, _ in results)
                    rows.append(
                        [
                            f"{latency:g}",
                            way,
                            str(stats["requests"]),
                            f"{stats['bytes']:,}",
                            f"{median * 1000:.1f}",
                        ]
                    )
    print(f"pipeline: {expected['total']:,} parameters in {len(COMPONENTS)} components\n")
    print(table(["latency ms", "way", "requests", "bytes", f"median ms of {args.rounds}"], rows))


if __name__ == "__main__":
    main()
