"""``remotetensors info LOCATION``: format, metadata, files and sizes."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..views.display import human_bytes, human_count, shown_metadata
from .options import add_location_options, opened
from .table import print_table

HELP = "Show format, metadata, files and sizes."
# One line for --help's list of examples.
EXAMPLE = "remotetensors info hf://openai-community/gpt2"


def add_arguments(sub: argparse.ArgumentParser) -> None:
    add_location_options(sub)
    sub.add_argument(
        "--kerchunk",
        metavar="OUT.json",
        help="also write kerchunk references of the tensors to OUT.json (fsspec's reference "
        "filesystem and zarr read them; hub files at the commit read)",
    )


def run(args: argparse.Namespace) -> int:
    from ..views.display import describe_lines
    from ..views.pipelines import parts_lines, parts_report
    from ..views.reports import active_words

    with opened(args) as model:
        files: dict[str, dict[str, Any]] = {
            name: {
                "format": index.format,
                "header_bytes": index.header_length,
                "file_bytes": index.file_size,
                "tensors": len(index),
                "metadata": shown_metadata(index.format, index.metadata, index.tensors),
            }
            for name, index in model.index.files.items()
        }
        dtypes = sorted(model.parameter_count())
        result: dict[str, Any] = {
            "location": model.location,  # its secrets redacted
            "files": files,
            "tensors": len(model.tensors),
            "dtypes": dtypes,
            "parameters": model.num_parameters,
            "active_parameters": model.num_active_parameters,
            "bytes": model.nbytes,
            "metadata": shown_metadata(
                next(iter(files.values()))["format"], model.metadata, model.tensors
            ),
            "unmapped": list(model.index.unmapped),
            **parts_report(model),
        }
        if args.kerchunk:
            from ..integrations.zarr.kerchunk import write_references

            write_references(model.to_kerchunk(), args.kerchunk)
            result["kerchunk"] = args.kerchunk
        moe = model.true_count.moe
        active = active_words(
            result["active_parameters"],
            model.true_count.active_exact,
            moe.as_dict() if moe is not None else None,
            phrase="per token",
        )
    if args.json:
        print(json.dumps(result))
        return 0
    formats = sorted({f["format"] for f in files.values()})
    print(model.location)
    print(f"  format:     {', '.join(str(f) for f in formats)}")
    print(f"  tensors:    {result['tensors']} ({', '.join(dtypes)})")
    print(f"  parameters: {human_count(result['parameters'])} ({result['parameters']:,})")
    if active is not None:
        print(f"  active:     {active}")
    print(f"  data:       {human_bytes(result['bytes'])}")
    for line in parts_lines(result):
        print(f"  {line}")
    if "gguf" in formats and result["metadata"]:
        print(describe_lines(result["metadata"], result["parameters"], result["bytes"]))
    elif result["metadata"]:
        print(f"  metadata:   {json.dumps(result['metadata'])}")
    rows = [
        [name, str(f["tensors"]), human_bytes(f["header_bytes"]), human_bytes(f["file_bytes"])]
        for name, f in files.items()
    ]
    print_table(["file", "tensors", "header", "size"], rows, right=("tensors", "header", "size"))
    if args.kerchunk:
        print(f"  kerchunk:   {args.kerchunk}")
    return 0
