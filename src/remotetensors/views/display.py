"""Text and HTML views of counts, sizes and tensor tables, for terminals, pipes and notebooks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..index import TensorInfo
    from ..quantization import LogicalTensor
    from ..sources.base import Traffic
    from .tree import Leaf, Section, Tree


def human_count(value: int) -> str:
    """``22_700_000`` -> ``"22.7M"`` (K, M, B, T; plain below a thousand)."""
    return _scaled(value, (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)), "")


def human_bytes(value: int) -> str:
    """``45_400_000`` -> ``"45.4 MB"`` (decimal units, as the hub shows sizes)."""
    units = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3))
    return _scaled(value, units, " ") if value >= 1000 else f"{value} B"


def _scaled(value: int, units: Sequence[tuple[str, int]], space: str) -> str:
    """``value`` in the largest of ``units`` (largest first) that it reaches, to one decimal;
    a value that rounds up to 1000 of a unit is shown in the next (``999_960_000`` is
    ``1.0B``, not ``1000.0M``)."""
    for i, (unit, size) in enumerate(units):
        if value >= size:
            shown = f"{value / size:.1f}"
            if shown == "1000.0" and i > 0:
                unit, size = units[i - 1]
                shown = f"{value / size:.1f}"
            return f"{shown}{space}{unit}"
    return str(value)


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


def shown_metadata(
    file_format: str, metadata: Mapping[str, Any] | None, tensors: Mapping[str, TensorInfo]
) -> dict[str, Any] | None:
    """Metadata as ``info`` shows it: as is, except GGUF's, which is summarised (architecture,
    context length, quantization, tokenizer size; arrays by their length, not their contents)."""
    if metadata is None:
        return None
    if file_format == "gguf":
        from ..formats.gguf_files import describe

        return describe(metadata, tensors)
    return dict(metadata)


# --- the model tree, as HTML for notebooks and as text for terminals ---------------------------
#
# Inline styles only (notebook front ends and static exports strip <style> and scripts), and
# colours that read on light and dark backgrounds alike: text inherits the theme's colour,
# backgrounds are translucent grey, accents are mid-tones.

MAX_ROWS_PER_TABLE = 100
"""Rows of one table in a view; the rest are summarised in one line."""

MAX_ITEMS_PER_LEVEL = 60
"""Rows and sections at one level of a view; the rest are summarised in one line."""

_BOX = (
    "font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:13px;"
    "line-height:1.45;color:inherit;max-width:1100px"
)
_TABLE = "border-collapse:collapse;margin:4px 0 6px 0;font-size:12px;color:inherit"
_TH = (
    "text-align:left;padding:2px 10px 2px 4px;border-bottom:1px solid rgba(127,127,127,0.5);"
    "background:rgba(127,127,127,0.12);font-weight:600"
)
_TD = "text-align:left;padding:1px 10px 1px 4px;border-bottom:1px solid rgba(127,127,127,0.15)"
_TD_NUM = _TD.replace("text-align:left", "text-align:right")
_MUTED = "opacity:0.72"
_CODE = "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px"
_SUMMARY = "cursor:pointer;padding:2px 0"
_NEST = "margin-left:1.1em;padding-left:0.6em;border-left:2px solid rgba(127,127,127,0.3)"
_BADGE = "display:inline-block;padding:0 5px;border-radius:3px;font-size:11px;margin-left:4px;"
_PACKED = _BADGE + "border:1px solid #c27c0e;color:#c27c0e"
_AUX = _BADGE + "border:1px solid #6f86a8;color:#6f86a8"
_COUNT = "font-weight:600;color:#3a8fd6"


def _code(text: str) -> str:
    return f'<code style="{_CODE}">{escape(text)}</code>'


def traffic_words(traffic: Traffic) -> str:
    """``"7 requests, 48.2 kB, 0.03 s"``."""
    plural = "" if traffic.requests == 1 else "s"
    return (
        f"{traffic.requests:,} request{plural}, {human_bytes(traffic.bytes)}, "
        f"{traffic.seconds:.2f} s"
    )


def _totals_lines(tree: Tree, counted_as: str) -> list[str]:
    """Totals as text lines: parameters (true, with the stored count when they differ),
    bytes, files, dtypes, tensors."""
    lines = []
    count = f"{human_count(tree.parameters)} parameters ({tree.parameters:,})"
    if tree.parameters != tree.stored_elements:
        count += f"; {human_count(tree.stored_elements)} elements as stored"
    elif counted_as != "parameters":
        count = f"{human_count(tree.stored_elements)} {counted_as} ({tree.stored_elements:,})"
    files = f", {len(tree.files)} file{'s' if len(tree.files) != 1 else ''}" if tree.files else ""
    lines.append(f"{count} · {human_bytes(tree.nbytes)}{files}")
    dtypes = ", ".join(f"{d} {human_count(n)}" for d, n in tree.dtypes.items())
    tensors = f"{tree.tensors:,} tensors"
    marks = []
    if tree.packed:
        marks.append(f"{tree.packed:,} packed")
    if tree.auxiliary:
        marks.append(f"{tree.auxiliary:,} quantization auxiliary")
    if marks:
        tensors += f" ({', '.join(marks)})"
    lines.append(f"{tensors} · dtypes: {dtypes}")
    return lines


def _section_words(section: Section) -> str:
    each = " each" if section.count > 1 else ""
    inner = (
        f"{section.tensors} tensor{'s' if section.tensors != 1 else ''}, "
        f"{human_count(section.parameters)} parameters{each}"
    )
    if section.count == 1:
        return f"{inner}, {human_bytes(section.nbytes)}"
    return (
        f"{section.count} \u00d7 ({inner}) · {human_bytes(section.nbytes * section.count)} in all"
    )


def _marks_html(leaf: Leaf) -> str:
    if leaf.role != "weight":
        return f'<span style="{_AUX}" title="quantization bookkeeping, not counted">aux</span>'
    if leaf.packing:
        return f'<span style="{_PACKED}" title="{escape(leaf.packing)}">packed</span>'
    return ""


def _table_html(rows: list[Leaf], prefix: str, show_files: bool) -> str:
    headers = ["name", "dtype", "shape", "parameters", "size"] + (["file"] if show_files else [])
    parts = [
        f'<table style="{_TABLE}"><tr>'
        + "".join(f'<th style="{_TH}">{h}</th>' for h in headers)
        + "</tr>"
    ]
    for leaf in rows[:MAX_ROWS_PER_TABLE]:
        name = leaf.name or prefix.rsplit(".", 1)[-1]
        params = f"{leaf.parameters:,}" if leaf.role == "weight" else "—"
        cells = [
            f'<td style="{_TD}" title="{escape(leaf.info.name)}">{_code(name)}'
            f"{_marks_html(leaf)}</td>",
            f'<td style="{_TD}">{escape(leaf.info.dtype)}</td>',
            f'<td style="{_TD}">{escape(str(list(leaf.info.shape)))}</td>',
            f'<td style="{_TD_NUM}">{params}</td>',
            f'<td style="{_TD_NUM}">{human_bytes(leaf.info.nbytes)}</td>',
        ]
        if show_files:
            cells.append(f'<td style="{_TD};{_MUTED}">{escape(leaf.info.file or "")}</td>')
        parts.append("<tr>" + "".join(cells) + "</tr>")
    if len(rows) > MAX_ROWS_PER_TABLE:
        rest = rows[MAX_ROWS_PER_TABLE:]
        parts.append(
            f'<tr><td colspan="{len(headers)}" style="{_TD};{_MUTED}">… {len(rest):,} more '
            f"tensors ({human_count(sum(r.parameters for r in rest))} parameters)</td></tr>"
        )
    parts.append("</table>")
    return "".join(parts)


def _items_html(
    items: Sequence[Leaf | Section], prefix: str, show_files: bool, *, top: bool
) -> str:
    from .tree import Leaf

    parts: list[str] = []
    rows: list[Leaf] = []
    shown = items[:MAX_ITEMS_PER_LEVEL] if not top else items

    def flush() -> None:
        if rows:
            parts.append(_table_html(rows, prefix, show_files))
            rows.clear()

    for item in shown:
        if isinstance(item, Leaf):
            rows.append(item)
            continue
        flush()
        label = f"{prefix}.{item.label}" if prefix else item.label
        first = _first_block(label, item)
        hint = (
            f'<div style="{_MUTED};font-size:12px">one block shown; the first is '
            f"{_code(first)}</div>"
            if item.count > 1
            else ""
        )
        parts.append(
            f'<details style="margin:1px 0"><summary style="{_SUMMARY}">{_code(label)} — '
            f'<span style="{_COUNT}">{escape(_section_words(item))}</span></summary>'
            f'<div style="{_NEST}">{hint}'
            + _items_html(item.items, first, show_files=False, top=False)
            + "</div></details>"
        )
    flush()
    if len(items) > len(shown):
        parts.append(
            f'<div style="{_MUTED}">… {len(items) - len(shown):,} more rows and sections</div>'
        )
    return "".join(parts)


def _first_block(label: str, section: Section) -> str:
    """``model.layers.[0-31]`` -> ``model.layers.0``: the first block's full name."""
    head, _, _ = label.rpartition(".")
    return f"{head}.{section.indices[0]}" if head else str(section.indices[0])


