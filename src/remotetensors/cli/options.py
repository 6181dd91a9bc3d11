"""The command line's shared options: where to read from and how, turned into library options.

Every command that opens a location takes the same options (:func:`add_location_options`);
:func:`open_options` turns them into the keyword arguments of ``open_model``. Values are
checked here, before any request is made, and a bad value is a :class:`UsageError` naming the
option.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import RemoteTensorsError
from ..options import ReadOptions
from ..redact import redact_url

if TYPE_CHECKING:
    from ..models.sync import Model

DEFAULT_TIMEOUT_SECONDS = 20.0
"""The command line's wait for the next bytes of an answer (the library waits 60 s): a person
at a terminal would rather hear of a dead server soon."""

DEFAULT_RETRIES = 2
"""Retries after a failed request on the command line (the library makes 5 attempts)."""


class UsageError(RemoteTensorsError, ValueError):
    """A command-line value that cannot be used (named with the option it was given to)."""


def add_location_options(
    sub: argparse.ArgumentParser, *, json_flag: bool = True, many: bool = False
) -> None:
    """The location argument and the options of every command that reads one (``many``: any
    number of locations, for a scan)."""
    sub.add_argument(
        "location",
        nargs="*" if many else None,
        help="hf://org/name, s3://bucket/prefix/, https://..., a path"
        + (" (several: a scan, one table row or JSON line each)" if many else ""),
    )
    sub.add_argument("--revision", help="hub revision (branch, tag or commit)")
    sub.add_argument("--token", help="hub token (default: HF_TOKEN or the stored one)")
    sub.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="fsspec storage option (repeatable), e.g. --option endpoint_url=http://...; "
        "true, false, null and JSON objects ({...}) are passed as such, the rest as text",
    )
    sub.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="extra HTTP request header (repeatable), e.g. --header 'Authorization: Bearer ...'",
    )
    sub.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="requests in flight (>= 1; by default it adapts to the link)",
    )
    sub.add_argument("--file", help="a file in the folder or repo (e.g. one of several GGUF files)")
    sub.add_argument(
        "--variant",
        help="a diffusers pipeline's weights variant, e.g. fp16: each component's "
        "diffusion_pytorch_model.fp16.safetensors (components without it read their plain files)",
    )
    sub.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="HTTP: longest wait for the next bytes of an answer, per attempt "
        f"(default {DEFAULT_TIMEOUT_SECONDS:g})",
    )
    sub.add_argument(
        "--retries",
        type=int,
        default=DEFAULT_RETRIES,
        help=f"HTTP: retries of a failed request (default {DEFAULT_RETRIES})",
    )
    sub.add_argument(
        "--accept-whole-body-below",
        default="0",
        metavar="SIZE",
        help="HTTP: when a server ignores Range, accept whole files smaller than SIZE "
        "(e.g. 10MB; default 0: never)",
    )
    sub.add_argument(
        "--ca-bundle",
        metavar="PATH",
        help="HTTPS: a PEM file of CA certificates to verify servers with (default: "
        "SSL_CERT_FILE, REQUESTS_CA_BUNDLE, else certifi's bundle)",
    )
    sub.add_argument(
        "--no-cache",
        action="store_true",
        help="read everything over the network and keep nothing in the persistent cache",
    )
    if json_flag:
        sub.add_argument("--json", action="store_true", help="print JSON")


def open_options(args: argparse.Namespace) -> dict[str, Any]:
    """``open_model`` keyword arguments from the parsed options.

    Raises:
        UsageError: a value out of range or malformed.
    """
    if args.concurrency is not None and args.concurrency < 1:
        raise UsageError(f"--concurrency must be at least 1, got {args.concurrency}")
    if not args.timeout > 0:
        raise UsageError(f"--timeout must be more than 0 seconds, got {args.timeout:g}")
    if args.retries < 0:
        raise UsageError(f"--retries must be 0 or more, got {args.retries}")
    if args.ca_bundle is not None and not os.path.exists(args.ca_bundle):
        raise UsageError(f"--ca-bundle names no file or folder: {args.ca_bundle!r}")
    from ..sources.http.client import HttpOptions  # here: httpx is not needed for --help

    read = ReadOptions(cache=not args.no_cache)
    if args.concurrency:
        read = replace(read, max_concurrency=args.concurrency)
    http = HttpOptions(
        connect_timeout_seconds=min(args.timeout, HttpOptions().connect_timeout_seconds),
        read_timeout_seconds=args.timeout,
        max_attempts=args.retries + 1,
        headers=_headers(args.header),
        accept_whole_body_below_bytes=parse_size(
            args.accept_whole_body_below, "--accept-whole-body-below"
        ),
        ca_bundle=args.ca_bundle,
    )
    return {
        "revision": args.revision,
        "token": _token(args.token),
        "storage_options": _storage_options(args.option) or None,
        "options": read,
        "http_options": http,
        "variant": args.variant,
    }


# The values of --option and --header are never quoted in a message: they carry credentials
# (a secret key, a bearer token, a cookie). Their names are, and what is wrong with them.
_NOT_SHOWN = "not shown: it may hold a credential"


def _storage_options(items: list[str]) -> dict[str, Any]:
    storage: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            seen = f"{len(item)} characters without '='" if not sep else "no key before '='"
            raise UsageError(f"--option wants KEY=VALUE; got {seen} ({_NOT_SHOWN})")
        storage[key] = _option_value(key, value)
    return storage


def _option_value(key: str, text: str) -> Any:
    """``true``/``false``/``null`` and JSON objects and arrays as such, anything else as text.

    Numbers stay text: an all-digit access key must not turn into an int.

    Raises:
        UsageError: a value that starts as JSON and is not, named by ``key``.
    """
    if text in ("true", "false", "null") or text.lstrip().startswith(("{", "[")):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"--option {key}: the value is not valid JSON ({exc.msg} at character "
                f"{exc.pos}; the value is {_NOT_SHOWN})"
            ) from None
    return text


def _token(token: str | None) -> str | None:
    """``--token``, checked as the header it becomes (``Authorization: Bearer ...``).

    Raises:
        UsageError: it cannot be sent (a newline pasted with it, a space inside), not quoted.
    """
    from ..sources.http.head import HeadError, check_field  # here: not needed for --help

    if token is not None:
        try:
            check_field("Authorization", f"Bearer {token}")
        except HeadError:
            raise UsageError(
                "--token cannot be sent in an Authorization header: it holds a line break, "
                f"a control character or a character that is not ASCII ({_NOT_SHOWN})"
            ) from None
    return token


def _headers(items: list[str]) -> dict[str, str]:
    from ..sources.http.head import HeadError, check_field  # here: not needed for --help

    headers: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition(":")
        name, value = name.strip(), value.strip()
        if not sep:
            raise UsageError(
                f"--header wants 'NAME: VALUE'; got {len(item)} characters without ':' "
                f"({_NOT_SHOWN})"
            )
        try:
            check_field(name, value)
        except HeadError as exc:
            raise UsageError(f"--header: {exc} ({_NOT_SHOWN})") from None
        headers[name] = value
    return headers


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)\s*", re.IGNORECASE)
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_size(text: str, option: str) -> int:
    """``"10MB"`` -> 10_000_000, ``"4KiB"`` -> 4096, ``"512"`` -> 512 (bytes).

    Raises:
        UsageError: not a size.
    """
    match = _SIZE.fullmatch(text)
    if match is None:
        raise UsageError(f"{option} wants a size such as 512, 64KB or 10MiB, got {text!r}")
    unit = match.group(2).lower()
    scale = _UNITS[unit[:1] if unit[:1] in "kmgt" else ""]
    if unit[1:2] == "i":
        scale = 1024 ** ("kmgt".index(unit[0]) + 1)
    return int(float(match.group(1)) * scale)


def parse_slice(expr: str) -> tuple[Any, ...]:
    """``"1000:2000, :, 3"`` -> ``(slice(1000, 2000), slice(None), 3)``; ``...`` allowed.

    Bounds may be negative (``-10:`` is the last ten); the reader resolves them against the
    shape, as Python does.

    Raises:
        UsageError: for anything but integers, slices and ``...``.
    """
    items: list[Any] = []
    for part in (p.strip() for p in expr.split(",")):
        if part == "...":
            items.append(Ellipsis)
        elif ":" in part:
            bounds = [b.strip() for b in part.split(":")]
            if len(bounds) > 3:
                raise UsageError(f"bad slice {part!r} in --slice {expr!r}: at most start:stop:step")
            items.append(slice(*(_integer(b, part, expr) for b in bounds)))
        elif part:
            items.append(_integer(part, part, expr))
        else:
            raise UsageError(f"empty item in --slice {expr!r}")
    return tuple(items)


def _integer(text: str, part: str, expr: str) -> int | None:
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise UsageError(
            f"bad slice {part!r} in --slice {expr!r}: {text!r} is not an integer; "
            "write e.g. 10:20, -10: or :, 0:8"
        ) from None


def resolve_negative(index: tuple[Any, ...], shape: tuple[int, ...]) -> tuple[Any, ...]:
    """Count negative bounds from the end of their axis, as Python does (``-10:`` -> ``n-10:``).

    The library's ``get_slice`` follows the reference reader, which refuses negative bounds;
    a person at the command line means "from the end". Positive bounds are left for the
    reader to check.

    Raises:
        UsageError: a negative bound past the start of its axis.
    """
    if Ellipsis in index:
        at = index.index(Ellipsis)
        after = len(index) - at - 1  # items after the ellipsis index the last axes
        axes = [*range(at), -1, *range(len(shape) - after, len(shape))]
    else:
        axes = list(range(len(index)))
    resolved: list[Any] = []
    for item, axis in zip(index, axes, strict=True):
        if item is Ellipsis or axis < 0 or axis >= len(shape):
            resolved.append(item)
            continue
        size = shape[axis]

        def fix(bound: int | None, axis: int = axis, size: int = size) -> int | None:
            if bound is None or bound >= 0:
                return bound
            if bound + size < 0:
                raise UsageError(
                    f"--slice bound {bound} is before the start of axis {axis} (size {size})"
                )
            return bound + size

        if isinstance(item, slice):
            if item.step is not None and item.step < 0:
                raise UsageError("--slice steps must be positive")
            resolved.append(slice(fix(item.start), fix(item.stop), item.step))
        else:
            resolved.append(fix(item))
    return tuple(resolved)


@contextlib.contextmanager
def opened(args: argparse.Namespace) -> Iterator[Model]:
    """The model at ``args.location`` with the shared options, closed at the end; on a terminal
    a status line tells when nothing moves."""
    from ..models.sync import open_model
    from .status import StatusLine

    kwargs = open_options(args)
    location = args.location
    if args.file:
        location = f"{location.rstrip('/')}/{args.file.lstrip('/')}"
    with StatusLine(redact_url(location)):
        model = open_model(location, **kwargs)
        try:
            yield model
        finally:
            model.close()
