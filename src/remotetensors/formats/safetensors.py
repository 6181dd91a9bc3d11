"""The safetensors header: how long it is, and what it says, validated like the reference.

Sans-IO: every function takes bytes and integers and returns values or raises
:class:`~remotetensors.errors.HeaderError`. The rules and their order are those of the reference
reader (safetensors 0.8.0); each rule group is one function below, called in that order by
:func:`parse_header`.

Layout: bytes ``[0, 8)`` hold N (u64, little-endian), bytes ``[8, 8+N)`` the JSON header, and the
data follows at ``8+N``. ``data_offsets`` in the header are relative to ``8+N``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from ..dtypes import DTYPES
from ..errors import HeaderError, HeaderErrorKind
from ..index import FileIndex, TensorInfo
from . import strict_json
from .strict_json import Pairs

PREFIX_BYTES = 8
"""Size of the length prefix."""

MAX_HEADER_BYTES = 100_000_000
"""Largest header length N that the reference accepts (decimal bytes; N equal to it passes)."""

_U64_LIMIT = 2**64
_ENTRY_FIELDS = ("dtype", "shape", "data_offsets")


@dataclass(frozen=True, slots=True)
class _Entry:
    dtype: str
    shape: tuple[int, ...]
    begin: int  # relative to the data buffer
    stop: int


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
    try:
        text = header.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HeaderError(
            HeaderErrorKind.INVALID_UTF8,
            f"byte {exc.start} of the header is not valid UTF-8",
            location=location,
        ) from None
    try:
        metadata, entries = _read_json(text)
    except strict_json.StrictJSONError as exc:
        raise HeaderError(HeaderErrorKind.INVALID_JSON, str(exc), location=location) from None
    ordered = _check_offsets_and_sizes(entries, location)
    data_offset = PREFIX_BYTES + len(header)
    _check_coverage(ordered, header_length=len(header), file_size=file_size, location=location)
    tensors = {
        name: TensorInfo(name, e.dtype, e.shape, data_offset + e.begin, data_offset + e.stop)
        for name, e in ordered
    }
    return FileIndex(tensors, metadata, len(header), file_size, "safetensors")


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
    try:
        text = header.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HeaderError(
            HeaderErrorKind.INVALID_UTF8,
            f"byte {exc.start} of the header is not valid UTF-8",
            location=location,
        ) from None
    try:
        _, entries = _read_json(text)
    except strict_json.StrictJSONError as exc:
        raise HeaderError(HeaderErrorKind.INVALID_JSON, str(exc), location=location) from None
    ordered = _check_offsets_and_sizes(entries, location)
    data_end = ordered[-1][1].stop if ordered else 0
    return parse_header(header, file_size=PREFIX_BYTES + len(header) + data_end, location=location)


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
    expected = PREFIX_BYTES + header_length + data_end
    if expected != file_size:
        raise HeaderError(
            HeaderErrorKind.INCOMPLETE_BUFFER,
            f"the header describes {expected} bytes (8 + header {header_length} + data "
            f"{data_end}) but the file has {file_size}",
            location=location,
        )
    tensors = {
        name: TensorInfo(info.name, info.dtype, info.shape, info.start + shift, info.end + shift)
        for name, info in provisional.tensors.items()
    }
    return FileIndex(tensors, provisional.metadata, header_length, file_size, provisional.format)


def parse_file(data: bytes, *, location: str = "<bytes>") -> FileIndex:
    """Validate a whole file held in memory (``data`` is every byte of it)."""
    n = header_length(data[:64], file_size=len(data), location=location)
    header = data[PREFIX_BYTES : PREFIX_BYTES + n]
    return parse_header(header, file_size=len(data), location=location)


# --- rule group 5: the JSON shape (serde's derived structs) ---------------------------------


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
    return _Entry(dtype, shape, offsets[0], offsets[1])


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
    ordered = sorted(entries.items(), key=lambda item: (item[1].begin, item[1].stop))
    running_end = 0
    for name, entry in ordered:
        if entry.begin != running_end or entry.stop < entry.begin:
            raise HeaderError(
                HeaderErrorKind.INVALID_OFFSET,
                f"tensor `{name}` has data_offsets [{entry.begin}, {entry.stop}] but the "
                f"previous tensor ends at {running_end}: tensors must tile the data buffer "
                "without holes or overlaps",
                location=location,
            )
        count = 1
        for dim in entry.shape:
            count *= dim
            if count >= _U64_LIMIT:
                _raise_overflow(name, entry, location)
        bits = count * DTYPES[entry.dtype].bits
        if bits >= _U64_LIMIT:
            _raise_overflow(name, entry, location)
        if bits % 8:
            raise HeaderError(
                HeaderErrorKind.MISALIGNED,
                f"tensor `{name}` of {entry.dtype} with shape {list(entry.shape)} holds "
                f"{bits} bits, which is not a whole number of bytes",
                location=location,
            )
        if entry.stop - entry.begin != bits // 8:
            raise HeaderError(
                HeaderErrorKind.INVALID_TENSOR_INFO,
                f"tensor `{name}` of {entry.dtype} with shape {list(entry.shape)} needs "
                f"{bits // 8} bytes but data_offsets [{entry.begin}, {entry.stop}] span "
                f"{entry.stop - entry.begin}",
                location=location,
            )
        running_end = entry.stop
    return ordered


def _raise_overflow(name: str, entry: _Entry, location: str) -> None:
    raise HeaderError(
        HeaderErrorKind.OVERFLOW,
        f"the size of tensor `{name}` ({entry.dtype}, shape {list(entry.shape)}) overflows 64 bits",
        location=location,
    )


# --- rule group 7: the header describes the whole file ----------------------------------------


def _check_coverage(
    ordered: list[tuple[str, _Entry]], *, header_length: int, file_size: int, location: str
) -> None:
    data_end = ordered[-1][1].stop if ordered else 0
    expected = PREFIX_BYTES + header_length + data_end
    if expected != file_size:
        raise HeaderError(
            HeaderErrorKind.INCOMPLETE_BUFFER,
            f"the header describes {expected} bytes (8 + header {header_length} + data "
            f"{data_end}) but the file has {file_size}",
            location=location,
        )
