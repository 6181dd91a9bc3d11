"""``get_slice`` index expressions turned into byte runs, with the reference's semantics.

Pure: no IO. :func:`plan_slice` validates an index expression against a tensor exactly as the
reference ``safetensors`` 0.8.0 ``get_slice`` does and returns a :class:`SlicePlan`: the
result's bytes as a grid of equal runs of the file (a start, a count and a byte stride per
axis), whose size does not grow with the number of elements. :meth:`SlicePlan.chunks` turns it
into reads: strided selections (``[:, ::2]``) fetch the spans that cover their runs, holes of at
most ``max_gap_bytes`` included, and numpy picks the runs out of them; runs far apart or long
are read straight into the result.

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
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import SliceError
from ..index import TensorInfo
from ..ranges import ByteRange

if TYPE_CHECKING:
    from collections.abc import Iterator

    import numpy.typing as npt

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


GATHER_RUN_BYTES = 64 * 1024
"""Runs shorter than this are read within covering spans and picked out by numpy; longer runs
are read straight into the result, as a request per run then costs little beside its bytes."""


@dataclass(frozen=True, slots=True)
class SliceChunk:
    """One step of a slice read: spans of the file fetched back to back, then gathered.

    Span ``i`` is bytes ``[starts[i], starts[i] + span_bytes)`` of the file (absolute offsets,
    end exclusive); it lands at byte ``i * span_bytes`` of the chunk's buffer. In that buffer the
    selected runs, ``run_bytes`` long each, form a grid of shape ``runs_shape`` (its first axis
    counts the spans) with byte strides ``runs_strides``; in C order they are bytes
    ``[out_start, out_start + out_bytes)`` of the result.

    Attributes:
        direct: the buffer is exactly those bytes of the result, in order (every span is one
            run): it can be the result's own memory, with nothing to gather.
    """

    starts: npt.NDArray[np.int64]
    span_bytes: int
    runs_shape: tuple[int, ...]
    runs_strides: tuple[int, ...]
    run_bytes: int
    out_start: int
    direct: bool

    @property
    def fetched_bytes(self) -> int:
        """Bytes the spans hold (the buffer's length)."""
        return len(self.starts) * self.span_bytes

    @property
    def out_bytes(self) -> int:
        """Bytes of the result that this chunk fills."""
        return math.prod(self.runs_shape) * self.run_bytes

    def spans(self) -> list[ByteRange]:
        """The spans as byte ranges, in buffer order."""
        length = self.span_bytes
        return [ByteRange(start, start + length) for start in self.starts.tolist()]

    def gather(self, fetched: npt.NDArray[np.uint8], result: npt.NDArray[np.uint8]) -> None:
        """Copy the selected runs from ``fetched`` (the spans, back to back) into ``result``
        (all the result's bytes, 1-D uint8).

        Raises:
            ValueError: ``fetched`` is shorter than :attr:`fetched_bytes`.
        """
        # A void item of exactly one run: numpy copies it with one move per run, whatever the
        # dtype (sub-byte runs are whole bytes, checked when planning).
        run = np.dtype((np.void, self.run_bytes))
        source = np.ndarray(self.runs_shape, run, fetched, 0, self.runs_strides)
        target = result[self.out_start : self.out_start + self.out_bytes].view(run)
        np.copyto(target.reshape(self.runs_shape), source)


@dataclass(frozen=True, slots=True)
class SlicePlan:
    """What a slice of a tensor needs and gives: a grid of equal runs of bytes.

    The result's bytes, in C order, are runs of ``run_bytes`` bytes each; run ``(i0, i1, ...)``
    starts at absolute byte ``start + i0 * strides[0] + i1 * strides[1] + ...`` of the file.
    Runs that touch are merged into longer runs and axes that step evenly into one axis, so the
    plan's size depends on the number of dimensions, never on the number of elements.

    Attributes:
        shape: shape of the result.
        start: absolute file offset of the first run (the tensor's start if there is none).
        counts: runs along each grid axis, outer first; each at least 2.
        strides: bytes from one run to the next along each grid axis.
        run_bytes: length of one run; 0 when the result has no elements.
    """

    shape: tuple[int, ...]
    start: int
    counts: tuple[int, ...]
    strides: tuple[int, ...]
    run_bytes: int

    @property
    def nbytes(self) -> int:
        """Bytes of the result in the file's encoding (sum of the runs)."""
        return self.num_runs * self.run_bytes

    @property
    def num_elements(self) -> int:
        """Number of elements of the result."""
        return math.prod(self.shape)

    @property
    def num_runs(self) -> int:
        """Number of runs (0 when the result is empty)."""
        return math.prod(self.counts) if self.run_bytes else 0

    @property
    def covering(self) -> ByteRange:
        """From the first selected byte to one past the last (empty when nothing is selected):
        a read of the slice never fetches a byte outside it."""
        end = self.start + self._extents()[0] if self.run_bytes else self.start
        return ByteRange(self.start, end)

    def chunks(
        self,
        *,
        max_gap_bytes: int,
        chunk_bytes: int,
        gather_run_bytes: int = GATHER_RUN_BYTES,
    ) -> list[SliceChunk]:
        """How to read the slice: chunks to fetch one after the other, in result order.

        Runs shorter than ``gather_run_bytes`` are fetched with the holes between them when no
        hole is longer than ``max_gap_bytes``, in spans that cover them, and picked out by
        numpy; a gather chunk fetches at most ``max(chunk_bytes, gather_run_bytes)`` bytes, so
        its buffer is bounded. Otherwise the runs are read straight into the result (one direct
        chunk). No byte outside :attr:`covering` is fetched, none twice. Pure: the number of
        chunks and spans grows with the requests needed, not with the elements.
        """
        if not self.run_bytes:
            return []
        extents = self._extents()
        inner = len(self.counts)  # grid axes [inner:] are fetched whole, holes included
        while inner > 0 and self.strides[inner - 1] - extents[inner] <= max_gap_bytes:
            inner -= 1
        if inner == len(self.counts) or self.run_bytes >= gather_run_bytes:
            starts = self.start + _offsets(self.counts, self.strides)
            run = self.run_bytes
            return [SliceChunk(starts, run, (len(starts),), (run,), run, 0, direct=True)]
        budget = max(chunk_bytes, gather_run_bytes)
        if extents[inner] <= budget:
            return self._whole_blocks(inner, extents[inner], budget)
        return self._batches(inner, extents, budget)

    def _extents(self) -> list[int]:
        """``extents[i]``: bytes from the first byte of a block of grid axes ``[i:]`` to one
        past its last (``extents[-1]`` is one run)."""
        extents = [self.run_bytes]
        for count, stride in zip(reversed(self.counts), reversed(self.strides), strict=True):
            extents.append((count - 1) * stride + extents[-1])
        return extents[::-1]

    def _whole_blocks(self, inner: int, span: int, budget: int) -> list[SliceChunk]:
        """Chunks of as many whole blocks of grid axes ``[inner:]`` as fit ``budget`` bytes."""
        starts = self.start + _offsets(self.counts[:inner], self.strides[:inner])
        per_chunk = budget // span
        out_per_block = math.prod(self.counts[inner:]) * self.run_bytes
        chunks = []
        for first in range(0, len(starts), per_chunk):
            group = starts[first : first + per_chunk]
            chunks.append(
                SliceChunk(
                    group,
                    span,
                    (len(group), *self.counts[inner:]),
                    (span, *self.strides[inner:]),
                    self.run_bytes,
                    first * out_per_block,
                    direct=False,
                )
            )
        return chunks

    def _batches(self, inner: int, extents: list[int], budget: int) -> list[SliceChunk]:
        """Chunks of one span each, when a whole block of grid axes ``[inner:]`` exceeds
        ``budget``: consecutive items along the outermost axis whose items fit, as many as fit."""
        axis = inner
        while extents[axis + 1] > budget:  # extents[-1] is one run, shorter than the budget
            axis += 1
        item, stride = extents[axis + 1], self.strides[axis]
        per_chunk = (budget - item) // stride + 1
        out_per_item = math.prod(self.counts[axis + 1 :]) * self.run_bytes
        out_per_block = self.counts[axis] * out_per_item
        chunks = []
        bases = self.start + _offsets(self.counts[:axis], self.strides[:axis])
        for block, base in enumerate(bases.tolist()):
            for first in range(0, self.counts[axis], per_chunk):
                taken = min(per_chunk, self.counts[axis] - first)
                span = (taken - 1) * stride + item
                chunks.append(
                    SliceChunk(
                        np.array([base + first * stride], dtype=np.int64),
                        span,
                        (1, taken, *self.counts[axis + 1 :]),
                        (span, stride, *self.strides[axis + 1 :]),
                        self.run_bytes,
                        block * out_per_block + first * out_per_item,
                        direct=False,
                    )
                )
        return chunks


def _offsets(counts: Sequence[int], strides: Sequence[int]) -> npt.NDArray[np.int64]:
    """Offsets of every point of a grid, in C order (one ``0`` for no axes)."""
    offsets = np.zeros(1, dtype=np.int64)
    for count, stride in zip(counts, strides, strict=True):
        offsets = (offsets[:, None] + stride * np.arange(count, dtype=np.int64)).reshape(-1)
    return offsets


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
    axes = _check_bounds(items, shape, expr, info.dtype_info.bits)
    # Dimensions the expression does not name are taken whole, unchecked (as the reference).
    axes += [_Axis(0, dim, 1, True) for dim in shape[len(axes) :]]
    result_shape = tuple(axis.count for axis in axes if axis.keep)
    return _plan(axes, shape, info, result_shape)


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


def _check_bounds(items: list[_Item], shape: Sequence[int], expr: str, bits: int) -> list[_Axis]:
    """Check items against their dimensions, from the last to the first, as the reference: each
    dimension's bounds, then, for a sub-byte dtype, its byte boundaries."""
    started = False  # whether the reference holds byte runs yet, for the boundary checks
    for i in reversed(range(len(items))):
        item, dim = items[i], shape[i]
        start = 0 if item.start is None else item.start
        if start >= dim:
            raise _out_of_bounds(expr, shape, start, i, dim)
        if not item.is_int and item.stop is not None and item.stop > dim:
            raise _out_of_bounds(expr, shape, item.stop - 1, i, dim)
        if bits % 8:
            holds = _check_byte_boundaries(item, dim, math.prod(shape[i + 1 :]) * bits, started)
            if holds is None:
                raise SliceError(
                    f"Error during slicing {expr} with shape {list(shape)}: The slice is slicing "
                    "for subbytes dtypes, and the slice does not end up at a byte boundary, this "
                    "is invalid."
                )
            started = holds
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


def _check_byte_boundaries(item: _Item, dim: int, span_bits: int, started: bool) -> bool | None:
    """One step of the reference's walk over the dimensions, last to first, for a sub-byte
    dtype: ``None`` when a run of bytes it would make does not start or end on a byte, else
    whether it holds runs after this dimension (``span_bits``: bits of one index of it).

    The reference's rules, as it applies them: until it holds runs, a dimension taken whole is
    skipped; a slice with step 1 (or an int) makes one run from its start to its stop, checked at
    both ends, even when empty; a slice with a larger step makes one run per index it picks,
    checked at both ends, and none when it picks none. Once it holds runs, each index picked
    shifts them, checked at its start; a dimension that picks none leaves no runs, and the walk
    goes on as before the first run. Ruled in O(1), not per index: the picked indexes are
    ``start + k * step``.
    """
    start = 0 if item.start is None else item.start
    stop = start + 1 if item.is_int else (dim if item.stop is None else item.stop)
    count = max(0, -(-(stop - start) // item.step))
    if started:
        ok = count == 0 or (
            start * span_bits % 8 == 0 and (count == 1 or item.step * span_bits % 8 == 0)
        )
        return count > 0 if ok else None
    if item.step == 1:
        if start == 0 and stop == dim:
            return False
        ok = start * span_bits % 8 == 0 and stop * span_bits % 8 == 0
        return True if ok else None
    # Every picked index n is checked at n * span and (n + 1) * span: all pass exactly when one
    # index's span is whole bytes.
    if count and span_bits % 8:
        return None
    return count > 0


def _out_of_bounds(expr: str, shape: Sequence[int], index: int, i: int, dim: int) -> SliceError:
    return SliceError(
        f"Error during slicing {expr} with shape {list(shape)}: index {index} out of bounds for "
        f"tensor dimension #{i} of size {dim}"
    )


def _plan(
    axes: list[_Axis], shape: Sequence[int], info: TensorInfo, result: tuple[int, ...]
) -> SlicePlan:
    """The selection as a grid of runs (in bytes), runs and axes merged."""
    if any(axis.count == 0 for axis in axes):
        return SlicePlan(result, info.start, (), (), 0)
    bits = info.dtype_info.bits
    strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    # Trailing dimensions selected whole form one contiguous block of elements.
    inner = len(axes)
    while inner > 0 and axes[inner - 1].step == 1 and axes[inner - 1].count == shape[inner - 1]:
        inner -= 1
    run_elements = math.prod(shape[inner:])
    first = 0  # elements before the first run
    grid: list[tuple[int, int]] = []  # (count, stride in elements) of each axis that repeats
    for i in range(inner):
        axis = axes[i]
        first += axis.start * strides[i]
        if i == inner - 1 and axis.step == 1:
            # The innermost partial dimension widens the run instead of repeating it.
            run_elements *= axis.count
        elif axis.count > 1:
            grid.append((axis.count, axis.step * strides[i]))
    # A sub-byte selection passed the reference's boundary checks: every index it picks starts
    # on a byte, and so do the first run, each run's end and each step between runs.
    counts, steps, run_bytes = _merged(
        [(c, s * bits // 8) for c, s in grid], run_elements * bits // 8
    )
    return SlicePlan(result, info.start + first * bits // 8, counts, steps, run_bytes)


def _merged(
    grid: list[tuple[int, int]], run_bytes: int
) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """Runs that touch merged into one run, and an axis that steps over a whole inner axis
    merged with it, from the innermost axis out: ``(counts, strides, run_bytes)``."""
    kept: list[tuple[int, int]] = []  # innermost first
    for count, stride in reversed(grid):
        if not kept and stride == run_bytes:
            run_bytes *= count
        elif kept and stride == kept[-1][0] * kept[-1][1]:
            kept[-1] = (kept[-1][0] * count, kept[-1][1])
        else:
            kept.append((count, stride))
    kept.reverse()
    return tuple(c for c, _ in kept), tuple(s for _, s in kept), run_bytes


# --- numpy's rules, for tensors read whole rows at a time (quantized GGUF) ---------------------


@dataclass(frozen=True, slots=True)
class RowSelection:
    """What a numpy index needs of a tensor's first dimension.

    Attributes:
        shape: the result's shape.
        rows: the indexes of the first dimension that the index reads, distinct and ascending;
            ``None`` when it reads all of them (an ellipsis or no item covers that dimension);
            none when the result is empty.
        key: the index to apply to an array of only those rows, in that order: it gives what
            the original index gives on the whole tensor (``None`` items, boolean arrays,
            integer arrays, negative steps and the placement of advanced-index dimensions
            included); ``()`` when the result is empty (nothing to read).
    """

    shape: tuple[int, ...]
    rows: npt.NDArray[np.intp] | None
    key: tuple[Any, ...]


def numpy_rows(index: Any, shape: tuple[int, ...]) -> RowSelection:
    """The rows of a tensor of ``shape`` that ``index`` reads with numpy's indexing rules, and
    the index remapped to those rows (see :class:`RowSelection`). Pure; no array of the
    tensor's size is made.

    Raises:
        SliceError: numpy rejects the index for this shape (its message).
    """
    key = index if isinstance(index, tuple) else (index,)
    try:
        # numpy's own checks (bounds, boolean shapes, too many indices, ...) on an array of the
        # shape that holds one byte: free for basic indexing, one byte per result element else.
        result_shape = np.shape(np.broadcast_to(np.zeros((), np.int8), shape)[key])
    except IndexError as exc:
        raise SliceError(f"{exc} (shape {list(shape)})") from None
    if math.prod(result_shape) == 0:
        # Nothing to read; numpy checks no bounds then either ([False, [9]] of a 2 x 3 array).
        return RowSelection(result_shape, np.empty(0, np.intp), ())
    # A boolean array indexes as its nonzero() tuple in its place (numpy's documented rule),
    # after which every item but None, an ellipsis and a boolean scalar indexes one dimension.
    key = tuple(_nonzero_items(key))
    at = _first_dimension_item(key, len(shape))
    if at is None:
        return RowSelection(result_shape, None, key)
    item = key[at]
    picked = np.arange(shape[0])[item]
    new: Any
    if isinstance(item, slice):
        forward = item.indices(shape[0])[2] > 0
        rows = picked if forward else picked[::-1]
        # Kept a slice: an integer array here would change where numpy puts advanced-index
        # dimensions ([1:3, [0, 1]] is 2 x 2, [[1, 2], [0, 1]] is 2).
        new = slice(None) if forward else slice(None, None, -1)
    else:
        rows = np.unique(picked)
        new = np.searchsorted(rows, picked)  # a scalar stays a scalar, an array keeps its shape
    return RowSelection(result_shape, rows, (*key[:at], new, *key[at + 1 :]))


def _nonzero_items(key: tuple[Any, ...]) -> Iterator[Any]:
    for item in key:
        if isinstance(item, (list, tuple, np.ndarray)):
            array = np.asarray(item)
            if array.dtype == np.bool_ and array.ndim:
                yield from array.nonzero()
                continue
        yield item


def _takes_no_dimension(item: Any) -> bool:
    """None and boolean scalars add a dimension, an ellipsis stands for the ones left over."""
    if item is None or item is Ellipsis or isinstance(item, (bool, np.bool_)):
        return True
    return isinstance(item, np.ndarray) and item.ndim == 0 and item.dtype == np.bool_


def _first_dimension_item(key: tuple[Any, ...], ndim: int) -> int | None:
    """Where in ``key`` (boolean arrays expanded) the item indexing dimension 0 is; ``None``
    when no item does."""
    indexing = [i for i, item in enumerate(key) if not _takes_no_dimension(item)]
    ellipsis = next((i for i, item in enumerate(key) if item is Ellipsis), None)
    covers_first = ellipsis is not None and (not indexing or ellipsis < indexing[0])
    if not indexing or (covers_first and ndim > len(indexing)):
        return None
    return indexing[0]
