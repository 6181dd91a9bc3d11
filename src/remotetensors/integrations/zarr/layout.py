"""How a model's tensors become Zarr arrays: node names, chunk grids, metadata documents.

Pure planning from the headers: no IO, no zarr import. A tensor is one array named as the
checkpoint names it (a ``/`` in a name nests it in groups), chunked in blocks of whole rows
along its first axis (every other axis whole), about ``chunk_bytes`` a chunk. In C order those
rows are one contiguous byte range of the file, so a chunk is one range read.

Two readers of a plan:

- the store (:mod:`.store`) reads each chunk through our reader and pads the last one with
  zeros in memory (Zarr chunks are all of the grid's size; the values past the array's end are
  never shown);
- references (kerchunk, VirtualiZarr) name a byte range of the file per chunk, so the last
  chunk reaches past the tensor's end into whatever follows it (bytes Zarr reads and drops).
  Where that would run past the end of the file, the rows per chunk are made to divide the
  tensor's rows; packed dtypes (F4, F6) are left out, as no byte range of the file is a chunk
  of one-value-a-byte data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ...index import TensorInfo
from ...redact import redact_url
from .dtypes import ZARR_DTYPES, ZarrDType

Separator = Literal["/", "."]


@dataclass(frozen=True, slots=True)
class ArrayPlan:
    """One tensor as a Zarr array.

    Attributes:
        path: the node path, the tensor's name.
        info: the tensor's header entry.
        dtype: its Zarr data type.
        rows: rows of the first axis per chunk (1 for a scalar).
        dims: one dimension name per axis, unique to this tensor (xarray needs a name per
            axis, and the same name on two tensors would have to mean the same size).
    """

    path: str
    info: TensorInfo
    dtype: ZarrDType
    rows: int
    dims: tuple[str, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.info.shape

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        """The chunk grid's shape (Zarr wants every extent positive, even of an empty axis)."""
        if not self.shape:
            return ()
        return (self.rows, *(max(1, n) for n in self.shape[1:]))

    @property
    def row_values(self) -> int:
        """Values in one row (one index of the first axis)."""
        return math.prod(self.shape[1:])

    @property
    def chunk_count(self) -> int:
        """Chunks in the grid: along the first axis only; none for an empty tensor."""
        if math.prod(self.shape) == 0:
            return 0
        return -(-self.shape[0] // self.rows) if self.shape else 1

    @property
    def chunk_nbytes(self) -> int:
        """Bytes of one encoded Zarr chunk (values of ``dtype.item_bytes`` each, C order)."""
        values = self.rows * self.row_values if self.shape else 1
        return values * self.dtype.item_bytes

    def chunk_rows(self, index: int) -> tuple[int, int]:
        """Rows ``[start, end)`` of the tensor in chunk ``index`` (``end`` exclusive)."""
        if not self.shape:
            return 0, 1
        start = index * self.rows
        return start, min(self.shape[0], start + self.rows)

    def file_bytes(self, start_row: int, end_row: int) -> tuple[int, int]:
        """Rows ``[start_row, end_row)`` as bytes ``(offset, length)`` of the tensor's data in
        the file (``offset`` from the tensor's first byte; packed dtypes whole bytes, which
        the plan's row alignment makes exact)."""
        dt = self.info.dtype_info
        per_row = self.row_values if self.shape else 1
        offset = dt.nbytes(start_row * per_row)
        return offset, dt.nbytes(end_row * per_row) - offset

    def chunk_key(self, index: int, separator: Separator) -> str:
        """The chunk's key under the array (``c/3/0`` or ``c.3.0``; ``c`` for a scalar)."""
        if not self.shape:
            return "c"
        return "c" + separator + separator.join(map(str, (index, *[0] * (len(self.shape) - 1))))

    def attributes(self) -> dict[str, Any]:
        """What the array says of itself: the dtype as stored and its file."""
        found: dict[str, Any] = {"stored_dtype": self.info.dtype}
        if self.info.file is not None:
            found["file"] = self.info.file
        return found

    def v3_metadata(self, separator: Separator) -> dict[str, Any]:
        """The array's ``zarr.json`` document (Zarr v3)."""
        return {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(self.shape),
            "data_type": self.dtype.v3,
            "chunk_grid": {
                "name": "regular",
                "configuration": {"chunk_shape": list(self.chunk_shape)},
            },
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": separator}},
            "fill_value": self.dtype.fill,
            "codecs": [self.dtype.codec],
            "attributes": self.attributes(),
            "dimension_names": list(self.dims),
            "storage_transformers": [],
        }

    def v2_metadata(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The array's ``.zarray`` and ``.zattrs`` (Zarr v2, as kerchunk writes them). The
        fill value is ``null``: xarray masks a v2 array's fill value as missing, and a zero
        weight is not missing."""
        zarray = {
            "zarr_format": 2,
            "shape": list(self.shape),
            "chunks": list(self.chunk_shape),
            "dtype": self.dtype.v2,
            "compressor": None,
            "filters": None,
            "fill_value": None,
            "order": "C",
            "dimension_separator": ".",
        }
        return zarray, {"_ARRAY_DIMENSIONS": list(self.dims), **self.attributes()}


@dataclass(frozen=True)
class Plan:
    """A model as a Zarr hierarchy.

    Attributes:
        arrays: node path -> array, in the model's (sorted) order.
        groups: the group paths, the root ``""`` first; each holds its direct members.
        left_out: ``(tensor name, why)`` for each tensor that is not in the hierarchy.
    """

    arrays: dict[str, ArrayPlan]
    groups: dict[str, list[str]] = field(default_factory=dict)
    left_out: list[tuple[str, str]] = field(default_factory=list)

    def chunks(self) -> Iterator[tuple[ArrayPlan, int]]:
        """Every chunk of every array, array by array."""
        for array in self.arrays.values():
            for index in range(array.chunk_count):
                yield array, index


def plan_arrays(
    tensors: Mapping[str, TensorInfo],
    *,
    chunk_bytes: int,
    file_sizes: Mapping[str, int] | None = None,
    usable: Callable[[ZarrDType], bool] | None = None,
) -> Plan:
    """The Zarr hierarchy of ``tensors``.

    Args:
        tensors: name -> header entry (with its file, for a model).
        chunk_bytes: target bytes of a chunk, in whole rows (at least one row).
        file_sizes: file name -> size in bytes, for references: each chunk is then a byte
            range of the file (see the module's docstring); ``None`` for the store.
        usable: whether zarr reads a data type as the checkpoint's dtype (see
            :func:`.kinds.usable`); every type is, when ``None``.

    Raises:
        ValueError: ``chunk_bytes`` is not positive.
    """
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
    plan = Plan(arrays={}, groups={"": []})
    for name, info in tensors.items():
        dtype = ZARR_DTYPES.get(info.dtype)
        why = _why_not(name, info, dtype, references=file_sizes is not None, usable=usable)
        parents = name.split("/")[:-1]
        paths = ["/".join(parents[: i + 1]) for i in range(len(parents))]
        if why is None and any(p in plan.arrays for p in paths):
            why = "an array holds the name's parent path already"
        if why is None and name in plan.groups:
            why = "it would be an array and a group at once"
        if why is not None or dtype is None:
            plan.left_out.append((name, why or ""))
            continue
        after = None
        if file_sizes is not None:
            after = file_sizes.get(info.file or "", info.end) - info.end
        rows = _rows(info, dtype, chunk_bytes, bytes_after=after)
        plan.arrays[name] = ArrayPlan(name, info, dtype, rows, _dims(name, info, tensors))
        for parent, child in zip(["", *paths], [*paths, name], strict=True):
            members = plan.groups.setdefault(parent, [])
            leaf = child.rsplit("/", 1)[-1]
            if leaf not in members:
                members.append(leaf)
    return plan


def _why_not(
    name: str,
    info: TensorInfo,
    dtype: ZarrDType | None,
    *,
    references: bool,
    usable: Callable[[ZarrDType], bool] | None,
) -> str | None:
    """Why tensor ``name`` cannot be an array, or None when it can."""
    if dtype is None:
        return f"its dtype {info.dtype} has no Zarr data type (it is read whole, dequantized)"
    if references and dtype.packed_in_file:
        return (
            f"its {info.dtype} values are packed {info.dtype_info.bits} bits apiece in the file, "
            "so no byte range of the file is a Zarr chunk of them (zarr-python has no packbits "
            "codec); the Zarr store of the model unpacks them"
        )
    if usable is not None and not usable(dtype):
        return f"the Zarr data type {dtype.v3!r} is registered by another library for another type"
    if not info.row_major:
        strides = list(info.layout.strides) if info.layout is not None else []
        return (
            f"it is a strided view of its storage (shape {list(info.shape)}, strides "
            f"{strides}), not one row-major range of its file, which is what a Zarr chunk "
            "of it would be; get_tensor gathers it"
        )
    segments = name.split("/")
    if "\\" in name or any(s in ("", ".", "..") or s.startswith("__") for s in segments):
        return "Zarr node names cannot be empty, '.' or '..', start with '__' or hold a backslash"
    return None


def _rows(info: TensorInfo, dtype: ZarrDType, chunk_bytes: int, *, bytes_after: int | None) -> int:
    """Rows per chunk: about ``chunk_bytes`` of the chunk's encoding, at least one row, all the
    rows when fewer; a multiple that starts every chunk on a byte of the file (packed dtypes);
    with ``bytes_after`` (references) a divisor of the rows when the last chunk would otherwise
    reach more than ``bytes_after`` bytes past the tensor's end."""
    if not info.shape or info.shape[0] == 0:
        return 1
    count = info.shape[0]
    row_values = math.prod(info.shape[1:])
    bits = info.dtype_info.bits
    align = 8 // math.gcd(row_values * bits, 8) if row_values else 1
    rows = max(1, chunk_bytes // max(1, row_values * dtype.item_bytes))
    rows = max(align, rows - rows % align)
    if rows >= count:
        return count
    if bytes_after is not None:
        overrun = (-count % rows) * info.dtype_info.nbytes(row_values)
        if overrun > bytes_after:
            rows = _largest_divisor(count, rows)
    return rows


def _largest_divisor(count: int, limit: int) -> int:
    """The largest divisor of ``count`` that is at most ``limit`` (pairs up to the root)."""
    best = 1
    for small in range(1, math.isqrt(count) + 1):
        if count % small == 0:
            large = count // small
            if large <= limit:
                return max(best, large)
            best = small if small <= limit else best
    return best


def _dims(name: str, info: TensorInfo, tensors: Mapping[str, TensorInfo]) -> tuple[str, ...]:
    """``{name}.dim_{axis}`` per axis; one that happens to be a tensor's name is suffixed, as
    xarray would take a variable of a dimension's name for its coordinate."""
    dims = []
    for axis in range(len(info.shape)):
        dim = f"{name}.dim_{axis}"
        while dim in tensors:
            dim += "_"
        dims.append(dim)
    return tuple(dims)


def group_attributes(location: str, metadata: Mapping[str, object] | None) -> dict[str, Any]:
    """The root group's attributes: the model's location (redacted) and its metadata when that
    is text (safetensors' ``__metadata__``; GGUF's typed metadata, vocabulary included, stays
    out: it is no array's business and may be megabytes)."""
    attributes: dict[str, Any] = {"location": redact_url(location)}
    if metadata and all(isinstance(v, str) for v in metadata.values()):
        attributes["metadata"] = {str(k): v for k, v in metadata.items()}
    return attributes
