"""Tables for the command line that never cut a cell.

Tensor names are what a reader needs whole (``q_proj`` and ``k_proj`` differ only at the end),
so a table that is too wide for the terminal drops its less important columns first, and if the
first column alone is still too wide, each row's first cell gets a line of its own with the
other cells indented below it. Numbers are right-aligned, under right-aligned headers.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence

GAP = "  "


def render(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: Sequence[str] = (),
    width: int | None = None,
    drop_first: Sequence[str] = (),
) -> str:
    """The table as text.

    Args:
        headers: column names; the first column is never dropped.
        rows: cells, as many per row as headers.
        right: names of columns to right-align (numbers).
        width: the terminal's columns; None for output that is piped (every column, any width).
        drop_first: columns to leave out, in this order, while the table is wider than ``width``.

    Returns:
        Lines joined by newlines, without trailing spaces.
    """
    keep = list(range(len(headers)))
    if width is not None:
        for name in drop_first:
            if _width(headers, rows, keep) <= width:
                break
            if name in headers and headers.index(name) in keep and headers.index(name) != 0:
                keep.remove(headers.index(name))
        if _width(headers, rows, keep) > width:
            return _stacked(headers, rows, keep, right)
    return _columns(headers, rows, keep, right)


def _widths(
    headers: Sequence[str], rows: Sequence[Sequence[str]], keep: Sequence[int]
) -> list[int]:
    return [max([len(headers[i])] + [len(row[i]) for row in rows]) for i in keep]


def _width(headers: Sequence[str], rows: Sequence[Sequence[str]], keep: Sequence[int]) -> int:
    return sum(_widths(headers, rows, keep)) + len(GAP) * (len(keep) - 1)


def _line(cells: Sequence[str], widths: Sequence[int], aligned_right: Sequence[bool]) -> str:
    parts = [
        c.rjust(w) if r else c.ljust(w)
        for c, w, r in zip(cells, widths, aligned_right, strict=True)
    ]
    return GAP.join(parts).rstrip()


def _columns(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    keep: Sequence[int],
    right: Sequence[str],
) -> str:
    widths = _widths(headers, rows, keep)
    aligned = [headers[i] in right for i in keep]
    lines = [_line([headers[i] for i in keep], widths, aligned)]
    lines += [_line([row[i] for i in keep], widths, aligned) for row in rows]
    return "\n".join(lines)


def _stacked(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    keep: Sequence[int],
    right: Sequence[str],
) -> str:
    """First cell on a line of its own, the rest as an indented table below it."""
    rest = keep[1:]
    if not rest:
        return "\n".join([headers[0]] + [row[0] for row in rows])
    widths = _widths(headers, rows, rest)
    aligned = [headers[i] in right for i in rest]
    lines = [headers[0], "    " + _line([headers[i] for i in rest], widths, aligned)]
    for row in rows:
        lines.append(row[0])
        lines.append("    " + _line([row[i] for i in rest], widths, aligned))
    return "\n".join(lines)


def print_table(
    headers: list[str],
    rows: list[list[str]],
    *,
    right: tuple[str, ...] = (),
    drop_first: tuple[str, ...] = (),
) -> None:
    """Print a table on stdout, as wide as the terminal when it is one (see :func:`render`)."""
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    print(render(headers, rows, right=right, width=width, drop_first=drop_first))
