"""remotetensors: read safetensors files where they live, fetching only the bytes you ask for."""

from __future__ import annotations

from .dtypes import DTYPES, DType
from .errors import (
    BadResponseError,
    FileClosedError,
    FrameworkError,
    HeaderError,
    HeaderErrorKind,
    NotFoundError,
    PermissionDeniedError,
    RangeNotSupportedError,
    RemoteFileChangedError,
    RemoteTensorsError,
    RequestTimeoutError,
    SliceError,
    TensorNotFoundError,
    TransportError,
    UnsupportedDtypeError,
)
from .index import FileIndex, TensorInfo, parameter_count
from .ranges import ByteRange

__version__ = "0.1.0"

__all__ = [
    "DTYPES",
    "BadResponseError",
    "ByteRange",
    "DType",
    "FileClosedError",
    "FileIndex",
    "FrameworkError",
    "HeaderError",
    "HeaderErrorKind",
    "NotFoundError",
    "PermissionDeniedError",
    "RangeNotSupportedError",
    "RemoteFileChangedError",
    "RemoteTensorsError",
    "RequestTimeoutError",
    "SliceError",
    "TensorInfo",
    "TensorNotFoundError",
    "TransportError",
    "UnsupportedDtypeError",
    "__version__",
    "parameter_count",
]
