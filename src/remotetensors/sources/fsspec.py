"""Any fsspec filesystem as a ByteSource: S3 natively, other async filesystems through their
async range reads, sync ones (memory, HfFileSystem, ...) on worker threads.

``storage_options`` go to fsspec untouched, and chained URLs (``simplecache::s3://...``) work,
since the filesystem comes from :func:`fsspec.core.url_to_fs`.

S3 (s3fs) gets one request per range, size and ETag included: the first ranged GET reports the
size (``ContentRange``) and ETag, and later GETs send ``IfMatch`` so a changed object fails with
412 instead of mixing versions. Other filesystems learn the size and validator from ``info`` and
read with ``cat_file``; every read is checked for its exact length.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any, TypeVar

import fsspec
import fsspec.asyn

from ..errors import (
    BadResponseError,
    LocationError,
    MissingDependencyError,
    NotFoundError,
    PermissionDeniedError,
    RemoteFileChangedError,
    TransportError,
)
from ..redact import redact_text, redact_url
from .base import ByteSource, Prefix
from .recipe import SourceRecipe

if TYPE_CHECKING:
    from collections.abc import Coroutine, Mapping

T = TypeVar("T")

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


class FsspecSource(ByteSource):
    """One file on an fsspec filesystem.

    Args:
        url: an fsspec URL (``s3://bucket/key``, ``memory://x``, ``simplecache::s3://...``).
        storage_options: passed to fsspec untouched (credentials, ``endpoint_url``, ...).
        fs: an already configured filesystem; ``url`` is then a path on it.
    """

    def __init__(
        self,
        url: str,
        *,
        storage_options: Mapping[str, Any] | None = None,
        fs: fsspec.AbstractFileSystem | None = None,
    ) -> None:
        self._given = url  # with its secrets: what another process must open again
        self._url = redact_url(url)  # named in every message and as the location
        # Kept to reopen the file in another process; None when a ready filesystem was given.
        self._storage_options = None if fs is not None else dict(storage_options or {})
        if fs is None:
            fs, path = _filesystem(url, storage_options)
        else:
            path = url
        self._fs = fs
        self._path = path
        self._size = 0
        self._validator: str | None = None
        self._is_s3 = type(fs).__name__ == "S3FileSystem"

    @property
    def location(self) -> str:
        return self._url

    async def open_prefix(self, length: int) -> Prefix:
        if self._is_s3:
            data = await self._s3_get(0, length, first=True)
            return Prefix(data, self._size, self._validator)
        info = await self._call("info", self._path)
        if info.get("type") == "directory":
            raise NotFoundError(f"{self._url}: is a directory, not a file")
        self._size = int(info["size"])
        self._validator = _validator_of(info)
        end = min(length, self._size)
        data = await self._call("cat_file", self._path, start=0, end=end) if end else b""
        self._check_length(data, 0, end)
        return Prefix(bytes(data), self._size, self._validator)

    def recipe(self) -> SourceRecipe:
        if self._storage_options is None:
            raise NotImplementedError(
                f"{self._url}: opened on a given filesystem object, which cannot be reopened "
                "elsewhere; open it by URL with storage_options"
            )
        return SourceRecipe(
            "fsspec",
            self._given,
            self._url,
            self._size,
            self._validator,
            storage_options=self._storage_options,
        )

    async def read_into(self, start: int, buffer: memoryview) -> None:
        end = start + len(buffer)
        if not len(buffer):
            return
        if self._is_s3:
            data = await self._s3_get(start, end, first=False)
        else:
            data = await self._call("cat_file", self._path, start=start, end=end)
        self._check_length(data, start, end)
        buffer[:] = data

    def _check_length(self, data: bytes, start: int, end: int) -> None:
        if len(data) != end - start:
            raise BadResponseError(
                f"{self._url}: asked for bytes [{start}, {end}), got {len(data)} bytes"
            )

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A filesystem method: its async twin on async filesystems, else on a worker thread."""
        try:
            if isinstance(self._fs, fsspec.asyn.AsyncFileSystem) and self._fs.async_impl:
                return await self._on_own_loop(getattr(self._fs, f"_{method}")(*args, **kwargs))
            return await asyncio.to_thread(getattr(self._fs, method), *args, **kwargs)
        except Exception as exc:
            raise self._translate(exc) from exc

    async def _on_own_loop(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Await ``coroutine`` on the loop that owns the filesystem's sessions.

        A filesystem made for sync use (fsspec's default) keeps its sessions on fsspec's IO
        loop, and s3fs closes them there at exit; driving them from another loop leaves
        sessions that cannot be closed cleanly (tracebacks at exit). Cancelling the wait
        cancels the work on that loop.
        """
        loop = getattr(self._fs, "loop", None)
        if loop is None or loop is asyncio.get_running_loop():
            return await coroutine
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, loop))

    async def _s3_get(self, start: int, end: int, *, first: bool) -> bytes:
        bucket, key, version = self._fs.split_path(self._path)
        extra: dict[str, Any] = {}
        if version:
            extra["VersionId"] = version
        if not first and self._validator is not None:
            extra["IfMatch"] = self._validator
        try:
            response, data = await self._on_own_loop(
                self._s3_get_object(
                    Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}", **extra
                )
            )
        except Exception as exc:
            if first and "InvalidRange" in _chain_text(exc):
                self._size = 0  # an empty object has no byte 0
                return b""
            raise self._translate(exc) from exc
        match = _CONTENT_RANGE.fullmatch(str(response.get("ContentRange", "")))
        if match is None:
            raise BadResponseError(
                f"{self._url}: a ranged GET came back without a usable ContentRange "
                f"({response.get('ContentRange')!r})"
            )
        total = int(match.group(3))
        etag = response.get("ETag")
        if first:
            self._size = total
            self._validator = etag
        elif total != self._size or (etag and self._validator and etag != self._validator):
            raise RemoteFileChangedError(
                f"{self._url}: the object changed since it was opened (size {self._size}, "
                f"ETag {self._validator}; now size {total}, ETag {etag})"
            )
        expected_end = min(end, total) if first else end
        if int(match.group(1)) != start or int(match.group(2)) != expected_end - 1:
            raise BadResponseError(
                f"{self._url}: asked for bytes {start}-{end - 1}, got ContentRange "
                f"{response.get('ContentRange')!r}"
            )
        return data

    async def _s3_get_object(self, **request: Any) -> tuple[dict[str, Any], bytes]:
        response: dict[str, Any] = await self._fs._call_s3("get_object", **request)
        try:
            data: bytes = await response["Body"].read()
        finally:
            response["Body"].close()
        return response, data

    def _translate(self, exc: Exception) -> Exception:
        text = _chain_text(exc)
        if "PreconditionFailed" in text or "pre-conditions" in text:
            return RemoteFileChangedError(
                f"{self._url}: the object changed since it was opened (ETag {self._validator} "
                "no longer matches); open it again to read the new version"
            )
        # The backend's own words may quote the URL or path with its query: redacted too.
        said = redact_text(str(exc))
        if isinstance(exc, FileNotFoundError):
            return NotFoundError(f"{self._url}: not found ({said})")
        if isinstance(exc, PermissionError):
            return PermissionDeniedError(
                f"{self._url}: access denied ({said}); check the credentials in storage_options "
                "or the AWS_* environment variables"
            )
        if isinstance(exc, (BadResponseError, RemoteFileChangedError)):
            return exc
        return TransportError(f"{self._url}: {type(exc).__name__}: {said}")


def _filesystem(
    url: str, storage_options: Mapping[str, Any] | None
) -> tuple[fsspec.AbstractFileSystem, str]:
    """fsspec's filesystem and path for ``url``, its failures put in the user's terms.

    Raises:
        MissingDependencyError: the protocol's package is not installed (with the pip line).
        LocationError: an unknown protocol, or options the filesystem does not take.
        TransportError: the filesystem could not connect (FTP and SFTP connect right here).
    """
    shown = redact_url(url)
    try:
        fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    except ImportError as exc:
        raise MissingDependencyError(f"{shown}: {_install_hint(exc)}") from exc
    except OSError as exc:
        raise TransportError(f"{shown}: cannot connect: {redact_text(str(exc))}") from exc
    except Exception as exc:
        if "Protocol not known" in str(exc):
            protocol = url.split("://", 1)[0]
            raise LocationError(
                f"{shown}: unknown protocol {protocol!r}; expected hf://, http(s)://, s3://, "
                "another fsspec protocol, file:// or a local path"
            ) from exc
        raise LocationError(
            f"{shown}: cannot set up its filesystem: {type(exc).__name__}: {redact_text(str(exc))}"
        ) from exc
    return fs, path


def _install_hint(exc: ImportError) -> str:
    """What to install for a protocol whose package is missing."""
    missing: str | None = None
    seen: BaseException | None = exc
    while seen is not None and missing is None:
        missing = getattr(seen, "name", None)
        seen = seen.__cause__ or seen.__context__
    text = str(exc)
    if missing == "s3fs" or "s3fs" in text:
        return 'reading s3:// needs s3fs: pip install "remotetensors[s3]"'
    if missing:
        return f"{text}: pip install {missing}"
    return text


def _chain_text(exc: BaseException) -> str:
    """The reprs of an exception and its causes (s3fs re-raises botocore errors as OSError)."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 8:
        parts.append(repr(seen))
        seen = seen.__cause__ or seen.__context__
    return " ".join(parts)


def _validator_of(info: Mapping[str, Any]) -> str | None:
    for key in ("ETag", "etag", "VersionId", "version_id", "md5", "mtime", "LastModified"):
        if info.get(key) is not None:
            return f"{key}={info[key]}"
    return None
