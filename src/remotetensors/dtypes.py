"""The dtype table: header name, bits per element and the numpy dtype of one element.

Multi-byte values in safetensors files are little-endian. The numpy dtypes below say so
explicitly where numpy can (``<f4``); the ml_dtypes types (BF16, F8, F6, F4) have no byte-order
flag and assume a little-endian machine, as ml_dtypes itself does.

Sub-byte dtypes (F4, F6_E2M3, F6_E3M2) are stored packed in the file. ml_dtypes holds one value
per byte, so reading them means unpacking. The bit order is a little-endian bit stream: element
``i`` occupies bits ``[i*b, (i+1)*b)`` of the little-endian integer formed by the bytes, so for F4
element 0 is the low nibble of byte 0 and element 1 its high nibble (the layout of torch's
``float4_e2m1fn_x2``, checked in the tests when torch is installed), and for F6 four elements fill
three bytes, element 0 in the low six bits of byte 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt  # numpy.typing costs ~10 ms to import; annotations only

from .errors import UnsupportedDtypeError


@dataclass(frozen=True, slots=True)
class DType:
    """One safetensors dtype.

    Attributes:
        name: the name in the header (``"BF16"``), case-sensitive.
        bits: bits per element in the file (4 for F4, 6 for F6_*).
        spec: the numpy dtype string (``"<f4"``), or ``"ml_dtypes.NAME"`` for an ml_dtypes type.
    """

    name: str
    bits: int
    spec: str

    @property
    def numpy(self) -> np.dtype[Any]:
        """The numpy dtype of one decoded element (one byte per element for F4 and F6).

        Resolved on first use: ml_dtypes takes tens of milliseconds to import, and reading
        headers or counting parameters never needs it.
        """
        found = _NUMPY.get(self.spec)
        if found is None:
            found = _NUMPY[self.spec] = _resolve(self.spec)
        return found

    @property
    def packed(self) -> bool:
        """True when elements are narrower than a byte and stored packed in the file."""
        return self.bits % 8 != 0

    def nbytes(self, num_elements: int) -> int:
        """Bytes that ``num_elements`` elements take in the file (whole bytes, rounded up)."""
        return (num_elements * self.bits + 7) // 8


_NUMPY: dict[str, np.dtype[Any]] = {}


def _resolve(spec: str) -> np.dtype[Any]:
    if spec.startswith("ml_dtypes."):
        import ml_dtypes

        result: np.dtype[Any] = np.dtype(getattr(ml_dtypes, spec.removeprefix("ml_dtypes.")))
    else:
        result = np.dtype(spec)
    return result


# In the reference's order (the order of its error message, and reversed, its writer's order).
_TABLE = (
    DType("BOOL", 8, "?"),
    DType("F4", 4, "ml_dtypes.float4_e2m1fn"),
    DType("F6_E2M3", 6, "ml_dtypes.float6_e2m3fn"),
    DType("F6_E3M2", 6, "ml_dtypes.float6_e3m2fn"),
    DType("U8", 8, "<u1"),
    DType("I8", 8, "<i1"),
    DType("F8_E5M2", 8, "ml_dtypes.float8_e5m2"),
    # float8_e4m3fn, not float8_e4m3: 0x78 must read as 256, not inf.
    DType("F8_E4M3", 8, "ml_dtypes.float8_e4m3fn"),
    DType("F8_E8M0", 8, "ml_dtypes.float8_e8m0fnu"),
    DType("F8_E4M3FNUZ", 8, "ml_dtypes.float8_e4m3fnuz"),
    DType("F8_E5M2FNUZ", 8, "ml_dtypes.float8_e5m2fnuz"),
    DType("I16", 16, "<i2"),
    DType("U16", 16, "<u2"),
    DType("F16", 16, "<f2"),
    DType("BF16", 16, "ml_dtypes.bfloat16"),
    DType("I32", 32, "<i4"),
    DType("U32", 32, "<u4"),
    DType("F32", 32, "<f4"),
    DType("C64", 64, "<c8"),
    DType("F64", 64, "<f8"),
    DType("I64", 64, "<i8"),
    DType("U64", 64, "<u8"),
)

DTYPES: Mapping[str, DType] = MappingProxyType({d.name: d for d in _TABLE})
"""Every safetensors dtype by header name, in the reference's table order."""


