"""The command line: ``remotetensors params|memory|info|tree|ls|get|demo|cache|verify``.

Also ``python -m remotetensors``. Every failure is one line on stderr, ``remotetensors: error:
...``, and exit status 1 (2 for a malformed command line, as argparse does); Ctrl-C exits with
130 after one line. On a terminal a status line shows what is being waited for when nothing
moves for a second or two. ``--json`` prints data as JSON.

Adding a command: a module of its own in this package, named as the command, with ``HELP``
(one line), ``EXAMPLE`` (one command line, listed by ``--help``), ``add_arguments(sub)``
(``options.add_location_options(sub)`` when it reads a location) and ``run(args)``, which
returns the exit status; then list it in :data:`COMMANDS`.
:func:`.options.opened` opens the location with every shared option applied and the status line
running; :func:`.table.print_table` prints a table that fits the terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import textwrap
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TextIO

from .. import __version__
from ..errors import RemoteTensorsError
from ..redact import redact_text
from . import cache, demo, get, info, ls, memory, params, tree, verify
from .options import opened, parse_slice

if TYPE_CHECKING:
    from types import ModuleType as Command

# Each command is a module with ``HELP``, ``add_arguments(sub)`` and ``run(args) -> int``. The
# commands import what they use when they run, so that ``--help`` and a usage error do not pay
# for httpx, numpy and the model code (see tests/unit/test_import_cost.py).

__all__ = ["DEBUG_VARIABLE", "main", "main_exit", "opened", "parse_slice"]

DEBUG_VARIABLE = "REMOTETENSORS_DEBUG"
"""Set to 1 to get the traceback of an unexpected failure instead of its one-line summary."""


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(_join_dash_values(sys.argv[1:] if argv is None else argv))
    try:
        with _one_line_warnings():
            return _run(args)
    except KeyboardInterrupt:
        print("remotetensors: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (``| head``): stop quietly, as other tools do, and
        # keep Python from complaining when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (RemoteTensorsError, OSError) as exc:
        # What a user can mend: our own errors (a bad argument is a UsageError) and the
        # system's. A bare ValueError is a bug of ours, shown as one below.
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
        one_line = " ".join(redact_text(str(message)).split())
        print(_fit_terminal(f"remotetensors: warning: {one_line}", sys.stderr), file=sys.stderr)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def _fit_terminal(line: str, stream: TextIO) -> str:
    """``line`` wrapped to the terminal's width when ``stream`` is a terminal (a cut word
    would be lost off the right edge), else as it is: logs and pipes get one line each."""
    if not stream.isatty():
        return line
    width = shutil.get_terminal_size().columns
    return textwrap.fill(line, width, subsequent_indent="  ", break_on_hyphens=False)


def _error(message: str) -> None:
    # Our messages name URLs redacted already; another library's (a warning, an unexpected
    # error, the system's) may quote one whole.
    one_line = " ".join(redact_text(message).split())
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


# The commands in the order ``--help`` lists them.
COMMANDS: tuple[Command, ...] = (params, memory, info, tree, ls, get, demo, cache, verify)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="remotetensors",
        description="Read safetensors, bintensors and GGUF files where they live.",
        epilog=_examples(),
        # The examples are one per line, as typed: argparse would rewrap them into one paragraph.
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"remotetensors {__version__}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    for module in COMMANDS:
        name = module.__name__.rsplit(".", 1)[-1]
        sub = commands.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        # The command's own module is asked for ``run`` when the command runs (a test may
        # replace it); the demo also gets ``main``, to run the commands it shows.
        sub.set_defaults(command=module)
    return parser


def _examples() -> str:
    """``--help``'s closing list: each command's one-line ``EXAMPLE``, in :data:`COMMANDS`'
    order."""
    lines = [f"  {module.EXAMPLE}" for module in COMMANDS]
    return "examples (one per command):\n" + "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    if args.command is demo:
        return demo.run(args, main=main)
    return int(args.command.run(args))
