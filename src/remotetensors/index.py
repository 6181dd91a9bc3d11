"""Index values: what a header says about each tensor, a file, and parameter counts.

All values are frozen. Byte offsets are absolute positions in the file; ``end`` is exclusive.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import compress
from types import MappingProxyType
from typing import Any, Final

from . import hooks
from .dtypes import DTYPES, DType, dtype

MAX_EXPANSION = 64
"""A read may hand out at most this many times the bytes it reads for a tensor whose elements
repeat (an expanded view, stride 0), or :data:`MAX_EXPANDED_BYTES`, whichever is more:
a few bytes of a file must not become gigabytes of memory."""

MAX_EXPANDED_BYTES = 64 * 1024 * 1024
"""See :data:`MAX_EXPANSION`."""


def row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a row-major (C order) tensor of ``shape``."""
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True, slots=True)
class TensorLayout:
    """How a tensor lies in its file when its header entry alone does not say it: the layout
    of a tensor that is not "the row-major elements of bytes ``[start, end)``, where the header
    puts them". Formats that can only hold such tensors (safetensors, bintensors, GGUF) give
    none; a PyTorch ``.bin`` gives one to every tensor.

    Every path that reads bytes for a tensor asks :attr:`TensorInfo.layout` (through
    :meth:`TensorInfo.row_major` and :attr:`predicted`) and honours it or refuses with a
    :class:`~remotetensors.errors.LayoutError` naming the tensor.

    Attributes:
        strides: elements between neighbours along each dimension. When they are not the
            row-major ones (a transposed view, an expanded one with stride 0), ``[start, end)``
            is the span from the first element used to the last, and the elements must be
            gathered from it.
        predicted: where the bytes start is predicted (a zip member's data, placed from its
            central directory entry) and must be confirmed (its local header read) by the
            file before bytes are trusted from there; reads through the file confirm it on
            their own, and :meth:`AsyncTensorFile.offsets_confirmed` says whether it is.
    """

    strides: tuple[int, ...]
    predicted: bool = False


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor as its file's header describes it.

    Attributes:
        name: the tensor's name.
        dtype: the header's dtype name (``"BF16"``); :attr:`dtype_info` has bits and numpy dtype.
        shape: the dimensions; ``()`` for a scalar.
        start: absolute byte offset in the file of the first byte of data.
        end: absolute byte offset one past the last byte (exclusive).
        file: the file holding the tensor, for tensors of a sharded model; ``None`` otherwise.
        layout: how its elements lie in ``[start, end)`` when that is not plainly (see
            :class:`TensorLayout`); ``None``: row-major, where the header says.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int
    file: str | None = None
    layout: TensorLayout | None = None

    @property
    def dtype_info(self) -> DType:
        """The dtype's table entry."""
        return DTYPES.get(self.dtype) or dtype(self.dtype)

    @property
    def nbytes(self) -> int:
        """Bytes of data in the file."""
        return self.end - self.start

    @property
    def num_elements(self) -> int:
        """Number of elements (parameters): the product of the shape, 1 for a scalar."""
        return math.prod(self.shape)

    @property
    def row_major(self) -> bool:
        """Whether its bytes ``[start, end)`` are its elements in row-major order (whatever
        says where they start: see :attr:`TensorLayout.predicted`)."""
        layout = self.layout
        return layout is None or _in_order(self.shape, layout.strides)

    @property
    def materialised_nbytes(self) -> int:
        """Bytes of the row-major array a read hands out (the elements of the shape)."""
        return self.dtype_info.nbytes(self.num_elements)

    def _repr_html_(self) -> str:
        return str(hooks.call("tensor_card_html", self))

    def __repr__(self) -> str:
        where = f", file={self.file!r}" if self.file is not None else ""
        if self.layout is not None and not self.row_major:
            where += f", strides={list(self.layout.strides)}"
        return (
            f"TensorInfo({self.name!r}, {self.dtype}, shape={list(self.shape)}, "
            f"bytes=[{self.start}, {self.end}){where})"
        )


