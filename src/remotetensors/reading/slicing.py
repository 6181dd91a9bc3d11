"""``get_slice`` index expressions turned into byte runs, with the reference's semantics.

Pure: no IO. :func:`plan_slice` validates an index expression against a tensor exactly as the
reference ``safetensors`` 0.8.0 ``get_slice`` does and returns the byte runs (absolute, in C
order, adjacent runs merged) whose concatenation is the result.

Semantics, as the reference's:
- items are ints (negative ones count from the end; ``True`` is 1), slices whose start and stop
  are ``None`` or >= 0 with a positive step, and at most one ``...``; ``()`` is the whole tensor
  and ``[]`` an empty first dimension;
- no clamping, unlike numpy: a slice whose start is >= the dimension or whose stop exceeds it is
  an error, dimensions checked from the last to the first;
- a slice with stop < start is an error here (the reference misbehaves).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import SliceError
from ..index import TensorInfo
from ..ranges import ByteRange

_EMPTY = object()
"""Stands for the empty-list index ``[]``: an empty selection of the first dimension."""


@dataclass(frozen=True, slots=True)
class _Item:
    """One index item, parsed but not yet checked against its dimension."""

    start: int | None
    stop: int | None
    step: int
    is_int: bool  # an int index: the dimension disappears from the result
    text: str  # how the reference prints the item in its error messages


@dataclass(frozen=True, slots=True)
class _Axis:
    """One dimension's checked selection: ``count`` indexes ``start, start+step, ...``."""

    start: int
    count: int
    step: int
    keep: bool


@dataclass(frozen=True, slots=True)
class SlicePlan:
    """What a slice of a tensor needs and gives.

    Attributes:
        shape: shape of the result.
        runs: absolute byte ranges in C order of the result, adjacent runs merged; empty when the
            result has no elements.
    """

    shape: tuple[int, ...]
    runs: tuple[ByteRange, ...]

    @property
    def nbytes(self) -> int:
        """Bytes of the result in the file's encoding (sum of the runs)."""
        return sum(run.length for run in self.runs)

    @property
    def num_elements(self) -> int:
        """Number of elements of the result."""
        return math.prod(self.shape)


def plan_slice(info: TensorInfo, index: Any) -> SlicePlan:
    """Validate ``index`` against ``info`` and return the byte runs of the result.

    Raises:
        SliceError: for an index the reference rejects, with the reference's message where it has
            one; also for a slice with a negative bound or stop < start.
    """
    shape = info.shape
    items = [_item(raw, i, shape) for i, raw in enumerate(_expand(_as_items(index), shape))]
    expr = "[" + ", ".join(item.text for item in items) + "]"
    if len(items) > len(shape):
        raise SliceError(
            f"Error during slicing {expr} with shape {list(shape)}: more slicing indexes than "
            "dimensions in tensor"
        )
    axes = _check_bounds(items, shape, expr)
    # Dimensions the expression does not name are taken whole, unchecked (as the reference).
    axes += [_Axis(0, dim, 1, True) for dim in shape[len(axes) :]]
    result_shape = tuple(axis.count for axis in axes if axis.keep)
    return SlicePlan(result_shape, _runs(axes, shape, info, expr))


def _as_items(index: Any) -> list[Any]:
    if isinstance(index, tuple):
        return list(index)
    if isinstance(index, list):
        # Only a whole index may be a list, and only the empty one: ``[]`` selects nothing of
        # the first dimension.
        if index:
            raise SliceError("Non empty lists are not implemented")
        return [_EMPTY]
    return [index]


def _expand(items: list[Any], shape: Sequence[int]) -> list[Any]:
    ellipses = sum(1 for item in items if item is Ellipsis)
    if ellipses > 1:
        raise SliceError("Only one ellipsis (...) is allowed in slice index")
    if ellipses:
        at = items.index(Ellipsis)
        fill = max(0, len(shape) - (len(items) - 1))
        items = items[:at] + [slice(None)] * fill + items[at + 1 :]
    return items


def _check_type(item: Any, position: int) -> None:
    if item is Ellipsis or item is _EMPTY or isinstance(item, slice):
        return
    if isinstance(item, (float, complex, str, bytes, list)) or item is None:
        raise _unsupported(position)
    try:
        operator.index(item)
    except TypeError:
        raise _unsupported(position) from None


def _unsupported(position: int) -> SliceError:
    return SliceError(
        f"Unsupported slice index at position {position}: expected slice, int, or ellipsis"
    )


