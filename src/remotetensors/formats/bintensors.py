"""The bintensors header (bincode instead of JSON), validated like its reference reader.

Sans-IO. Layout as in safetensors: bytes ``[0, 8)`` hold N (u64 little-endian), bytes
``[8, 8+N)`` the header, and the data follows at ``8+N``. The header is one bincode value
("standard" configuration), then padding that the reader ignores::

    header   := metadata tensors
    metadata := 0x00 | 0x01 count (key:str value:str)*count
    tensors  := count (name:str dtype:varint ndim:varint dim:varint*ndim
                       start:varint end:varint)*count

Unsigned integers are varints: a first byte up to 250 is the value; 251, 252 and 253 announce a
little-endian u16, u32 and u64; 254 and 255 are errors (the dtype index, a u32, also rejects 253).
Tensors are listed in data order. Rules and their order are those of bintensors 0.2.0; the length
rules (too small, too large, past the end) are shared with safetensors.
"""

from __future__ import annotations

import re

from ..dtypes import DTYPES
from ..errors import HeaderError, HeaderErrorKind
from ..index import FileIndex, TensorInfo, TensorTable
from .safetensors import PREFIX_BYTES

DTYPE_ORDER = (
    "BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16",
    "I32", "U32", "F32", "F64", "I64", "U64",
)  # fmt: skip
"""Dtype names by their bincode index."""

_U64_LIMIT = 2**64
_ALLOCATION_BUDGET = 100_000_000
_FIRST_NOT_WHITESPACE = re.compile(rb"[^ \t\r\n]")
# What the reference decoder claims from its budget when it reads a container's length: the
# in-memory size of one element (a tensor entry is 72 bytes, a metadata pair 48).
_TENSOR_ENTRY_BYTES = 72
_METADATA_ENTRY_BYTES = 48


class _Invalid(Exception):
    """The bincode value cannot be decoded; the message says where and why."""