def _in_order(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether elements of ``shape`` at ``strides`` lie one after the other in row-major
    order (torch's ``is_contiguous``: an empty tensor does, and a dimension of size 1 may
    have any stride)."""
    if math.prod(shape) == 0:
        return True
    expected = 1
    for size, step in zip(reversed(shape), reversed(strides), strict=True):
        if size != 1 and step != expected:
            return False
        expected *= size
    return True


Row = tuple[str, tuple[int, ...], int, int, "str | None"]
"""One tensor as a plain tuple: ``(dtype, shape, start, end, file)``, the fields of
:class:`TensorInfo` after its name. Read a field by its name below (``row[ROW_FILE]``) or by
unpacking the whole row.

A plain tuple, not a ``NamedTuple``: headers of 100k tensors build one row per tensor at C speed
(``zip``), and a ``NamedTuple`` (or ``tuple.__new__(Row, ...)``) costs 7-15% more on the
header-parsing benchmark (``benchmarks/header_parse.py``)."""

ROW_DTYPE: Final = 0
"""Position in a :data:`Row` of the dtype name (``"BF16"``)."""
ROW_SHAPE: Final = 1
"""Position in a :data:`Row` of the shape."""
ROW_START: Final = 2
"""Position in a :data:`Row` of the absolute offset of the first byte of data."""
ROW_END: Final = 3
"""Position in a :data:`Row` of the absolute offset one past the last byte."""
ROW_FILE: Final = 4
"""Position in a :data:`Row` of the file holding the tensor (of a model), or ``None``."""


class TensorTable(Mapping[str, TensorInfo]):
    """An immutable ``name -> TensorInfo`` map that keeps each tensor as a :data:`Row` and makes
    its :class:`TensorInfo` on first access (then keeps it, so the same name gives the same
    object).

    Why: a frozen dataclass costs 1-2 us to build, and opening a file with 100k tensors would
    build 100k of them (twice for a model: the file's, then the model's with ``file`` set)
    although counting parameters needs none. The counters below read the rows at C speed, and
    a model of one file shares its file's rows (see :meth:`placed_in`).

    Iteration follows the rows' order, or name order for a table made with ``by_name``.

    A tensor whose layout its row cannot say (:class:`TensorLayout`) has it in ``layouts``;
    counts then take each byte of a file once (tensors sharing a storage overlap) and each
    view once (two names of one tensor, tied weights, are one tensor: torch's
    ``num_parameters()`` counts a tie once).
    """

    __slots__ = (
        "_by_name",
        "_counts",
        "_file",
        "_infos",
        "_layouts",
        "_names_text",
        "_order",
        "_rows",
    )

    def __init__(
        self,
        rows: dict[str, Row],
        *,
        file: str | None = None,
        by_name: bool = False,
        layouts: Mapping[str, TensorLayout] | None = None,
    ) -> None:
        """Take ``rows`` over (not copied: nobody may change it afterwards, but
        :meth:`move_offsets`).

        Args:
            rows: name -> row.
            file: when given, every tensor's file, whatever its row says.
            by_name: iterate in name order (sorted when first iterated) instead of row order.
            layouts: name -> layout, for the tensors that have one (see :class:`TensorLayout`).
        """
        self._rows = rows
        self._file = file
        self._by_name = by_name
        self._layouts: Mapping[str, TensorLayout] = MappingProxyType(dict(layouts or {}))
        self._order: list[str] | None = None
        self._infos: dict[str, TensorInfo] = {}
        self._counts: dict[str, int] | None = None
        self._names_text: str | None = None

    @classmethod
    def of(cls, tensors: Mapping[str, TensorInfo]) -> TensorTable:
        """A table of ``tensors`` (itself when it is one already)."""
        if isinstance(tensors, TensorTable):
            return tensors
        table = cls(
            {n: (i.dtype, i.shape, i.start, i.end, i.file) for n, i in tensors.items()},
            layouts={n: i.layout for n, i in tensors.items() if i.layout is not None},
        )
        table._infos.update(tensors)
        return table

    def placed_in(self, file: str) -> TensorTable:
        """The same tensors in ``file`` (of a model), in name order; shares these rows."""
        return TensorTable(self._rows, file=file, by_name=True, layouts=self._layouts)

    def by_name(self) -> TensorTable:
        """The same tensors in name order (itself when it is in name order already)."""
        if self._by_name:
            return self
        return TensorTable(self._rows, file=self._file, by_name=True, layouts=self._layouts)

    def layouts(self) -> Mapping[str, TensorLayout]:
        """name -> layout of the tensors that have one (read-only; empty for most formats)."""
        return self._layouts

    def __getitem__(self, name: str) -> TensorInfo:
        info = self._infos.get(name)
        if info is None:
            dtype_name, shape, start, end, file = self._rows[name]
            if self._file is not None:
                file = self._file
            info = self._infos[name] = TensorInfo(
                name, dtype_name, shape, start, end, file, self._layouts.get(name)
            )
        return info

    def get(self, name: str, default: Any = None) -> Any:  # Mapping's goes through KeyError
        return self[name] if name in self._rows else default

    def __contains__(self, name: object) -> bool:
        return name in self._rows

    def __iter__(self) -> Iterator[str]:
        if not self._by_name:
            return iter(self._rows)
        if self._order is None:
            self._order = sorted(self._rows)
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        return f"TensorTable({len(self._rows)} tensors)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_table, (self._rows, self._file, self._by_name, dict(self._layouts)))

    def move_offsets(self, file: str, rows: Mapping[str, Row]) -> int:
        """Give the tensors of ``file`` the offsets that ``rows`` (that file's own) say, in place.

        The one change a table takes: a shard known from the hub's metadata endpoint has
        provisional offsets until its 8-byte length is read, and only its starts and ends move
        (names, dtypes and shapes stay). Done in place, it costs the shard's own rows: a model
        that opens its shards one by one stays linear in its tensors, where building the whole
        table again for each shard was quadratic. Infos made before are made again on access.

        Returns:
            how many rows moved (the shard's tensors that this table holds in ``file``).
        """
        own = self._rows
        moved = 0
        for name, row in rows.items():
            current = own.get(name)
            if current is None:
                continue
            if (current[ROW_FILE] if self._file is None else self._file) != file:
                continue  # the weight map puts this name in another file (an unmapped copy)
            own[name] = placed(row, file)
            self._infos.pop(name, None)
            moved += 1
        return moved

    def row(self, name: str) -> Row:
        """One tensor's row (with its file as :meth:`get` says), without building the others'.

        Raises:
            KeyError: no such tensor.
        """
        row = self._rows[name]
        return row if self._file is None else placed(row, self._file)

    def rows(self) -> Mapping[str, Row]:
        """The rows, read-only, in the table's order (with their file as :meth:`get` says)."""
        if self._file is None and not self._by_name:
            return MappingProxyType(self._rows)
        file = self._file
        rows = self._rows
        if file is None:
            return MappingProxyType({name: rows[name] for name in self})
        return MappingProxyType({name: placed(rows[name], file) for name in self})

    def dtype_names(self) -> set[str]:
        """The dtype names that occur (one pass at C speed)."""
        return set(map(_dtype_of, self._rows.values()))

    def may_have_name_ending(self, suffix: str) -> bool:
        """``False`` when no name ends with ``suffix`` (a search of one string, cached); ``True``
        means perhaps: check the names themselves."""
        if self._names_text is None:
            self._names_text = "\n".join(self._rows) + "\n"
        return f"{suffix}\n" in self._names_text

    def may_have_name_containing(self, fragment: str) -> bool:
        """``False`` when no name contains ``fragment`` (a search of one string, cached);
        ``True`` means perhaps: check the names themselves."""
        self.may_have_name_ending("")  # builds the text once
        assert self._names_text is not None
        return fragment in self._names_text

    def parameter_count(self) -> dict[str, int]:
        """Elements per dtype name, ordered by dtype name; see :func:`parameter_count`. With
        layouts, a view reached by several names (a tie) counts once."""
        if self._counts is None:
            rows: Iterable[Row] = self._rows.values()
            if self._layouts:
                ties = self.tied_names()
                rows = [row for name, row in self._rows.items() if name not in ties]
            dtypes = list(map(_dtype_of, rows))
            counts = list(map(math.prod, map(_shape_of, rows)))
            # One pass per distinct dtype (a model has a handful), each at C speed.
            self._counts = {
                name: sum(compress(counts, map(name.__eq__, dtypes)))
                for name in sorted(set(dtypes))
            }
        return dict(self._counts)

    @property
    def num_parameters(self) -> int:
        """Total number of elements."""
        return sum(self.parameter_count().values())

    @property
    def nbytes(self) -> int:
        """Total bytes of tensor data; with layouts, each byte of a file once (tensors that
        share a storage overlap)."""
        rows = self._rows.values()
        if self._layouts:
            return _covered_bytes(rows)
        return int(sum(map(_end_of, rows)) - sum(map(_start_of, rows)))

    def tied_names(self) -> frozenset[str]:
        """The names of a view that an earlier name (in row order) reaches already: same file,
        start, dtype, shape and strides, as tied weights saved by ``torch.save`` are. Counts
        leave them out, as torch's ``num_parameters()`` counts a tie once. Empty for a table
        without layouts (safetensors cannot hold two names of one tensor)."""
        if not self._layouts:
            return frozenset()
        seen: set[tuple[Any, ...]] = set()
        ties: list[str] = []
        layouts = self._layouts
        for name, row in self._rows.items():
            layout = layouts.get(name)
            strides = None if layout is None else layout.strides
            key = (row[ROW_FILE], row[ROW_START], row[ROW_DTYPE], row[ROW_SHAPE], strides)
            if key in seen:
                ties.append(name)
            else:
                seen.add(key)
        return frozenset(ties)


def _covered_bytes(rows: Iterable[Row]) -> int:
    """Bytes covered by the rows' ranges, per file, each byte once."""
    spans = sorted((row[ROW_FILE] or "", row[ROW_START], row[ROW_END]) for row in rows)
    total = 0
    file, reach = None, 0
    for where, start, end in spans:
        if where != file:
            file, reach = where, 0
        if end > max(start, reach):
            total += end - max(start, reach)
            reach = end
    return total


def _table(
    rows: dict[str, Row],
    file: str | None,
    by_name: bool,
    layouts: Mapping[str, TensorLayout] | None = None,
) -> TensorTable:
    """Unpickling: the table again."""
    return TensorTable(rows, file=file, by_name=by_name, layouts=layouts)


_dtype_of = operator.itemgetter(ROW_DTYPE)
_shape_of = operator.itemgetter(ROW_SHAPE)
_start_of = operator.itemgetter(ROW_START)
_end_of = operator.itemgetter(ROW_END)


def placed(row: Row, file: str) -> Row:
    """``row`` of a tensor placed in ``file`` (of a model)."""
    dtype_name, shape, start, end, _ = row
    return (dtype_name, shape, start, end, file)


def parameter_count(tensors: Iterable[TensorInfo]) -> dict[str, int]:
    """Elements summed per dtype name, the rule the Hugging Face Hub uses for its counts.

    The result is ordered by dtype name, so it prints the same way every time.
    """
    counts: dict[str, int] = {}
    for info in tensors:
        counts[info.dtype] = counts.get(info.dtype, 0) + info.num_elements
    return dict(sorted(counts.items()))


def bits_per_weight(tensors: Iterable[TensorInfo]) -> dict[str, float]:
    """Bits of storage per element, per dtype name (16.0 for BF16, 4.5 for GGUF's Q4_K),
    ordered by dtype name; dtypes with no elements are left out."""
    counts: dict[str, int] = {}
    nbytes: dict[str, int] = {}
    for info in tensors:
        counts[info.dtype] = counts.get(info.dtype, 0) + info.num_elements
        nbytes[info.dtype] = nbytes.get(info.dtype, 0) + info.nbytes
    return {d: nbytes[d] * 8 / counts[d] for d in sorted(counts) if counts[d]}


class _Totals:
    """Counts over ``self.tensors``, shared by file and model indexes."""

    __slots__ = ()
    tensors: TensorTable

    def parameter_count(self) -> dict[str, int]:
        """Elements per dtype name (the hub's rule); see :func:`parameter_count`."""
        return self.tensors.parameter_count()

    @property
    def num_parameters(self) -> int:
        """Total number of elements over all tensors."""
        return self.tensors.num_parameters

    @property
    def nbytes(self) -> int:
        """Total bytes of tensor data."""
        return self.tensors.nbytes


@dataclass(frozen=True, slots=True)
class FileIndex(_Totals):
    """Everything a file's header says, validated.

    Attributes:
        tensors: name -> info, in data order (ascending ``start``, then ``end``).
        metadata: the ``__metadata__`` map, or ``None`` when the header has none; for GGUF the
            typed key/value metadata (arrays as tuples).
        header_length: N, the header's length in bytes as the first 8 bytes say (padding
            included); for GGUF, every byte before the data.
        file_size: total size of the file in bytes.
        format: ``"safetensors"``, ``"bintensors"`` or ``"gguf"``.
        prefix_bytes: bytes before the header (the 8-byte length; 0 for GGUF).
    """

    tensors: TensorTable
    metadata: Mapping[str, Any] | None
    header_length: int
    file_size: int
    format: str = "safetensors"
    prefix_bytes: int = 8
    _sorted_names: tuple[str, ...] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        # Read-only, so a shared index cannot be changed by one of its users (a TensorTable is).
        object.__setattr__(self, "tensors", TensorTable.of(self.tensors))
        if self.metadata is not None:
            object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))

    @property
    def data_offset(self) -> int:
        """Absolute offset of the data buffer: 8 + N (the data start for GGUF)."""
        return self.prefix_bytes + self.header_length

    def keys(self) -> list[str]:
        """Tensor names, sorted (like ``safetensors.safe_open.keys()``)."""
        if self._sorted_names is None:  # sorted when first asked: counting never asks
            object.__setattr__(self, "_sorted_names", tuple(sorted(self.tensors)))
        assert self._sorted_names is not None
        return list(self._sorted_names)

    def offset_keys(self) -> list[str]:
        """Tensor names in data order (like ``safetensors.safe_open.offset_keys()``)."""
        return list(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def _repr_html_(self) -> str:
        return str(hooks.call("tensors_html", f"{self.format} file", self.tensors.values()))

    def __repr__(self) -> str:
        return (
            f"FileIndex({self.format}, {len(self.tensors)} tensors, "
            f"{self.num_parameters} parameters, header {self.header_length} B, "
            f"file {self.file_size} B)"
        )


@dataclass(frozen=True, slots=True)
class ModelIndex(_Totals):
    """What the headers of a model's files say, joined: one file, or a sharded checkpoint.

    Attributes:
        files: file name -> its index, in the order of the weight map's first mention.
        tensors: name -> info (with ``file`` set), for every tensor of the weight map (or of the
            single file), sorted by name.
        metadata: the index file's ``metadata`` (sharded) or the file's ``__metadata__``.
        unmapped: tensors present in a shard but absent from the weight map (not in ``tensors``).

    Counts (:meth:`parameter_count`, :attr:`num_parameters`, :attr:`nbytes`) cover every tensor
    of every file, the unmapped ones included: that is how the hub and huggingface_hub's
    ``get_safetensors_metadata`` count a sharded model.
    """

    files: Mapping[str, FileIndex]
    tensors: TensorTable
    metadata: Mapping[str, object] | None
    unmapped: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", MappingProxyType(dict(self.files)))
        # Name order, sorted when first iterated: counting never iterates.
        object.__setattr__(self, "tensors", TensorTable.of(self.tensors).by_name())

    @classmethod
    def of_file(cls, name: str, file: FileIndex) -> ModelIndex:
        """The model of a single file ``name``."""
        return cls({name: file}, file.tensors.placed_in(name), file.metadata)

    def keys(self) -> list[str]:
        """Tensor names, sorted."""
        return list(self.tensors)

    def _tables(self) -> list[TensorTable]:
        if not self.unmapped:
            return [self.tensors]
        return [file.tensors for file in self.files.values()]

    def parameter_count(self) -> dict[str, int]:
        """Elements per dtype name over every file's tensors (the hub's rule)."""
        counts: dict[str, int] = {}
        for table in self._tables():
            for name, count in table.parameter_count().items():
                counts[name] = counts.get(name, 0) + count
        return dict(sorted(counts.items()))

    @property
    def num_parameters(self) -> int:
        """Total number of elements over every file's tensors."""
        return sum(table.num_parameters for table in self._tables())

    @property
    def nbytes(self) -> int:
        """Total bytes of tensor data over every file."""
        return sum(table.nbytes for table in self._tables())

    @property
    def header_bytes(self) -> int:
        """Bytes of all headers (8-byte prefixes included)."""
        return sum(f.data_offset for f in self.files.values())

    def _repr_html_(self) -> str:
        title = f"model in {len(self.files)} file(s)"
        return str(hooks.call("tensors_html", title, self.tensors.values(), show_files=True))
