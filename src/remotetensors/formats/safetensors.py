"""The safetensors header: how long it is, and what it says, validated like the reference.

Sans-IO: every function takes bytes and integers and returns values or raises
:class:`~remotetensors.errors.HeaderError`. The rules and their order are those of the reference
reader (safetensors 0.8.0); each rule group is one function below, called in that order by
:func:`parse_header`.

Layout: bytes ``[0, 8)`` hold N (u64, little-endian), bytes ``[8, 8+N)`` the JSON header, and the
data follows at ``8+N``. ``data_offsets`` in the header are relative to ``8+N``.
"""

from __future__ import annotations

import gc
import json
import math
import operator
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import chain, repeat
from typing import Any, NamedTuple

from ..dtypes import DTYPES
from ..errors import HeaderError, HeaderErrorKind
from ..index import FileIndex, Row, TensorTable
from . import strict_json
from .strict_json import Pairs

PREFIX_BYTES = 8
"""Size of the length prefix."""

MAX_HEADER_BYTES = 100_000_000
"""Largest header length N that the reference accepts (decimal bytes; N equal to it passes)."""

_loads: Callable[[str], Any]
try:
    # The optional accelerator (``pip install remotetensors[fast]``): about twice as fast as
    # ``json.loads`` on headers, and the same values for every text the fast path accepts (the
    # one difference, integers past 64 bits becoming floats, fails its integer check).
    from orjson import loads as _orjson_loads

    _loads = _orjson_loads
except ImportError:  # pragma: no cover - depends on the installation
    _loads = json.loads

_U64_LIMIT = 2**64
_ENTRY_FIELDS = ("dtype", "shape", "data_offsets")
_DTYPE, _SHAPE, _OFFSETS = (operator.itemgetter(f) for f in _ENTRY_FIELDS)
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_DTYPE_NAMES = frozenset(DTYPES)
_BITS = {name: d.bits for name, d in DTYPES.items()}


# One tensor's header entry: (dtype, shape, begin, stop), offsets relative to the data buffer.
# A plain tuple: a header of 100k tensors builds 100k of them, and a class costs 1-2 us each.
_Entry = tuple[str, tuple[int, ...], int, int]


def describe_foreign(first_bytes: bytes) -> str:
    """A hint when the bytes look like something other than a tensor file, else ``""``."""
    head = first_bytes[:64].lstrip().lower()
    if head.startswith(b"version "):  # "version https://git-lfs.github.com/spec/v1"
        return (
            " (this is a Git LFS pointer file, not the file itself: fetch it through the LFS "
            "or resolve URL)"
        )
    if head.startswith((b"<!doctype", b"<html", b"<?xml", b"<head")):
        return " (this is an HTML or XML page, not a tensor file: check the URL)"
    if head.startswith((b"{", b"[")):
        return " (this is a JSON document, not a tensor file: an index.json or config file?)"
    return ""


_NOT_TENSORS = " (so this is not a safetensors file, or it is cut short or damaged)"


def header_length(prefix: bytes, *, file_size: int, location: str = "<bytes>") -> int:
    """Read N from the first bytes of a file and check it against the file size.

    Args:
        prefix: the first bytes of the file; at least 8 unless the file is shorter. More bytes
            give better hints when the file is not a tensor file at all.
        file_size: total size of the file in bytes.
        location: named in error messages.

    Returns:
        N, the header length in bytes. The header occupies bytes ``[8, 8 + N)``.

    Raises:
        HeaderError: TOO_SMALL, TOO_LARGE or INVALID_LENGTH, checked in that order.
    """
    if file_size < PREFIX_BYTES or len(prefix) < PREFIX_BYTES:
        raise HeaderError(
            HeaderErrorKind.TOO_SMALL,
            f"the file has {file_size} bytes; a safetensors file has at least 8",
            location=location,
        )
    (n,) = struct.unpack_from("<Q", prefix)
    if n > MAX_HEADER_BYTES:
        raise HeaderError(
            HeaderErrorKind.TOO_LARGE,
            f"the first 8 bytes say the header has {n} bytes, more than the limit of "
            f"{MAX_HEADER_BYTES}{describe_foreign(prefix) or _NOT_TENSORS}",
            location=location,
        )
    if PREFIX_BYTES + n > file_size:
        raise HeaderError(
            HeaderErrorKind.INVALID_LENGTH,
            f"the header claims bytes [8, {8 + n}) but the file has only {file_size} bytes"
            f"{describe_foreign(prefix) or _NOT_TENSORS}",
            location=location,
        )
    return int(n)


