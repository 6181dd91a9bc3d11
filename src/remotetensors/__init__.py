"""remotetensors: read safetensors files where they live, fetching only the bytes you ask for.

Only the exceptions are imported with the package; every other name is imported from its module
on first use (PEP 562), so ``import remotetensors`` and ``remotetensors --help`` do not pay for
httpx, the event loop machinery and the model code until something is opened.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import hooks
from .errors import (
    AmbiguousModelError,
    BackendError,
    BadResponseError,
    CheckpointMismatchError,
    ChecksumMismatchError,
    ConfigWarning,
    DropInError,
    FileClosedError,
    FrameworkError,
    HeaderError,
    HeaderErrorKind,
    IncompleteLoadError,
    LayoutError,
    LeftOutWarning,
    LocationError,
    MissingDependencyError,
    NotFoundError,
    OfflineError,
    PermissionDeniedError,
    RangeNotSupportedError,
    ReadOnlyStoreError,
    RedirectError,
    RemoteFileChangedError,
    RemoteTensorsError,
    RequestTimeoutError,
    ShardNotOpenedError,
    SliceError,
    TensorNotFoundError,
    TlsError,
    TlsErrorKind,
    TransportError,
    UnsupportedDtypeError,
)

if TYPE_CHECKING:
    from .dtypes import DTYPES, DType
    from .index import FileIndex, ModelIndex, TensorInfo, TensorLayout, parameter_count
    from .integrations.torch import LoadReport, load_into, load_into_async
    from .integrations.torch_iter import iter_tensors, iter_tensors_async
    from .models.checksum import verify_checksum, verify_checksum_async
    from .models.model import AsyncModel, open_model_async
    from .models.scan import ModelSummary, ScanResult, scan, scan_async
    from .models.sync import Model, TensorSlice, open_async, open_model, safe_open
    from .options import ReadOptions
    from .quantization import LogicalTensor, ParameterCount, Quantization
    from .quantization.memory import MemoryEstimate
    from .ranges import ByteRange
    from .reading.file import AsyncTensorFile, AsyncTensorSlice
    from .sources.base import Traffic
    from .sources.http.client import HttpOptions
    from .views.compare import Comparison, compare
    from .views.explore import TensorView
    from .views.stats import TensorStats

from .version import __version__

_LAZY: dict[str, str] = {
    **dict.fromkeys(["verify_checksum", "verify_checksum_async"], ".models.checksum"),
    **dict.fromkeys(["Comparison", "compare"], ".views.compare"),
    **dict.fromkeys(["DTYPES", "DType"], ".dtypes"),
    **dict.fromkeys(["TensorView"], ".views.explore"),
    **dict.fromkeys(
        ["FileIndex", "ModelIndex", "TensorInfo", "TensorLayout", "parameter_count"], ".index"
    ),
    **dict.fromkeys(["MemoryEstimate"], ".quantization.memory"),
    **dict.fromkeys(["AsyncModel", "open_model_async"], ".models.model"),
    **dict.fromkeys(["ReadOptions"], ".options"),
    **dict.fromkeys(["LogicalTensor", "ParameterCount", "Quantization"], ".quantization"),
    **dict.fromkeys(["ByteRange"], ".ranges"),
    **dict.fromkeys(["AsyncTensorFile", "AsyncTensorSlice"], ".reading.file"),
    **dict.fromkeys(["ModelSummary", "ScanResult", "scan", "scan_async"], ".models.scan"),
    **dict.fromkeys(["Traffic"], ".sources.base"),
    **dict.fromkeys(["HttpOptions"], ".sources.http.client"),
    **dict.fromkeys(["TensorStats"], ".views.stats"),
    **dict.fromkeys(["LoadReport", "load_into", "load_into_async"], ".integrations.torch"),
    **dict.fromkeys(["iter_tensors", "iter_tensors_async"], ".integrations.torch_iter"),
    **dict.fromkeys(
        ["Model", "TensorSlice", "open_async", "open_model", "safe_open"], ".models.sync"
    ),
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


# The hooks through which values reach the views and integrations above them (see hooks.py):
# hook -> (module, name), imported on the hook's first call, as the lazy names above are.
_HOOKS: dict[str, tuple[str, str]] = {
    "tensor_card_html": (".views.explore", "tensor_card_html"),
    "tensors_html": (".views.display", "html_view"),
    "model_html": (".views.explore", "model_html"),
    "model_text": (".views.explore", "model_text"),
    "model_tree": (".views.explore", "model_tree"),
    "tensor_view": (".views.explore", "TensorView"),
    "tensor_to_dask": (".integrations.dask", "tensor_to_dask"),
    "open_pipeline": (".models.pipeline", "open_pipeline"),
    "model_zarr_store": (".integrations.zarr", "model_zarr_store"),
    "model_kerchunk": (".integrations.zarr", "model_kerchunk"),
}


def _imported_on_call(module: str, name: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module, __name__), name)(*args, **kwargs)

    return call


for _hook, (_module, _name) in _HOOKS.items():
    hooks.plug(_hook, _imported_on_call(_module, _name))
del _hook, _module, _name


__all__ = [
    "DTYPES",
    "AmbiguousModelError",
    "AsyncModel",
    "AsyncTensorFile",
    "AsyncTensorSlice",
    "BackendError",
    "BadResponseError",
    "ByteRange",
    "CheckpointMismatchError",
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
    "IncompleteLoadError",
    "LayoutError",
    "LeftOutWarning",
    "LoadReport",
    "LocationError",
    "LogicalTensor",
    "MemoryEstimate",
    "MissingDependencyError",
    "Model",
    "ModelIndex",
    "ModelSummary",
    "NotFoundError",
    "OfflineError",
    "ParameterCount",
    "PermissionDeniedError",
    "Quantization",
    "RangeNotSupportedError",
    "ReadOnlyStoreError",
    "ReadOptions",
    "RedirectError",
    "RemoteFileChangedError",
    "RemoteTensorsError",
    "RequestTimeoutError",
    "ScanResult",
    "ShardNotOpenedError",
    "SliceError",
    "TensorInfo",
    "TensorLayout",
    "TensorNotFoundError",
    "TensorSlice",
    "TensorStats",
    "TensorView",
    "TlsError",
    "TlsErrorKind",
    "Traffic",
    "TransportError",
    "UnsupportedDtypeError",
    "__version__",
    "compare",
    "iter_tensors",
    "iter_tensors_async",
    "load_into",
    "load_into_async",
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
