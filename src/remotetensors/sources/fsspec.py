"""Any fsspec filesystem as a ByteSource: S3 natively, other async filesystems through their
async range reads, sync ones (memory, HfFileSystem, ...) on worker threads.

``storage_options`` go to fsspec untouched, and chained URLs (``simplecache::s3://...``) work,
since the filesystem comes from :func:`fsspec.core.url_to_fs`. Every read is checked for its
exact length.

Every read is tied to the version of the file seen when it was opened, as firmly as the backend
allows (a changed file raises :class:`RemoteFileChangedError`, never mixes versions):

- S3 (s3fs) gets one request per range, size and ETag included: the first ranged GET reports
  the size (``ContentRange``) and ETag, and later GETs send ``IfMatch``, so a changed object
  fails with 412; every answer's size and ETag are compared too.
- fsspec's HTTP filesystem, where the server gives a strong ETag: ``info`` (a HEAD) gives the
  size and ETag, and every read sends ``If-Match``, so a changed file fails with 412.
- GCS (gcsfs) and Azure Blob (adlfs) get one request per range and no metadata request: the
  first ranged GET reports the size and the version (a generation, an ETag), and every later
  one asks for that version only (a media GET at ``generation=``, a download with
  ``If-Match``), so a rewrite is refused by the read itself (:mod:`.gcs`, :mod:`.azure`).
- Every other filesystem (memory, local files through fsspec, SFTP, HTTP without a strong
  ETag, ...): ``info`` gives the size and whatever the backend reports that changes
  when the file is rewritten (:data:`VERSION_FIELDS`: an ETag, a version id, a GCS generation,
  a content hash, a modification time, an inode; else :data:`FALLBACK_VERSION_FIELDS`, the
  creation time of fsspec's memory filesystem, which makes a new file on every write). After
  every read, the header window's included, ``info`` is asked again (its listing cache dropped
  first) and must say the same: a read between two equal answers is of that version, so all
  bytes handed out, cached header window and later reads alike, come from the version whose
  header was read. This costs one metadata call per read (a request on remote filesystems).
  The guarantee is only as fine as those fields: a modification time that does not move
  between two writes in one clock tick, or a backend that reports nothing but the size (then
  only a change of size is detected), lets a rewrite between two reads go unseen.

fsspec's HTTP filesystem follows redirects through aiohttp, which forwards every header but
``Authorization``, ``Cookie`` and ``Proxy-Authorization`` to another origin and follows ``https``
to ``http``. The requests this source makes it send (``info``, ``cat_file``) carry a client
middleware (aiohttp 3.12 and later) that holds each hop to the rules of every other HTTP request
here (:func:`_http_guard`): no redirect from ``https`` to ``http``, to another scheme or in a
loop (:func:`.http.answer.follow`), no header but the harmless ones to another origin than the
file's, no ``Proxy-Authorization`` to any (:func:`.http.policy.carried`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import re
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import fsspec
import fsspec.asyn

from ..errors import (
    BadResponseError,
    LocationError,
    MissingDependencyError,
    NotFoundError,
    PermissionDeniedError,
    RedirectError,
    RemoteFileChangedError,
    TransportError,
)
from ..redact import redact_text, redact_url, url_secrets
from .azure import AzureBlob, is_azure
from .base import ByteSource, Prefix, Suffix
from .cache.offline import offline, offline_error
from .gcs import GcsObject, http_status, is_gcs
from .http.answer import Failed, follow
from .http.policy import carried, origin
from .pinned import PinnedObject, StoredObject
from .recipe import SourceRecipe
from .s3_direct import SIGNED_SECONDS, S3DirectReads

if TYPE_CHECKING:
    from collections.abc import Coroutine, Mapping

T = TypeVar("T")

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")

VERSION_FIELDS = (
    "ETag",  # s3fs, fsspec's HTTP filesystem
    "etag",  # adlfs, gcsfs
    "VersionId",  # s3fs on a versioned bucket
    "version_id",  # adlfs on a versioned container
    "generation",  # gcsfs
    "blob_id",  # huggingface_hub's HfFileSystem (the git blob)
    "sha",  # GitHub
    "md5Hash",  # gcsfs
    "md5",
    "Content-MD5",  # fsspec's HTTP filesystem
    "Digest",  # fsspec's HTTP filesystem
    "crc32c",  # gcsfs
    "mtime",  # local files, SFTP, gcsfs
    "LastModified",  # s3fs
    "last_modified",  # adlfs
    "Last-Modified",  # fsspec's HTTP filesystem
    "updated",  # gcsfs
    "modificationTime",  # WebHDFS
    "ino",  # local files (a file replaced by a rename is a new inode)
)
"""Fields of fsspec's ``info`` that change when a file is rewritten; whichever a backend
reports are compared together."""

FALLBACK_VERSION_FIELDS = ("created",)
"""Compared only where none of :data:`VERSION_FIELDS` is reported: fsspec's memory filesystem
makes a new file, with a new creation time, on every write. Elsewhere a creation time (a local
file's ``st_ctime``) also moves when only the metadata changes, so it is not used there."""


@dataclass(frozen=True, slots=True)
class FileVersion:
    """One version of a file as fsspec's ``info`` describes it.

    Attributes:
        size: the file's size in bytes.
        fields: ``(name, value)`` of each version field the backend reported, values as text;
            empty where it reports none (then only the size tells versions apart).
    """

    size: int
    fields: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, info: Mapping[str, Any], shown: str) -> FileVersion:
        """The version ``info`` describes (``shown`` names the file in errors).

        Raises:
            BadResponseError: ``info`` gives no size.
        """
        size = info.get("size")
        if size is None:
            raise BadResponseError(f"{shown}: the filesystem reports no size for the file")
        fields = _fields(info, VERSION_FIELDS) or _fields(info, FALLBACK_VERSION_FIELDS)
        return cls(int(size), fields)

    @property
    def validator(self) -> str | None:
        """The fields as one string (``"mtime=1700000000.5, ino=42"``), or None."""
        return ", ".join(f"{name}={value}" for name, value in self.fields) or None

    def changes_to(self, now: FileVersion) -> str:
        """What differs in ``now``, for a message: ``"size 10 -> 14, created a -> b"``."""
        changes = [f"size {self.size} -> {now.size}"] if now.size != self.size else []
        before, after = dict(self.fields), dict(now.fields)
        for name in dict.fromkeys([*before, *after]):
            if before.get(name) != after.get(name):
                changes.append(f"{name} {before.get(name)} -> {after.get(name)}")
        return ", ".join(changes)


