"""A checkpoint in xarray: our Zarr store against kerchunk references and downloading the file.

Usage: python benchmarks/zarr_store.py [--latency-ms 0 20] [--rounds 5] [--out FILE]

Writes a BERT-sized F32 checkpoint in one file (a 30,522 x 384 embedding and 6 layers, about
87 MiB, all-MiniLM-L6-v2's shapes), serves it with ``benchmarks/server.py`` (aiohttp, in its
own process; ``--latency-ms`` before every answer) and times three things a notebook does:

- **open**: from the URL to an ``xarray.Dataset`` that lists every tensor;
- **ten rows**: open, then rows 1000:1010 of the embedding as numpy;
- **everything**: open, then ``Dataset.load()``: every tensor as numpy.

Tools, taking turns in every round (so a slow spell of the shared machine hits each alike):

- ``remotetensors``: ``xr.open_zarr(rt.open_model(url).as_zarr_store(), consolidated=False)``;
- ``kerchunk refs``: the references ``to_kerchunk`` wrote (made once, before the rounds, as a
  user keeps a JSON file), opened by xarray through fsspec's reference filesystem over HTTP;
- ``download``: the file fetched whole (httpx, to a temporary file), then
  ``safetensors.numpy.load_file`` and an ``xarray.Dataset`` of the arrays (what one does today).

Medians over the rounds of the wall time (after a warm-up round); requests and body bytes the
server counted in the last round. Every result is checked against the arrays written. Prints a Markdown report.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import xarray as xr
from run import Server, machine, serving, table
from safetensors.numpy import load_file, save_file

import remotetensors as rt
from remotetensors.integrations.zarr import register_dtypes

EMBEDDINGS = "embeddings.word_embeddings.weight"
WORK = ("open", "ten rows", "everything")


def write_model(folder: Path) -> dict[str, np.ndarray[Any, Any]]:
    """all-MiniLM-L6-v2's shapes, random values; written to ``folder/files/minilm.safetensors``
    (the server serves ``folder/files`` under ``/files/``)."""
    rng = np.random.default_rng(0)
    hidden, inner = 384, 1536
    shapes: dict[str, tuple[int, ...]] = {
        EMBEDDINGS: (30522, hidden),
        "embeddings.position_embeddings.weight": (512, hidden),
        "embeddings.token_type_embeddings.weight": (2, hidden),
        "embeddings.LayerNorm.weight": (hidden,),
        "embeddings.LayerNorm.bias": (hidden,),
        "pooler.dense.weight": (hidden, hidden),
        "pooler.dense.bias": (hidden,),
    }
    for i in range(6):
        for part, shape in {
            "attention.self.query": (hidden, hidden),
            "attention.self.key": (hidden, hidden),
            "attention.self.value": (hidden, hidden),
            "attention.output.dense": (hidden, hidden),
            "intermediate.dense": (inner, hidden),
            "output.dense": (hidden, inner),
        }.items():
            shapes[f"encoder.layer.{i}.{part}.weight"] = shape
            shapes[f"encoder.layer.{i}.{part}.bias"] = (shape[0],)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[f"encoder.layer.{i}.{norm}.weight"] = (hidden,)
            shapes[f"encoder.layer.{i}.{norm}.bias"] = (hidden,)
    tensors = {n: rng.standard_normal(s, dtype=np.float32) for n, s in shapes.items()}
    (folder / "files").mkdir()
    save_file(tensors, str(folder / "files" / "minilm.safetensors"))
    return tensors


def ours(url: str, work: str) -> Any:
    with rt.open_model(url) as m:
        ds = xr.open_zarr(m.as_zarr_store(), consolidated=False)
        return result(ds, work)


def kerchunk(refs: dict[str, Any], work: str) -> Any:
    options = {"fo": refs, "remote_protocol": "http", "remote_options": {"asynchronous": True}}
    ds = xr.open_dataset(
        "reference://",
        engine="zarr",
        chunks={},
        backend_kwargs={"consolidated": False, "zarr_format": 2, "storage_options": options},
    )
    return result(ds, work)


def download(url: str, work: str, scratch: Path) -> Any:
    target = scratch / "downloaded.safetensors"
    with httpx.stream("GET", url) as response, target.open("wb") as out:
        for block in response.iter_bytes(1 << 20):
            out.write(block)
    arrays = load_file(str(target))
    target.unlink()
    ds = xr.Dataset({n: ([f"{n}.dim_{i}" for i in range(a.ndim)], a) for n, a in arrays.items()})
    return result(ds, work)


def result(ds: xr.Dataset, work: str) -> Any:
    if work == "open":
        return sorted(ds.data_vars)
    if work == "ten rows":
        return ds[EMBEDDINGS][1000:1010].values
    loaded = ds.load()  # every variable at once (dask computes their chunks concurrently)
    return {name: loaded[name].values for name in loaded.data_vars}


def check(work: str, got: Any, tensors: dict[str, np.ndarray[Any, Any]]) -> None:
    if work == "open":
        assert got == sorted(tensors), "the dataset does not list every tensor"
    elif work == "ten rows":
        assert np.array_equal(got, tensors[EMBEDDINGS][1000:1010])
    else:
        assert all(np.array_equal(got[n], t) for n, t in tensors.items())


def run(server: Server, tensors: dict[str, Any], rounds: int, scratch: Path) -> list[list[str]]:
    url = f"{server.url}/files/minilm.safetensors"
    with rt.open_model(url) as m:
        refs = m.to_kerchunk()
    tools: dict[str, Callable[[str], Any]] = {
        "remotetensors": lambda work: ours(url, work),
        "kerchunk refs": lambda work: kerchunk(refs, work),
        "download + safetensors": lambda work: download(url, work, scratch),
    }
    seconds: dict[tuple[str, str], list[float]] = {}
    moved: dict[tuple[str, str], dict[str, int]] = {}
    for work in WORK:  # a warm-up round, not counted: imports, first connections
        for fn in tools.values():
            check(work, fn(work), tensors)
    for _ in range(rounds):
        for work in WORK:
            for tool, fn in tools.items():
                server.stats()  # reset the counters
                started = time.perf_counter()
                got = fn(work)
                seconds.setdefault((work, tool), []).append(time.perf_counter() - started)
                moved[(work, tool)] = server.stats()
                check(work, got, tensors)
    rows = []
    for work in WORK:
        for tool in tools:
            counts = moved[(work, tool)]
            rows.append(
                [
                    work,
                    tool,
                    f"{statistics.median(seconds[(work, tool)]) * 1000:.0f}",
                    str(counts["requests"]),
                    f"{counts['bytes'] / 2**20:.2f}",
                ]
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 20.0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    register_dtypes()
    lines = [f"Machine: {machine()}", ""]
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        tensors = write_model(root)
        for latency in args.latency_ms:
            with serving(root, latency) as server:
                rows = run(server, tensors, args.rounds, root)
            lines += [
                f"### {latency:g} ms added before every answer ({args.rounds} rounds)",
                "",
                table(["work", "tool", "median ms", "requests", "MiB moved"], rows),
                "",
            ]
    report = "\n".join(lines)
    print(report)
    if args.out:
        args.out.write_text(report + "\n")


if __name__ == "__main__":
    main()
