"""An Azure blob read at the version it was opened at (adlfs's clients, azure-storage-blob's
downloads).

An Azure blob's ETag changes on every write, and a download can be made conditional on it
(``If-Match``): the service answers 412 once the blob is rewritten. adlfs's ``cat_file`` takes
no condition, so the reads go through azure-storage-blob's ``download_blob`` on the blob client
of adlfs's own service client (its account, credentials and endpoint are the user's):

- the first request is a ranged download; its ``Content-Range`` gives the size and its ``ETag``
  the version, taken as opened;
- every later read is a ranged download with ``If-Match`` of that ETag: a rewrite is a 412,
  turned into :class:`~remotetensors.errors.RemoteFileChangedError`, with no metadata request;
- a blob named by a version id (``az://container/key?versionid=V``, on an account with blob
  versioning) is downloaded at that version, which cannot change;
- Azure has no suffix range: reading a blob from its end (a zip's directory) first asks its
  properties (one HEAD) for the size and ETag; an empty blob (no byte range: 416) likewise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import RemoteFileChangedError
from .pinned import Answer, PinnedObject, StoredObject

if TYPE_CHECKING:
    import fsspec

__all__ = ["AzureBlob", "is_azure"]


def is_azure(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether ``fs`` is adlfs's blob filesystem (``az://``, ``abfs://``)."""
    return any(kind.__name__ == "AzureBlobFileSystem" for kind in type(fs).__mro__)


def split_blob(path: str) -> tuple[str, str, str | None]:
    """``(container, key, version id or None)`` of a path on adlfs's filesystem
    (``container/key`` or ``container/key?versionid=V``); read whatever ``version_aware`` says.

    Raises:
        ValueError: the path names a container, not a blob.
    """
    container, _, rest = path.lstrip("/").partition("/")
    key, _, version_id = rest.partition("?versionid=")
    if not container or not key:
        raise ValueError(f"{path}: names a container, not a blob")
    return container, key, version_id or None


class AzureBlob(PinnedObject):
    """One blob on adlfs's filesystem ``fs`` at ``path`` (see :func:`split_blob`), read at the
    ETag first seen.

    Raises (construction):
        ValueError: ``path`` names a container, not a blob.
    """

    def __init__(self, fs: fsspec.AbstractFileSystem, path: str, shown: str) -> None:
        super().__init__(shown)
        self._fs: Any = fs
        self._container, self._key, self._named = split_blob(path)
        self._client: Any = None

    @property
    def stored(self) -> StoredObject:
        client = self._fs.service_client
        endpoint = str(getattr(client, "primary_endpoint", None) or client.url).rstrip("/")
        return StoredObject("az", endpoint, self._container, self._key, self._named)

    def _blob(self) -> Any:
        """The blob's client, made once from adlfs's service client (sharing its pipeline)."""
        if self._client is None:
            self._client = self._fs.service_client.get_blob_client(self._container, self._key)
        return self._client

    async def _download(self, start: int, length: int, **conditions: Any) -> tuple[bytes, Any]:
        """Bytes ``[start, start + length)`` and the download's properties."""
        downloader = await self._blob().download_blob(
            offset=start, length=length, version_id=self._named, max_concurrency=1, **conditions
        )
        data = await downloader.readall()
        return bytes(data), downloader.properties

    async def first(self, length: int, *, suffix: bool = False) -> Answer:
        length = max(length, 1)
        if not suffix:
            try:
                data, properties = await self._download(0, length)
            except Exception as exc:
                if getattr(exc, "status_code", None) != 416:
                    raise
            else:
                total = self.check_range(properties.content_range, 0)
                return self.opened(Answer(data, total, str(properties.etag)))
        # A suffix, or an empty blob (no byte 0): its properties first.
        size, etag = await self.current()
        self.assume(size, etag)
        start = max(0, size - length) if suffix else 0
        end = size if suffix else min(size, length)
        return Answer(await self.read(start, end) if start < end else b"", size, etag)

    async def read(self, start: int, end: int) -> bytes:
        from azure.core import MatchConditions

        assert self.version is not None, "first comes first"
        try:
            data, properties = await self._download(
                start, end - start, etag=self.version, match_condition=MatchConditions.IfNotModified
            )
        except Exception as exc:
            status = getattr(exc, "status_code", None)
            if status == 412:
                raise self._changed("its ETag no longer matches") from exc
            if status == 404:
                raise self._changed("it is gone") from exc
            raise
        total = self.check_range(properties.content_range, start)
        if total != self.size or properties.etag != self.version:
            raise self._changed(f"now size {total}, ETag {properties.etag}")
        return data

    async def current(self) -> tuple[int, str]:
        properties = await self._blob().get_blob_properties(version_id=self._named)
        return int(properties.size), str(properties.etag)

    def _changed(self, seen: str) -> RemoteFileChangedError:
        return RemoteFileChangedError(
            f"{self.shown}: the blob changed since it was opened (size {self.size}, "
            f"ETag {self.version}; {seen}); open it again to read the new version"
        )
