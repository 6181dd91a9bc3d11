"""Text and HTML views of counts, sizes and tensor tables, for terminals, pipes and notebooks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .index import TensorInfo


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


def shown_metadata(
    file_format: str, metadata: Mapping[str, Any] | None, tensors: Mapping[str, TensorInfo]
) -> dict[str, Any] | None:
    """Metadata as ``info`` shows it: as is, except GGUF's, which is summarised (architecture,
    context length, quantization, tokenizer size; arrays by their length, not their contents)."""
    if metadata is None:
        return None
    if file_format == "gguf":
        from .formats.gguf import describe

        return describe(metadata, tensors)
    return dict(metadata)


# --- HTML for notebooks ------------------------------------------------------------------------

MAX_GROUPS_SHOWN = 40
"""Groups listed in an HTML view; the rest are summarised in one line, so huge models stay
readable."""

MAX_ROWS_PER_GROUP = 50


def module_of(name: str) -> str:
    """The group a tensor belongs to: up to its first numbered component (``model.layers.3``),
    else its parent module (``model.embed_tokens``), else the name itself."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return ".".join(parts[:-1]) or name


def html_view(
    title: str,
    tensors: Iterable[TensorInfo],
    *,
    show_files: bool = False,
    summary: Sequence[str] = (),
    counted_as: str = "parameters",
) -> str:
    """An HTML summary: totals by dtype, then tensors grouped by module in collapsible sections.

    ``summary`` lines (plain text) go first, under the title; ``counted_as`` names what the
    element counts are (``"elements as stored"`` for a quantized model, whose true count is in
    the summary).
    """
    infos = list(tensors)
    groups: dict[str, list[TensorInfo]] = {}
    for info in infos:
        groups.setdefault(module_of(info.name), []).append(info)
    counts: dict[str, int] = {}
    for info in infos:
        counts[info.dtype] = counts.get(info.dtype, 0) + info.num_elements
    total = sum(counts.values())
    nbytes = sum(i.nbytes for i in infos)
    parts = [
        "<div class='remotetensors'>",
        f"<b>{escape(title)}</b>: {len(infos):,} tensors, {human_count(total)} {counted_as} "
        f"({total:,}), {human_bytes(nbytes)}",
        *(f"<br>{escape(line)}" for line in summary),
        "<br>by dtype: "
        + ", ".join(f"{escape(d)} {human_count(n)}" for d, n in sorted(counts.items())),
    ]
    headers = ["name", "dtype", "shape", "parameters", "size"] + (["file"] if show_files else [])
    for key, members in list(groups.items())[:MAX_GROUPS_SHOWN]:
        params = sum(i.num_elements for i in members)
        parts.append(
            f"<details><summary><code>{escape(key)}</code> — {len(members)} tensors, "
            f"{human_count(params)} parameters, {human_bytes(sum(i.nbytes for i in members))}"
            "</summary><table><tr>" + "".join(f"<th>{h}</th>" for h in headers) + "</tr>"
        )
        for info in members[:MAX_ROWS_PER_GROUP]:
            cells = [
                f"<code>{escape(info.name)}</code>",
                escape(info.dtype),
                escape(str(list(info.shape))),
                f"{info.num_elements:,}",
                human_bytes(info.nbytes),
            ] + ([escape(info.file or "")] if show_files else [])
            parts.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        if len(members) > MAX_ROWS_PER_GROUP:
            more = len(members) - MAX_ROWS_PER_GROUP
            parts.append(f"<tr><td colspan='{len(headers)}'>… {more} more</td></tr>")
        parts.append("</table></details>")
    hidden = list(groups.values())[MAX_GROUPS_SHOWN:]
    if hidden:
        rest = sum(len(g) for g in hidden)
        parts.append(
            f"<div>… {len(hidden):,} more groups ({rest:,} tensors, "
            f"{human_count(sum(i.num_elements for g in hidden for i in g))} parameters)</div>"
        )
    parts.append("</div>")
    return "\n".join(parts)
