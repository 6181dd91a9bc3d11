"""An S3 object with the persistent cache in front of it (see :mod:`.cache.source`).

As an HTTP file (``http/cached.py``), a kept version is used once S3 confirms it: the object's
first GET carries ``IfNoneMatch`` with the kept ETag, and a 304 serves the kept bytes (one
request, no body), while any other answer is the new version, kept in turn. An object named by
its VersionId (``s3://bucket/key?versionId=...``) cannot change: its kept version is served
without a request. Versions are kept under ``(endpoint, bucket, key, VersionId or ETag, size)``
(:func:`.cache.keys.s3_version`). Offline, the object's latest kept version is served.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .cache import keys
from .cache.offline import offline
from .cache.source import Absent, CachedSource, Found, Kept

if TYPE_CHECKING:
    from .base import Prefix, Traffic
    from .cache.store import CacheStore
    from .fsspec import FsspecSource

__all__ = ["S3CachedSource"]


class S3CachedSource(CachedSource):
    """``inner``, an S3 object (:meth:`FsspecSource.s3_object` is not None), with ``store``
    in front of it (see the module)."""

    def __init__(self, inner: FsspecSource, traffic: Traffic | None, store: CacheStore) -> None:
        super().__init__(inner, traffic, store)
        self._s3 = inner
        named = inner.s3_object()
        assert named is not None, "an S3 object"
        self._object = named
        self._pointed = False  # the object's latest version points to this one

    def _latest(self) -> Found | None:
        endpoint, bucket, key, version_id = self._object
        entry = self.store.get(keys.s3_latest(endpoint, bucket, key, version_id))
        size, etag = (entry.meta.get(k) for k in ("size", "etag")) if entry else (None, None)
        if not isinstance(size, int) or not isinstance(etag, str):
            return None
        found = keys.s3_version(endpoint, bucket, key, version_id or etag, size)
        version = self.store.get(found)
        kept = Kept.of(version) if version is not None else None
        if kept is None or (kept.size, kept.etag) != (size, etag):
            return None
        return kept, (found,)

    async def _lookup(self) -> Found | Absent | None:
        # A VersionId names bytes that cannot change; otherwise S3 confirms (_revalidate).
        return self._latest() if offline() or self._object[3] is not None else None

    async def _revalidate(self, length: int) -> Found | Absent | Prefix | None:
        found = self._latest()
        if found is None or found[0].etag is None:
            return None
        kept = found[0]
        assert kept.etag is not None
        self.traffic._begin()  # one request, counted as any other
        received = 0
        try:
            prefix = await self._s3.open_prefix_unless(length, size=kept.size, etag=kept.etag)
            received = 0 if prefix is None else len(prefix.data)
        finally:
            self.traffic._end(received)
        return found if prefix is None else prefix

    def _opened(self, prefix: Prefix) -> tuple[tuple[str, ...], Kept]:
        endpoint, bucket, key, version_id = self._object
        kept = Kept(prefix.size, prefix.validator)
        if prefix.validator is None and version_id is None:
            return (), kept  # nothing names this version
        named = version_id or prefix.validator
        assert named is not None
        return (keys.s3_version(endpoint, bucket, key, named, prefix.size),), kept

    def _adopt(self, kept: Kept) -> None:
        self._s3.assume_version(kept.size, kept.etag)

    def _persist(self, kept: Kept) -> None:
        super()._persist(kept)
        if self._pointed:
            return
        endpoint, bucket, key, version_id = self._object
        meta = {"kind": "latest", "shown": self.location, "size": kept.size, "etag": kept.etag}
        self._pointed = self.store.put(keys.s3_latest(endpoint, bucket, key, version_id), meta)