def tree_html(
    title: str,
    tree: Tree,
    *,
    show_files: bool = False,
    summary: Sequence[str] = (),
    counted_as: str = "parameters",
    traffic: Mapping[str, Traffic] | None = None,
) -> str:
    """A model or file as HTML: totals on top, then its tree (repeated blocks folded).

    Args:
        title: the location, shown first.
        tree: from :func:`remotetensors.tree.build_tree`.
        show_files: add a file column to top-level rows (sharded models).
        summary: extra lines of plain text under the totals (quantization, declared totals).
        counted_as: what the element counts are, when no true count is known.
        traffic: file name -> what crossed the network, shown as one line and per file.
    """
    parts = [f'<div class="remotetensors" style="{_BOX}">']
    parts.append(f'<div style="font-weight:600;font-size:14px">{escape(title)}</div>')
    for line in _totals_lines(tree, counted_as):
        parts.append(f"<div>{escape(line)}</div>")
    for line in summary:
        parts.append(f'<div style="{_MUTED}">{escape(line)}</div>')
    if traffic:
        parts.append(_traffic_html(traffic))
    parts.append('<div style="margin-top:4px">')
    parts.append(_items_html(tree.items, "", show_files, top=True))
    parts.append("</div></div>")
    return "\n".join(parts)


