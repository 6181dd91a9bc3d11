"""A Google Cloud Storage object read at the generation it was opened at (gcsfs underneath).

GCS names every version of an object by its *generation*, and a media download can ask for one
(``generation=G``): once an object is rewritten, its old generation answers 404 (on a bucket
without object versioning; with versioning, the old bytes, still of one version). So:

- the first request is a ranged media GET of the latest generation (or of the one the location
  names, ``gs://bucket/key#G`` or ``?generation=G``); its ``Content-Range`` gives the size and
  its ``X-Goog-Generation`` the generation, taken as opened;
- every later read is a ranged media GET at that generation: a rewrite is a 404, turned into
  :class:`~remotetensors.errors.RemoteFileChangedError`, and no metadata request is ever made
  to check the version (gcsfs's ``info`` costs 1 to 3 requests, folder listings included);
- an empty object, which has no byte range to ask for (416), costs one metadata request for its
  generation.

gcsfs is driven through its own request method (``_call``), so its credentials, endpoint
(``endpoint_url=``, ``STORAGE_EMULATOR_HOST``), retries and session are the user's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import BadResponseError, RemoteFileChangedError
from .pinned import Answer, PinnedObject, StoredObject

if TYPE_CHECKING:
    import fsspec

__all__ = ["GcsObject", "http_status", "is_gcs"]


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of gcsfs's ``HttpError`` (its ``code``), else None. Other errors are not
    asked for a ``code``: aiohttp's warn on that name."""
    if type(exc).__name__ != "HttpError":
        return None
    code = getattr(exc, "code", None)
    return code if isinstance(code, int) else None


def is_gcs(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether ``fs`` is gcsfs's filesystem (or its subclass for zonal and hierarchical
    buckets, which gcsfs 2026 hands out unless ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``)."""
    return any(kind.__name__ == "GCSFileSystem" for kind in type(fs).__mro__)


class GcsObject(PinnedObject):
    """One GCS object on gcsfs's filesystem ``fs`` at ``path`` (``bucket/key``, with
    ``#generation`` or ``?generation=`` to name one), read at the generation first seen.

    Raises (construction):
        ValueError: ``path`` names a bucket, not an object.
    """

    def __init__(self, fs: fsspec.AbstractFileSystem, path: str, shown: str) -> None:
        super().__init__(shown)
        self._fs: Any = fs
        # gcsfs reads a generation off a path only when version_aware: read it here either way.
        bucket, key, generation = type(fs)._split_path(path, version_aware=True)
        if not key:
            raise ValueError(f"{shown}: names a bucket, not an object")
        self._bucket, self._key = str(bucket), str(key)
        self._named: str | None = str(generation) if generation else None

    @property
    def stored(self) -> StoredObject:
        endpoint = str(getattr(self._fs, "_location", None) or "gs")
        return StoredObject("gs", endpoint, self._bucket, self._key, self._named)

    async def _get(self, ranged: str, generation: str | None) -> tuple[Any, bytes]:
        """A media GET of ``Range: ranged`` at ``generation`` (None: the latest)."""
        url = self._fs.url(f"{self._bucket}/{self._key}", generation=generation)
        headers, data = await self._fs._call("GET", url, headers={"Range": ranged})
        return headers, bytes(data)

    async def first(self, length: int, *, suffix: bool = False) -> Answer:
        length = max(length, 1)
        ranged = f"bytes=-{length}" if suffix else f"bytes=0-{length - 1}"
        try:
            headers, data = await self._get(ranged, self._named)
        except Exception as exc:
            if http_status(exc) != 416:
                raise
            # No byte 0: an empty object. Its generation from its metadata.
            size, latest = await self.current()
            return self.opened(Answer(b"", size, latest))
        if headers.get("Content-Range") is None and len(data) <= length:
            total = len(data)  # the whole object, shorter than the range asked for
        else:
            total = self.check_range(headers.get("Content-Range"), None if suffix else 0)
        generation: str | None = headers.get("X-Goog-Generation") or self._named
        if not generation:
            raise BadResponseError(f"{self.shown}: a media download came back without a generation")
        return self.opened(Answer(data, total, str(generation)))

    async def read(self, start: int, end: int) -> bytes:
        assert self.version is not None, "first comes first"
        try:
            headers, data = await self._get(f"bytes={start}-{end - 1}", self.version)
        except FileNotFoundError as exc:
            raise self._changed("its generation is gone") from exc
        total = self.check_range(headers.get("Content-Range"), start)
        generation = headers.get("X-Goog-Generation")  # a str, or None
        if total != self.size or (generation and generation != self.version):
            raise self._changed(f"now size {total}, generation {generation}")
        return data

    async def current(self) -> tuple[int, str]:
        meta = await self._fs._call(
            "GET", "b/{}/o/{}", self._bucket, self._key, json_out=True, generation=self._named
        )
        return int(meta["size"]), str(meta["generation"])

    def _changed(self, seen: str) -> RemoteFileChangedError:
        return RemoteFileChangedError(
            f"{self.shown}: the object changed since it was opened (size {self.size}, "
            f"generation {self.version}; {seen}); open it again to read the new version"
        )