def _fields(info: Mapping[str, Any], names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    return tuple((name, str(info[name])) for name in names if info.get(name) is not None)


class FsspecSource(ByteSource):
    """One file on an fsspec filesystem.

    Reads are tied to the version opened as firmly as the backend allows (the module's
    docstring says how, per backend): S3, GCS, Azure Blob and HTTP with a strong ETag make
    every read conditional; every other backend is asked for the file's ``info`` again after
    each read, which detects a rewrite only as finely as the fields it reports
    (:class:`FileVersion`): a backend that reports nothing but the size sees only a change of
    size.

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
        self._secrets = url_secrets(url)  # masked in the backend's words, wherever they are
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
        # GCS and Azure Blob: every read asks for the version opened (sources/gcs.py, azure.py).
        self._pinned = _pinned_object(fs, path, self._url)
        self._version: FileVersion | None = None  # other backends: what info said at open
        # cat_file's keyword arguments that make a read fail unless it is of the version
        # opened (If-Match over HTTP); None where the version is checked after each read.
        self._conditions: dict[str, Any] | None = None
        # S3: ranges read through a presigned URL by the direct client (see s3_direct.py).
        self._direct = (
            S3DirectReads(self._presigned) if self._is_s3 and S3DirectReads.usable(fs) else None
        )

    @property
    def location(self) -> str:
        return self._url

    async def open_prefix(self, length: int) -> Prefix:
        if self._is_s3:
            data = await self._s3_get(0, length, first=True)
            assert data is not None  # asked without a condition
            await self._prepare_direct()
            return Prefix(data, self._size, self._validator)
        if self._pinned is not None:
            pinned = self._pinned
            answer = await self._pinned_call(lambda: pinned.first(length))
            self._size, self._validator = answer.size, answer.version
            return Prefix(answer.data, answer.size, answer.version)
        await self._learn_version()
        end = min(length, self._size)
        data = await self._cat(0, end) if end else b""
        return Prefix(bytes(data), self._size, self._validator)

    async def open_suffix(self, length: int) -> Suffix:
        if self._is_s3:  # one request: S3 answers a suffix range
            data = await self._s3_get(0, length, first=True, suffix=True)
            assert data is not None  # asked without a condition
            return Suffix(data, self._size, self._validator)
        if self._pinned is not None:
            pinned = self._pinned
            answer = await self._pinned_call(lambda: pinned.first(length, suffix=True))
            self._size, self._validator = answer.size, answer.version
            return Suffix(answer.data, answer.size, answer.version)
        await self._learn_version()
        start = max(0, self._size - length)
        data = await self._cat(start, self._size) if self._size else b""
        return Suffix(bytes(data), self._size, self._validator)

    async def _learn_version(self) -> None:
        """Ask ``info`` afresh and keep the size, validator and read conditions it gives (the
        first call of a source other than S3).

        Raises:
            NotFoundError: the location is missing or a directory.
        """
        info = await self._fresh_info()
        if info.get("type") == "directory":
            raise NotFoundError(f"{self._url}: is a directory, not a file")
        self._version = FileVersion.of(info, self._url)
        self._size = self._version.size
        self._validator = self._version.validator
        self._conditions = self._read_conditions(info)

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
            direct, etag = self._direct, self._validator
            if direct is not None and etag is not None:
                self._check_online()
                if await direct.read_into(start, buffer, size=self._size, etag=etag):
                    return
            data = await self._s3_get(start, end, first=False)
            assert data is not None  # asked without a condition
            self._check_length(data, start, end)
        elif self._pinned is not None:
            pinned = self._pinned
            data = await self._pinned_call(lambda: pinned.read(start, end))
            self._check_length(data, start, end)
        else:
            data = await self._cat(start, end)
        buffer[:] = data

    async def _cat(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the version opened (not S3).

        Raises:
            RemoteFileChangedError: the file is no longer that version.
            BadResponseError: the backend gave another number of bytes.
        """
        if self._conditions is not None:
            data = await self._call(
                "cat_file",
                self._path,
                start=start,
                end=end,
                **self._conditions,
                **self._http_rules(),
            )
        else:
            data, info = await self._cat_then_info(start, end)
            # Before the length check: a file cut short is a changed file, not a bad answer.
            self._check_version(info)
        self._check_length(data, start, end)
        return bytes(data)

    async def _cat_then_info(self, start: int, end: int) -> tuple[bytes, dict[str, Any]]:
        """``cat_file`` of ``[start, end)``, then ``info`` afresh; on a sync filesystem in one
        trip to a worker thread (a trip costs more than a read of the memory filesystem).

        Raises:
            NotFoundError: the file is gone; and what :meth:`_translate` makes of the rest.
        """
        self._check_online()
        if self._is_async():
            data = await self._call(
                "cat_file", self._path, start=start, end=end, **self._http_rules()
            )
            return data, await self._fresh_info()

        def both() -> tuple[bytes, dict[str, Any]]:
            data = self._fs.cat_file(self._path, start=start, end=end)
            self._fs.invalidate_cache(self._path)
            return data, self._fs.info(self._path)

        try:
            return await asyncio.to_thread(both)
        except Exception as exc:
            raise self._translate(exc) from exc

    async def _fresh_info(self) -> dict[str, Any]:
        """``info`` of the file as the backend has it now, not as a cached listing had it."""
        self._fs.invalidate_cache(self._path)
        # fsspec's HTTP info passes the filesystem's own keywords besides these: a middleware
        # the caller configured there would be given twice, so it stands alone then.
        mine = "middlewares" not in getattr(self._fs, "kwargs", {})
        info: dict[str, Any] = await self._call(
            "info", self._path, **(self._http_rules() if mine else {})
        )
        return info

    def _check_version(self, info: Mapping[str, Any]) -> None:
        """``info`` asked after a read: the read is of the version opened when ``info`` still
        describes that version.

        Raises:
            RemoteFileChangedError: naming what changed (size, ETag, mtime, ...).
        """
        assert self._version is not None, "open_prefix comes first"
        now = FileVersion.of(info, self._url)
        if now != self._version:
            raise RemoteFileChangedError(
                f"{self._url}: the file changed since it was opened "
                f"({self._version.changes_to(now)}); open it again to read the new version"
            )

    def _read_conditions(self, info: Mapping[str, Any]) -> dict[str, Any] | None:
        """``cat_file`` keywords that make the server refuse (412) any other version: for
        fsspec's HTTP filesystem and a strong ETag (a weak one cannot be used for ``If-Match``,
        RFC 9110 13.1.1). None elsewhere: the version is then checked after each read."""
        etag = info.get("ETag")
        if type(self._fs).__name__ != "HTTPFileSystem" or not etag or etag.startswith("W/"):
            return None
        # cat_file's headers replace the filesystem's own: keep those (credentials) in.
        headers = dict(getattr(self._fs, "kwargs", {}).get("headers") or {})
        headers["If-Match"] = etag
        return {"headers": headers}

    def _http_rules(self) -> dict[str, Any]:
        """Keywords of one call of fsspec's HTTP filesystem that hold its requests to the rules
        of every HTTP request (:func:`_http_guard`), after the caller's own middlewares; none
        for another filesystem, or an aiohttp without client middlewares (before 3.12)."""
        if type(self._fs).__name__ != "HTTPFileSystem" or not _aiohttp_has_middlewares():
            return {}
        own = tuple(getattr(self._fs, "kwargs", {}).get("middlewares") or ())
        return {"middlewares": (*own, _http_guard(self._path, self._url))}

    def _check_length(self, data: bytes, start: int, end: int) -> None:
        if len(data) != end - start:
            raise BadResponseError(
                f"{self._url}: asked for bytes [{start}, {end}), got {len(data)} bytes"
            )

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A filesystem method: its async twin on async filesystems, else on a worker thread.

        Raises:
            OfflineError: offline mode is on (nothing is asked of the filesystem).
        """
        self._check_online()
        try:
            if self._is_async():
                return await self._on_own_loop(getattr(self._fs, f"_{method}")(*args, **kwargs))
            return await asyncio.to_thread(getattr(self._fs, method), *args, **kwargs)
        except Exception as exc:
            raise self._translate(exc) from exc

    async def _pinned_call(self, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``call()``, a read of a GCS object or Azure blob, on the filesystem's loop, its
        errors translated (the version checks' own pass through).

        Raises:
            OfflineError: offline mode is on (nothing is asked of the service).
        """
        self._check_online()
        try:
            return await self._on_own_loop(call())
        except Exception as exc:
            raise self._translate(exc) from exc

    def stored_object(self) -> StoredObject | None:
        """Where a GCS object or Azure blob lives (a persistent cache keys it by this), None
        on any other filesystem."""
        return None if self._pinned is None else self._pinned.stored

    async def current_version(self) -> tuple[int, str]:
        """``(size, version)`` of a GCS object or Azure blob as the service has it now: one
        metadata request, no bytes (a persistent cache revalidates with it).

        Raises:
            ValueError: another filesystem; NotFoundError, and what :meth:`_translate` gives.
        """
        pinned = self._pinned
        if pinned is None:
            raise ValueError(f"{self._url}: only a GCS object or Azure blob has a version here")
        return await self._pinned_call(pinned.current)

    async def aclose(self) -> None:
        """Close the S3 session of a filesystem this source made for itself.

        A filesystem fsspec does not share (``skip_instance_cache=True``, or options it cannot
        cache by) would otherwise close its session only when collected, through s3fs's
        finalizer, which gives the close 0.1 s on fsspec's loop, or starts it as a task on
        whatever loop is running then (one that may close first): its sockets were then left
        open and collected unclosed (a ``ResourceWarning``). A shared or given filesystem is
        left alone: others use it.
        """
        if self._direct is not None:
            await self._direct.aclose()
        if self._storage_options is None or not self._is_s3 or _shared(self._fs):
            return
        session = getattr(self._fs, "_s3", None)
        if session is None:  # never connected
            return
        self._fs._s3 = None
        await self._on_own_loop(session.__aexit__(None, None, None))

    def _is_async(self) -> bool:
        return isinstance(self._fs, fsspec.asyn.AsyncFileSystem) and bool(self._fs.async_impl)

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

    def _check_online(self) -> None:
        # A local or in-memory filesystem asks no network; every other one may.
        if offline() and not local_protocol(self._fs):
            raise offline_error(self._url)

    def s3_object(self) -> tuple[str, str, str, str | None] | None:
        """``(endpoint, bucket, key, version id)`` of an S3 object (a persistent cache keys it
        by these), None for any other filesystem. The endpoint is the one configured (an
        S3-compatible store's), else ``"s3"`` (Amazon's)."""
        if not self._is_s3:
            return None
        bucket, key, version = self._fs.split_path(self._path)
        endpoint = (
            getattr(self._fs, "endpoint_url", None)
            or (getattr(self._fs, "client_kwargs", None) or {}).get("endpoint_url")
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
            or "s3"
        )
        return str(endpoint), bucket, key, version or None

    async def open_prefix_unless(self, length: int, *, size: int, etag: str) -> Prefix | None:
        """:meth:`open_prefix` of an S3 object, asked only if it no longer has ``etag``
        (``IfNoneMatch``): None when S3 answers 304 (the version of ``size`` bytes with that
        ETag is then taken as opened, see :meth:`assume_version`). One request either way.

        Raises:
            ValueError: not an S3 object; and what :meth:`open_prefix` raises.
        """
        if not self._is_s3:
            raise ValueError(f"{self._url}: only an S3 object is revalidated")
        data = await self._s3_get(0, length, first=True, unless=etag)
        if data is None:
            self.assume_version(size, etag)
            return None
        return Prefix(data, self._size, self._validator)

    def assume_version(self, size: int, etag: str | None) -> None:
        """Take the S3 object's version of ``size`` bytes with ``etag`` as opened, without a
        request (a persistent cache holds its header): later reads send ``IfMatch`` with it.
        Likewise a GCS object's generation or an Azure blob's ETag (``etag``): later reads ask
        for that version."""
        self._size = size
        self._validator = etag
        if self._pinned is not None and etag is not None:
            self._pinned.assume(size, etag)

    async def _s3_get(
        self,
        start: int,
        end: int,
        *,
        first: bool,
        suffix: bool = False,
        unless: str | None = None,
    ) -> bytes | None:
        """Bytes ``[start, end)`` of the object in one GET (on the first request ``end`` may
        lie beyond it; see :meth:`open_prefix`); with ``suffix`` (a first request) its last
        ``end`` bytes instead; None when ``unless`` (an ETag, on the first request) still
        names it (HTTP 304).

        Raises:
            OfflineError: offline mode is on (no request is sent).
            BadResponseError, RemoteFileChangedError, and what :meth:`_translate` gives.
        """
        self._check_online()
        bucket, key, version = self._fs.split_path(self._path)
        extra: dict[str, Any] = {}
        if version:
            extra["VersionId"] = version
        if not first and self._validator is not None:
            extra["IfMatch"] = self._validator
        if unless is not None:
            extra["IfNoneMatch"] = unless
        try:
            response, data = await self._on_own_loop(
                self._s3_get_object(
                    Bucket=bucket,
                    Key=key,
                    Range=f"bytes=-{end}" if suffix else f"bytes={start}-{end - 1}",
                    **extra,
                )
            )
        except Exception as exc:
            if first and "InvalidRange" in _chain_text(exc):
                self._size = 0  # an empty object has no byte 0
                return b""
            if unless is not None and _not_modified(exc):
                return None
            raise self._translate(exc) from exc
        match = _CONTENT_RANGE.fullmatch(str(response.get("ContentRange", "")))
        if match is None and suffix and not data and response.get("ContentLength") == 0:
            self._size = 0  # an empty object answers a suffix range whole (no ContentRange)
            self._validator = response.get("ETag")
            return b""
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
        if suffix:
            start, expected_end = max(0, total - end), total
        if int(match.group(1)) != start or int(match.group(2)) != expected_end - 1:
            asked = f"the last {end} bytes" if suffix else f"bytes {start}-{end - 1}"
            raise BadResponseError(
                f"{self._url}: asked for {asked}, got ContentRange {response.get('ContentRange')!r}"
            )
        return data

    def receives_in_threads(self) -> bool:
        """True when an S3 object's ranges go through the direct client over plain HTTP
        (see :mod:`.s3_direct`), which receives large bodies in worker threads."""
        return self._direct is not None and self._direct.plain

    async def _prepare_direct(self) -> None:
        """Sign the direct reads' URL once the object is open (no request)."""
        if self._direct is not None and self._validator is not None:
            try:
                await self._direct.prepare()
            except Exception:  # credentials that cannot sign: every read takes the S3 path
                self._direct = None

    async def _presigned(self) -> str:
        """A presigned ``get_object`` URL of the object (at its version id, if named), signed
        on the filesystem's loop with the credentials s3fs resolved: no request."""
        bucket, key, version = self._fs.split_path(self._path)
        params: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if version:
            params["VersionId"] = version

        async def sign() -> str:
            client = await self._fs.set_session()
            url: str = await client.generate_presigned_url(
                "get_object", Params=params, ExpiresIn=SIGNED_SECONDS
            )
            return url

        return await self._on_own_loop(sign())

    async def _s3_get_object(self, **request: Any) -> tuple[dict[str, Any], bytes]:
        response: dict[str, Any] = await self._fs._call_s3("get_object", **request)
        try:
            data: bytes = await response["Body"].read()
        finally:
            response["Body"].close()
        return response, data

    def _translate(self, exc: Exception) -> Exception:
        refused = next((e for e in _chain(exc) if isinstance(e, RedirectError)), None)
        if refused is not None:  # our guard's, under aiohttp's ClientOSError (and fsspec's 404)
            return refused
        if _refused_precondition(exc):
            return RemoteFileChangedError(
                f"{self._url}: the file changed since it was opened (the version opened, "
                f"{self._validator}, no longer matches); open it again to read the new version"
            )
        # The backend's own words may quote the URL or path with its query: redacted too.
        said = redact_text(str(exc), secrets=self._secrets)
        # azure-core's errors carry a status_code, gcsfs's HttpError a code; neither is an
        # OSError.
        status = getattr(exc, "status_code", None) or http_status(exc)
        if isinstance(exc, FileNotFoundError) or status == 404:
            return NotFoundError(f"{self._url}: not found ({said})")
        if isinstance(exc, PermissionError) or status in (401, 403):
            return PermissionDeniedError(
                f"{self._url}: access denied ({said}); check the credentials in storage_options "
                "or the backend's environment variables (AWS_*, GOOGLE_APPLICATION_CREDENTIALS, "
                "AZURE_STORAGE_*)"
            )
        if isinstance(exc, (BadResponseError, RemoteFileChangedError)):
            return exc
        return TransportError(f"{self._url}: {type(exc).__name__}: {said}")


Middleware = Callable[[Any, Any], Awaitable[Any]]
"""An aiohttp client middleware: ``(request, handler) -> response``."""


def _http_guard(named: str, shown: str) -> Middleware:
    """An aiohttp client middleware for the requests of one call of fsspec's HTTP filesystem
    about the file at ``named`` (``shown`` in messages).

    aiohttp follows redirects and calls it once per hop, before the hop is sent: it refuses a
    hop that :func:`.http.answer.follow` refuses (raising :class:`RedirectError`), and drops
    the headers that :func:`.http.policy.carried` does not send to the hop's origin (``Host``
    is the hop's own, set by aiohttp). The hops of one method are one chain: fsspec's ``info``
    sends a HEAD, then a GET from the start when the HEAD told no size.
    """
    chains: dict[str, list[str]] = {}

    async def guard(request: Any, handler: Any) -> Any:
        url = str(request.url)
        chain = chains.setdefault(str(request.method), [])
        if chain:
            step = follow(chain[-1], url, tuple(chain[:-1]), shown)
            if isinstance(step, Failed):
                raise step.error
        chain.append(url)
        fields = [(str(name), str(value)) for name, value in request.headers.items()]
        kept = {name.lower() for name, _ in carried(fields, foreign=origin(url) != origin(named))}
        for name in {name for name, _ in fields if name.lower() not in kept | {"host"}}:
            request.headers.popall(name, None)
        return await handler(request)

    return guard


def _pinned_object(fs: fsspec.AbstractFileSystem, path: str, shown: str) -> PinnedObject | None:
    """The object that reads a GCS object or Azure blob at its version, or None: another
    filesystem, or a path that names a bucket or container (opening it fails as a folder's)."""
    try:
        if is_gcs(fs):
            return GcsObject(fs, path, shown)
        if is_azure(fs):
            return AzureBlob(fs, path, shown)
    except ValueError:
        return None
    return None


@functools.cache
def _shared(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether fsspec keeps ``fs`` in its instance cache, so that others get it too."""
    cache: dict[Any, Any] = getattr(type(fs), "_cache", {})
    return cache.get(getattr(fs, "_fs_token", None)) is fs


def _aiohttp_has_middlewares() -> bool:
    """Whether the aiohttp that fsspec's HTTP filesystem uses takes client middlewares."""
    aiohttp = sys.modules.get("aiohttp")
    session = getattr(aiohttp, "ClientSession", None)
    return session is not None and "middlewares" in inspect.signature(session._request).parameters


def _filesystem(
    url: str, storage_options: Mapping[str, Any] | None
) -> tuple[fsspec.AbstractFileSystem, str]:
    """fsspec's filesystem and path for ``url``, its failures put in the user's terms.

    Raises:
        MissingDependencyError: the protocol's package is not installed (with the pip line).
        LocationError: an unknown protocol, or options the filesystem does not take.
        TransportError: the filesystem could not connect (FTP and SFTP connect right here).
    """
    shown, secrets = redact_url(url), url_secrets(url)
    try:
        fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    except ImportError as exc:
        raise MissingDependencyError(f"{shown}: {_install_hint(exc)}") from exc
    except OSError as exc:
        said = redact_text(str(exc), secrets=secrets)
        raise TransportError(f"{shown}: cannot connect: {said}") from exc
    except Exception as exc:
        if "Protocol not known" in str(exc):
            protocol = url.split("://", 1)[0]
            raise LocationError(
                f"{shown}: unknown protocol {protocol!r}; expected hf://, http(s)://, s3://, "
                "another fsspec protocol, file:// or a local path"
            ) from exc
        said = redact_text(str(exc), secrets=secrets)
        raise LocationError(
            f"{shown}: cannot set up its filesystem: {type(exc).__name__}: {said}"
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


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """An exception and its causes, at most 8 (s3fs re-raises botocore errors as OSError)."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return
        yield seen
        seen = seen.__cause__ or seen.__context__


def _chain_text(exc: BaseException) -> str:
    """The reprs of an exception and its causes."""
    return " ".join(repr(seen) for seen in _chain(exc))


def _not_modified(exc: BaseException) -> bool:
    """Whether a GET made with ``IfNoneMatch`` was answered 304 (botocore raises it)."""
    for seen in _chain(exc):
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            error = response.get("Error") or {}
            meta = response.get("ResponseMetadata") or {}
            code = str(error.get("Code"))
            if code in ("304", "NotModified") or meta.get("HTTPStatusCode") == 304:
                return True
    return False


def _refused_precondition(exc: BaseException) -> bool:
    """Whether a conditional read was refused: S3's ``PreconditionFailed`` (botocore), or an
    HTTP 412 (aiohttp's ``ClientResponseError.status`` under fsspec's HTTP filesystem)."""
    text = _chain_text(exc)
    if "PreconditionFailed" in text or "pre-conditions" in text:
        return True
    return any(getattr(seen, "status", None) == 412 for seen in _chain(exc))


def local_protocol(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether ``fs`` reads this machine only (local files, memory): allowed offline."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local", "memory")
