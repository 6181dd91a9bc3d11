"""Views for exploring a model in a notebook or a terminal: the model's folded tree with its
totals and network counters, and one tensor's card, statistics and heatmap.

The views are built from what the headers say; only :meth:`TensorView.stats`,
:meth:`TensorView.heatmap` and :meth:`TensorView.get` fetch data, and only what they say.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import DTYPES
from .display import human_bytes, tree_html, tree_text
from .stats import Heatmap, TensorStats, as_float, tensor_stats
from .tree import Tree, build_tree

if TYPE_CHECKING:
    from ..index import TensorInfo
    from ..models.model import AsyncModel
    from ..models.sync import Model
    from ..quantization import LogicalTensor

DEFAULT_STATS_BYTES = 64 * 1024 * 1024
"""Tensors larger than this are summarised from a sample (see :meth:`TensorView.stats`)."""

SAMPLE_BLOCKS = 8
"""Runs of consecutive values a sample is made of, spread evenly over the tensor (one range
request each)."""

_BOX = "font-family:system-ui,sans-serif;font-size:13px;line-height:1.45;color:inherit"
_TD = "padding:1px 12px 1px 4px;border-bottom:1px solid rgba(127,127,127,0.2)"
_MUTED = "opacity:0.72"


# --- the model ---------------------------------------------------------------------------------


def model_tree(model: AsyncModel) -> Tree:
    """The model's tensors folded into a tree, with true counts and roles."""
    return build_tree(model.tensors.values(), model.logical_tensors)


def _summary(model: AsyncModel) -> list[str]:
    from .reports import active_words, declared_words, quantization_words

    count = model.true_count
    lines = []
    if count.moe is not None:
        active = active_words(count.active, count.active_exact, count.moe.as_dict())
        lines.append(f"mixture of experts: {active}")
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
    at_most = "at most " if estimate.kv_cache_bound else ""
    return (
        f"memory to serve one sequence of {estimate.context:,} tokens: weights "
        f"{human_bytes(estimate.weights_bytes)} + KV cache {at_most}"
        f"{human_bytes(estimate.kv_cache_bytes)} = {at_most}{human_bytes(estimate.total_bytes)}"
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


@dataclass(frozen=True, slots=True)
class Sample:
    """Where a sample of a tensor's values comes from: runs of consecutive values (in C order)
    spread evenly over the tensor.

    Attributes:
        keys: one ``get_slice`` key per run: ints for the leading dimensions, then a slice of
            one dimension (``[i, a:b]``), so each run is one byte range of the file, whole
            elements and, for sub-byte dtypes, whole bytes (the reference's boundary rules).
        values: values in all the runs.
        run_values: values in one run.
    """

    keys: tuple[tuple[Any, ...], ...]
    values: int
    run_values: int

    def describe(self, total: int) -> str:
        """How the view states the sample (``total``: the tensor's values)."""
        return (
            f"sample: {self.values:,} of {total:,} values, in {len(self.keys)} runs of "
            f"{self.run_values:,} spread over the tensor ({self.values / total:.1%} of it)"
        )


def sample_runs(shape: tuple[int, ...], bits: int, max_bytes: int) -> Sample | None:
    """About ``max_bytes`` of a tensor's values in :data:`SAMPLE_BLOCKS` runs spread evenly over
    it; ``None`` when the whole tensor is no larger (read it whole). Pure.

    A run lies inside the outermost dimension whose one index fits a run's share of the budget
    (rows of a matrix, rows of one expert of a 3-D stack), so no run is a whole first-axis row
    of a large tensor. Runs hold whole elements and, for sub-byte dtypes (F4, F6), start and end
    on bytes in every dimension, so that they can be read. A run of the fewest elements that
    end on a byte may exceed its share when the budget is smaller than that.

    Args:
        shape: the tensor's shape.
        bits: bits per element in the file.
        max_bytes: the budget, in bytes of the file (positive).
    """
    total = math.prod(shape)
    if not shape or total * bits <= max_bytes * 8:
        return None
    share = max(1, max_bytes * 8 // SAMPLE_BLOCKS)  # bits for one run
    strides = [math.prod(shape[k + 1 :]) for k in range(len(shape))]
    axis = next(k for k in range(len(shape)) if strides[k] * bits <= share or k == len(shape) - 1)
    # An index of a dimension starts on a byte only at multiples of this step.
    steps = [8 // math.gcd(stride * bits, 8) for stride in strides]
    while axis > 0 and steps[axis] > shape[axis]:
        axis -= 1  # no run of whole bytes fits inside this dimension: take the outer one
    run = share // (strides[axis] * bits) // steps[axis] * steps[axis]
    run = min(max(run, steps[axis]), shape[axis] - shape[axis] % steps[axis])
    if run <= 0:
        return None  # a tensor of a fraction of a byte in all: no file holds one
    units = math.prod(shape[: axis + 1])  # indexes of the run's dimension, over every lead
    count = max(1, min(SAMPLE_BLOCKS, units // run))
    keys: list[tuple[Any, ...]] = []
    end = 0  # element after the last run taken: runs stay in order and apart
    for j in range(count):
        at = round(j * (units - run) / max(1, count - 1))
        lead, start = divmod(at, shape[axis])
        start = min(start, shape[axis] - run) // steps[axis] * steps[axis]
        leads = np.unravel_index(lead, shape[:axis]) if axis else ()
        ints = tuple(int(i) // steps[k] * steps[k] for k, i in enumerate(leads))
        first = sum(i * strides[k] for k, i in enumerate(ints)) + start * strides[axis]
        if keys and first < end:
            continue  # rounded onto the run before it
        keys.append((*ints, slice(start, start + run)))
        end = first + run * strides[axis]
    return Sample(tuple(keys), len(keys) * run * strides[axis], run * strides[axis])


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
                it, in :data:`SAMPLE_BLOCKS` runs of consecutive values spread over it (see
                :func:`sample_runs`); the result says so.
            bins: histogram bins.

        Raises:
            ValueError: ``max_bytes`` is not positive.
            and whatever fetching raises.
        """
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        info = self.info
        runs = sample_runs(info.shape, _bits(info), max_bytes)
        sample = None
        if runs is None:
            values = self.get()
        else:
            parts = self._model._fetch_slices(self.name, list(runs.keys))
            values = np.concatenate([np.asarray(p).reshape(-1) for p in parts])
            sample = runs.describe(info.num_elements)
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


def _bits(info: TensorInfo) -> int:
    """Bits per element in the file; a GGML block type's average (its blocks are read whole by
    rows, and only the budget depends on it)."""
    known = DTYPES.get(info.dtype)
    if known is not None:
        return known.bits
    return max(1, info.nbytes * 8 // max(1, info.num_elements))


def _slice_text(index: Any) -> str:
    if isinstance(index, slice):
        start = "" if index.start is None else str(index.start)
        stop = "" if index.stop is None else str(index.stop)
        return f"{start}:{stop}"
    return str(index)
