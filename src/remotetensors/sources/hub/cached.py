"""A hub file with the persistent cache in front of it (see :mod:`..cache.source`).

A file at a commit cannot change, so once the visit's commit is fixed (:meth:`.repo.HubRepo.settle`)
its kept bytes are served without a request. They are kept by content (the LFS sha256 or git
blob id the hub gives, :func:`.listing.content_id_of_answer`) and found from the commit through
a small pointer, ``(commit, path) -> content``; a path that the hub said does not exist at a
commit is kept as such. On a later commit whose pointers the cache lacks (the repo was pushed
to), the commit's listing (one request, kept too) gives each path's content id: every file that
did not change is found under its id, and only the changed ones are read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import NotFoundError, RemoteTensorsError
from ..cache import keys
from ..cache.source import ABSENT, Absent, CachedSource, Found, Kept
from .listing import content_id_of_answer

if TYPE_CHECKING:
    from ..base import Prefix, Traffic
    from ..cache.store import CacheStore
    from .repo import HubSource

__all__ = ["HubCachedSource"]


class HubCachedSource(CachedSource):
    """``inner``, a hub file, with ``store`` in front of it (see the module)."""

    def __init__(self, inner: HubSource, traffic: Traffic | None, store: CacheStore) -> None:
        super().__init__(inner, traffic, store)
        self._hub = inner
        self._content: str | None = None  # the content id the bytes are kept under
        self._pointed = False  # the (commit, path) pointer to it is written

    def _at(self) -> str:
        """The key of this path at the pinned commit."""
        repo = self._hub.repo
        return repo.key(keys.hub_file, repo.revision, self._hub.path)

    def _blob(self, content: str, size: int) -> tuple[str, Kept] | None:
        key = keys.hub_blob(self._hub.repo.endpoint, content, size)
        entry = self.store.get(key)
        kept = Kept.of(entry) if entry is not None else None
        return None if kept is None or kept.size != size else (key, kept)

    async def _lookup(self) -> Found | Absent | None:
        repo = self._hub.repo
        await repo.settle()
        if not repo.pinned:
            return None  # a first visit: the commit is not known before the first answer
        self._hub.follow_pin()  # a file not kept is read at the visit's commit, not the branch
        at = self._at()
        entry = self.store.get(at)
        meta = entry.meta if entry is not None else {}
        if meta.get("kind") == "absent":
            return ABSENT
        if meta.get("kind") == "file" and entry is not None and (kept := Kept.of(entry)):
            return kept, (at,)
        content, size = meta.get("content"), meta.get("size")
        if isinstance(content, str) and isinstance(size, int):
            blob = self._blob(content, size)
            if blob is not None:
                self._content, self._pointed = content, True
                return blob[1], (blob[0], at)
        if not repo.warm:
            return None
        try:  # pushed to since the last visit: the commit's listing names each file's content
            listed = await repo.listed_file(self._hub.path)
        except RemoteTensorsError:
            return None  # read the file itself (offline: the error names it)
        if listed is None:
            self.store.put(at, {"kind": "absent", "shown": self.location})
            return ABSENT
        content = listed.content_id
        if content is None or listed.size is None:
            return None
        blob = self._blob(content, listed.size)
        if blob is None:
            return None
        self._content = content
        self._point(at, listed.size)
        return blob[1], (blob[0], at)

    def _opened(self, prefix: Prefix) -> tuple[tuple[str, ...], Kept]:
        repo = self._hub.repo
        self._content = content_id_of_answer(self._hub.first_responses)
        found: list[str] = []
        if self._content is not None:
            found.append(keys.hub_blob(repo.endpoint, self._content, prefix.size))
        if repo.pinned:
            found.append(self._at())
        # No validators: the bytes at a commit cannot change, and a CDN's ETag is its own.
        return tuple(found), Kept(prefix.size)

    def _adopt(self, kept: Kept) -> None:
        self._hub.assume_version(kept.size, None, None)

    def _persist(self, kept: Kept) -> None:
        meta, payload = kept.entry(self.location)
        if self._content is None:  # no content id came: kept under the commit's path alone
            for key in self._keys:
                self.store.put(key, meta, payload)
            return
        self.store.put(self._keys[0], meta, payload)
        if len(self._keys) > 1 and not self._pointed:
            self._point(self._keys[1], kept.size)

    def _point(self, at: str, size: int) -> None:
        """Write the ``(commit, path) -> content`` pointer."""
        meta = {"kind": "alias", "shown": self.location, "content": self._content, "size": size}
        self._pointed = self.store.put(at, meta)

    def _remember_absent(self, error: NotFoundError) -> None:
        repo = self._hub.repo
        answers = self._hub.first_responses
        said = answers[-1].get("X-Repo-Commit") if answers else None
        # "No such file" is a fact about a commit when it names the pinned one, or when it was
        # asked at that commit (a visit that knew its commit asks there).
        at_commit = said == repo.revision or self._hub.given_url == repo.url(self._hub.path)
        if error.code == "EntryNotFound" and repo.pinned and at_commit:
            self.store.put(self._at(), {"kind": "absent", "shown": self.location})

    def _absent_error(self) -> NotFoundError:
        repo = self._hub.repo
        error = NotFoundError(
            f"{self.location}: repo {repo.repo.repo_id} has no file {self._hub.path!r} at commit "
            f"{repo.revision} (HTTP 404 EntryNotFound, as kept in the cache)"
        )
        error.code = "EntryNotFound"
        return error
