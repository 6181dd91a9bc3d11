"""The exceptions of remotetensors.

Every exception raised on purpose by this package derives from :class:`RemoteTensorsError`.
Each leaf also derives from the builtin exception a user would naturally catch, so code written
against ``safetensors`` or plain Python (``except KeyError``, ``except FileNotFoundError``) keeps
working. Messages name the location, what was expected and what was seen.

Drop-in compatibility: the errors that ``safetensors.safe_open`` raises as its own
``SafetensorError`` (a malformed header, a bad slice, a closed file, an unknown tensor, framework,
device or backend, a dtype it cannot hand over) are, on our side, leaves of
:class:`DropInError`. When ``safetensors`` or ``bintensors`` is installed, ``DropInError`` also
derives from ``safetensors.SafetensorError`` and ``bintensors.BintensorError``, so code written
for either package catches our failures in the same places without a change. The classes are
looked up once, at import (about 1 ms each when installed, nothing when not).
"""

from __future__ import annotations

import enum
import importlib
import os
import sys
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any


class RemoteTensorsError(Exception):
    """Root of every error raised by remotetensors."""


def _reference_error_classes() -> tuple[type[Exception], ...]:
    """The exception classes of the installed reference readers (safetensors, bintensors)."""
    found: list[type[Exception]] = []
    for module_name, class_name in (
        ("safetensors", "SafetensorError"),
        ("bintensors", "BintensorError"),
    ):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        cls = getattr(module, class_name, None)
        if isinstance(cls, type) and issubclass(cls, Exception):
            found.append(cls)
    return tuple(found)


REFERENCE_ERRORS: tuple[type[Exception], ...] = _reference_error_classes()
"""``safetensors.SafetensorError`` and ``bintensors.BintensorError``, those that are installed."""

if TYPE_CHECKING:
    # mypy cannot follow a computed list of bases; to it, DropInError is a plain root leaf.
    class DropInError(RemoteTensorsError):
        """An error that ``safetensors.safe_open`` raises as its ``SafetensorError``."""

else:
    # Built with type() because a class statement cannot take a list of bases known only at
    # import time. The reference classes are plain Exception subclasses (same C layout as
    # ValueError, KeyError and IndexError), so they combine with the builtins below.
    DropInError = type(
        "DropInError",
        (RemoteTensorsError, *REFERENCE_ERRORS),
        {
            "__doc__": (
                "An error that ``safetensors.safe_open`` raises as its ``SafetensorError``; also "
                "an instance of ``safetensors.SafetensorError`` and "
                "``bintensors.BintensorError`` when those packages are installed."
            ),
            "__module__": __name__,
        },
    )