def _traffic_html(traffic: Mapping[str, Traffic]) -> str:
    from ..sources.base import Traffic

    total = Traffic.total(traffic.values())
    rows = "".join(
        f'<tr><td style="{_TD}">{_code(name)}</td><td style="{_TD_NUM}">{t.requests:,}</td>'
        f'<td style="{_TD_NUM}">{human_bytes(t.bytes)}</td>'
        f'<td style="{_TD_NUM}">{t.seconds:.3f} s</td></tr>'
        for name, t in list(traffic.items())[:MAX_ROWS_PER_TABLE]
    )
    head = "".join(f'<th style="{_TH}">{h}</th>' for h in ("file", "requests", "bytes", "time"))
    return (
        f'<details style="margin:1px 0"><summary style="{_SUMMARY}">network so far: '
        f'<span style="{_COUNT}">{escape(traffic_words(total))}</span></summary>'
        f'<table style="{_TABLE}"><tr>{head}</tr>{rows}</table></details>'
    )


def html_view(
    title: str,
    tensors: Iterable[TensorInfo],
    *,
    show_files: bool = False,
    summary: Sequence[str] = (),
    counted_as: str = "parameters",
    logical: Mapping[str, LogicalTensor] | None = None,
    traffic: Mapping[str, Traffic] | None = None,
) -> str:
    """HTML of ``tensors`` as a folded tree; see :func:`tree_html` (``logical`` gives roles and
    true counts, as ``model.logical_tensors``)."""
    from .tree import build_tree

    return tree_html(
        title,
        build_tree(tensors, logical),
        show_files=show_files,
        summary=summary,
        counted_as=counted_as,
        traffic=traffic,
    )


def tree_text(
    title: str,
    tree: Tree,
    *,
    summary: Sequence[str] = (),
    traffic: Mapping[str, Traffic] | None = None,
) -> str:
    """The same view as plain text, for terminals and pipes: totals, then rows and folded
    sections, indented."""
    from ..sources.base import Traffic

    lines = [title, *(f"  {line}" for line in _totals_lines(tree, "parameters"))]
    lines += [f"  {line}" for line in summary]
    if traffic:
        lines.append(f"  network so far: {traffic_words(Traffic.total(traffic.values()))}")
    lines.append("")
    lines += _items_text(tree.items, "", "")
    return "\n".join(lines)


def _items_text(items: Sequence[Leaf | Section], prefix: str, indent: str) -> list[str]:
    from .tree import Leaf

    lines: list[str] = []
    rows: list[Leaf] = []

    def flush() -> None:
        if rows:
            table = plain_table(
                ["name", "dtype", "shape", "parameters", "size"],
                [
                    [
                        (r.name or prefix.rsplit(".", 1)[-1])
                        + (" [aux]" if r.role != "weight" else " [packed]" if r.packing else ""),
                        r.info.dtype,
                        str(list(r.info.shape)),
                        f"{r.parameters:,}" if r.role == "weight" else "-",
                        human_bytes(r.info.nbytes),
                    ]
                    for r in rows[:MAX_ROWS_PER_TABLE]
                ],
            )
            lines.extend(indent + line for line in table.splitlines())
            if len(rows) > MAX_ROWS_PER_TABLE:
                lines.append(f"{indent}… {len(rows) - MAX_ROWS_PER_TABLE:,} more tensors")
            rows.clear()

    for item in items[:MAX_ITEMS_PER_LEVEL] if indent else items:
        if isinstance(item, Leaf):
            rows.append(item)
            continue
        flush()
        label = f"{prefix}.{item.label}" if prefix else item.label
        lines.append(f"{indent}{label} — {_section_words(item)}")
        lines += _items_text(item.items, _first_block(label, item), indent + "    ")
    flush()
    return lines


def describe_lines(summary: Mapping[str, Any], parameters: int, nbytes: int) -> str:
    """The human lines of ``info`` for a GGUF model's summary (see :func:`describe`)."""
    bits = nbytes * 8 / parameters if parameters else 0.0
    tokenizer = summary.get("tokenizer") or "?"
    return "\n".join(
        [
            f"  architecture: {summary.get('architecture')}",
            f"  context:      {summary.get('context_length')}",
            f"  quantization: {summary.get('quantization')} ({bits:.2f} bits/weight)",
            f"  tokenizer:    {tokenizer}, {summary.get('tokenizer_size', 0):,} tokens",
            f"  metadata:     {len(summary.get('metadata', {}))} keys (--json shows them)",
        ]
    )
