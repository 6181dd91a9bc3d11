"""``remotetensors demo``: a sample sharded checkpoint served on a loopback port (see
:mod:`.sample`), read by the commands a user would type, with what crossed the network."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from ..views.display import human_bytes

HELP = "Serve a sample checkpoint on loopback and read it (offline)."
# One line for --help's list of examples.
EXAMPLE = "remotetensors demo"


def add_arguments(sub: argparse.ArgumentParser) -> None:
    """The demo takes no options."""


def run(args: argparse.Namespace, *, main: Callable[[list[str]], int]) -> int:
    """Run the demo; ``main`` runs one command line (the app's own, passed in by it)."""
    # Imported here, not with the module: tempfile and pathlib cost every --help 4-5 ms.
    import tempfile
    from pathlib import Path

    from .sample import CountingServer, write_sample_checkpoint

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_sample_checkpoint(root)
        size = sum(p.stat().st_size for p in root.iterdir())
        server = CountingServer(root)
        url = server.url
        steps = [
            ["params", url],
            ["ls", url, "--filter", "model.layers.0.*"],
            ["get", url, "model.embed_tokens.weight", "--slice", "100:110", "-o", "rows.npy"],
        ]
        here = Path.cwd()
        try:
            print(f"Serving a sample sharded checkpoint ({human_bytes(size)}) at {url}")
            for step in steps:
                shown = " ".join(f"'{a}'" if "*" in a else a for a in step)
                print(f"\n$ remotetensors {shown}")
                server.reset()
                # Files the demo writes go to its temporary folder, named relative to it.
                os.chdir(root)
                try:
                    status = main(step)
                finally:
                    os.chdir(here)
                if status:
                    return status
                print(
                    f"  crossed the network: {server.requests} requests, "
                    f"{human_bytes(server.bytes_sent)} of a {human_bytes(size)} checkpoint"
                )
            print("\n(rows.npy was written to a temporary folder that the demo has now removed.)")
        finally:
            server.stop()
    return 0