class _Reader:
    """Decodes bincode values from the header, tracking the position for messages."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, count: int, what: str) -> bytes:
        if self.pos + count > len(self.data):
            raise _Invalid(
                f"the header ends at byte {len(self.data)} while reading {what} "
                f"({count} bytes needed at {self.pos})"
            )
        chunk = self.data[self.pos : self.pos + count]
        self.pos += count
        return chunk

    def varint(self, what: str, *, max_tag: int = 253) -> int:
        tag = self._take(1, what)[0]
        if tag <= 250:
            return tag
        widths = {251: 2, 252: 4, 253: 8}
        if tag not in widths or tag > max_tag:
            raise _Invalid(f"invalid integer tag {tag} for {what} at byte {self.pos - 1}")
        return int.from_bytes(self._take(widths[tag], what), "little")

    def option_tag(self, what: str) -> bool:
        tag = self._take(1, what)[0]
        if tag > 1:
            raise _Invalid(f"invalid option tag {tag} for {what} at byte {self.pos - 1}")
        return tag == 1

    def string(self, what: str) -> str:
        length = self.varint(f"the length of {what}")
        raw = self._take(length, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _Invalid(f"{what} at byte {self.pos - length} is not valid UTF-8") from None


def parse_header(header: bytes, *, file_size: int, location: str = "<bytes>") -> FileIndex:
    """Parse and validate a bintensors header (bytes ``[8, 8+N)`` of the file).

    Raises:
        HeaderError: INVALID_BINCODE when the value cannot be decoded, DUPLICATE_NAME,
            INVALID_OFFSET, OVERFLOW, INVALID_TENSOR_INFO or INCOMPLETE_BUFFER, in that order.
    """
    try:
        metadata, entries = _decode(header)
    except _Invalid as exc:
        raise HeaderError(HeaderErrorKind.INVALID_BINCODE, str(exc), location=location) from None
    data_offset = PREFIX_BYTES + len(header)
    names: set[str] = set()
    running_end = 0
    tensors: dict[str, TensorInfo] = {}
    for name, *_ in entries:
        if name in names:
            raise HeaderError(
                HeaderErrorKind.DUPLICATE_NAME,
                f"tensor `{name}` is listed twice; bintensors names must be unique",
                location=location,
            )
        names.add(name)
    for name, dtype, shape, begin, stop in entries:
        if begin != running_end or stop < begin:
            raise HeaderError(
                HeaderErrorKind.INVALID_OFFSET,
                f"tensor `{name}` has offsets [{begin}, {stop}] but the previous tensor ends at "
                f"{running_end}: tensors must follow each other in data order",
                location=location,
            )
        count = 1
        for dim in shape:
            count *= dim
            if count >= _U64_LIMIT:
                _overflow(name, dtype, shape, location)
        nbytes = count * (DTYPES[dtype].bits // 8)
        if nbytes >= _U64_LIMIT:
            _overflow(name, dtype, shape, location)
        if stop - begin != nbytes:
            raise HeaderError(
                HeaderErrorKind.INVALID_TENSOR_INFO,
                f"tensor `{name}` of {dtype} with shape {list(shape)} needs {nbytes} bytes but "
                f"its offsets [{begin}, {stop}] span {stop - begin}",
                location=location,
            )
        running_end = stop
        tensors[name] = TensorInfo(name, dtype, shape, data_offset + begin, data_offset + stop)
    expected = data_offset + running_end
    if expected != file_size:
        raise HeaderError(
            HeaderErrorKind.INCOMPLETE_BUFFER,
            f"the header describes {expected} bytes (8 + header {len(header)} + data "
            f"{running_end}) but the file has {file_size}",
            location=location,
        )
    return FileIndex(TensorTable.of(tensors), metadata, len(header), file_size, "bintensors")


def _overflow(name: str, dtype: str, shape: tuple[int, ...], location: str) -> None:
    raise HeaderError(
        HeaderErrorKind.OVERFLOW,
        f"the size of tensor `{name}` ({dtype}, shape {list(shape)}) overflows 64 bits",
        location=location,
    )


def _decode(
    header: bytes,
) -> tuple[dict[str, str] | None, list[tuple[str, str, tuple[int, ...], int, int]]]:
    reader = _Reader(header)
    metadata: dict[str, str] | None = None
    if reader.option_tag("the metadata"):
        count = reader.varint("the metadata count")
        _claim(count * _METADATA_ENTRY_BYTES, "metadata entries", count)
        metadata = {}
        for _ in range(count):
            key = reader.string("a metadata key")
            metadata[key] = reader.string(f"the metadata value of {key!r}")  # last one wins
    count = reader.varint("the tensor count")
    _claim(count * _TENSOR_ENTRY_BYTES, "tensors", count)
    entries = []
    for _ in range(count):
        name = reader.string("a tensor name")
        index = reader.varint(f"the dtype of {name!r}", max_tag=252)
        if index >= len(DTYPE_ORDER):
            raise _Invalid(
                f"dtype index {index} of tensor {name!r}; bintensors defines 0 to "
                f"{len(DTYPE_ORDER) - 1}"
            )
        ndim = reader.varint(f"the rank of {name!r}")
        shape = tuple(reader.varint(f"a dimension of {name!r}") for _ in range(ndim))
        begin = reader.varint(f"the start offset of {name!r}")
        stop = reader.varint(f"the end offset of {name!r}")
        entries.append((name, DTYPE_ORDER[index], shape, begin, stop))
    return metadata, entries


def _claim(nbytes: int, what: str, count: int) -> None:
    if nbytes > _ALLOCATION_BUDGET:
        raise _Invalid(
            f"the header claims {count} {what}, more than the reference decoder's allocation "
            f"limit of {_ALLOCATION_BUDGET} bytes allows"
        )


def looks_like_bintensors(header: bytes, location: str) -> bool:
    """Whether a file is bintensors, from the start of its header and, as a hint, its name.

    A bintensors header starts with its metadata option tag (0 or 1), a safetensors header with
    ``{`` after optional JSON whitespace. Any other start (or none) is a broken file of either
    format: the ``.bt`` suffix decides which format's error it gets.
    """
    if header[:1] in (b"\x00", b"\x01"):
        return True
    first = _FIRST_NOT_WHITESPACE.search(header)
    if first is not None and first.group() == b"{":
        return False
    return location.lower().split("?", 1)[0].endswith(".bt")
