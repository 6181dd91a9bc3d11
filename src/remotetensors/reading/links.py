"""What each link taught the stream controller, kept per origin: across the files of a model,
the models of a process and, through the cache folder, the processes of a machine.

A fresh :class:`~.streams.StreamController` climbs from 8 streams of 8 MiB and needs a few
windows of a read to find the link's setting: on a link that caps each connection at 100 MB/s,
a 512 MiB tensor's first window alone (128 MiB at 8 streams, when parts started at 16 MiB) took
0.18 of its 0.45 s, and a file read after it climbed again from the start. So the setting a
controller keeps (once a window measured it) is remembered for the origin it read from
(scheme, host and port; a bucket for object stores; the hub's CDN as one), and the next
controller of that origin starts there. It still climbs from there (links change): a
remembered setting is a start, never a pin.

Persisted as an entry per origin of the persistent cache (:mod:`..sources.cache.store`, in
``REMOTETENSORS_CACHE``: written atomically, checked when read, evicted and cleared with the
rest), written when the setting changes; every entry carries when it was last confirmed, and
one older than :data:`FORGET_AFTER_SECONDS` is forgotten (the machine may have moved networks
since). A folder that cannot be read or written is no error: the memory is then this
process's only.
``ReadOptions(cache=False)`` reads and writes none of it, and a read that pins a knob
(``max_concurrency``, ``part_size_bytes``) neither uses nor teaches it: what it measured is
the pin's, not the link's (see :func:`memory_for`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..sources.cache import keys
from .streams import Setting

if TYPE_CHECKING:
    from ..options import ReadOptions
    from ..sources.cache.store import CacheStore

__all__ = ["FORGET_AFTER_SECONDS", "LinkMemory", "memory_for", "origin_of"]

FORGET_AFTER_SECONDS = 24 * 3600.0
"""A setting not confirmed for this long (seconds) is forgotten."""

CONFIRM_AFTER_SECONDS = 600.0
"""An unchanged setting is written again (its age reset) at most this often (seconds)."""


@dataclass(frozen=True, slots=True)
class Learnt:
    """A setting and when it was last confirmed (seconds since the epoch)."""

    setting: Setting
    at: float


def origin_of(location: str) -> str | None:
    """The origin a location's bytes come from, as the memory keys it: ``scheme://host:port``
    for URLs (the scheme's default port spelt out), the bucket or container for object
    stores (``s3://bucket``), ``hf://`` for every hub file (one CDN serves them); None for
    local files (no link to learn: the disk is read in the caller's thread, see
    :mod:`.fetch`)."""
    parts = urlsplit(location)
    scheme = parts.scheme.lower()
    if "://" not in location or scheme == "file":
        return None
    if scheme in ("hf", "hf-hub"):
        return "hf://"
    if scheme in ("http", "https"):
        port = parts.port or (443 if scheme == "https" else 80)
        return f"{scheme}://{(parts.hostname or '').lower()}:{port}"
    return f"{scheme}://{parts.netloc}"


class LinkMemory:
    """Settings per origin (see the module): read from ``store`` once per origin, then kept
    in this process.

    Args:
        store: the persistent cache the settings are kept in, or None for this process only.
        clock: seconds since the epoch (entries' ages).
    """

    def __init__(self, store: CacheStore | None, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        self._known: dict[str, Learnt | None] = {}

    def recall(self, origin: str) -> Setting | None:
        """The setting last learnt for ``origin``, or None (never, or forgotten)."""
        learnt = self._learnt(origin)
        if learnt is None or self._clock() - learnt.at > FORGET_AFTER_SECONDS:
            return None
        return learnt.setting

    def remember(self, origin: str, setting: Setting) -> None:
        """``setting`` is what ``origin``'s link gave best now: kept here, and in the store
        when it changed (or its entry is due a confirmation)."""
        now = self._clock()
        before = self._learnt(origin)
        if (
            before is not None
            and before.setting == setting
            and now - before.at < CONFIRM_AFTER_SECONDS
        ):
            return
        with self._lock:
            self._known[origin] = Learnt(setting, now)
        if self._store is not None:
            meta = {
                "kind": "link",
                "shown": origin,
                "streams": setting.streams,
                "part_size_bytes": setting.part_size_bytes,
                "at": now,
            }
            self._store.put(keys.link(origin), meta)

    def _learnt(self, origin: str) -> Learnt | None:
        with self._lock:
            if origin in self._known:
                return self._known[origin]
        learnt = self._read(origin)
        with self._lock:
            return self._known.setdefault(origin, learnt)

    def _read(self, origin: str) -> Learnt | None:
        """The store's entry for ``origin``; None when there is none or it is not a setting."""
        entry = self._store.get(keys.link(origin)) if self._store is not None else None
        if entry is None:
            return None
        meta = entry.meta
        try:
            setting = Setting(int(meta["streams"]), int(meta["part_size_bytes"]))
            at = float(meta["at"])
        except (KeyError, TypeError, ValueError):
            return None
        if setting.streams <= 0 or setting.part_size_bytes <= 0:
            return None
        return Learnt(setting, at)


_memories: dict[CacheStore, LinkMemory] = {}
_memories_lock = threading.Lock()


def memory_for(options: ReadOptions) -> LinkMemory | None:
    """The memory a read with ``options`` uses: the persistent cache's (one per store, per
    process); None when ``options`` keep the cache out (``cache=False``) or pin a knob."""
    if not options.cache or options.max_concurrency is not None:
        return None
    if options.part_size_bytes is not None:
        return None
    from ..sources.cache.store import default_store  # here: its platformdirs import

    store = default_store()
    with _memories_lock:
        memory = _memories.get(store)
        if memory is None:
            memory = _memories[store] = LinkMemory(store)
        return memory
