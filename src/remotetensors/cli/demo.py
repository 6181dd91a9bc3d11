"""``remotetensors demo``: sample checkpoints served on a loopback port (see :mod:`.sample`),
read by the commands a user would type, with what crossed the network.

It shows a sharded checkpoint counted, listed and sliced; a mixture of experts' total and
active parameters; a PyTorch ``.bin`` repo and one layer loaded into torch (where torch is
installed); and the sharded checkpoint again with the network off, from the cache. The cache is
a folder of the demo's own, removed with it: the user's cache is never touched.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ..views.display import human_bytes

if TYPE_CHECKING:
    from .sample import CountingServer

HELP = "Serve a sample checkpoint on loopback and read it (offline)."
# One line for --help's list of examples.
EXAMPLE = "remotetensors demo"


def add_arguments(sub: argparse.ArgumentParser) -> None:
    """The demo takes no options."""


def run(args: argparse.Namespace, *, main: Callable[[list[str]], int]) -> int:
    """Run the demo; ``main`` runs one command line (the app's own, passed in by it)."""
    # Imported here, not with the module: tempfile costs every --help a few ms.
    import tempfile

    from .sample import CountingServer, write_moe_checkpoint, write_sample_checkpoint

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        served = root / "served"
        served.mkdir()
        write_sample_checkpoint(served)
        size = sum(p.stat().st_size for p in served.iterdir() if p.is_file())
        write_moe_checkpoint(served / "moe")
        torch_bin = _write_torch_bin(served / "bin")
        server = CountingServer(served)
        url = server.url
        steps: list[tuple[dict[str, str], list[str]]] = [
            ({}, ["params", url]),
            ({}, ["ls", url, "--filter", "model.layers.0.*"]),
            ({}, ["get", url, "model.embed_tokens.weight", "--slice", "100:110", "-o", "rows.npy"]),
            ({}, ["params", url + "moe/"]),
        ]
        if torch_bin:
            steps.append(({}, ["params", url + "bin/"]))
        try:
            print(f"Serving a sample sharded checkpoint ({human_bytes(size)}) at {url}")
            print(
                "and beside it a mixture of experts (moe/)"
                + (" and a .bin repo (bin/)" if torch_bin else "")
            )
            with _environment({"REMOTETENSORS_CACHE": str(root / "cache")}):
                for extra, step in steps:
                    status = _step(main, step, extra, server, root, size)
                    if status:
                        return status
                _offline(url, server)
                if torch_bin:
                    _load_a_layer(url, server)
                else:
                    print("\n(torch is not installed: no .bin repo, no loading into torch)")
            print("\n(rows.npy and the cache were written to a temporary folder, now removed.)")
        finally:
            server.stop()
    return 0


def _step(
    main: Callable[[list[str]], int],
    step: list[str],
    extra: dict[str, str],
    server: CountingServer,
    root: Path,
    size: int,
) -> int:
    """Run one command line as typed, with ``extra`` variables set; print what it cost."""
    shown = " ".join(f"'{a}'" if "*" in a else a for a in step)
    variables = "".join(f"{k}={v} " for k, v in extra.items())
    print(f"\n$ {variables}remotetensors {shown}")
    server.reset()
    here = Path.cwd()
    # Files the demo writes go to its temporary folder, named relative to it.
    os.chdir(root)
    try:
        with _environment(extra):
            status = main(step)
    finally:
        os.chdir(here)
    if not status:
        print(
            f"  crossed the network: {server.requests} requests, "
            f"{human_bytes(server.bytes_sent)}" + ("" if server.requests else " (from the cache)")
        )
    return status


@contextmanager
def _environment(variables: dict[str, str]) -> Iterator[None]:
    """Set ``variables`` for the block, then put back what was there."""
    saved = {k: os.environ.get(k) for k in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _write_torch_bin(folder: Path) -> bool:
    """A small ``pytorch_model.bin`` (``torch.save`` of a state dict) in ``folder``; False, and
    nothing written, without torch."""
    try:
        import torch
    except ImportError:
        return False
    folder.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(0)
    state = {
        "encoder.layer.0.dense.weight": torch.randn(256, 256, generator=generator),
        "encoder.layer.0.dense.bias": torch.zeros(256),
        "encoder.layer.1.dense.weight": torch.randn(256, 256, generator=generator),
        "encoder.layer.1.dense.bias": torch.zeros(256),
    }
    torch.save(state, folder / "pytorch_model.bin")
    return True


def _load_a_layer(url: str, server: CountingServer) -> None:
    """Load one layer of the ``.bin`` repo into a ``torch.nn.Linear`` and say what it cost."""
    import torch

    from ..integrations.torch import load_into

    print(
        "\n>>> layer = torch.nn.Linear(256, 256)\n"
        f">>> rt.load_into(layer, {url + 'bin/'!r}, prefix='encoder.layer.1.dense.', strict=False)"
    )
    server.reset()
    layer = torch.nn.Linear(256, 256)
    load_into(layer, url + "bin/", prefix="encoder.layer.1.dense.", strict=False)
    print(
        f"  loaded {tuple(layer.weight.shape)}; crossed the network: {server.requests} "
        f"requests, {human_bytes(server.bytes_sent)}"
    )


def _offline(url: str, server: CountingServer) -> None:
    """Open the sharded checkpoint again with the network off: its headers come from the cache.

    Through the API, without the configs: the sample has none, an HTTP server's "not found" is
    not kept, and offline each would be a warning.
    """
    from ..models.sync import open_model
    from ..options import ReadOptions

    print(
        "\n>>> os.environ['REMOTETENSORS_OFFLINE'] = '1'   # or HF_HUB_OFFLINE=1\n"
        f">>> m = rt.open_model({url!r}, options=rt.ReadOptions(read_configs=False))"
    )
    server.reset()
    offline = _environment({"REMOTETENSORS_OFFLINE": "1"})
    with offline, open_model(url, options=ReadOptions(read_configs=False)) as model:
        print(f"  {model.num_parameters:,} parameters; requests sent: {model.traffic.requests}")
    print(f"  crossed the network: {server.requests} requests (the headers came from the cache)")
