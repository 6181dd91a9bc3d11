"""Views for exploring a model in a notebook or a terminal: the model's folded tree with its
totals and network counters, and one tensor's card, statistics and heatmap.

The views are built from what the headers say; only :meth:`TensorView.stats`,
:meth:`TensorView.heatmap` and :meth:`TensorView.get` fetch data, and only what they say.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

import numpy as np

from .display import human_bytes, tree_html, tree_text
from .stats import Heatmap, TensorStats, as_float, tensor_stats
from .tree import Tree, build_tree

if TYPE_CHECKING:
    from ..index import TensorInfo
    from ..models.model import AsyncModel
    from ..models.sync import Model
    from ..quantization import LogicalTensor

DEFAULT_STATS_BYTES = 64 * 1024 * 1024
"""Tensors larger than this are summarised from a sample of rows (see :meth:`TensorView.stats`)."""

SAMPLE_BLOCKS = 8
"""Row blocks a sample is made of, spread evenly over the tensor (one range request each)."""

_BOX = "font-family:system-ui,sans-serif;font-size:13px;line-height:1.45;color:inherit"
_TD = "padding:1px 12px 1px 4px;border-bottom:1px solid rgba(127,127,127,0.2)"
_MUTED = "opacity:0.72"


# --- the model ---------------------------------------------------------------------------------


def model_tree(model: AsyncModel) -> Tree:
    """The model's tensors folded into a tree, with true counts and roles."""
    return build_tree(model.tensors.values(), model.logical_tensors)


def _summary(model: AsyncModel) -> list[str]:
    from .reports import declared_words, quantization_words

    count = model.true_count
    lines = []
    if count.quantization is not None:
        lines.append(f"quantized: {quantization_words(count.quantization.as_dict())}")
    if not count.exact:
        lines.append("some packed counts are upper bounds (no logical shape stored)")
    declared = declared_words(count.total, count.declared_total)
    if declared is not None:
        lines.append(declared)
    memory = _memory_line(model)
    if memory:
        lines.append(memory)
    return lines


def _memory_line(model: AsyncModel) -> str | None:
    """Memory to serve at the config's longest context, when the config says enough."""
    try:
        estimate = model.memory()
    except ValueError:
        return None
    if estimate.kv_cache_bytes is None or not estimate.context:
        return None
    return (
        f"memory to serve one sequence of {estimate.context:,} tokens: weights "
        f"{human_bytes(estimate.weights_bytes)} + KV cache {human_bytes(estimate.kv_cache_bytes)}"
        f" = {human_bytes(estimate.total_bytes)}"
    )


def model_html(model: AsyncModel) -> str:
    """The model's HTML view: totals, quantization, network counters, folded tree."""
    return tree_html(
        model.location,
        model_tree(model),
        show_files=len(model.files) > 1,
        summary=_summary(model),
        traffic=model.traffic_by_file,
    )


def model_text(model: AsyncModel) -> str:
    """The model's plain-text view, for terminals."""
    return tree_text(
        model.location, model_tree(model), summary=_summary(model), traffic=model.traffic_by_file
    )


# --- one tensor --------------------------------------------------------------------------------


def tensor_card_rows(
    info: TensorInfo, logical: LogicalTensor | None = None
) -> list[tuple[str, str]]:
    """(label, value) pairs describing a tensor from its header entry."""
    rows = [
        ("dtype", info.dtype),
        ("shape", str(list(info.shape))),
        ("elements", f"{info.num_elements:,}"),
        ("bytes", f"{info.nbytes:,} ({human_bytes(info.nbytes)})"),
        ("byte range", f"[{info.start:,}, {info.end:,})"),
    ]
    if info.file:
        rows.append(("shard", info.file))
    if logical is not None:
        if logical.role != "weight":
            rows.append(("role", "quantization auxiliary (not counted as parameters)"))
        elif logical.packing:
            shape = f", logical shape {list(logical.shape)}" if logical.shape else ""
            rows.append(("packed", f"{logical.packing}{shape}"))
            rows.append(("parameters", f"{logical.num_parameters:,}"))
    return rows


def tensor_card_html(info: TensorInfo, logical: LogicalTensor | None = None) -> str:
    """A tensor's card: name, dtype, shape, bytes, shard and byte range."""
    table = "".join(
        f'<tr><td style="{_TD};{_MUTED}">{escape(k)}</td><td style="{_TD}">{escape(v)}</td></tr>'
        for k, v in tensor_card_rows(info, logical)
    )
    return (
        f'<div style="{_BOX}"><div style="font-weight:600"><code>{escape(info.name)}</code></div>'
        f'<table style="border-collapse:collapse;font-size:12px;color:inherit">{table}</table>'
        "</div>"
    )


def tensor_card_text(info: TensorInfo, logical: LogicalTensor | None = None) -> str:
    """The card as text."""
    rows = tensor_card_rows(info, logical)
    return "\n".join([info.name, *(f"  {k:<11} {v}" for k, v in rows)])