def _rebuild(cls: type[Exception], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Exception:
    """Unpickle an error whose constructor takes keyword-only arguments."""
    return cls(*args, **kwargs)


class HeaderErrorKind(str, enum.Enum):
    """Which validation rule a header broke, in the order the reference reader applies them."""

    TOO_SMALL = "header too small"
    TOO_LARGE = "header too large"
    INVALID_LENGTH = "invalid header length"
    INVALID_UTF8 = "invalid UTF-8 in header"
    INVALID_JSON = "invalid JSON in header"
    INVALID_OFFSET = "invalid offset"
    OVERFLOW = "overflow computing buffer size"
    MISALIGNED = "misaligned sub-byte tensor"
    INVALID_TENSOR_INFO = "invalid shape, data type, or offset"
    INCOMPLETE_BUFFER = "incomplete metadata, file not fully covered"
    # bintensors only: its header is bincode, and duplicate tensor names are an error there.
    INVALID_BINCODE = "invalid bincode header"
    DUPLICATE_NAME = "duplicate tensor name"
    # A sharded model's index (or the hub's metadata of one): shard names stay inside it.
    FILE_OUTSIDE_MODEL = "shard file outside the model"
    # GGUF only: its binary header has rules of its own, and limits against hostile headers.
    INVALID_MAGIC = "not a GGUF file"
    UNSUPPORTED_VERSION = "unsupported GGUF version"
    TRUNCATED = "truncated GGUF header"
    INVALID_VALUE_TYPE = "invalid GGUF value type"
    STRING_TOO_LONG = "GGUF string too long"
    ARRAY_TOO_LONG = "GGUF array too long"
    TOO_MANY_DIMS = "too many tensor dims"
    INVALID_METADATA = "invalid GGUF metadata"
    MISALIGNED_TENSOR = "misaligned GGUF tensor offset"
    # PyTorch .bin (torch.save's zip): the archive, and the pickle read without running it.
    INVALID_ZIP = "invalid PyTorch zip archive"
    LEGACY_TORCH_FORMAT = "legacy PyTorch file (torch.save before 1.6)"
    INVALID_PICKLE = "invalid or unsupported pickle"
    FORBIDDEN_GLOBAL = "pickle global not allowed"


class HeaderError(DropInError, ValueError):
    """A file's header is malformed; ``kind`` says which rule failed.

    Attributes:
        kind: the rule that failed, testable without parsing the message.
        location: the file the header came from (``"<bytes>"`` when parsed from memory).
        detail: what was seen, in words.
    """

    def __init__(self, kind: HeaderErrorKind, detail: str, *, location: str = "<bytes>") -> None:
        self.kind = kind
        self.detail = detail
        self.location = location
        super().__init__(f"{location}: {kind.value}: {detail}")

    def with_location(self, location: str) -> HeaderError:
        """Return the same error naming ``location``."""
        return HeaderError(self.kind, self.detail, location=location)

    def __reduce__(self) -> tuple[Any, ...]:
        # Errors cross process boundaries (multiprocessing, DataLoader workers) pickled; the
        # default rebuilds from ``args`` alone, which lacks the keyword-only location.
        return (_rebuild, (type(self), (self.kind, self.detail), {"location": self.location}))


class AmbiguousModelError(RemoteTensorsError, ValueError):
    """A folder or repo holds several models (GGUF files) and the location does not say which.

    Attributes:
        choices: the files (or first parts of split files) to choose from.
    """

    def __init__(self, message: str, *, choices: list[str]) -> None:
        self.choices = choices
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), tuple(self.args), {"choices": self.choices}))


class TensorNotFoundError(DropInError, KeyError):
    """A tensor name that the file or model does not hold."""

    def __init__(self, message: str, *, name: str) -> None:
        self.name = name
        super().__init__(message)

    def __str__(self) -> str:
        # KeyError quotes its argument; keep the message readable.
        return str(self.args[0])

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), tuple(self.args), {"name": self.name}))


class SliceError(DropInError, IndexError):
    """An index expression that ``get_slice`` cannot apply to a tensor."""


class UnsupportedDtypeError(DropInError, TypeError):
    """A dtype that cannot be turned into the requested array type."""


class FileClosedError(DropInError, ValueError):
    """A call on a file or model after its context was closed."""


class ShardNotOpenedError(RemoteTensorsError, RuntimeError):
    """A call that needs a shard's final offsets before they are known: a shard known from the
    hub's metadata endpoint reads its 8-byte length on its first data read, and a synchronous
    call such as ``to_dask`` cannot wait for it (``await model.open_shards(names)`` first)."""


class LocationError(RemoteTensorsError, ValueError):
    """A location that cannot be understood: a malformed ``hf://`` URL, an unknown protocol."""


class FrameworkError(DropInError, ValueError):
    """An unknown ``framework=`` or ``device=`` value, or a framework that is not installed."""


class BackendError(DropInError, ValueError):
    """An unknown ``backend=`` value of ``safe_open`` (the reference's are "mmap" and "pread")."""


