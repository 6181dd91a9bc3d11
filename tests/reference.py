"""The reference ``safetensors`` package as an oracle: categories of its errors, its view of files."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import ml_dtypes  # noqa: F401  (the reference's numpy path needs it imported for BF16)
import numpy as np
import safetensors
from safetensors.numpy import save

from remotetensors.errors import HeaderErrorKind

# Substrings of the reference's messages, in the order its rules apply.
_CATEGORIES = (
    ("header too small", HeaderErrorKind.TOO_SMALL),
    ("header too large", HeaderErrorKind.TOO_LARGE),
    ("invalid header length", HeaderErrorKind.INVALID_LENGTH),
    ("invalid UTF-8", HeaderErrorKind.INVALID_UTF8),
    ("invalid JSON", HeaderErrorKind.INVALID_JSON),
    ("invalid offset", HeaderErrorKind.INVALID_OFFSET),
    ("overflow computing", HeaderErrorKind.OVERFLOW),
    ("byte boundary", HeaderErrorKind.MISALIGNED),
    ("invalid shape, data type, or offset", HeaderErrorKind.INVALID_TENSOR_INFO),
    ("incomplete metadata", HeaderErrorKind.INCOMPLETE_BUFFER),
)


def category(message: str) -> HeaderErrorKind:
    """The rule a reference error message reports; fails loudly on a message it does not know."""
    for needle, kind in _CATEGORIES:
        if needle in message:
            return kind
    raise AssertionError(f"unknown reference error: {message}")


@dataclass(frozen=True)
class ReferenceView:
    """What the reference reports for a valid file: name -> (dtype, shape, data bytes)."""

    tensors: dict[str, tuple[str, tuple[int, ...], bytes]]


def reference_read(data: bytes) -> ReferenceView | HeaderErrorKind:
    """Deserialize ``data`` with the reference: its view of the file, or the rule that failed."""
    try:
        items = safetensors.deserialize(data)  # type: ignore[no-untyped-call]
    except safetensors.SafetensorError as exc:
        return category(str(exc))
    return ReferenceView(
        {name: (d["dtype"], tuple(d["shape"]), bytes(d["data"])) for name, d in items}
    )


def raw_file(header: str | bytes, data: bytes = b"", *, pad: bool = False) -> bytes:
    """A file from a header text (encoded as UTF-8) and data bytes, N taken from the header."""
    raw = header.encode("utf-8", "surrogatepass") if isinstance(header, str) else header
    if pad:
        raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def write_reference(
    tensors: dict[str, np.ndarray[Any, Any]], metadata: dict[str, str] | None = None
) -> bytes:
    """Bytes of a file written by the reference writer."""
    result: bytes = save(tensors, metadata=metadata)
    return result


def bincode_varint(value: int) -> bytes:
    """The shortest bincode varint for ``value``."""
    if value <= 250:
        return bytes([value])
    for tag, fmt, limit in ((251, "<H", 2**16), (252, "<I", 2**32), (253, "<Q", 2**64)):
        if value < limit:
            return bytes([tag]) + struct.pack(fmt, value)
    raise ValueError(f"{value} does not fit a u64")


_BT_CATEGORIES = (
    ("HeaderTooSmall", HeaderErrorKind.TOO_SMALL),
    ("HeaderTooLarge", HeaderErrorKind.TOO_LARGE),
    ("InvalidHeaderLength", HeaderErrorKind.INVALID_LENGTH),
    ("DecoderError", HeaderErrorKind.INVALID_BINCODE),
    ("ValidationMismatch", HeaderErrorKind.DUPLICATE_NAME),
    ("InvalidOffset", HeaderErrorKind.INVALID_OFFSET),
    ("ValidationOverflow", HeaderErrorKind.OVERFLOW),
    ("TensorInvalidInfo", HeaderErrorKind.INVALID_TENSOR_INFO),
    ("MetadataIncompleteBuffer", HeaderErrorKind.INCOMPLETE_BUFFER),
)


def bintensors_read(data: bytes) -> ReferenceView | HeaderErrorKind:
    """Deserialize with the reference bintensors: its view of the file, or the rule that failed."""
    import bintensors

    try:
        items = bintensors.deserialize(data)
    except Exception as exc:
        for needle, kind in _BT_CATEGORIES:
            if needle in str(exc):
                return kind
        raise AssertionError(f"unknown bintensors error: {exc}") from exc
    return ReferenceView(
        {name: (d["dtype"], tuple(d["shape"]), bytes(d["data"])) for name, d in items}
    )