def dtype(name: str) -> DType:
    """Look up a dtype by its header name.

    Raises:
        UnsupportedDtypeError: for a name that safetensors does not define (names are
            case-sensitive: ``"f32"`` is not ``"F32"``).
    """
    try:
        return DTYPES[name]
    except KeyError:
        known = ", ".join(DTYPES)
        raise UnsupportedDtypeError(f"unknown dtype {name!r}; expected one of {known}") from None


def unpack(raw: npt.NDArray[np.uint8], dt: DType, num_elements: int) -> npt.NDArray[Any]:
    """Unpack sub-byte elements from their packed bytes into a 1-D ml_dtypes array.

    Args:
        raw: the packed bytes, at least ``dt.nbytes(num_elements)`` of them.
        dt: a packed dtype (F4, F6_E2M3, F6_E3M2).
        num_elements: how many elements to unpack.

    Returns:
        A new writable array of ``num_elements`` elements of ``dt.numpy``.

    Raises:
        UnsupportedDtypeError: ``dt`` is not a packed dtype.
    """
    if not dt.packed:
        raise UnsupportedDtypeError(f"{dt.name} is not a packed sub-byte dtype")
    raw = np.asarray(raw, dtype=np.uint8).reshape(-1)[: dt.nbytes(num_elements)]
    if dt.bits == 4:
        codes = np.empty(2 * raw.size, dtype=np.uint8)
        codes[0::2] = raw & 0x0F
        codes[1::2] = raw >> 4
    else:
        # Four 6-bit codes in every three bytes; pad to whole groups, then trim.
        groups = -(-raw.size // 3)
        padded = np.zeros(groups * 3, dtype=np.uint8)
        padded[: raw.size] = raw
        triple = padded.reshape(-1, 3).astype(np.uint32)
        word = triple[:, 0] | (triple[:, 1] << 8) | (triple[:, 2] << 16)
        codes = np.empty((groups, 4), dtype=np.uint8)
        for i in range(4):
            codes[:, i] = (word >> (6 * i)) & 0x3F
        codes = codes.reshape(-1)
    values: npt.NDArray[Any] = codes[:num_elements].view(dt.numpy).copy()
    return values


def pack(values: npt.NDArray[Any], dt: DType) -> npt.NDArray[np.uint8]:
    """Pack an ml_dtypes array of a sub-byte dtype into the file's bytes (inverse of unpack).

    Raises:
        UnsupportedDtypeError: ``dt`` is not packed, or ``values`` is not of ``dt.numpy``.
    """
    if not dt.packed:
        raise UnsupportedDtypeError(f"{dt.name} is not a packed sub-byte dtype")
    if values.dtype != dt.numpy:
        raise UnsupportedDtypeError(f"expected an array of {dt.numpy}, got {values.dtype}")
    codes = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
    if dt.bits == 4:
        padded = np.zeros(-(-codes.size // 2) * 2, dtype=np.uint8)
        padded[: codes.size] = codes & 0x0F
        return (padded[0::2] | (padded[1::2] << 4)).astype(np.uint8)
    groups = -(-codes.size // 4)
    padded = np.zeros(groups * 4, dtype=np.uint32)
    padded[: codes.size] = codes & 0x3F
    quad = padded.reshape(-1, 4)
    word = quad[:, 0] | (quad[:, 1] << 6) | (quad[:, 2] << 12) | (quad[:, 3] << 18)
    out = np.empty((groups, 3), dtype=np.uint8)
    for i in range(3):
        out[:, i] = (word >> (8 * i)) & 0xFF
    return out.reshape(-1)[: dt.nbytes(codes.size)]
