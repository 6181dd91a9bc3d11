"""Text views of counts, sizes and tensor tables, for terminals and pipes."""

from __future__ import annotations

from collections.abc import Sequence


def human_count(value: int) -> str:
    """``22_700_000`` -> ``"22.7M"`` (K, M, B, T; plain below a thousand)."""
    for unit, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return str(value)


def human_bytes(value: int) -> str:
    """``45_400_000`` -> ``"45.4 MB"`` (decimal units, as the hub shows sizes)."""
    for unit, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, for output that is piped or saved."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(lines)
