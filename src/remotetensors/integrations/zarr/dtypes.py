"""The checkpoint dtypes as Zarr data types, and the ml_dtypes ones registered with zarr-python.

Zarr v3's core data types cover BOOL, the integers, F16/F32/F64 and C64. The others have names
in the zarr-extensions registry (``bfloat16``, ``float8_e5m2``, ``float8_e4m3fnuz``,
``float8_e5m2fnuz``, ``float8_e8m0fnu``, ``float4_e2m1fn``, ``float6_e2m3fn``,
``float6_e3m2fn``), one byte per value for the sub-byte kinds under the ``bytes`` codec, which
zarr-python 3.1 does not ship but lets a library register (:mod:`.kinds`).

One kind has no registry name: safetensors' ``F8_E4M3`` is OCP's E4M3 *without* infinities
(``ml_dtypes.float8_e4m3fn``: byte 0x78 is 256), while the registry's ``float8_e4m3`` is the
IEEE-style kind with infinities (0x78 is inf). Read under that name, large values would come
back as inf: wrong. It is named ``float8_e4m3fn`` here, as ml_dtypes, LLVM and TensorStore name
it; a reader that does not know the name refuses the array rather than misreading it.

This module is the table (:data:`ZARR_DTYPES`) and imports no zarr: kerchunk references are
written without it. The data type classes are in :mod:`.kinds`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...dtypes import DTYPES

JsonScalar = bool | int | float | str | list[float]


@dataclass(frozen=True, slots=True)
class ZarrDType:
    """How one checkpoint dtype is written in Zarr metadata.

    Attributes:
        name: the checkpoint's dtype name (``"BF16"``).
        v3: the Zarr v3 ``data_type`` (``"bfloat16"``).
        v2: the Zarr v2 ``dtype`` (``"<f4"``; the v3 name where numpy has no type string).
        fill: the ``fill_value`` as JSON (every chunk exists, so it is never shown).
        item_bytes: bytes per value in a Zarr chunk (one for F4 and F6, unpacked).
        registered: whether zarr-python knows the type only from :mod:`.kinds` (ml_dtypes).
    """

    name: str
    v3: str
    v2: str
    fill: JsonScalar
    item_bytes: int
    registered: bool

    @property
    def packed_in_file(self) -> bool:
        """Whether the file packs several values into a byte (F4, F6): a Zarr chunk of it is
        not a byte range of the file."""
        return DTYPES[self.name].packed

    @property
    def codec(self) -> dict[str, Any]:
        """The ``bytes`` codec: little-endian, as the file stores multi-byte values."""
        if self.item_bytes == 1:
            return {"name": "bytes"}
        return {"name": "bytes", "configuration": {"endian": "little"}}


def _core(name: str, v3: str, v2: str, fill: JsonScalar, item_bytes: int) -> ZarrDType:
    return ZarrDType(name, v3, v2, fill, item_bytes, registered=False)


def _ml(name: str, v3: str, item_bytes: int, fill: JsonScalar = 0.0) -> ZarrDType:
    return ZarrDType(name, v3, v3, fill, item_bytes, registered=True)


ZARR_DTYPES: Mapping[str, ZarrDType] = {
    d.name: d
    for d in (
        _core("BOOL", "bool", "|b1", False, 1),
        _core("U8", "uint8", "|u1", 0, 1),
        _core("I8", "int8", "|i1", 0, 1),
        _core("I16", "int16", "<i2", 0, 2),
        _core("U16", "uint16", "<u2", 0, 2),
        _core("F16", "float16", "<f2", 0.0, 2),
        _core("I32", "int32", "<i4", 0, 4),
        _core("U32", "uint32", "<u4", 0, 4),
        _core("F32", "float32", "<f4", 0.0, 4),
        _core("C64", "complex64", "<c8", [0.0, 0.0], 8),
        _core("F64", "float64", "<f8", 0.0, 8),
        _core("I64", "int64", "<i8", 0, 8),
        _core("U64", "uint64", "<u8", 0, 8),
        _ml("BF16", "bfloat16", 2),
        _ml("F8_E5M2", "float8_e5m2", 1),
        _ml("F8_E4M3", "float8_e4m3fn", 1),  # not the registry's float8_e4m3: see above
        _ml("F8_E4M3FNUZ", "float8_e4m3fnuz", 1),
        _ml("F8_E5M2FNUZ", "float8_e5m2fnuz", 1),
        _ml("F8_E8M0", "float8_e8m0fnu", 1, fill="NaN"),  # it has no zero
        _ml("F4", "float4_e2m1fn", 1),
        _ml("F6_E2M3", "float6_e2m3fn", 1),
        _ml("F6_E3M2", "float6_e3m2fn", 1),
    )
}
"""Checkpoint dtype name -> its Zarr data type; a name missing here (GGUF's block-quantized
kinds) has none."""
