"""remotetensors: read safetensors files where they live, fetching only the bytes you ask for.

Only the exceptions are imported with the package; every other name is imported from its module
on first use (PEP 562), so ``import remotetensors`` and ``remotetensors --help`` do not pay for
httpx, the event loop machinery and the model code until something is opened.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from .checksum import verify_checksum, verify_checksum_async
    from .compare import Comparison, compare
    from .dtypes import DTYPES, DType
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

_LAZY: dict[str, str] = {
    **dict.fromkeys(["verify_checksum", "verify_checksum_async"], ".checksum"),
    **dict.fromkeys(["Comparison", "compare"], ".compare"),
    **dict.fromkeys(["DTYPES", "DType"], ".dtypes"),
    **dict.fromkeys(["TensorView"], ".explore"),
    **dict.fromkeys(["FileIndex", "ModelIndex", "TensorInfo", "parameter_count"], ".index"),
    **dict.fromkeys(["MemoryEstimate"], ".memory"),
    **dict.fromkeys(["AsyncModel", "open_model_async"], ".model"),
    **dict.fromkeys(["ReadOptions"], ".options"),
    **dict.fromkeys(["LogicalTensor", "ParameterCount", "Quantization"], ".quantization"),
    **dict.fromkeys(["ByteRange"], ".ranges"),
    **dict.fromkeys(["AsyncTensorFile", "AsyncTensorSlice"], ".reader"),
    **dict.fromkeys(["ModelSummary", "ScanResult", "scan", "scan_async"], ".scan"),
    **dict.fromkeys(["Traffic"], ".sources.base"),
    **dict.fromkeys(["HttpOptions"], ".sources.http"),
    **dict.fromkeys(["TensorStats"], ".stats"),
    **dict.fromkeys(["Model", "TensorSlice", "open_async", "open_model", "safe_open"], ".sync"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        try:  # a submodule (``rt.sync``), as an eager package would have imported it
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


class _Package(types.ModuleType):
    """The package, where ``compare`` and ``scan`` stay functions once their submodules load.

    Importing a submodule binds it on its package under its own name; an eager ``__init__``
    then rebound the function of the same name, but a lazy one imports ``.compare`` and
    ``.scan`` later, whenever some other module first needs them.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("compare", "scan") and isinstance(value, types.ModuleType):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


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
