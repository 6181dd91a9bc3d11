"""GGUF headers (llama.cpp's format), parsed incrementally and validated. Sans-IO.

Layout (versions 2 and 3, little-endian)::

    header   := "GGUF" version:u32 tensor_count:u64 kv_count:u64 kv*kv_count info*tensor_count
    kv       := key:string type:u32 value
    value    := u8 | i8 | u16 | i16 | u32 | i32 | f32 | bool(u8) | string | u64 | i64 | f64
              | array := element_type:u32 count:u64 value*count
    string   := length:u64 bytes (UTF-8)
    info     := name:string n_dims:u32 dim:u64*n_dims ggml_type:u32 offset:u64

Dims are innermost first (numpy's shape is the dims reversed). The data starts at the end of the
tensor infos rounded up to ``general.alignment`` (default 32), and each tensor's offset is
relative to that start and a multiple of the alignment.

The parser is fed bytes as they arrive: :meth:`HeaderParser.advance` returns either the parsed
:class:`GGUFHeader` or a :class:`NeedMore` saying which prefix of the file it needs at least,
and where the header probably ends (an estimate from the sizes seen so far), so a caller reads
the rest of a multi-megabyte tokenizer in one or two large requests rather than one per field.
Parsing resumes where it stopped; no byte is parsed twice.

Hostile headers cannot make it allocate more than the bytes it was given: counts are never used
to preallocate, and :class:`GGUFLimits` caps the header size, string lengths, array lengths and
dims, each failure a :class:`~remotetensors.errors.HeaderError` with its own kind.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from ..errors import HeaderError, HeaderErrorKind
from ..index import FileIndex, TensorInfo, TensorTable
from .magic import GGUF_MAGIC

SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


@dataclass(frozen=True, slots=True)
class GGUFLimits:
    """Caps against hostile headers; every one is far above what real models use.

    Attributes:
        max_header_bytes: the header (magic to the end of the tensor infos); real ones reach
            ~10 MB with a 150k-token vocabulary and its merges.
        max_string_bytes: one string (a chat template is a few kB).
        max_array_length: elements of one metadata array (vocabularies: ~10^5 to 10^6).
        max_dims: dims of one tensor (ggml's GGML_MAX_DIMS).
        max_array_depth: arrays of arrays nested this deep at most.
    """

    max_header_bytes: int = 256 * 1024 * 1024
    max_string_bytes: int = 16 * 1024 * 1024
    max_array_length: int = 64 * 1024 * 1024
    max_dims: int = 4
    max_array_depth: int = 2


# --- the GGML tensor types -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GGMLType:
    """A GGML tensor type: ``block_size`` elements are stored in ``type_size`` bytes.

    Attributes:
        id: the number in tensor infos.
        name: the GGML name (``"Q4_K"``); F32, F16, BF16, F64 and I8..I64 are also safetensors
            dtype names, and read as such.
        block_size: elements per block (1 for plain types, 32 or 256 for most quantized ones).
        type_size: bytes per block.
    """

    id: int
    name: str
    block_size: int
    type_size: int

    @property
    def bits_per_weight(self) -> float:
        """Bits of storage per element (4.5 for Q4_K)."""
        return self.type_size * 8 / self.block_size

    def nbytes(self, num_elements: int) -> int:
        """Bytes of ``num_elements`` elements (a whole number of blocks)."""
        return num_elements // self.block_size * self.type_size


_QK_K = 256
GGML_TYPES: Mapping[int, GGMLType] = MappingProxyType(
    {
        t.id: t
        for t in (
            GGMLType(0, "F32", 1, 4),
            GGMLType(1, "F16", 1, 2),
            GGMLType(2, "Q4_0", 32, 2 + 16),
            GGMLType(3, "Q4_1", 32, 2 + 2 + 16),
            GGMLType(6, "Q5_0", 32, 2 + 4 + 16),
            GGMLType(7, "Q5_1", 32, 2 + 2 + 4 + 16),
            GGMLType(8, "Q8_0", 32, 2 + 32),
            GGMLType(9, "Q8_1", 32, 4 + 4 + 32),
            GGMLType(10, "Q2_K", _QK_K, 2 + 2 + _QK_K // 16 + _QK_K // 4),
            GGMLType(11, "Q3_K", _QK_K, 2 + _QK_K // 4 + _QK_K // 8 + 12),
            GGMLType(12, "Q4_K", _QK_K, 2 + 2 + _QK_K // 2 + 12),
            GGMLType(13, "Q5_K", _QK_K, 2 + 2 + _QK_K // 2 + _QK_K // 8 + 12),
            GGMLType(14, "Q6_K", _QK_K, 2 + _QK_K // 2 + _QK_K // 4 + _QK_K // 16),
            GGMLType(15, "Q8_K", _QK_K, 4 + _QK_K + _QK_K // 8),
            GGMLType(16, "IQ2_XXS", _QK_K, 2 + _QK_K // 4),
            GGMLType(17, "IQ2_XS", _QK_K, 2 + _QK_K // 4 + _QK_K // 32),
            GGMLType(18, "IQ3_XXS", _QK_K, 2 + _QK_K // 4 + _QK_K // 8),
            GGMLType(19, "IQ1_S", _QK_K, 2 + _QK_K // 8 + _QK_K // 16),
            GGMLType(20, "IQ4_NL", 32, 2 + 16),
            GGMLType(21, "IQ3_S", _QK_K, 2 + _QK_K // 4 + _QK_K // 8 + _QK_K // 32 + 4),
            GGMLType(22, "IQ2_S", _QK_K, 2 + _QK_K // 4 + _QK_K // 16),
            GGMLType(23, "IQ4_XS", _QK_K, 2 + 2 + _QK_K // 2 + _QK_K // 64),
            GGMLType(24, "I8", 1, 1),
            GGMLType(25, "I16", 1, 2),
            GGMLType(26, "I32", 1, 4),
            GGMLType(27, "I64", 1, 8),
            GGMLType(28, "F64", 1, 8),
            GGMLType(29, "IQ1_M", _QK_K, _QK_K // 8 + _QK_K // 16 + _QK_K // 32),
            GGMLType(30, "BF16", 1, 2),
            GGMLType(34, "TQ1_0", _QK_K, 2 + 4 * 13),
            GGMLType(35, "TQ2_0", _QK_K, 2 + 64),
            GGMLType(39, "MXFP4", 32, 1 + 16),
            GGMLType(40, "NVFP4", 64, 4 + 32),
            GGMLType(41, "Q1_0", 128, 2 + 16),
        )
    }
)
"""Every GGML type by id, as llama.cpp's ``ggml.h`` (and ``gguf.GGML_QUANT_SIZES``) define them."""

GGML_TYPES_BY_NAME: Mapping[str, GGMLType] = MappingProxyType(
    {t.name: t for t in GGML_TYPES.values()}
)

# llama.cpp's llama_ftype: what `general.file_type` says the model was quantized to.
FILE_TYPES: Mapping[int, str] = MappingProxyType(
    {
        0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
        11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
        17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
        23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
        29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
        38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0",
    }
)  # fmt: skip

# --- metadata value types ----------------------------------------------------------------------

VALUE_TYPES: Mapping[int, str] = MappingProxyType(
    {
        0: "UINT8", 1: "INT8", 2: "UINT16", 3: "INT16", 4: "UINT32", 5: "INT32", 6: "FLOAT32",
        7: "BOOL", 8: "STRING", 9: "ARRAY", 10: "UINT64", 11: "INT64", 12: "FLOAT64",
    }
)  # fmt: skip
"""GGUF metadata value types by their number."""

STRING, ARRAY = 8, 9
# Fixed-size value types: their numpy dtype (little-endian), which also gives their width.
_SCALARS: dict[int, np.dtype[Any]] = {
    0: np.dtype("<u1"), 1: np.dtype("<i1"), 2: np.dtype("<u2"), 3: np.dtype("<i2"),
    4: np.dtype("<u4"), 5: np.dtype("<i4"), 6: np.dtype("<f4"), 7: np.dtype("?"),
    10: np.dtype("<u8"), 11: np.dtype("<i8"), 12: np.dtype("<f8"),
}  # fmt: skip
_UINT32 = 4

# Smallest encodings, to reject counts that cannot fit before allocating anything.
_MIN_KV_BYTES = 8 + 4 + 1  # empty key, type, a one-byte value
_MIN_INFO_BYTES = 8 + 4 + 4 + 8  # empty name, no dims, type, offset
_MIN_VALUE_BYTES = {**{k: v.itemsize for k, v in _SCALARS.items()}, STRING: 8, ARRAY: 12}
# Guesses for what is not yet seen, used only for the read-ahead estimate.
_GUESS_KV_BYTES = 64
_GUESS_INFO_BYTES = 112


# --- results -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GGUFTensor:
    """One tensor info.

    Attributes:
        name: the tensor's name.
        dims: GGUF's dims, innermost first.
        ggml_type: its GGML type.
        offset: bytes from the data start to the tensor's first byte.
    """

    name: str
    dims: tuple[int, ...]
    ggml_type: GGMLType
    offset: int

    @property
    def shape(self) -> tuple[int, ...]:
        """The numpy shape: ``dims`` reversed."""
        return self.dims[::-1]

    @property
    def num_elements(self) -> int:
        """Elements (parameters) of the tensor."""
        return math.prod(self.dims)

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor's data."""
        return self.ggml_type.nbytes(self.num_elements)


@dataclass(frozen=True, slots=True)
class GGUFHeader:
    """A parsed, validated GGUF header.

    Attributes:
        version: 2 or 3.
        metadata: key -> value in file order: ``int``, ``float``, ``bool``, ``str`` (UTF-8;
            invalid bytes kept as surrogate escapes) or a tuple of values for arrays.
        value_types: key -> its value type numbers: ``(4,)`` for UINT32, ``(9, 8)`` for an
            array of strings.
        tensors: the tensor infos in file order.
        alignment: the data alignment in bytes.
        header_end: offset one past the last tensor info (exclusive).
        data_start: ``header_end`` rounded up to ``alignment``; tensor offsets count from here.
    """

    version: int
    metadata: Mapping[str, Any]
    value_types: Mapping[str, tuple[int, ...]]
    tensors: tuple[GGUFTensor, ...]
    alignment: int
    header_end: int
    data_start: int

    def to_index(self, *, file_size: int) -> FileIndex:
        """The format-independent index: numpy shapes, GGML type names, absolute offsets.

        ``header_length`` is ``data_start`` (GGUF has no separate length prefix), so
        ``data_offset`` is the data start.
        """
        infos = sorted(self.tensors, key=lambda t: (t.offset, t.nbytes))
        tensors = {
            t.name: TensorInfo(
                t.name,
                t.ggml_type.name,
                t.shape,
                self.data_start + t.offset,
                self.data_start + t.offset + t.nbytes,
            )
            for t in infos
        }
        return FileIndex(
            TensorTable.of(tensors),
            self.metadata,
            self.data_start,
            file_size,
            "gguf",
            prefix_bytes=0,
        )


@dataclass(frozen=True, slots=True)
class NeedMore:
    """The parser needs more of the file.

    Attributes:
        end: bytes ``[0, end)`` are needed before parsing can go on (exclusive).
        estimate: where the header probably ends, from the sizes seen so far (``>= end``).
    """

    end: int
    estimate: int


# --- the parser ------------------------------------------------------------------------------


@dataclass
class _Progress:
    """What the estimate is made from; updated as parsing goes."""

    kv_left: int = 0
    infos_left: int = 0
    infos_start: int = 0
    infos_done: int = 0
    array_start: int = 0
    array_count: int = 0
    array_done: int = 0
    array_pos: int = 0
    in_array: bool = False
    largest_count: int = 0
    largest_bytes: int = 0

    def array_seen(self, count: int, nbytes: int) -> None:
        self.largest_count = max(self.largest_count, count)
        self.largest_bytes = max(self.largest_bytes, nbytes)


class HeaderParser:
    """An incremental GGUF header parser: feed bytes of the file from its start, then advance.

    Args:
        file_size: the file's size in bytes, when known; a header that would run past it is
            rejected as truncated at once.
        location: named in errors.
        limits: caps against hostile headers.

    Usage::

        parser = HeaderParser(file_size=size, location=url)
        parser.feed(first_window)
        while isinstance(step := parser.advance(), NeedMore):
            parser.feed(read(parser.buffered, next_read_end(step, parser.buffered, size)))
        header = step
    """

    def __init__(
        self,
        *,
        file_size: int | None = None,
        location: str = "<bytes>",
        limits: GGUFLimits | None = None,
    ) -> None:
        self.file_size = file_size
        self.location = location
        self.limits = limits or GGUFLimits()
        self._buf = bytearray()
        self._pos = 0
        self._progress = _Progress()
        self._steps = self._parse()
        self._pending: NeedMore | None = None
        self._result: GGUFHeader | None = None

    @property
    def buffered(self) -> int:
        """Bytes of the file fed so far (``[0, buffered)``)."""
        return len(self._buf)

    @property
    def data(self) -> bytes:
        """The bytes fed so far."""
        return bytes(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append the next bytes of the file (they must follow those fed before)."""
        self._buf += data

    def advance(self) -> GGUFHeader | NeedMore:
        """Parse as far as the bytes fed allow.

        Returns:
            The header when complete, else what is needed next.

        Raises:
            HeaderError: the header is malformed, truncated or over a limit.
        """
        if self._result is not None:
            return self._result
        if self._pending is not None and len(self._buf) < self._pending.end:
            return self._pending
        try:
            self._pending = next(self._steps)
        except StopIteration as done:
            self._result = done.value
            assert self._result is not None
            return self._result
        return self._pending

    # --- errors and needs ------------------------------------------------------------------------

    def _error(self, kind: HeaderErrorKind, detail: str) -> HeaderError:
        return HeaderError(kind, detail, location=self.location)

    def _need(self, end: int, what: str) -> NeedMore:
        self._check_reach(end, what)
        return NeedMore(end, max(end, self._estimate(end)))

    def _check_reach(self, end: int, what: str) -> None:
        """Reject a header that must extend to byte ``end``: past the cap, or past the file."""
        limit = self.limits.max_header_bytes
        if end > limit:
            raise self._error(
                HeaderErrorKind.TOO_LARGE,
                f"reading {what} needs the header to extend to byte {end}, past the limit of "
                f"{limit} bytes (GGUFLimits.max_header_bytes)",
            )
        if self.file_size is not None and end > self.file_size:
            raise self._error(
                HeaderErrorKind.TRUNCATED,
                f"reading {what} needs bytes up to {end} but the file has {self.file_size}",
            )

    def _estimate(self, end: int) -> int:
        p = self._progress
        guess = end
        largest_count, largest_bytes = p.largest_count, p.largest_bytes
        if p.in_array and p.array_done > 0:
            per = (p.array_pos - p.array_start) / p.array_done
            array_bytes = math.ceil(per * p.array_count)
            guess = max(guess, p.array_start + array_bytes)
            largest_count = max(largest_count, p.array_count)
            largest_bytes = max(largest_bytes, array_bytes)
        per_info = _GUESS_INFO_BYTES
        if p.infos_done > 0:
            per_info = math.ceil((self._pos - p.infos_start) / p.infos_done)
        # The pairs not yet seen: a tokenizer's other arrays (types, scores, merges) follow its
        # vocabulary and scale with it, so guess them from the largest array so far: 4 bytes an
        # element for each remaining pair, but no more than that array's own size in all.
        rest = min(p.kv_left * 4 * largest_count, largest_bytes)
        guess += p.kv_left * _GUESS_KV_BYTES + rest + p.infos_left * per_info
        if self.file_size is not None:
            guess = min(guess, self.file_size)
        return min(guess, self.limits.max_header_bytes)

    # --- the grammar, as a generator that yields what it needs -----------------------------------

    def _parse(self) -> Generator[NeedMore, None, GGUFHeader]:
        buf = self._buf
        while len(buf) < 4:
            yield self._need(4, "the magic")
        if bytes(buf[:4]) != GGUF_MAGIC:
            raise self._error(
                HeaderErrorKind.INVALID_MAGIC,
                f"expected the magic b'GGUF' at byte 0, found {bytes(buf[:4])!r}",
            )
        while len(buf) < 24:
            yield self._need(24, "the version and counts")
        version = _U32.unpack_from(buf, 4)[0]
        self._check_version(version)
        tensor_count = _U64.unpack_from(buf, 8)[0]
        kv_count = _U64.unpack_from(buf, 16)[0]
        self._check_counts(tensor_count, kv_count)
        self._pos = 24
        progress = self._progress
        metadata: dict[str, Any] = {}
        types: dict[str, tuple[int, ...]] = {}
        for i in range(kv_count):
            progress.kv_left = kv_count - i - 1
            progress.infos_left = tensor_count
            key = yield from self._string(f"the key of metadata pair {i}", strict=True)
            if key in metadata:
                raise self._error(
                    HeaderErrorKind.DUPLICATE_NAME,
                    f"metadata key {key!r} appears twice (pair {i} at byte {self._pos})",
                )
            vtype = yield from self._u32(f"the value type of {key!r}")
            value, vtypes = yield from self._value(vtype, key, depth=0)
            metadata[key] = value
            types[key] = vtypes
        alignment = self._alignment(metadata, types)
        progress.kv_left = 0
        progress.infos_start = self._pos
        tensors: list[GGUFTensor] = []
        names: set[str] = set()
        for i in range(tensor_count):
            progress.infos_left = tensor_count - i
            progress.infos_done = i
            tensor = yield from self._tensor_info(i)
            if tensor.name in names:
                raise self._error(
                    HeaderErrorKind.DUPLICATE_NAME,
                    f"tensor {tensor.name!r} is listed twice (tensor info {i})",
                )
            names.add(tensor.name)
            tensors.append(tensor)
        progress.infos_left = 0
        header_end = self._pos
        self._check_reach(header_end, "the tensor infos")  # when it was fed in one piece
        data_start = -(-header_end // alignment) * alignment
        self._check_data(tensors, alignment, data_start)
        return GGUFHeader(
            version,
            MappingProxyType(metadata),
            MappingProxyType(types),
            tuple(tensors),
            alignment,
            header_end,
            data_start,
        )

    def _check_version(self, version: int) -> None:
        if version in SUPPORTED_VERSIONS:
            return
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        if swapped in (1, 2, 3):
            raise self._error(
                HeaderErrorKind.UNSUPPORTED_VERSION,
                f"this is a big-endian GGUF file (version {swapped} byte-swapped); only "
                "little-endian files are supported",
            )
        hint = " (GGUF v1 used 32-bit counts and is obsolete)" if version == 1 else ""
        raise self._error(
            HeaderErrorKind.UNSUPPORTED_VERSION,
            f"GGUF version {version}{hint}; supported versions are 2 and 3",
        )

    def _check_counts(self, tensor_count: int, kv_count: int) -> None:
        # Their smallest encodings, checked before any of them is read.
        least = 24 + kv_count * _MIN_KV_BYTES + tensor_count * _MIN_INFO_BYTES
        self._check_reach(least, f"{kv_count} metadata pairs and {tensor_count} tensor infos")

    def _u32(self, what: str) -> Generator[NeedMore, None, int]:
        pos = self._pos
        while len(self._buf) < pos + 4:
            yield self._need(pos + 4, what)
        self._pos = pos + 4
        value: int = _U32.unpack_from(self._buf, pos)[0]
        return value

    def _u64(self, what: str) -> Generator[NeedMore, None, int]:
        pos = self._pos
        while len(self._buf) < pos + 8:
            yield self._need(pos + 8, what)
        self._pos = pos + 8
        value: int = _U64.unpack_from(self._buf, pos)[0]
        return value

    def _string(self, what: str, *, strict: bool) -> Generator[NeedMore, None, str]:
        start = self._pos
        length = yield from self._u64(f"the length of {what}")
        self._check_string_length(length, what, start)
        end = self._pos + length
        while len(self._buf) < end:
            yield self._need(end, what)
        raw = self._buf[self._pos : end]
        self._pos = end
        if not strict:
            return raw.decode("utf-8", "surrogateescape")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self._error(
                HeaderErrorKind.INVALID_UTF8,
                f"{what} at byte {end - length} is not valid UTF-8: {bytes(raw[:40])!r}",
            ) from None

    def _check_string_length(self, length: int, what: str, at: int) -> None:
        if length > self.limits.max_string_bytes:
            raise self._error(
                HeaderErrorKind.STRING_TOO_LONG,
                f"{what} at byte {at} claims {length} bytes; the limit is "
                f"{self.limits.max_string_bytes} (GGUFLimits.max_string_bytes)",
            )

    def _value(
        self, vtype: int, key: str, *, depth: int
    ) -> Generator[NeedMore, None, tuple[Any, tuple[int, ...]]]:
        if vtype not in VALUE_TYPES:
            raise self._error(
                HeaderErrorKind.INVALID_VALUE_TYPE,
                f"value type {vtype} of {key!r} (before byte {self._pos}); GGUF defines 0 to 12",
            )
        if vtype == STRING:
            text = yield from self._string(f"the value of {key!r}", strict=False)
            return text, (STRING,)
        if vtype == ARRAY:
            return (yield from self._array(key, depth=depth))
        dt = _SCALARS[vtype]
        pos = self._pos
        while len(self._buf) < pos + dt.itemsize:
            yield self._need(pos + dt.itemsize, f"the value of {key!r}")
        self._pos = pos + dt.itemsize
        scalar = np.frombuffer(bytes(self._buf[pos : self._pos]), dtype=dt)[0].item()
        return scalar, (vtype,)

    def _array(
        self, key: str, *, depth: int
    ) -> Generator[NeedMore, None, tuple[Any, tuple[int, ...]]]:
        at = self._pos
        etype = yield from self._u32(f"the element type of array {key!r}")
        count = yield from self._u64(f"the length of array {key!r}")
        if etype not in VALUE_TYPES:
            raise self._error(
                HeaderErrorKind.INVALID_VALUE_TYPE,
                f"element type {etype} of array {key!r} at byte {at}; GGUF defines 0 to 12",
            )
        if count > self.limits.max_array_length:
            raise self._error(
                HeaderErrorKind.ARRAY_TOO_LONG,
                f"array {key!r} at byte {at} claims {count} elements; the limit is "
                f"{self.limits.max_array_length} (GGUFLimits.max_array_length)",
            )
        least = self._pos + count * _MIN_VALUE_BYTES[etype]
        # Checked before reading, so a huge count fails at once instead of after a long read.
        self._check_reach(least, f"the {count} elements of array {key!r}")
        if etype == ARRAY:
            if depth + 1 >= self.limits.max_array_depth:
                raise self._error(
                    HeaderErrorKind.INVALID_VALUE_TYPE,
                    f"array {key!r} at byte {at} nests arrays deeper than "
                    f"{self.limits.max_array_depth} levels (GGUFLimits.max_array_depth)",
                )
            items: list[Any] = []
            inner: tuple[int, ...] = (ARRAY,)
            for k in range(count):
                # Each element is an array value: its element type, length and elements.
                value, inner_types = yield from self._array(f"{key}[{k}]", depth=depth + 1)
                items.append(value)
                inner = inner_types
            return tuple(items), (ARRAY, *inner) if count else (ARRAY, ARRAY)
        if etype == STRING:
            strings = yield from self._string_array(key, count)
            return strings, (ARRAY, STRING)
        dt = _SCALARS[etype]
        end = self._pos + count * dt.itemsize
        while len(self._buf) < end:
            yield self._need(end, f"array {key!r}")
        values = np.frombuffer(bytes(self._buf[self._pos : end]), dtype=dt).tolist()
        self._progress.array_seen(count, end - self._pos)
        self._pos = end
        return tuple(values), (ARRAY, etype)

    def _string_array(self, key: str, count: int) -> Generator[NeedMore, None, tuple[str, ...]]:
        # The hot loop of big headers (vocabularies, merges): no generator per element.
        buf = self._buf
        progress = self._progress
        progress.in_array = True
        progress.array_start = self._pos
        progress.array_count = count
        max_len = self.limits.max_string_bytes
        out: list[str] = []
        pos = self._pos
        unpack = _U64.unpack_from
        for k in range(count):
            if len(buf) < pos + 8:
                progress.array_done, progress.array_pos = k, pos
                self._pos = pos
                while len(buf) < pos + 8:
                    yield self._need(pos + 8, f"element {k} of array {key!r}")
            length = unpack(buf, pos)[0]
            if length > max_len:
                self._check_string_length(length, f"element {k} of array {key!r}", pos)
            end = pos + 8 + length
            if len(buf) < end:
                progress.array_done, progress.array_pos = k, pos
                self._pos = pos
                while len(buf) < end:
                    yield self._need(end, f"element {k} of array {key!r}")
            out.append(buf[pos + 8 : end].decode("utf-8", "surrogateescape"))
            pos = end
        progress.array_seen(count, pos - progress.array_start)
        self._pos = pos
        progress.in_array = False
        return tuple(out)

    def _alignment(self, metadata: Mapping[str, Any], types: Mapping[str, tuple[int, ...]]) -> int:
        if "general.alignment" not in metadata:
            return DEFAULT_ALIGNMENT
        value = metadata["general.alignment"]
        if types["general.alignment"] != (_UINT32,) or value <= 0 or value & (value - 1):
            kind = VALUE_TYPES.get(types["general.alignment"][0], "?")
            raise self._error(
                HeaderErrorKind.INVALID_METADATA,
                f"general.alignment must be a UINT32 power of two, found {value!r} ({kind})",
            )
        alignment: int = value
        return alignment

    def _tensor_info(self, i: int) -> Generator[NeedMore, None, GGUFTensor]:
        name = yield from self._string(f"the name of tensor {i}", strict=True)
        n_dims = yield from self._u32(f"the dims count of tensor {name!r}")
        if n_dims > self.limits.max_dims:
            raise self._error(
                HeaderErrorKind.TOO_MANY_DIMS,
                f"tensor {name!r} has {n_dims} dims; the limit is {self.limits.max_dims} "
                "(ggml's GGML_MAX_DIMS)",
            )
        dims = []
        for d in range(n_dims):
            dims.append((yield from self._u64(f"dim {d} of tensor {name!r}")))
        type_id = yield from self._u32(f"the type of tensor {name!r}")
        offset = yield from self._u64(f"the offset of tensor {name!r}")
        ggml_type = GGML_TYPES.get(type_id)
        if ggml_type is None:
            raise self._error(
                HeaderErrorKind.INVALID_TENSOR_INFO,
                f"tensor {name!r} has GGML type {type_id}, which ggml does not define "
                f"(known: {', '.join(f'{t.id}={t.name}' for t in GGML_TYPES.values())})",
            )
        count = math.prod(dims)
        if count >= 2**63:
            raise self._error(
                HeaderErrorKind.OVERFLOW,
                f"tensor {name!r} with dims {dims} has {count} elements, more than 2**63",
            )
        row = dims[0] if dims else 1  # a tensor without dims is one element
        if row % ggml_type.block_size:
            raise self._error(
                HeaderErrorKind.INVALID_TENSOR_INFO,
                f"tensor {name!r} ({ggml_type.name}) has rows of {row} elements, not a "
                f"multiple of its block size {ggml_type.block_size}",
            )
        return GGUFTensor(name, tuple(dims), ggml_type, offset)

    def _check_data(self, tensors: list[GGUFTensor], alignment: int, data_start: int) -> None:
        ordered = sorted(tensors, key=lambda t: (t.offset, t.nbytes))
        previous: GGUFTensor | None = None
        for tensor in ordered:
            if tensor.offset % alignment:
                raise self._error(
                    HeaderErrorKind.MISALIGNED_TENSOR,
                    f"tensor {tensor.name!r} starts at data offset {tensor.offset}, not a "
                    f"multiple of the alignment {alignment}",
                )
            if previous is not None and tensor.offset < previous.offset + previous.nbytes:
                raise self._error(
                    HeaderErrorKind.INVALID_OFFSET,
                    f"tensor {tensor.name!r} at data offset {tensor.offset} overlaps "
                    f"{previous.name!r} at [{previous.offset}, "
                    f"{previous.offset + previous.nbytes})",
                )
            end = data_start + tensor.offset + tensor.nbytes
            if self.file_size is not None and end > self.file_size:
                raise self._error(
                    HeaderErrorKind.INVALID_OFFSET,
                    f"tensor {tensor.name!r} ({tensor.ggml_type.name}, shape "
                    f"{list(tensor.shape)}) occupies bytes [{end - tensor.nbytes}, {end}) but "
                    f"the file has {self.file_size}",
                )
            previous = tensor


# --- whole-buffer helpers and read planning ----------------------------------------------------


def parse_header(
    data: bytes | bytearray | memoryview,
    *,
    file_size: int | None = None,
    location: str = "<bytes>",
    limits: GGUFLimits | None = None,
) -> GGUFHeader:
    """Parse a GGUF header from a buffer holding at least the whole header.

    Args:
        data: bytes from the start of the file (the whole file, or a prefix).
        file_size: the file's size; ``len(data)`` when None.

    Raises:
        HeaderError: malformed, over a limit, or ``data`` ends inside the header (TRUNCATED).
    """
    size = len(data) if file_size is None else file_size
    parser = HeaderParser(file_size=size, location=location, limits=limits)
    parser.feed(data)
    step = parser.advance()
    if isinstance(step, NeedMore):
        raise HeaderError(
            HeaderErrorKind.TRUNCATED,
            f"the header needs bytes up to {step.end} but only {len(data)} were given",
            location=location,
        )
    return step


def next_read_end(need: NeedMore, have: int, file_size: int) -> int:
    """Where the next read should end (exclusive), given what the parser needs.

    At least ``need.end``; otherwise the estimated header end plus a quarter of the estimated
    remainder as margin (so a vocabulary whose later entries are longer than its first still
    fits), and at least half again what is held, so repeated underestimates grow geometrically.
    Never past the end of the file.
    """
    margin = max(need.estimate - have, 0) // 4 + 4096
    return min(file_size, max(need.end, need.estimate + margin, have + have // 2))