def _item(raw: Any, dim_index: int, shape: Sequence[int]) -> _Item:
    # One pass in order, as the reference; positions count in the expanded expression.
    _check_type(raw, dim_index)
    if raw is _EMPTY:
        return _Item(0, 0, 1, False, "0:0")
    if isinstance(raw, slice):
        return _slice_item(raw)
    value = operator.index(raw)
    if value < 0:
        dim = shape[dim_index] if dim_index < len(shape) else 0
        if value + dim < 0:
            raise SliceError(f"Invalid index {value} for dimension {dim_index} of size {dim}")
        value += dim
    return _Item(value, None, 1, True, str(value))


def _slice_item(raw: slice) -> _Item:
    step = 1 if raw.step is None else operator.index(raw.step)
    if step <= 0:
        raise SliceError(f"Slice step must be a positive integer, got {step}")
    start = None if raw.start is None else operator.index(raw.start)
    stop = None if raw.stop is None else operator.index(raw.stop)
    for bound in (start, stop):
        if bound is not None and bound < 0:
            raise SliceError(
                f"negative slice bound {bound} is not supported by get_slice "
                "(the reference raises OverflowError); use a non-negative index"
            )
    text = ("" if start is None else str(start)) + ":" + ("" if stop is None else str(stop))
    if step != 1:
        text += f":{step}"
    return _Item(start, stop, step, False, text)


def _check_bounds(items: list[_Item], shape: Sequence[int], expr: str) -> list[_Axis]:
    """Check items against their dimensions, from the last to the first, as the reference."""
    for i in reversed(range(len(items))):
        item, dim = items[i], shape[i]
        start = 0 if item.start is None else item.start
        if start >= dim:
            raise _out_of_bounds(expr, shape, start, i, dim)
        if not item.is_int and item.stop is not None and item.stop > dim:
            raise _out_of_bounds(expr, shape, item.stop - 1, i, dim)
    axes = []
    for i, (item, dim) in enumerate(zip(items, shape, strict=False)):
        start = 0 if item.start is None else item.start
        if item.is_int:
            axes.append(_Axis(start, 1, 1, keep=False))
            continue
        stop = dim if item.stop is None else item.stop
        if stop < start:
            raise SliceError(
                f"Error during slicing {expr} with shape {list(shape)}: the slice {item.text} of "
                f"dimension #{i} stops before it starts"
            )
        axes.append(_Axis(start, -(-(stop - start) // item.step), item.step, keep=True))
    return axes


def _out_of_bounds(expr: str, shape: Sequence[int], index: int, i: int, dim: int) -> SliceError:
    return SliceError(
        f"Error during slicing {expr} with shape {list(shape)}: index {index} out of bounds for "
        f"tensor dimension #{i} of size {dim}"
    )


def _runs(
    axes: list[_Axis], shape: Sequence[int], info: TensorInfo, expr: str
) -> tuple[ByteRange, ...]:
    """Byte runs of the selection, in C order of the result, adjacent runs merged."""
    if any(axis.count == 0 for axis in axes):
        return ()
    bits = info.dtype_info.bits
    strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    # Trailing dimensions selected whole form one contiguous block of elements.
    inner = len(axes)
    while inner > 0 and axes[inner - 1].step == 1 and axes[inner - 1].count == shape[inner - 1]:
        inner -= 1
    block = math.prod(shape[inner:])
    offsets = np.zeros(1, dtype=np.int64)
    run_elements = block
    for i in range(inner):
        axis = axes[i]
        if i == inner - 1 and axis.step == 1:
            # The innermost partial dimension widens the run instead of repeating it.
            offsets = offsets + axis.start * strides[i]
            run_elements = axis.count * block
        else:
            picks = axis.start + axis.step * np.arange(axis.count, dtype=np.int64)
            offsets = (offsets[:, None] + picks[None, :] * strides[i]).reshape(-1)
    start_bits = offsets * bits
    length_bits = run_elements * bits
    if length_bits % 8 or np.any(start_bits % 8):
        raise SliceError(
            f"Error during slicing {expr} with shape {list(shape)}: The slice is slicing for "
            "subbytes dtypes, and the slice does not end up at a byte boundary, this is invalid."
        )
    starts = info.start + start_bits // 8
    length = length_bits // 8
    # Merge runs that touch: a new run begins where a start is not the previous run's end.
    breaks = np.flatnonzero(starts[1:] != starts[:-1] + length) + 1
    run_starts = starts[np.concatenate(([0], breaks))]
    run_ends = starts[np.concatenate((breaks - 1, [starts.size - 1]))] + length
    return tuple(
        ByteRange(a, b) for a, b in zip(run_starts.tolist(), run_ends.tolist(), strict=True)
    )
