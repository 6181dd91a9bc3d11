"""The command line: ``remotetensors params|memory|info|ls|get|demo``.

Also ``python -m remotetensors``. Every library error becomes one line on stderr and exit
status 1; Ctrl-C exits with 130. Tables use rich in a terminal and plain columns when piped;
``--json`` prints data as JSON.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from . import scan_cli
from .demo import CountingServer, write_safetensors, write_sample_checkpoint
from .display import human_bytes, human_count, plain_table, shown_metadata
from .errors import RemoteTensorsError
from .formats.gguf import describe_lines
from .options import ReadOptions
from .reports import memory_report, memory_text, params_report, params_text
from .sync import Model, open_model


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        print("remotetensors: interrupted", file=sys.stderr)
        return 130
    except (RemoteTensorsError, ValueError, OSError) as exc:
        print(f"remotetensors: error: {exc}", file=sys.stderr)
        return 1


def main_exit() -> None:
    """Console-script entry point: run and exit with the status."""
    sys.exit(main())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="remotetensors",
        description="Read safetensors, bintensors and GGUF files where they live.",
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    def command(name: str, help_text: str, run: Any) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(run=run)
        return sub

    def location_options(
        sub: argparse.ArgumentParser, *, json_flag: bool = True, many: bool = False
    ) -> None:
        sub.add_argument(
            "location",
            nargs="*" if many else None,
            help="hf://org/name, s3://bucket/prefix/, https://..., a path"
            + (" (several: a scan, one line or JSON object each)" if many else ""),
        )
        sub.add_argument("--revision", help="hub revision (branch, tag or commit)")
        sub.add_argument("--token", help="hub token (default: HF_TOKEN or the stored one)")
        sub.add_argument(
            "--option",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="fsspec storage option (repeatable), e.g. --option endpoint_url=http://...",
        )
        sub.add_argument("--concurrency", type=int, default=None, help="requests in flight")
        sub.add_argument(
            "--file", help="a file in the folder or repo (e.g. one of several GGUF files)"
        )
        if json_flag:
            sub.add_argument("--json", action="store_true", help="print JSON")

    params = command(
        "params", "Count parameters: the true total, then by dtype as stored.", _params
    )
    location_options(params, many=True)
    scan_cli.add_arguments(params)
    memory = command("memory", "Memory to serve: weights as stored plus the KV cache.", _memory)
    location_options(memory)
    memory.add_argument("--context", type=int, default=None, help="tokens per sequence")
    memory.add_argument("--batch", type=int, default=1, help="sequences at once (default 1)")
    memory.add_argument("--kv-dtype", default=None, help="KV cache dtype: bf16, f16, fp8, ...")
    location_options(command("info", "Show format, metadata, files and sizes.", _info))
    ls = command("ls", "List tensors: name, dtype, shape, size, file.", _ls)
    location_options(ls)
    ls.add_argument("--filter", default="*", metavar="GLOB", help="only names matching GLOB")
    get = command("get", "Fetch one tensor (or a slice) into a .npy or .safetensors file.", _get)
    location_options(get)
    get.add_argument("name", help="tensor name")
    get.add_argument("--slice", dest="slice_expr", help="e.g. '1000:2000' or ':, 0:8'")
    get.add_argument("-o", "--output", required=True, help="FILE.npy or FILE.safetensors")
    command("demo", "Serve a sample checkpoint on loopback and read it (offline).", _demo)
    return parser


def _open(args: argparse.Namespace) -> Model:
    storage: dict[str, str] = {}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--option wants KEY=VALUE, got {item!r}")
        storage[key] = value
    options = ReadOptions(max_concurrency=args.concurrency) if args.concurrency else None
    location = args.location
    if args.file:
        location = f"{location.rstrip('/')}/{args.file.lstrip('/')}"
    return open_model(
        location,
        revision=args.revision,
        token=args.token,
        storage_options=storage or None,
        options=options,
    )


def _print_table(headers: list[str], rows: list[list[str]], title: str | None = None) -> None:
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title)
        for header in headers:
            table.add_column(header, justify="right" if header in ("size", "params") else "left")
        for row in rows:
            table.add_row(*row)
        Console().print(table)
    else:
        if title:
            print(title)
        print(plain_table(headers, rows))


def _params(args: argparse.Namespace) -> int:
    if scan_cli.is_scan(args):
        return scan_cli.run(args, _print_table)
    args.location = args.location[0]
    with _open(args) as model:
        report = params_report(model)
    if args.json:
        print(json.dumps(report))
        return 0
    lines, headers, rows = params_text(report)
    print("\n".join(lines))
    _print_table(headers, rows)
    return 0


def _memory(args: argparse.Namespace) -> int:
    with _open(args) as model:
        report = memory_report(
            model, context=args.context, batch=args.batch, kv_dtype=args.kv_dtype
        )
    print(json.dumps(report) if args.json else "\n".join(memory_text(report)))
    return 0


def _info(args: argparse.Namespace) -> int:
    with _open(args) as model:
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
            "location": args.location,
            "files": files,
            "tensors": len(model.tensors),
            "dtypes": dtypes,
            "parameters": model.num_parameters,
            "bytes": model.nbytes,
            "metadata": shown_metadata(
                next(iter(files.values()))["format"], model.metadata, model.tensors
            ),
            "unmapped": list(model.index.unmapped),
        }
    if args.json:
        print(json.dumps(result))
        return 0
    formats = sorted({f["format"] for f in files.values()})
    print(f"{args.location}")
    print(f"  format:     {', '.join(str(f) for f in formats)}")
    print(f"  tensors:    {result['tensors']} ({', '.join(dtypes)})")
    print(f"  parameters: {human_count(model.num_parameters)} ({model.num_parameters:,})")
    print(f"  data:       {human_bytes(model.nbytes)}")
    if "gguf" in formats and result["metadata"]:
        print(describe_lines(result["metadata"], model.num_parameters, model.nbytes))
    elif result["metadata"]:
        print(f"  metadata:   {json.dumps(result['metadata'])}")
    rows = [
        [name, str(len(index)), human_bytes(index.header_length), human_bytes(index.file_size)]
        for name, index in model.index.files.items()
    ]
    _print_table(["file", "tensors", "header", "size"], rows)
    return 0


def _ls(args: argparse.Namespace) -> int:
    with _open(args) as model:
        infos = [i for n, i in model.tensors.items() if fnmatch.fnmatch(n, args.filter)]
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
    _print_table(["name", "dtype", "shape", "size", "file"], rows)
    return 0


def parse_slice(expr: str) -> tuple[Any, ...]:
    """``"1000:2000, :, 3"`` -> ``(slice(1000, 2000), slice(None), 3)``; ``...`` allowed.

    Raises:
        ValueError: for anything but ints, slices and ``...``.
    """
    items: list[Any] = []
    for part in (p.strip() for p in expr.split(",")):
        if part == "...":
            items.append(Ellipsis)
        elif ":" in part:
            bounds = [b.strip() for b in part.split(":")]
            if len(bounds) > 3:
                raise ValueError(f"bad slice {part!r} in --slice")
            numbers = [int(b) if b else None for b in bounds]
            items.append(slice(*numbers))
        elif part:
            items.append(int(part))
        else:
            raise ValueError(f"empty item in --slice {expr!r}")
    return tuple(items)


def _get(args: argparse.Namespace) -> int:
    output = Path(args.output)
    if output.suffix not in (".npy", ".safetensors"):
        raise ValueError(f"--output must end in .npy or .safetensors, got {output.name!r}")
    with _open(args) as model:
        if args.slice_expr:
            array = model.get_slice(args.name)[parse_slice(args.slice_expr)]
        else:
            array = model.get_tensor(args.name)
    if output.suffix == ".npy":
        np.save(output, array)
    else:
        write_safetensors(output, {args.name: array})
    print(
        f"{args.name} {list(array.shape)} {array.dtype} -> {output} ({human_bytes(array.nbytes)})"
    )
    return 0


def _demo(args: argparse.Namespace) -> int:
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
        try:
            print(f"Serving a sample sharded checkpoint ({human_bytes(size)}) at {url}")
            for step in steps:
                shown = " ".join(f"'{a}'" if "*" in a else a for a in step)
                print(f"\n$ remotetensors {shown}")
                if "-o" in step:
                    step[-1] = str(root / step[-1])
                server.reset()
                status = main(step)
                if status:
                    return status
                print(
                    f"  crossed the network: {server.requests} requests, "
                    f"{human_bytes(server.bytes_sent)} of a {human_bytes(size)} checkpoint"
                )
        finally:
            server.stop()
    return 0
