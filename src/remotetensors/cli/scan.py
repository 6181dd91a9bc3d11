"""``remotetensors params A B C …`` and ``params --from-file FILE``: a scan on the command line.

Prints a table (or JSON Lines with ``--json``: one object per location as it completes, with
``"location"`` and either the counts or ``"error"``), shows a progress bar with done, failed and
rate when stderr is a terminal, and exits 0 when every location succeeded, 1 when some failed
(the others are still printed).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TextIO

from ..options import DEFAULT_SCAN_CONCURRENCY, ReadOptions
from ..views.display import human_bytes, human_count
from .options import UsageError
from .table import print_table

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator

    from ..models.scan import ScanResult


def add_arguments(sub: argparse.ArgumentParser) -> None:
    """The scan's own options of ``params``."""
    sub.add_argument(
        "--from-file",
        metavar="FILE",
        help="read locations from FILE ('-' for stdin): one a line, '#' starts a comment",
    )
    sub.add_argument(
        "--models-at-once",
        type=int,
        default=DEFAULT_SCAN_CONCURRENCY,
        help=f"models opened at once by a scan (default {DEFAULT_SCAN_CONCURRENCY})",
    )


def is_scan(args: argparse.Namespace) -> bool:
    """Whether ``params`` was given several locations or a file of them."""
    return bool(args.from_file) or len(args.location) != 1


def read_locations(stream: TextIO) -> Iterator[str]:
    """Locations from a text stream: one a line; blank lines and ``#`` comments skipped."""
    for line in stream:
        text = line.split(" #", 1)[0].strip()
        if text and not text.startswith("#"):
            yield text


def run(args: argparse.Namespace, open_kwargs: dict[str, Any]) -> int:
    """Scan the locations of ``args`` with ``open_kwargs`` (the command line's shared options,
    as ``open_model`` keywords); returns the exit status (0 all succeeded, 1 otherwise).

    Raises:
        UsageError: no location given.
        OSError: the ``--from-file`` file cannot be read.
    """
    from ..models.scan import scan  # here: the scan machinery is not needed for --help

    if not args.location and not args.from_file:
        raise UsageError("params needs a location (or several, or --from-file FILE)")
    kwargs = dict(open_kwargs)
    kwargs["options"] = replace(kwargs.get("options") or ReadOptions(), progress=False)
    stream: TextIO | None = None
    if args.from_file:
        stream = sys.stdin if args.from_file == "-" else open(args.from_file, encoding="utf-8")  # noqa: SIM115
    try:
        locations = _chain(args.location, read_locations(stream) if stream else iter(()))
        return _report(
            scan(locations, concurrency=args.models_at_once, **kwargs),
            as_json=args.json,
        )
    finally:
        if stream is not None and stream is not sys.stdin:
            stream.close()


def _chain(first: list[str], rest: Iterator[str]) -> Iterator[str]:
    yield from first
    yield from rest


def _report(results: Iterator[ScanResult], *, as_json: bool) -> int:
    bar = _bar()
    rows: list[list[str]] = []
    done = failed = 0
    waited = 0.0
    quotas: dict[str, tuple[int, int]] = {}
    started = time.perf_counter()
    try:
        for result in results:
            done += 1
            failed += not result.ok
            waited += result.waited_seconds
            quotas = result.quotas or quotas
            if as_json:
                print(json.dumps(result.as_dict()), flush=True)
            else:
                rows.append(_row(result))
            if bar is not None:
                bar.update(1)
                bar.set_postfix(failed=failed, **quota_fields(result.quotas), refresh=False)
    finally:
        if bar is not None:
            bar.close()
    elapsed = time.perf_counter() - started
    if not as_json:
        if rows:
            print_table(
                ["location", "params", "quantization", "stored by dtype", "size", "files", "error"],
                rows,
                right=("params", "size", "files"),
            )
        room = ", ".join(f"{name} {left}" for name, left in quota_fields(quotas).items())
        print(
            f"{done} location(s), {failed} failed, {elapsed:.1f} s"
            f"{f', {waited:.1f} s waiting for rate limits' if waited else ''}"
            f"{f' (rate limits left: {room})' if room else ''}"
        )
    elif waited:
        print(f"remotetensors: waited {waited:.1f} s for rate limits", file=sys.stderr)
    return 1 if failed else 0


def quota_fields(quotas: dict[str, tuple[int, int]]) -> dict[str, str]:
    """The rate-limit buckets' room for the progress bar: ``{"api": "480/500", ...}`` (the
    host named too when several hosts said)."""
    hosts = {key.rsplit(" ", 1)[0] for key in quotas}
    fields = {}
    for key, (left, quota) in sorted(quotas.items()):
        name = key.rsplit(" ", 1)[1] if len(hosts) == 1 else key
        fields[name] = f"{left}/{quota}"
    return fields


def _row(result: ScanResult) -> list[str]:
    summary = result.summary
    if summary is None:
        return [result.location, "", "", "", "", "", f"{result.error_type}: {result.error}"]
    quant = summary.quantization
    quantization = ""
    if quant:
        bits = f" {quant['bits']}-bit" if quant.get("bits") else ""
        quantization = f"{quant['method']}{bits}"
    dtypes = ", ".join(f"{d} {human_count(n)}" for d, n in summary.by_dtype.items())
    bound = "" if summary.exact else "≤ "
    return [
        result.location,
        f"{bound}{human_count(summary.parameters)}",
        quantization,
        dtypes,
        human_bytes(summary.nbytes),
        str(summary.files),
        "",
    ]


def _bar() -> Any:
    if not sys.stderr.isatty():
        return None
    from tqdm.auto import tqdm

    return tqdm(unit="model", desc="scan", file=sys.stderr, leave=False)
