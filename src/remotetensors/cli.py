"""The command line: ``remotetensors params|memory|info|tree|ls|get|demo``.

Also ``python -m remotetensors``. Every failure is one line on stderr, ``remotetensors: error:
...``, and exit status 1 (2 for a malformed command line, as argparse does); Ctrl-C exits with
130 after one line. On a terminal a status line shows what is being waited for when nothing
moves for a second or two. ``--json`` prints data as JSON.

Adding a command: write its logic in a module of its own, then register it in :func:`_parser`
with ``command(name, help, run)`` (and ``location_options(sub)`` when it reads a location);
``run(args)`` returns the exit status. :func:`opened` opens the location with every shared
option applied and the status line running.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__, scan_cli
from .cli_options import add_location_options, open_options, parse_slice, resolve_negative
from .display import human_bytes, human_count, shown_metadata
from .errors import RemoteTensorsError

if TYPE_CHECKING:
    from .sync import Model

# The commands import what they use when they run, so that ``--help`` and a usage error do not
# pay for httpx, numpy and the model code (see tests/unit/test_import_cost.py).

__all__ = ["main", "main_exit", "opened", "parse_slice"]

Run = Callable[[argparse.Namespace], int]

DEBUG_VARIABLE = "REMOTETENSORS_DEBUG"
"""Set to 1 to get the traceback of an unexpected failure instead of its one-line summary."""


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(_join_dash_values(sys.argv[1:] if argv is None else argv))
    try:
        with _one_line_warnings():
            return int(args.run(args))
    except KeyboardInterrupt:
        print("remotetensors: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (``| head``): stop quietly, as other tools do, and
        # keep Python from complaining when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (RemoteTensorsError, ValueError, OSError) as exc:
        _error(str(exc))
        return 1
    except Exception as exc:
        if os.environ.get(DEBUG_VARIABLE):
            raise
        _error(
            f"{type(exc).__name__}: {exc} (unexpected; {DEBUG_VARIABLE}=1 shows the traceback, "
            "please report it)"
        )
        return 1


def main_exit() -> None:
    """Console-script entry point: run and exit with the status."""
    sys.exit(main())


@contextlib.contextmanager
def _one_line_warnings() -> Iterator[None]:
    """Warnings (a config that cannot be used, ...) as ``remotetensors: warning: ...`` lines,
    not Python's two-line form with a source line from asyncio."""
    shown = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        one_line = " ".join(str(message).split())
        print(f"remotetensors: warning: {one_line}", file=sys.stderr)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def _error(message: str) -> None:
    one_line = " ".join(message.split())
    print(f"remotetensors: error: {one_line}", file=sys.stderr)


# Options whose values may start with '-' and a digit (``--slice -10:``), which argparse would
# otherwise take for an option.
_DASH_VALUE_OPTIONS = ("--slice",)


def _join_dash_values(argv: list[str]) -> list[str]:
    joined: list[str] = []
    items = iter(argv)
    for item in items:
        if item in _DASH_VALUE_OPTIONS:
            value = next(items, None)
            if value is not None and value[:1] == "-" and value[1:2].isdigit():
                joined.append(f"{item}={value}")
                continue
            joined.append(item)
            if value is not None:
                joined.append(value)
            continue
        joined.append(item)
    return joined


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="remotetensors",
        description="Read safetensors, bintensors and GGUF files where they live.",
    )
    parser.add_argument("--version", action="version", version=f"remotetensors {__version__}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    def command(name: str, help_text: str, run: Run) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(run=run)
        return sub

    def location_options(
        sub: argparse.ArgumentParser, *, json_flag: bool = True, many: bool = False
    ) -> None:
        add_location_options(sub, json_flag=json_flag, many=many)

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
    location_options(command("tree", "Show modules as a tree, repeated blocks folded.", _tree))
    ls = command("ls", "List tensors: name, dtype, shape, size, file.", _ls)
    location_options(ls)
    ls.add_argument("--filter", default="*", metavar="GLOB", help="only names matching GLOB")
    get = command("get", "Fetch one tensor (or a slice) into a .npy or .safetensors file.", _get)
    location_options(get)
    get.add_argument("name", help="tensor name")
    get.add_argument(
        "--slice",
        dest="slice_expr",
        help="e.g. '1000:2000', ':, 0:8' or '-10:' (the last ten)",
    )
    get.add_argument(
        "-o",
        "--output",
        required=True,
        help="FILE.npy (BF16/F8/F4 stored as float32, exactly) or FILE.safetensors (any dtype)",
    )
    command("demo", "Serve a sample checkpoint on loopback and read it (offline).", _demo)
    return parser


@contextlib.contextmanager
def opened(args: argparse.Namespace) -> Iterator[Model]:
    """The model at ``args.location`` with the shared options, closed at the end; on a terminal
    a status line tells when nothing moves."""
    from .cli_status import StatusLine
    from .sync import open_model

    kwargs = open_options(args)
    location = args.location
    if args.file:
        location = f"{location.rstrip('/')}/{args.file.lstrip('/')}"
    with StatusLine(location):
        model = open_model(location, **kwargs)
        try:
            yield model
        finally:
            model.close()


def _print_table(
    headers: list[str],
    rows: list[list[str]],
    *,
    right: tuple[str, ...] = (),
    drop_first: tuple[str, ...] = (),
) -> None:
    from .cli_table import render

    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    print(render(headers, rows, right=right, width=width, drop_first=drop_first))


def _params(args: argparse.Namespace) -> int:
    from .reports import params_report, params_text

    if scan_cli.is_scan(args):
        return scan_cli.run(args, open_options(args), _print_table)
    args.location = args.location[0]
    with opened(args) as model:
        report = params_report(model)
    if args.json:
        print(json.dumps(report))
        return 0
    lines, headers, rows = params_text(report)
    print("\n".join(lines))
    _print_table(headers, rows, right=("parameters", "human", "bits/weight"))
    return 0


def _memory(args: argparse.Namespace) -> int:
    from .reports import memory_report, memory_text

    with opened(args) as model:
        report = memory_report(
            model, context=args.context, batch=args.batch, kv_dtype=args.kv_dtype
        )
    print(json.dumps(report) if args.json else "\n".join(memory_text(report)))
    return 0


def _info(args: argparse.Namespace) -> int:
    from .formats.gguf import describe_lines

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
    print(f"  parameters: {human_count(result['parameters'])} ({result['parameters']:,})")
    print(f"  data:       {human_bytes(result['bytes'])}")
    if "gguf" in formats and result["metadata"]:
        print(describe_lines(result["metadata"], result["parameters"], result["bytes"]))
    elif result["metadata"]:
        print(f"  metadata:   {json.dumps(result['metadata'])}")
    rows = [
        [name, str(f["tensors"]), human_bytes(f["header_bytes"]), human_bytes(f["file_bytes"])]
        for name, f in files.items()
    ]
    _print_table(["file", "tensors", "header", "size"], rows, right=("tensors", "header", "size"))
    return 0


def _tree(args: argparse.Namespace) -> int:
    from .tree_command import run_tree

    with opened(args) as model:
        return run_tree(model, as_json=args.json)


def _ls(args: argparse.Namespace) -> int:
    from .tree import natural_sorted

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
    _print_table(
        ["name", "dtype", "shape", "size", "file"],
        rows,
        right=("size",),
        drop_first=("file", "size", "dtype"),
    )
    return 0


def _get(args: argparse.Namespace) -> int:
    from .cli_output import check_output, save

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


def _demo(args: argparse.Namespace) -> int:
    from .demo import CountingServer, write_sample_checkpoint

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