class MissingDependencyError(RemoteTensorsError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class NotFoundError(RemoteTensorsError, FileNotFoundError):
    """The location does not exist (HTTP 404, a missing object or path).

    Attributes:
        code: what is missing when the server said so (the hub's ``X-Error-Code``:
            ``"RepoNotFound"``, ``"RevisionNotFound"``, ``"EntryNotFound"``), else None.
    """

    code: str | None = None


class PermissionDeniedError(RemoteTensorsError, PermissionError):
    """The server refused access (HTTP 401/403); usually a missing or wrong token."""


class TransportError(RemoteTensorsError, OSError):
    """The network failed and retries did not help: connect or read errors, 429 and 5xx."""


class RequestTimeoutError(TransportError, TimeoutError):
    """A request took longer than a configured bound.

    Attributes:
        bound: the :class:`~remotetensors.HttpOptions` field that tripped:
            ``"read_timeout_seconds"`` (no bytes for that long, on every attempt),
            ``"min_bytes_per_second"`` (too slow over a whole window) or
            ``"request_deadline_seconds"`` (the whole read took too long); ``None`` when
            raised by another source.
    """

    def __init__(self, message: str, *, bound: str | None = None) -> None:
        super().__init__(message)
        self.bound = bound


class TlsErrorKind(str, enum.Enum):
    """What went wrong in a TLS handshake (see :class:`TlsError`)."""

    UNKNOWN_ISSUER = "certificate from an unknown issuer"
    WRONG_HOST = "certificate for another host name"
    EXPIRED = "expired certificate"
    NOT_YET_VALID = "certificate not yet valid"
    UNTRUSTED = "untrusted certificate"
    NOT_TLS = "the server does not speak TLS"
    REFUSED = "handshake refused by the server"
    HANDSHAKE = "handshake failed"
    CA_BUNDLE = "CA bundle cannot be loaded"


class TlsError(TransportError):
    """A TLS handshake failed in a way another attempt cannot mend (an untrusted or expired
    certificate, a certificate for another name, a server that refuses the handshake or speaks
    plain HTTP on its TLS port), or the CA bundle named cannot be loaded. Raised at once, never
    retried; the message says how to trust a private CA (``SSL_CERT_FILE``,
    ``REQUESTS_CA_BUNDLE``, ``HttpOptions(ca_bundle=...)``).

    A :class:`TransportError` (so an ``OSError``, as :class:`ssl.SSLError` is): code that
    handles a network that cannot be reached handles this too.

    Attributes:
        kind: what failed, testable without parsing the message.
    """

    def __init__(self, message: str, *, kind: TlsErrorKind) -> None:
        super().__init__(message)
        self.kind = kind

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), tuple(self.args), {"kind": self.kind}))


class BadResponseError(RemoteTensorsError, OSError):
    """A server answered a ranged request with bytes that cannot be trusted.

    For example a ``Content-Range`` that does not match the request, a body of the wrong length,
    or a compressed body.
    """


class RangeNotSupportedError(BadResponseError):
    """The server ignored ``Range`` and started sending the whole file (HTTP 200)."""


class RedirectError(BadResponseError):
    """A redirect that is not followed: from ``https`` to ``http`` (a downgrade), to a scheme
    other than ``http(s)``, to an invalid URL, back to a URL already asked (a loop), or one hop
    more than the bound (see :data:`remotetensors.sources.http.policy.MAX_REDIRECTS`). The
    message names the URL redirected from and the URL it led to, their secrets masked."""


class ChecksumMismatchError(RemoteTensorsError, ValueError):
    """A file's digest differs from the one it was expected to have."""


class RemoteFileChangedError(RemoteTensorsError, OSError):
    """The file changed between two requests (its validator, e.g. the ETag, no longer matches)."""


class OfflineError(RemoteTensorsError, ConnectionError):
    """Offline mode is on (``HF_HUB_OFFLINE=1`` or ``REMOTETENSORS_OFFLINE=1``) and what was
    asked for is not in the persistent cache; no request was sent. The message names the
    location and says to run once online. A ``ConnectionError``, as huggingface_hub's
    ``OfflineModeIsEnabled`` is."""


