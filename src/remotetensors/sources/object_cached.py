"""A GCS object or Azure blob with the persistent cache in front of it (see :mod:`.cache.source`).

Kept as an S3 object is (``s3_cached.py``), under ``(service, endpoint, bucket or container, key,
version, size)`` (:func:`.cache.keys.object_version`), the version being the generation (GCS) or
ETag (Azure) the object was opened at, or the version the location names:

- an object named by its version (``gs://bucket/key#<generation>``,
  ``az://container/key?versionid=<id>``) cannot change: its kept version is served without a
  request;
- otherwise the kept latest version is revalidated by one metadata request (GCS: the object's
  JSON resource; Azure: its properties, a HEAD), which moves no byte of the object: when it still
  shows the kept version and size, the kept bytes are served and later reads ask for that
  version (a media GET at its generation, a download with ``If-Match``); else the object is
  opened anew (one more request) and its new version kept in turn. Neither emulator honours a
  conditional media GET that would do both in one request (fake-gcs-server ignores
  ``ifGenerationNotMatch``), so the check is kept apart from the read;
- offline, the object's latest kept version is served.
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

__all__ = ["ObjectCachedSource"]


class ObjectCachedSource(CachedSource):
    """``inner``, a GCS object or Azure blob (:meth:`FsspecSource.stored_object` is not None),
    with ``store`` in front of it (see the module)."""

    def __init__(self, inner: FsspecSource, traffic: Traffic | None, store: CacheStore) -> None:
        super().__init__(inner, traffic, store)
        self._object_source = inner
        stored = inner.stored_object()
        assert stored is not None, "a GCS object or Azure blob"
        self._stored = stored
        self._pointed = False  # the object's latest version points to this one

    def _version_key(self, version: str, size: int) -> str:
        o = self._stored
        return keys.object_version(o.service, o.endpoint, o.container, o.key, version, size)

    def _latest_key(self) -> str:
        o = self._stored
        return keys.object_latest(o.service, o.endpoint, o.container, o.key, o.named)

    def _latest(self) -> Found | None:
        entry = self.store.get(self._latest_key())
        size, etag = (entry.meta.get(k) for k in ("size", "etag")) if entry else (None, None)
        if not isinstance(size, int) or not isinstance(etag, str):
            return None
        found = self._version_key(self._stored.named or etag, size)
        version = self.store.get(found)
        kept = Kept.of(version) if version is not None else None
        if kept is None or (kept.size, kept.etag) != (size, etag):
            return None
        return kept, (found,)

    async def _lookup(self) -> Found | Absent | None:
        # A named version cannot change; otherwise the service confirms it (_revalidate).
        return self._latest() if offline() or self._stored.named is not None else None

    async def _revalidate(self, length: int) -> Found | Absent | Prefix | None:
        found = self._latest()
        if found is None:
            return None
        kept = found[0]
        self.traffic._begin()  # one metadata request, counted as any other
        try:
            now = await self._object_source.current_version()
        finally:
            self.traffic._end(0)
        return found if now == (kept.size, kept.etag) else None

    def _opened(self, prefix: Prefix) -> tuple[tuple[str, ...], Kept]:
        kept = Kept(prefix.size, prefix.validator)
        named = self._stored.named or prefix.validator
        if named is None:
            return (), kept  # nothing names this version
        return (self._version_key(named, prefix.size),), kept

    def _adopt(self, kept: Kept) -> None:
        self._object_source.assume_version(kept.size, kept.etag)

    def _persist(self, kept: Kept) -> None:
        super()._persist(kept)
        if self._pointed:
            return
        meta = {"kind": "latest", "shown": self.location, "size": kept.size, "etag": kept.etag}
        self._pointed = self.store.put(self._latest_key(), meta)
