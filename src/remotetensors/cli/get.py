"""``remotetensors get LOCATION NAME -o FILE``: one tensor, or a slice of it, into a ``.npy`` or
``.safetensors`` file (see :mod:`.output`)."""

from __future__ import annotations

import argparse
import json

from ..views.display import human_bytes
from .options import add_location_options, opened, parse_slice, resolve_negative

HELP = "Fetch one tensor (or a slice) into a .npy or .safetensors file."
# One line for --help's list of examples.
EXAMPLE = "remotetensors get hf://openai-community/gpt2 wte.weight --slice 0:10 -o rows.npy"


def add_arguments(sub: argparse.ArgumentParser) -> None:
    add_location_options(sub)
    sub.add_argument("name", help="tensor name")
    sub.add_argument(
        "--slice",
        dest="slice_expr",
        help="e.g. '1000:2000', ':, 0:8' or '-10:' (the last ten)",
    )
    sub.add_argument(
        "-o",
        "--output",
        required=True,
        help="FILE.npy (BF16/F8/F4 stored as float32, exactly) or FILE.safetensors (any dtype)",
    )


def run(args: argparse.Namespace) -> int:
    from pathlib import Path  # here: pathlib costs --help 3 ms (it imports urllib.parse)

    from .output import check_output, save

    output = Path(args.output)
    check_output(output)  # before the download, not after it
    index = parse_slice(args.slice_expr) if args.slice_expr else None
    with opened(args) as model:
        view = model.get_slice(args.name)  # an unknown name fails here, with suggestions
        info = model.tensors[args.name]
        if index is not None:
            array = view[resolve_negative(index, info.shape)]
        else:
            array = model.get_tensor(args.name)
    note = save(output, args.name, array, info.dtype)
    if args.json:
        result = {
            "name": args.name,
            "dtype": info.dtype,
            "shape": list(array.shape),
            "output": str(output),
            "bytes": output.stat().st_size,
            "note": note,
        }
        print(json.dumps(result))
        return 0
    print(f"{args.name} {list(array.shape)} {info.dtype} -> {output} ({human_bytes(array.nbytes)})")
    if note:
        print(f"  {note}")
    return 0
