"""``remotetensors ls LOCATION``: the tensors, with dtype, shape, size and file."""

from __future__ import annotations

import argparse
import fnmatch
import json

from ..views.display import human_bytes
from .options import add_location_options, opened
from .table import print_table

HELP = "List tensors: name, dtype, shape, size, file."
# One line for --help's list of examples.
EXAMPLE = "remotetensors ls hf://openai-community/gpt2 --filter 'h.0.*'"


def add_arguments(sub: argparse.ArgumentParser) -> None:
    add_location_options(sub)
    sub.add_argument("--filter", default="*", metavar="GLOB", help="only names matching GLOB")


def run(args: argparse.Namespace) -> int:
    from ..views.tree import natural_sorted

    with opened(args) as model:
        names = natural_sorted(fnmatch.filter(model.tensors, args.filter))
        infos = [model.tensors[n] for n in names]
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "name": i.name,
                        "dtype": i.dtype,
                        "shape": list(i.shape),
                        "bytes": i.nbytes,
                        "file": i.file,
                    }
                    for i in infos
                ]
            )
        )
        return 0
    rows = [
        [i.name, i.dtype, str(list(i.shape)), human_bytes(i.nbytes), i.file or ""] for i in infos
    ]
    print_table(
        ["name", "dtype", "shape", "size", "file"],
        rows,
        right=("size",),
        drop_first=("file", "size", "dtype"),
    )
    return 0