class CheckpointMismatchError(RemoteTensorsError, RuntimeError):
    """A checkpoint does not fit the torch module it is loaded into: a tensor whose shape
    differs (always an error), or, with ``strict=True``, names the module holds and the
    checkpoint lacks or the reverse. Raised from the headers alone, before any tensor data is
    asked for. A ``RuntimeError``, as ``torch.nn.Module.load_state_dict`` raises.

    Attributes:
        location: the checkpoint (secrets redacted).
        missing: module names the checkpoint lacks (raised with ``strict=True`` only).
        unexpected: checkpoint names the module lacks (raised with ``strict=True`` only).
        mismatched: module name -> (the module's shape, the checkpoint's shape).
    """

    def __init__(
        self,
        message: str,
        *,
        location: str,
        missing: tuple[str, ...] = (),
        unexpected: tuple[str, ...] = (),
        mismatched: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] | None = None,
    ) -> None:
        super().__init__(message)
        self.location = location
        self.missing = missing
        self.unexpected = unexpected
        self.mismatched = dict(mismatched or {})

    def __reduce__(self) -> tuple[Any, ...]:
        fields = {
            "location": self.location,
            "missing": self.missing,
            "unexpected": self.unexpected,
            "mismatched": self.mismatched,
        }
        return (_rebuild, (type(self), tuple(self.args), fields))


class IncompleteLoadError(RemoteTensorsError, OSError):
    """Reading a checkpoint into a torch module stopped part way (the network failed, the file
    changed). Only tensors whose every byte arrived were put in the module and are named in
    ``loaded``; a tensor cut short is not: a meta parameter stays on meta, a real one filled in
    place holds some new bytes and is named in ``not_loaded``. The cause is chained
    (``__cause__``).

    Attributes:
        location: the checkpoint (secrets redacted).
        loaded: module names filled completely before the failure.
        not_loaded: module names that were to be filled and were not.
        report: the load's report so far (a ``remotetensors.integrations.torch.LoadReport``).
    """

    def __init__(
        self,
        message: str,
        *,
        location: str,
        loaded: tuple[str, ...],
        not_loaded: tuple[str, ...],
        report: Any = None,
    ) -> None:
        super().__init__(message)
        self.location = location
        self.loaded = loaded
        self.not_loaded = not_loaded
        self.report = report

    def __str__(self) -> str:
        return str(self.args[0])  # OSError would show a tuple of several arguments

    def __reduce__(self) -> tuple[Any, ...]:
        fields = {
            "location": self.location,
            "loaded": self.loaded,
            "not_loaded": self.not_loaded,
            "report": self.report,
        }
        return (_rebuild, (type(self), tuple(self.args), fields))


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the names closest to ``name``, or ``""`` when none is."""
    import difflib  # here: 1.4 ms that only a miss pays, not every import

    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.8)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?"


class ConfigWarning(RemoteTensorsError, UserWarning):
    """A warning, not an error: a config that cannot be used as it is (not JSON, an unknown
    quantization method, one that contradicts the tensors). The model still opens and is
    counted from its tensors; the message names the file."""


class ReadOnlyStoreError(RemoteTensorsError, ValueError):
    """A write to a checkpoint's Zarr store (``Model.as_zarr_store()``), which only reads; a
    ``ValueError`` too, as zarr's own read-only error is."""


class LayoutError(RemoteTensorsError, ValueError):
    """A tensor whose bytes are not laid out the way a path reads them: its elements are not
    one row-major range of its file (a transposed or expanded view in a PyTorch ``.bin``),
    where its bytes start is not confirmed yet, or gathering them would hand out far more
    memory than the file holds for it. The message names the tensor, its layout and the path
    that reads it instead (``get_tensor`` and slices honour every layout)."""


class LeftOutWarning(RemoteTensorsError, UserWarning):
    """A tensor left out of a Zarr store, kerchunk references or a VirtualiZarr manifest: Zarr
    cannot express its dtype as stored, or its name as a node. The message names the tensor and
    the reason; every other tensor is there."""


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_at_caller(warning: Warning) -> None:
    """Issue ``warning`` from the first frame outside this package: the user's line that opened
    the model, so ``warnings.filterwarnings(..., module=...)`` and the printed location name
    their code, not ours (what ``skip_file_prefixes`` does from Python 3.12 on).

    Call it in the caller's thread (a warning issued on the IO thread has no user frame: it
    would point at the event loop); where no frame outside the package is found, the warning
    names the frame that called this function's caller.
    """
    frame = sys._getframe(1)  # the function that called this one
    level = 2  # warnings.warn's stacklevel that names that frame
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    warnings.warn(warning, stacklevel=level if frame is not None else 3)
