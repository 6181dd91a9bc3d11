"""One root for every exception, builtin leaves, and the public names pinned."""

from __future__ import annotations

import inspect
import pickle

import remotetensors
import remotetensors.errors as errors_module
from remotetensors.errors import (
    HeaderError,
    HeaderErrorKind,
    RemoteTensorsError,
    TensorNotFoundError,
    TlsError,
    TlsErrorKind,
)


def test_every_exception_subclasses_the_root() -> None:
    exceptions = [
        obj
        for _, obj in inspect.getmembers(errors_module, inspect.isclass)
        if issubclass(obj, BaseException)
    ]
    assert len(exceptions) > 10
    for exc in exceptions:
        assert issubclass(exc, RemoteTensorsError), exc
    for name in remotetensors.__all__:
        obj = getattr(remotetensors, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            assert issubclass(obj, RemoteTensorsError), name


def test_leaves_subclass_the_builtin_a_user_catches() -> None:
    assert issubclass(errors_module.HeaderError, ValueError)
    assert issubclass(errors_module.TensorNotFoundError, KeyError)
    assert issubclass(errors_module.SliceError, IndexError)
    assert issubclass(errors_module.UnsupportedDtypeError, TypeError)
    assert issubclass(errors_module.NotFoundError, FileNotFoundError)
    assert issubclass(errors_module.PermissionDeniedError, PermissionError)
    assert issubclass(errors_module.RequestTimeoutError, TimeoutError)
    assert issubclass(errors_module.LocationError, ValueError)
    assert issubclass(errors_module.MissingDependencyError, ImportError)
    assert issubclass(errors_module.TlsError, errors_module.TransportError)


def test_header_error_carries_its_rule_as_a_value() -> None:
    err = HeaderError(HeaderErrorKind.OVERFLOW, "too big", location="s3://b/k")
    assert err.kind is HeaderErrorKind.OVERFLOW
    assert str(err) == "s3://b/k: overflow computing buffer size: too big"
    assert err.with_location("x").location == "x"


def test_tls_error_carries_its_kind_across_processes() -> None:
    err = TlsError("https://h/m: TLS handshake with h:443 failed", kind=TlsErrorKind.EXPIRED)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is TlsError
    assert back.kind is TlsErrorKind.EXPIRED
    assert str(back) == str(err)
    assert isinstance(back, remotetensors.TransportError)
    assert isinstance(back, OSError)


def test_tensor_not_found_reads_well() -> None:
    err = TensorNotFoundError("File does not contain tensor w", name="w")
    assert str(err) == "File does not contain tensor w"
    assert err.name == "w"


PUBLIC_NAMES = {
    "ModelSummary",
    "ScanResult",
    "scan",
    "scan_async",
    "DTYPES",
    "BackendError",
    "BadResponseError",
    "DropInError",
    "ByteRange",
    "DType",
    "FileClosedError",
    "FileIndex",
    "FrameworkError",
    "HeaderError",
    "HeaderErrorKind",
    "MissingDependencyError",
    "NotFoundError",
    "PermissionDeniedError",
    "RangeNotSupportedError",
    "RedirectError",
    "RemoteFileChangedError",
    "RemoteTensorsError",
    "RequestTimeoutError",
    "ShardNotOpenedError",
    "SliceError",
    "TensorInfo",
    "TensorNotFoundError",
    "TransportError",
    "TlsError",
    "TlsErrorKind",
    "UnsupportedDtypeError",
    "__version__",
    "parameter_count",
    "AsyncTensorFile",
    "AsyncTensorSlice",
    "HttpOptions",
    "ReadOptions",
    "TensorSlice",
    "open_async",
    "safe_open",
    "ChecksumMismatchError",
    "verify_checksum",
    "verify_checksum_async",
    "AsyncModel",
    "Model",
    "ModelIndex",
    "open_model",
    "open_model_async",
    "LocationError",
    "ConfigWarning",
    "LogicalTensor",
    "MemoryEstimate",
    "ParameterCount",
    "Quantization",
    "AmbiguousModelError",
    "Comparison",
    "TensorStats",
    "TensorView",
    "Traffic",
    "compare",
    "LeftOutWarning",
    "LayoutError",
    "TensorLayout",
    "ReadOnlyStoreError",
    "OfflineError",
    "CheckpointMismatchError",
    "IncompleteLoadError",
    "LoadReport",
    "iter_tensors",
    "iter_tensors_async",
    "load_into",
    "load_into_async",
}


def test_public_names_are_pinned() -> None:
    assert set(remotetensors.__all__) == PUBLIC_NAMES
    assert len(remotetensors.__all__) == len(PUBLIC_NAMES)
    for name in remotetensors.__all__:
        assert hasattr(remotetensors, name)


def test_drop_in_errors_are_the_reference_errors_when_installed() -> None:
    import bintensors
    import safetensors

    for leaf in (
        errors_module.HeaderError,
        errors_module.SliceError,
        errors_module.FileClosedError,
        errors_module.TensorNotFoundError,
        errors_module.FrameworkError,
        errors_module.BackendError,
        errors_module.UnsupportedDtypeError,
    ):
        assert issubclass(leaf, errors_module.DropInError)
        assert issubclass(leaf, safetensors.SafetensorError)
        assert issubclass(leaf, bintensors.BintensorError)
    assert not issubclass(errors_module.NotFoundError, safetensors.SafetensorError)


def test_drop_in_errors_work_without_the_reference_packages() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['safetensors'] = None; sys.modules['bintensors'] = None\n"
        "import remotetensors.errors as e\n"
        "assert e.REFERENCE_ERRORS == (), e.REFERENCE_ERRORS\n"
        "assert e.DropInError.__bases__ == (e.RemoteTensorsError,)\n"
        "assert issubclass(e.SliceError, IndexError)\n"
        "raise SystemExit(str(e.SliceError('x')) == 'x' and 7)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert result.returncode == 7, result.stderr.decode()