def sample_blocks(rows: int, row_bytes: int, max_bytes: int) -> list[tuple[int, int]]:
    """Row ranges ``[(start, stop), ...]`` spread evenly over ``rows`` rows, about
    ``max_bytes`` in all (at least one row per block)."""
    wanted_rows = max(1, max_bytes // max(1, row_bytes))
    if wanted_rows >= rows:
        return [(0, rows)]
    blocks = min(SAMPLE_BLOCKS, wanted_rows)
    per_block = max(1, wanted_rows // blocks)
    starts = [round(i * (rows - per_block) / max(1, blocks - 1)) for i in range(blocks)]
    result: list[tuple[int, int]] = []
    for start in starts:
        if result and start < result[-1][1]:
            continue
        result.append((start, start + per_block))
    return result


class TensorView:
    """One tensor of an open (sync) model: its card, and its values on request.

    ``m.tensor("model.layers.0.mlp.up_proj.weight")`` renders the card; ``.stats()`` fetches
    the values and summarises them; ``.heatmap()`` fetches a 2-D slice; ``.get()`` and
    ``view[rows]`` return arrays.
    """

    def __init__(self, model: Model, info: TensorInfo, logical: LogicalTensor | None) -> None:
        self._model = model
        self.info = info
        self.logical = logical

    @property
    def name(self) -> str:
        """The tensor's name."""
        return self.info.name

    def get(self) -> Any:
        """The whole tensor (fetched)."""
        return self._model.get_tensor(self.name)

    def __getitem__(self, index: Any) -> Any:
        """A slice, fetching only its bytes: ``view[0:4]``."""
        return self._model.get_slice(self.name)[index]

    def _note(self) -> str | None:
        if self.logical is None:
            return None
        if self.logical.role != "weight":
            return "quantization auxiliary tensor: values as stored"
        if self.logical.packing:
            return f"values as stored, still packed ({self.logical.packing})"
        return None

    def stats(self, *, max_bytes: int = DEFAULT_STATS_BYTES, bins: int = 64) -> TensorStats:
        """Fetch the tensor and summarise its values (min, max, mean, std, share of zeros,
        NaN/Inf counts, histogram).

        Args:
            max_bytes: a tensor larger than this is summarised from about this many bytes of
                rows, in :data:`SAMPLE_BLOCKS` blocks spread over it; the result says so.
            bins: histogram bins.

        Raises:
            ValueError: ``max_bytes`` is not positive.
            and whatever fetching raises.
        """
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        info = self.info
        sample = None
        if info.nbytes <= max_bytes or len(info.shape) == 0:
            values = self.get()
        else:
            rows = info.shape[0]
            blocks = sample_blocks(rows, info.nbytes // max(1, rows), max_bytes)
            parts = self._model._fetch_rows(self.name, blocks)
            import numpy as np

            values = np.concatenate([as_float(p).reshape(-1) for p in parts])
            taken = sum(b - a for a, b in blocks)
            sample = (
                f"sample: {taken:,} of {rows:,} rows in {len(blocks)} blocks, "
                f"{taken / rows:.1%} of the tensor"
            )
        return tensor_stats(
            info.name, info.dtype, info.shape, values, sample=sample, bins=bins, note=self._note()
        )

    def heatmap(self, rows: slice = slice(0, 64), cols: slice = slice(0, 64)) -> Heatmap:
        """Fetch a 2-D slice and return it as a heatmap (``_repr_html_`` draws it).

        A tensor of more than two dimensions is sliced at index 0 of its leading dimensions;
        a vector is shown as one row. ``rows`` and ``cols`` are clamped to the shape, as numpy
        clamps slices (the defaults fit a router ``[8, 4096]``, a bias or an empty tensor).
        """
        shape = self.info.shape
        if any(size == 0 for size in shape[:-2]):
            lead: tuple[Any, ...] = tuple(slice(0, 0) for _ in shape[:-2])  # nothing to show
        else:
            lead = (0,) * max(0, len(shape) - 2)
        if len(shape) >= 2:
            index: tuple[Any, ...] = (*lead, _within(rows, shape[-2]), _within(cols, shape[-1]))
        elif len(shape) == 1:
            index = (_within(cols, shape[0]),)
        else:
            index = ()
        if self.info.num_elements == 0:  # nothing to fetch (and no range to ask for)
            values = np.empty(shape, np.float64)[index]
        else:
            values = as_float(self[index] if index else self.get())
        if values.ndim > 2:  # the leading dimensions were kept: one of them is empty
            values = values.reshape(-1, values.shape[-1])
        elif values.ndim < 2:
            values = values.reshape(1, values.size)
        region = "[" + ", ".join(_slice_text(i) for i in index) + "]" if index else ""
        return Heatmap(self.name, region, values)

    def _repr_html_(self) -> str:
        return tensor_card_html(self.info, self.logical)

    def __repr__(self) -> str:
        return tensor_card_text(self.info, self.logical)


def _within(index: slice, size: int) -> slice:
    """``index`` clamped to a dimension of ``size``, as numpy clamps (``0:64`` of 8 is ``0:8``)."""
    start, stop, step = index.indices(size)
    if step > 0:
        stop = max(stop, start)  # an empty range stays empty, and in bounds
    return slice(start, stop, None if step == 1 else step)


def _slice_text(index: Any) -> str:
    if isinstance(index, slice):
        start = "" if index.start is None else str(index.start)
        stop = "" if index.stop is None else str(index.stop)
        return f"{start}:{stop}"
    return str(index)
