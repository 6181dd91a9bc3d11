"""remotetensors: read safetensors files where they live, fetching only the bytes you ask for."""

from __future__ import annotations

from .checksum import verify_checksum, verify_checksum_async
from .compare import Comparison, compare
from .dtypes import DTYPES, DType
from .errors import (
    AmbiguousModelError,
    BackendError,
    BadResponseError,
    ChecksumMismatchError,
    ConfigWarning,
    DropInError,
    FileClosedError,
    FrameworkError,
    HeaderError,
    HeaderErrorKind,
    LocationError,
    MissingDependencyError,
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
from .explore import TensorView
from .index import FileIndex, ModelIndex, TensorInfo, parameter_count
from .memory import MemoryEstimate
from .model import AsyncModel, open_model_async
from .options import ReadOptions
from .quantization import LogicalTensor, ParameterCount, Quantization
from .ranges import ByteRange
from .reader import AsyncTensorFile, AsyncTensorSlice
from .scan import ModelSummary, ScanResult, scan, scan_async
from .sources.base import Traffic
from .sources.http import HttpOptions
from .stats import TensorStats
from .sync import Model, TensorSlice, open_async, open_model, safe_open

__version__ = "0.1.0"

__all__ = [
    "DTYPES",
    "AmbiguousModelError",
    "AsyncModel",
    "AsyncTensorFile",
    "AsyncTensorSlice",
    "BackendError",
    "BadResponseError",
    "ByteRange",
    "ChecksumMismatchError",
    "Comparison",
    "ConfigWarning",
    "DType",
    "DropInError",
    "FileClosedError",
    "FileIndex",
    "FrameworkError",
    "HeaderError",
    "HeaderErrorKind",
    "HttpOptions",
    "LocationError",
    "LogicalTensor",
    "MemoryEstimate",
    "MissingDependencyError",
    "Model",
    "ModelIndex",
    "ModelSummary",
    "NotFoundError",
    "ParameterCount",
    "PermissionDeniedError",
    "Quantization",
    "RangeNotSupportedError",
    "ReadOptions",
    "RemoteFileChangedError",
    "RemoteTensorsError",
    "RequestTimeoutError",
    "ScanResult",
    "SliceError",
    "TensorInfo",
    "TensorNotFoundError",
    "TensorSlice",
    "TensorStats",
    "TensorView",
    "Traffic",
    "TransportError",
    "UnsupportedDtypeError",
    "__version__",
    "compare",
    "open_async",
    "open_model",
    "open_model_async",
    "parameter_count",
    "safe_open",
    "scan",
    "scan_async",
    "verify_checksum",
    "verify_checksum_async",
]
