"""The ml_dtypes kinds as zarr-python data types (``ZDType``), and their registration.

zarr-python 3.1 reads a data type it has a class for in its registry; it ships none for
bfloat16, the float8 kinds or float4/float6. These classes wrap the ml_dtypes numpy dtypes
under the names of :data:`.dtypes.ZARR_DTYPES`, so zarr hands out ml_dtypes arrays, as
``get_tensor`` does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeGuard, overload

import numpy as np
from zarr.core.dtype import data_type_registry
from zarr.core.dtype.common import DataTypeValidationError, HasItemSize, check_dtype_spec_v2
from zarr.core.dtype.wrapper import ZDType

from ...dtypes import DTYPES
from .dtypes import ZARR_DTYPES, ZarrDType

if TYPE_CHECKING:
    from zarr.core.common import JSON, ZarrFormat
    from zarr.core.dtype.common import DTypeConfig_V2, DTypeJSON

_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


@dataclass(frozen=True, kw_only=True)
class _MLFloat(ZDType[Any, Any], HasItemSize):
    """A Zarr data type whose native dtype is an ml_dtypes float (one class per kind below).

    Its v2 name is its v3 name (numpy gives these types no type string of their own: bfloat16
    shows as ``<V2``). Values have no byte order of their own here: ml_dtypes, like the file,
    is little-endian, and the ``bytes`` codec's ``endian`` is written as ``little``.
    """

    _zarr_v3_name: ClassVar[str]
    dtype_cls: ClassVar[type[np.dtype[Any]]]

    @classmethod
    def native(cls) -> np.dtype[Any]:
        """The ml_dtypes numpy dtype of this kind."""
        import ml_dtypes

        result: np.dtype[Any] = np.dtype(getattr(ml_dtypes, cls._zarr_v3_name))
        return result

    @classmethod
    def from_native_dtype(cls, dtype: Any) -> _MLFloat:
        if cls._check_native_dtype(dtype):
            return cls()
        raise DataTypeValidationError(f"Invalid data type: {dtype}. Expected {cls.native()}")

    def to_native_dtype(self) -> np.dtype[Any]:
        return self.native()

    @classmethod
    def _from_json_v2(cls, data: DTypeJSON) -> _MLFloat:
        if (
            check_dtype_spec_v2(data)
            and data["name"] == cls._zarr_v3_name
            and data["object_codec_id"] is None
        ):
            return cls()
        raise DataTypeValidationError(f"Invalid Zarr v2 data type {data!r} for {cls.__name__}")

    @classmethod
    def _from_json_v3(cls, data: DTypeJSON) -> _MLFloat:
        if data == cls._zarr_v3_name:
            return cls()
        raise DataTypeValidationError(f"Invalid Zarr v3 data type {data!r} for {cls.__name__}")

    @overload
    def to_json(self, zarr_format: Literal[2]) -> DTypeConfig_V2[str, None]: ...
    @overload
    def to_json(self, zarr_format: Literal[3]) -> str: ...
    def to_json(self, zarr_format: ZarrFormat) -> DTypeConfig_V2[str, None] | str:
        if zarr_format == 2:
            return {"name": self._zarr_v3_name, "object_codec_id": None}
        return self._zarr_v3_name

    def _check_scalar(self, data: object) -> TypeGuard[float | int | np.generic | str]:
        if isinstance(data, str):
            return data in _SPECIAL
        return isinstance(data, float | int | np.floating | np.integer) or (
            isinstance(data, np.generic) and data.dtype == self.native()
        )

    def cast_scalar(self, data: object) -> Any:
        if not self._check_scalar(data):
            raise TypeError(f"Cannot convert {data!r} to a scalar of the data type {self}")
        value = _SPECIAL[data] if isinstance(data, str) else data
        return self.native().type(value)

    def default_scalar(self) -> Any:
        return self.native().type(0)

    def from_json_scalar(self, data: JSON, *, zarr_format: ZarrFormat) -> Any:
        if isinstance(data, str) and data.startswith("0x"):
            # Zarr v3 spells a float's exact bits in hex: the value's own little-endian bytes.
            raw = int(data, 16).to_bytes(self.item_size, "big")[::-1]
            return np.frombuffer(raw, dtype=self.native())[0]
        if isinstance(data, str | int | float) and not isinstance(data, bool):
            return self.cast_scalar(data)
        raise TypeError(f"Invalid fill value {data!r} for the data type {self}")

    def to_json_scalar(self, data: object, *, zarr_format: ZarrFormat) -> float | str:
        value = float(self.cast_scalar(data))
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value

    @property
    def item_size(self) -> int:
        return int(self.native().itemsize)


def _kind(v3: str) -> type[_MLFloat]:
    """The data type class of one ml_dtypes kind, named as the registry names it."""
    import ml_dtypes

    native_cls = type(np.dtype(getattr(ml_dtypes, v3)))
    title = "".join(part.capitalize() for part in v3.split("_"))
    return dataclass(frozen=True, kw_only=True)(
        type(title, (_MLFloat,), {"_zarr_v3_name": v3, "dtype_cls": native_cls})
    )


KINDS: Mapping[str, type[_MLFloat]] = {
    d.v3: _kind(d.v3) for d in ZARR_DTYPES.values() if d.registered
}
"""Zarr v3 name -> the data type class registered under it."""


def register_dtypes() -> None:
    """Register the ml_dtypes kinds of :data:`KINDS` with zarr-python's data type registry, so
    that zarr reads (and writes) bfloat16, the float8 kinds and the unpacked float4/float6 as
    ml_dtypes arrays. Idempotent; a name another library registered first is left to it (see
    :func:`usable`). Importing this module calls it."""
    for name, cls in KINDS.items():
        if name not in data_type_registry.contents:
            data_type_registry.register(name, cls)


def usable(dtype: ZarrDType) -> bool:
    """Whether zarr, as registered now, reads ``dtype`` as the checkpoint's numpy dtype: false
    only when another library registered its v3 name for a different type."""
    if not dtype.registered:
        return True
    found = data_type_registry.contents.get(dtype.v3)
    if found is None:
        return False
    try:
        native = found.from_json(dtype.v3, zarr_format=3).to_native_dtype()
    except (DataTypeValidationError, ValueError, TypeError):
        return False
    return bool(native == DTYPES[dtype.name].numpy)


register_dtypes()