def parse_header(header: bytes, *, file_size: int, location: str = "<bytes>") -> FileIndex:
    """Parse and validate a header, exactly as the reference reader does.

    Args:
        header: the N header bytes, i.e. bytes ``[8, 8 + N)`` of the file.
        file_size: total size of the file in bytes (the header must describe all of it).
        location: named in error messages.

    Returns:
        The validated index; tensors in data order, offsets absolute.

    Raises:
        HeaderError: with the ``kind`` of the first rule that fails.
    """
    metadata, rows, data_end = _validated(header, location)
    _check_file_size(len(header), data_end, file_size, location)
    return FileIndex(TensorTable(rows), metadata, len(header), file_size, "safetensors")


def _validated(header: bytes, location: str) -> tuple[dict[str, str] | None, dict[str, Row], int]:
    """Every rule but the last: the metadata, the rows in data order (offsets absolute, as if
    the data started at ``8 + len(header)``), and the data's length the header implies."""
    text = _decode_utf8(header, location)
    data_offset = PREFIX_BYTES + len(header)
    with _collector_paused():
        columns = _read_json_fast(text)
        fast = None if columns is None else _rows_fast(columns, data_offset)
    if fast is not None:
        rows, data_end = fast
        metadata = columns[0] if columns is not None else None
    else:
        # Not proven valid at C speed: the rule-by-rule path gives the verdict and message.
        if columns is not None:
            metadata, entries = _entries(columns)
        else:
            try:
                metadata, entries = _read_json(text)
            except strict_json.StrictJSONError as exc:
                raise HeaderError(
                    HeaderErrorKind.INVALID_JSON, str(exc), location=location
                ) from None
        ordered = _check_offsets_and_sizes(entries, location)
        rows = {
            name: (dtype, shape, data_offset + begin, data_offset + stop, None)
            for name, (dtype, shape, begin, stop) in ordered
        }
        data_end = ordered[-1][1][3] if ordered else 0
    return metadata, rows, data_end


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block, when it is on (and left alone when
    the caller turned it off). A header of N tensors makes about 3N containers at once, all of
    which survive and none of which can form a cycle: the collections their allocation sets off
    would traverse them, and the rest of the heap, for nothing (a quarter of a 7,200-tensor
    header's parse in a process with a few libraries loaded). Threads that parse at the same
    time are safe: whichever turned it off turns it back on."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _decode_utf8(header: bytes, location: str) -> str:
    try:
        return header.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HeaderError(
            HeaderErrorKind.INVALID_UTF8,
            f"byte {exc.start} of the header is not valid UTF-8",
            location=location,
        ) from None


def parse_header_unsized(header: bytes, *, location: str = "<bytes>") -> FileIndex:
    """Parse and validate a header whose file has not been seen yet (the hub's one-call
    metadata gives header objects without their files): every rule of :func:`parse_header`
    except the last (the header describes the whole file), which :func:`rebase` applies once
    the file's length prefix and size are known.

    Returns:
        A provisional index as if the header were exactly ``header`` (so ``data_offset`` is
        ``8 + len(header)``) and the file ended with the last tensor.

    Raises:
        HeaderError: with the ``kind`` of the first rule that fails.
    """
    metadata, rows, data_end = _validated(header, location)
    file_size = PREFIX_BYTES + len(header) + data_end
    return FileIndex(TensorTable(rows), metadata, len(header), file_size, "safetensors")


def rebase(
    provisional: FileIndex, *, header_length: int, file_size: int, location: str = "<bytes>"
) -> FileIndex:
    """The index of a file whose header was validated by :func:`parse_header_unsized`, now
    that its real header length N (from its first 8 bytes) and size are known: offsets move to
    the real data start, and the last rule is applied (the header describes the whole file).

    Raises:
        HeaderError: INCOMPLETE_BUFFER when N and the size do not fit what the header says.
    """
    shift = header_length - provisional.header_length
    data_end = provisional.file_size - provisional.data_offset
    _check_file_size(header_length, data_end, file_size, location)
    rows = {
        name: (dtype, shape, start + shift, end + shift, file)
        for name, (dtype, shape, start, end, file) in provisional.tensors.rows().items()
    }
    return FileIndex(
        TensorTable(rows), provisional.metadata, header_length, file_size, provisional.format
    )


def parse_file(data: bytes, *, location: str = "<bytes>") -> FileIndex:
    """Validate a whole file held in memory (``data`` is every byte of it)."""
    n = header_length(data[:64], file_size=len(data), location=location)
    header = data[PREFIX_BYTES : PREFIX_BYTES + n]
    return parse_header(header, file_size=len(data), location=location)


# --- rule group 5: the JSON shape (serde's derived structs) ---------------------------------


class _Columns(NamedTuple):
    """A header as :func:`_read_json_fast` read it: metadata, then one list per field, the
    tensors in the text's order."""

    metadata: dict[str, str] | None
    names: list[str]
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    begins: list[int]
    ends: list[int]


def _read_json_fast(text: str) -> _Columns | None:
    """The common case at C speed: plain ``json.loads``, then checks that prove the strict
    dialect's special cases cannot have occurred. ``None`` means "not proven": the caller runs
    the strict reader, which gives the verdict and the message. So this path never decides a
    rejection, and accepts only headers the strict reader accepts with the same result.

    What plain ``json`` does differently from serde_json, and why none of it survives here:

    - duplicate keys are dropped silently: every key in the text is followed by a ``:`` outside
      a string, so ``text.count(":")`` equals the parsed keys plus the colons inside parsed
      strings exactly when no key was lost (escapes cannot produce ``:`` except ``\\u``);
    - NaN, Infinity, floats, integers out of the u64 range, lone surrogates, deep nesting: the
      accepted shape is fixed (objects of exactly dtype/shape/data_offsets, a string-to-string
      ``__metadata__``), numbers appear only in shape and data_offsets and must be ints in
      ``[0, 2**64)``, and any ``\\u`` escape sends the header to the strict reader;
    - ``-0`` parses as the integer 0 (serde_json: the float -0.0, which a u64 rejects): a ``-``
      outside a string can only belong to a number here, so the ``-`` count must match too.

    Every check is a pass of a builtin over a whole column (``map``, ``set``, ``min``), not
    Python code per tensor: a header of 100k tensors costs about what ``json.loads`` costs.
    """
    if "\\" in text and "\\u" in text:  # one memchr first: most headers have no backslash
        return None
    try:
        top = _loads(text)
    except (ValueError, RecursionError):  # orjson's JSONDecodeError is a ValueError too
        return None
    if type(top) is not dict:
        return None
    strings: list[str] = list(top)
    keys = len(top)
    metadata: dict[str, str] | None = None
    if "__metadata__" in top:
        value = top.pop("__metadata__")
        if value is not None:
            if type(value) is not dict or set(map(type, value.values())) - {str}:
                return None
            metadata = value
            keys += len(value)
            strings += value
            strings += value.values()
    names = list(top)
    values = list(top.values())
    dtypes: list[str] = []
    shapes: list[list[int]] = []
    offsets: list[list[int]] = []
    if values:
        try:
            # Only a dict of exactly the three fields passes: len() or a field lookup raises
            # TypeError for any other JSON value, and a missing field raises KeyError.
            if set(map(len, values)) != {3}:
                return None
            dtypes = list(map(_DTYPE, values))
            shapes = list(map(_SHAPE, values))
            offsets = list(map(_OFFSETS, values))
            # Every value JSON gives that is not a str is unhashable or equal to no name.
            if not _DTYPE_NAMES.issuperset(dtypes):
                return None
        except (KeyError, TypeError):
            return None
        if set(map(type, shapes)) != {list} or set(map(type, offsets)) != {list}:
            return None
        if set(map(len, offsets)) != {2}:
            return None
        ints = list(chain.from_iterable(shapes))
        ints += chain.from_iterable(offsets)
        if set(map(type, ints)) != {int} or min(ints) < 0 or max(ints) >= _U64_LIMIT:
            return None
    keys += 3 * len(values)
    joined = "\0".join(strings)
    if text.count(":") != keys + joined.count(":") or text.count("-") != joined.count("-"):
        return None
    return _Columns(
        metadata,
        names,
        dtypes,
        list(map(tuple, shapes)),
        list(map(_FIRST, offsets)),
        list(map(_SECOND, offsets)),
    )


def _entries(columns: _Columns) -> tuple[dict[str, str] | None, dict[str, _Entry]]:
    """The columns as the strict reader returns a header (names are unique here)."""
    return columns.metadata, dict(
        zip(
            columns.names,
            zip(columns.dtypes, columns.shapes, columns.begins, columns.ends, strict=True),
            strict=True,
        )
    )


def _rows_fast(columns: _Columns, data_offset: int) -> tuple[dict[str, Row], int] | None:
    """Rule group 6 at C speed: the rows in data order and the data's end when the offsets
    tile the buffer and every size agrees; ``None`` when that is not proven (the rule-by-rule
    check then gives the verdict). Tensors with no elements are left to that check too: the
    reference's stepwise overflow rule matters only for them.
    """
    _, names, dtypes, shapes, begins, ends = columns
    if not names:
        return {}, 0
    order: list[int] | None = None
    if not all(map(operator.le, begins, begins[1:])):  # the text is not in data order
        # A stable sort by start alone orders exactly as the reference's (start, end) sort
        # when the tiling holds: two tensors can share a start only if one of them is empty.
        order = sorted(range(len(names)), key=begins.__getitem__)
        begins = list(map(begins.__getitem__, order))
        ends = list(map(ends.__getitem__, order))
    if begins[0] != 0 or begins[1:] != ends[:-1]:
        return None
    if order is not None:
        shapes = list(map(shapes.__getitem__, order))
        dtypes = list(map(dtypes.__getitem__, order))
        names = list(map(names.__getitem__, order))
    counts = list(map(math.prod, shapes))
    if min(counts) == 0 or max(counts) >= _U64_LIMIT:
        return None
    bits = list(map(operator.mul, counts, map(_BITS.__getitem__, dtypes)))
    if max(bits) >= _U64_LIMIT:
        return None
    if bits != list(map(operator.mul, map(operator.sub, ends, begins), repeat(8))):
        return None  # a size that disagrees, or one that is not whole bytes
    starts = map(operator.add, begins, repeat(data_offset))
    stops = map(operator.add, ends, repeat(data_offset))
    files: repeat[str | None] = repeat(None)
    rows: dict[str, Row] = dict(
        zip(names, zip(dtypes, shapes, starts, stops, files))  # noqa: B905
    )
    return rows, ends[-1]


def _read_json(text: str) -> tuple[dict[str, str] | None, dict[str, _Entry]]:
    top = strict_json.loads(text)
    if not isinstance(top, Pairs):
        raise strict_json.StrictJSONError(f"expected an object at the top, got {_kind(top)}")
    metadata: dict[str, str] | None = None
    seen_metadata = False
    entries: dict[str, _Entry] = {}
    for key, value in top:
        if key == "__metadata__":
            if seen_metadata:
                raise strict_json.StrictJSONError("duplicate field `__metadata__`")
            seen_metadata = True
            metadata = _read_metadata(value)
        else:
            # Last one wins for duplicate names, as in the reference; all must parse.
            entries[key] = _read_entry(key, value)
    return metadata, entries


def _read_metadata(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Pairs):
        raise strict_json.StrictJSONError(f"`__metadata__` must be an object, got {_kind(value)}")
    metadata: dict[str, str] = {}
    for key, item in value:
        if not isinstance(item, str):
            raise strict_json.StrictJSONError(
                f"metadata value of {key!r} must be a string, got {_kind(item)}"
            )
        metadata[key] = item
    return metadata


def _read_entry(name: str, value: Any) -> _Entry:
    if isinstance(value, Pairs):
        fields: dict[str, Any] = {}
        for key, item in value:
            if key in _ENTRY_FIELDS:
                if key in fields:
                    raise strict_json.StrictJSONError(f"duplicate field `{key}` in tensor {name!r}")
                fields[key] = item
            elif strict_json.max_depth(item) + 2 > strict_json.MAX_DEPTH:
                raise strict_json.StrictJSONError(
                    f"recursion limit exceeded in field {key!r} of tensor {name!r}"
                )
        for key in _ENTRY_FIELDS:
            if key not in fields:
                raise strict_json.StrictJSONError(f"missing field `{key}` in tensor {name!r}")
        raw_dtype, raw_shape, raw_offsets = (fields[k] for k in _ENTRY_FIELDS)
    elif isinstance(value, list):
        # serde also reads a struct from a sequence of its fields, in order.
        if len(value) != 3:
            raise strict_json.StrictJSONError(
                f"tensor {name!r} as an array must have 3 elements, got {len(value)}"
            )
        raw_dtype, raw_shape, raw_offsets = value
    else:
        raise strict_json.StrictJSONError(
            f"tensor {name!r} must be an object with dtype, shape and data_offsets, "
            f"got {_kind(value)}"
        )
    dtype = _read_dtype(name, raw_dtype)
    shape = _read_uints(name, "shape", raw_shape)
    offsets = _read_uints(name, "data_offsets", raw_offsets)
    if len(offsets) != 2:
        raise strict_json.StrictJSONError(
            f"data_offsets of tensor {name!r} must have 2 elements, got {len(offsets)}"
        )
    return (dtype, shape, offsets[0], offsets[1])


def _read_dtype(name: str, value: Any) -> str:
    if isinstance(value, Pairs):
        # serde's externally tagged form of a unit variant: {"F32": null}.
        if len(value) != 1 or value[0][1] is not None:
            raise strict_json.StrictJSONError(
                f"dtype of tensor {name!r} as an object must be {{NAME: null}}"
            )
        value = value[0][0]
    if not isinstance(value, str):
        raise strict_json.StrictJSONError(
            f"dtype of tensor {name!r} must be a string, got {_kind(value)}"
        )
    if value not in DTYPES:
        raise strict_json.StrictJSONError(
            f"unknown dtype {value!r} for tensor {name!r}; expected one of {', '.join(DTYPES)}"
        )
    return value


def _read_uints(name: str, field: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or isinstance(value, Pairs):
        raise strict_json.StrictJSONError(
            f"{field} of tensor {name!r} must be an array, got {_kind(value)}"
        )
    for item in value:
        # bool is an int in Python; in JSON it is not a number.
        if type(item) is not int or not 0 <= item < _U64_LIMIT:
            raise strict_json.StrictJSONError(
                f"{field} of tensor {name!r} must hold unsigned 64-bit integers, got {item!r}"
            )
    return tuple(value)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, Pairs):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, float):
        return f"the number {value!r}"
    return f"the number {value}"


