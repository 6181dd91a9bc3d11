"""A source with the persistent cache in front of it, and the one function readers call for the
bytes that describe a file (:func:`read_metadata`).

A :class:`CachedSource` is a :class:`~..base.CountingSource` (it counts what crosses the network,
and only that: an answer from the cache is no request). Opening it asks the cache first for the
version that will be read: when the backend can name that version without a request (a hub file
at a known commit) or confirm it with one request (an HTTP file revalidated, see
``http/cached.py``), the kept bytes are served and the source underneath takes that version as
opened, so later data reads are tied to it as if it had been opened over the network. Otherwise
it opens over the network as before.

What is kept of a file is what its reader declares as metadata through :func:`read_metadata`
(a safetensors file's 8-byte length and header, a GGUF header, a whole index or config, a zip's
central directory), never tensor data: the window that opened the file is not kept as such.
A kept file therefore opens with exactly its kept leading bytes (:meth:`CachedSource.open_prefix`
may return more or fewer than asked; the readers here take any prefix), and the reader finds
every byte it declared last time without a request.

Which keys name a version, and how a version is confirmed, is each backend's business: see
``hub/cached.py`` and ``http/cached.py``. No parsing here: the bytes are opaque.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import NotFoundError
from ..base import CountingSource, Prefix, Suffix
from .offline import offline, offline_error

if TYPE_CHECKING:
    from ..base import ByteSource, Traffic
    from .store import CacheStore, Entry

__all__ = ["ABSENT", "Absent", "CachedSource", "Kept", "read_metadata"]


@dataclass(frozen=True, slots=True)
class Kept:
    """What the cache holds of one version of a file.

    Attributes:
        size: the file's size in bytes.
        etag: the ETag it was opened with (None when the version needs none: a hub file at a
            commit, whose URL cannot change).
        last_modified: its ``Last-Modified``, likewise.
        spans: ``(start, bytes)`` of each kept span, in order, none touching another.
    """

    size: int
    etag: str | None = None
    last_modified: str | None = None
    spans: tuple[tuple[int, bytes], ...] = ()

    @property
    def validator(self) -> str | None:
        """The ETag, else ``Last-Modified`` (as :class:`~..base.Prefix` names it)."""
        return self.etag if self.etag is not None else self.last_modified

    def head(self) -> bytes:
        """The kept bytes from the file's start (``b""`` when none start at 0)."""
        if self.spans and self.spans[0][0] == 0:
            return self.spans[0][1]
        return b""

    def tail(self) -> bytes:
        """The kept bytes that end at the file's end (``b""`` when no span does)."""
        if self.spans and self.spans[-1][0] + len(self.spans[-1][1]) == self.size:
            return self.spans[-1][1]
        return b""

    def covers(self, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` when one kept span holds them all, else None."""
        if start >= end:
            return b""
        at = bisect.bisect_right([s for s, _ in self.spans], start) - 1
        if at < 0:
            return None
        first, data = self.spans[at]
        if end > first + len(data):
            return None
        return data[start - first : end - first]

    def with_span(self, start: int, data: bytes) -> Kept:
        """This, with bytes ``[start, start + len(data))`` kept too (joined to the spans they
        touch or overlap)."""
        spans = sorted([*self.spans, (start, data)])
        joined: list[tuple[int, bytes]] = []
        for first, piece in spans:
            if joined and first <= joined[-1][0] + len(joined[-1][1]):
                prev_first, prev = joined[-1]
                tail = piece[prev_first + len(prev) - first :]
                joined[-1] = (prev_first, prev + tail)
            else:
                joined.append((first, piece))
        return Kept(self.size, self.etag, self.last_modified, tuple(joined))

    def entry(self, shown: str) -> tuple[dict[str, Any], bytes]:
        """The store's meta and payload for this (kind ``"file"``; ``shown`` names it)."""
        meta = {
            "kind": "file",
            "shown": shown,
            "size": self.size,
            "etag": self.etag,
            "last_modified": self.last_modified,
            "spans": [[first, len(data)] for first, data in self.spans],
        }
        return meta, b"".join(data for _, data in self.spans)

    @classmethod
    def of(cls, entry: Entry) -> Kept | None:
        """The kept file in a store entry, or None when the entry is not a file's or does not
        add up (spans out of order, past the file's end, or not what the payload holds)."""
        meta = entry.meta
        try:
            size = int(meta["size"])
            etag, modified = meta.get("etag"), meta.get("last_modified")
            spans: list[tuple[int, bytes]] = []
            at = 0
            end_of_last = -1
            for first, length in meta["spans"]:
                first, length = int(first), int(length)
                if first <= end_of_last or length <= 0 or first + length > size:
                    return None
                spans.append((first, entry.payload[at : at + length]))
                at += length
                end_of_last = first + length
        except (KeyError, TypeError, ValueError):
            return None
        if meta.get("kind") != "file" or at != len(entry.payload):
            return None
        if not isinstance(etag, str | None) or not isinstance(modified, str | None):
            return None
        return cls(size, etag, modified, tuple(spans))


class Absent:
    """The cache knows that the file does not exist at the version asked for (a hub path at a
    commit, which cannot appear later)."""


ABSENT = Absent()

Found = tuple[Kept, tuple[str, ...]]
"""A kept version, and the keys it is kept under."""


class CachedSource(CountingSource):
    """``inner`` with the persistent cache ``store`` in front of it (see the module).

    Subclasses say how versions are named: :meth:`_lookup` (the version to be read, known
    without a request), :meth:`_revalidate` (a kept version confirmed by one cheap request),
    :meth:`_opened` (the keys of a version just opened), :meth:`_adopt` (the source underneath
    takes a kept version as opened), :meth:`_remember_absent` and :meth:`_absent_error`.

    Attributes:
        from_cache: whether the file was opened from the cache (no request).
    """

    def __init__(self, inner: ByteSource, traffic: Traffic | None, store: CacheStore) -> None:
        super().__init__(inner, traffic)
        self.store = store
        self.from_cache = False
        self._kept: Kept | None = None  # the version opened, with what is kept of it so far
        self._keys: tuple[str, ...] = ()  # where it is kept (none: it is not kept)

    async def open_prefix(self, length: int) -> Prefix:
        """The kept leading bytes of the version the cache names (no request), or the window
        of ``length`` bytes over the network (see the module).

        Raises:
            OfflineError: offline, and the cache does not hold the file.
            NotFoundError: the cache knows the file does not exist at the version asked for,
                or the network says so; and whatever the source raises.
        """
        found = await self._version(length)
        if isinstance(found, Prefix):  # the revalidation found a new version: it is open
            return found
        if found is not None:
            return Prefix(found.head(), found.size, found.validator)
        try:
            prefix = await super().open_prefix(length)
        except NotFoundError as exc:
            self._remember_absent(exc)
            raise
        self._keys, self._kept = self._opened(prefix)
        return prefix

    async def open_suffix(self, length: int) -> Suffix:
        """As :meth:`open_prefix`, from the file's end: the kept bytes that end at the file's
        end (no request; the reader asks :func:`read_metadata` for any others it needs), or
        the last ``length`` bytes over the network. A version found changed by the
        revalidation (which asks for a prefix) costs one more request, for its end.

        Raises:
            as :meth:`open_prefix`.
        """
        found = await self._version(length)
        if isinstance(found, Prefix):  # a new version, opened from its start
            tail = await super().read(max(0, found.size - length), found.size)
            return Suffix(tail, found.size, found.validator)
        if found is not None:
            return Suffix(found.tail(), found.size, found.validator)
        try:
            suffix = await super().open_suffix(length)
        except NotFoundError as exc:
            self._remember_absent(exc)
            raise
        self._keys, self._kept = self._opened(Prefix(b"", suffix.size, suffix.validator))
        return suffix

    async def _version(self, length: int) -> Prefix | Kept | None:
        """The version an opening reads, as the cache knows it, taken as opened: a kept one
        (adopted: no request), or a new one that the revalidation (a request for ``length``
        leading bytes) opened; None: open over the network.

        Raises:
            NotFoundError: the cache knows the file does not exist at the version asked for.
            OfflineError: offline, and the cache does not hold the file.
        """
        found: Found | Absent | Prefix | None = await self._lookup()
        if found is None and not offline():
            found = await self._revalidate(length)
        if isinstance(found, Prefix):
            self._keys, self._kept = self._opened(found)
            return found
        if isinstance(found, Absent):
            raise self._absent_error()
        if found is not None:
            kept, self._keys = found
            self._adopt(kept)
            self._kept = kept
            self.from_cache = True
            return kept
        if offline():
            raise offline_error(self.location)
        return None

    async def read_into(self, start: int, buffer: memoryview) -> None:
        kept = self._kept.covers(start, start + len(buffer)) if self._kept is not None else None
        if kept is not None:
            buffer[:] = kept
            return
        await super().read_into(start, buffer)

    async def read_metadata(self, start: int, end: int, *, held: bytes = b"") -> bytes:
        """See :func:`read_metadata`."""
        if self._kept is not None:
            kept = self._kept.covers(start, end)
            if kept is not None:
                return kept
        data = await _gather(self, start, end, held)
        if self._kept is not None and self._keys:
            self._kept = self._kept.with_span(start, data)
            self._persist(self._kept)
        return data

    # --- what a backend says ---------------------------------------------------------------

    async def _lookup(self) -> Found | Absent | None:
        """The version that will be read, as the cache holds it, found without a request; or
        that it does not exist; or None (ask the network). Offline, whatever the cache holds
        of the file is served."""
        return None

    async def _revalidate(self, length: int) -> Found | Absent | Prefix | None:
        """A kept version that one cheap request confirmed, or the prefix of the new version
        that request opened instead (it is counted either way); None: open as usual."""
        return None

    def _opened(self, prefix: Prefix) -> tuple[tuple[str, ...], Kept]:
        """The keys of the version just opened (none: not kept), and its empty kept record."""
        return (), Kept(prefix.size)

    def _adopt(self, kept: Kept) -> None:
        """Make the source underneath take ``kept``'s version as opened (its size and
        validators), so that its data reads are tied to it."""

    def _remember_absent(self, error: NotFoundError) -> None:
        """The network said the file does not exist; keep that if it cannot change."""

    def _absent_error(self) -> NotFoundError:
        """The error for a file the cache knows does not exist."""
        return NotFoundError(f"{self.location}: not found (known from the cache)")

    def _persist(self, kept: Kept) -> None:
        """Write ``kept`` under every key of the version."""
        meta, payload = kept.entry(self.location)
        for key in self._keys:
            self.store.put(key, meta, payload)


async def _gather(source: ByteSource, start: int, end: int, held: bytes) -> bytes:
    """Bytes ``[start, end)``: ``held`` (the first of them, already at hand) and the rest read."""
    held = held[: end - start]
    missing = start + len(held)
    return held + (await source.read(missing, end) if missing < end else b"")


async def read_metadata(source: ByteSource, start: int, end: int, *, held: bytes = b"") -> bytes:
    """Bytes ``[start, end)`` of the file at the version ``source`` opened, that describe it: a
    header, an index, a small file whole, a zip's central directory, a pickle.

    The one function a reader calls for such bytes, whatever the format: on a source with the
    persistent cache (:class:`CachedSource`), they come from the cache when it holds them (no
    request), and otherwise they are read and kept there, under the file's version, so that the
    next opening of that version, in this process or a later one, finds them without a request
    (offline too). On any other source they are read. Call it after ``source.open_prefix``
    (which the cache serves too); for the last ``n`` bytes of a file, ask for
    ``[prefix.size - n, prefix.size)``.

    Args:
        held: the first bytes of the span, already at hand (the opening window's share of
            it): only the rest is read.

    Raises:
        whatever the source raises (:class:`~remotetensors.errors.OfflineError` offline when
        the bytes are not kept).
    """
    if isinstance(source, CachedSource):
        return await source.read_metadata(start, end, held=held)
    return await _gather(source, start, end, held)
