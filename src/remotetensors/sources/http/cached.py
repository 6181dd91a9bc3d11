"""A file on an HTTP server with the persistent cache in front of it (see :mod:`..cache.source`).

A URL's bytes can change at any time, so a kept version is used only once the server confirms
it, by the file's first request. With a strong ETag that request is conditional
(``If-None-Match``): a 304 serves the kept bytes (one request, no body). A version known by its
``Last-Modified`` alone is asked for plainly (not ``If-Modified-Since``, which a server answers
304 for an older file too: a rollback would serve the newer version's header), and the kept
bytes are served only when the answer shows exactly the kept date and size. Any other answer
is the file's new version, opened by that same request, and kept in turn. A version is kept
under ``(URL, validator, size)`` (:func:`..cache.keys.http_version`), and the URL's latest
version is remembered to revalidate with (:func:`..cache.keys.http_latest`). A file whose only
validator is a weak ETag is not kept: a weak ETag does not promise the same bytes. Offline, the
URL's latest kept version is served.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..cache import keys
from ..cache.offline import offline
from ..cache.source import Absent, CachedSource, Found, Kept

if TYPE_CHECKING:
    from ..base import Prefix, Traffic
    from ..cache.store import CacheStore
    from .source import HttpSource

__all__ = ["HttpCachedSource"]


class HttpCachedSource(CachedSource):
    """``inner``, a file on an HTTP server, with ``store`` in front of it (see the module)."""

    def __init__(self, inner: HttpSource, traffic: Traffic | None, store: CacheStore) -> None:
        super().__init__(inner, traffic, store)
        self._http = inner
        self._pointed = False  # the URL's latest version points to this one

    def _latest(self) -> Found | None:
        """The URL's latest kept version, if its entry is whole."""
        url = self._http.given_url
        entry = self.store.get(keys.http_latest(url))
        if entry is None:
            return None
        size, etag, modified = (entry.meta.get(k) for k in ("size", "etag", "last_modified"))
        if not isinstance(size, int) or not isinstance(etag, str | None):
            return None
        if not isinstance(modified, str | None):
            return None
        validator = keys.strong_validator(etag, modified)
        if validator is None:
            return None
        key = keys.http_version(url, validator, size)
        version = self.store.get(key)
        kept = Kept.of(version) if version is not None else None
        if kept is None or (kept.size, kept.etag, kept.last_modified) != (size, etag, modified):
            return None
        return kept, (key,)

    async def _lookup(self) -> Found | Absent | None:
        # Online, a kept version is used only once the server confirms it (_revalidate).
        return self._latest() if offline() else None

    async def _revalidate(self, length: int) -> Found | Absent | Prefix | None:
        found = self._latest()
        if found is None:
            return None
        kept, _ = found
        self.traffic._begin()  # one request, counted as any other
        received = 0
        try:
            prefix = await self._http.open_prefix_unless(
                length, size=kept.size, etag=kept.etag, last_modified=kept.last_modified
            )
            received = 0 if prefix is None else len(prefix.data)
        finally:
            self.traffic._end(received)
        return found if prefix is None else prefix

    def _opened(self, prefix: Prefix) -> tuple[tuple[str, ...], Kept]:
        etag, modified = self._http.version_validators()
        kept = Kept(prefix.size, etag, modified)
        validator = keys.strong_validator(etag, modified)
        if validator is None:
            return (), kept  # a weak ETag alone: nothing names this version
        return (keys.http_version(self._http.given_url, validator, prefix.size),), kept

    def _adopt(self, kept: Kept) -> None:
        self._http.assume_version(kept.size, kept.etag, kept.last_modified)

    def _persist(self, kept: Kept) -> None:
        super()._persist(kept)
        if self._pointed:
            return
        meta = {
            "kind": "latest",
            "shown": self.location,
            "size": kept.size,
            "etag": kept.etag,
            "last_modified": kept.last_modified,
        }
        self._pointed = self.store.put(keys.http_latest(self._http.given_url), meta)