# --- rule group 6: offsets tile the buffer; sizes agree with shape and dtype ------------------


def _check_offsets_and_sizes(entries: dict[str, _Entry], location: str) -> list[tuple[str, _Entry]]:
    # Stable sort by (start, end), as the reference does before checking.
    ordered = sorted(entries.items(), key=lambda item: item[1][2:])
    running_end = 0
    for name, (dtype, shape, begin, stop) in ordered:
        if begin != running_end or stop < begin:
            raise HeaderError(
                HeaderErrorKind.INVALID_OFFSET,
                f"tensor `{name}` has data_offsets [{begin}, {stop}] but the "
                f"previous tensor ends at {running_end}: tensors must tile the data buffer "
                "without holes or overlaps",
                location=location,
            )
        count = math.prod(shape)
        if count == 0 or count >= _U64_LIMIT:
            # The reference multiplies step by step and fails on the first overflow, even
            # when a later 0 makes the product small: redo it that way. Without a 0 and
            # below the limit, no partial product can have overflowed.
            count = 1
            for dim in shape:
                count *= dim
                if count >= _U64_LIMIT:
                    _raise_overflow(name, dtype, shape, location)
        bits = count * DTYPES[dtype].bits
        if bits >= _U64_LIMIT:
            _raise_overflow(name, dtype, shape, location)
        if bits % 8:
            raise HeaderError(
                HeaderErrorKind.MISALIGNED,
                f"tensor `{name}` of {dtype} with shape {list(shape)} holds "
                f"{bits} bits, which is not a whole number of bytes",
                location=location,
            )
        if stop - begin != bits // 8:
            raise HeaderError(
                HeaderErrorKind.INVALID_TENSOR_INFO,
                f"tensor `{name}` of {dtype} with shape {list(shape)} needs "
                f"{bits // 8} bytes but data_offsets [{begin}, {stop}] span "
                f"{stop - begin}",
                location=location,
            )
        running_end = stop
    return ordered


def _raise_overflow(name: str, dtype: str, shape: tuple[int, ...], location: str) -> None:
    raise HeaderError(
        HeaderErrorKind.OVERFLOW,
        f"the size of tensor `{name}` ({dtype}, shape {list(shape)}) overflows 64 bits",
        location=location,
    )


# --- rule group 7: the header describes the whole file ----------------------------------------


def _check_file_size(header_length: int, data_end: int, file_size: int, location: str) -> None:
    """8 + N + the data's end must be the file's size, to the byte."""
    expected = PREFIX_BYTES + header_length + data_end
    if expected != file_size:
        raise HeaderError(
            HeaderErrorKind.INCOMPLETE_BUFFER,
            f"the header describes {expected} bytes (8 + header {header_length} + data "
            f"{data_end}) but the file has {file_size}",
            location=location,
        )
