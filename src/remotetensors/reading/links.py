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

Persisted in ``links.json`` in the cache folder (``REMOTETENSORS_CACHE``), rewritten atomically
when a setting changes; every entry carries when it was last confirmed, and one older than
:data:`FORGET_AFTER_SECONDS` is forgotten (the machine may have moved networks since). A
folder that cannot be read or written is no error: the memory is then this process's only.
``ReadOptions(cache=False)`` reads and writes none of it, and a read that pins a knob
(``max_concurrency``, ``part_size_bytes``) neither uses nor teaches it: what it measured is
the pin's, not the link's (see :func:`memory_for`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .streams import Setting

if TYPE_CHECKING:
    from ..options import ReadOptions

log = logging.getLogger("remotetensors")

__all__ = ["FORGET_AFTER_SECONDS", "LinkMemory", "forget_all", "memory_for", "origin_of"]

FORGET_AFTER_SECONDS = 24 * 3600.0
"""A setting not confirmed for this long (seconds) is forgotten."""

CONFIRM_AFTER_SECONDS = 600.0
"""An unchanged setting is written again (its age reset) at most this often (seconds)."""

FILE_NAME = "links.json"
"""The memory's file in the cache folder."""

_VERSION = 1


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
    """Settings per origin (see the module).

    Args:
        path: the file it is persisted in, or None for this process only.
        clock: seconds since the epoch (entries' ages).
    """

    def __init__(self, path: Path | None, *, clock: Callable[[], float] = time.time) -> None:
        self._path = path
        self._clock = clock
        self._lock = threading.Lock()
        self._learnt: dict[str, Learnt] | None = None  # loaded on first use

    def recall(self, origin: str) -> Setting | None:
        """The setting last learnt for ``origin``, or None (never, or forgotten)."""
        with self._lock:
            learnt = self._entries().get(origin)
        if learnt is None or self._clock() - learnt.at > FORGET_AFTER_SECONDS:
            return None
        return learnt.setting

    def remember(self, origin: str, setting: Setting) -> None:
        """``setting`` is what ``origin``'s link gave best now: kept here, and in the file
        when it changed (or its entry is due a confirmation)."""
        now = self._clock()
        with self._lock:
            entries = self._entries()
            before = entries.get(origin)
            if (
                before is not None
                and before.setting == setting
                and now - before.at < CONFIRM_AFTER_SECONDS
            ):
                return
            entries[origin] = Learnt(setting, now)
            self._write(origin, entries[origin])

    def _entries(self) -> dict[str, Learnt]:
        if self._learnt is None:
            self._learnt = self._read() if self._path is not None else {}
        return self._learnt

    def _read(self) -> dict[str, Learnt]:
        """The file's entries; none when it is missing or not ours (a corrupted file is
        replaced at the next write)."""
        assert self._path is not None
        try:
            data = json.loads(self._path.read_text())
            if data.get("version") != _VERSION:
                return {}
            return {
                origin: Learnt(
                    Setting(int(e["streams"]), int(e["part_size_bytes"])), float(e["at"])
                )
                for origin, e in data["origins"].items()
                if int(e["streams"]) > 0 and int(e["part_size_bytes"]) > 0
            }
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def _write(self, origin: str, learnt: Learnt) -> None:
        """Merge ``learnt`` into the file as it is now (another process may have written
        other origins since this one read it), atomically."""
        if self._path is None:
            return
        merged = {**self._read(), origin: learnt}
        data = {
            "version": _VERSION,
            "origins": {
                name: {
                    "streams": entry.setting.streams,
                    "part_size_bytes": entry.setting.part_size_bytes,
                    "at": entry.at,
                }
                for name, entry in merged.items()
                if self._clock() - entry.at <= FORGET_AFTER_SECONDS
            },
        }
        part = self._path.with_name(f"{self._path.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            part.write_text(json.dumps(data, indent=1, sort_keys=True))
            os.replace(part, self._path)
        except OSError as exc:
            log.debug("link memory %s not written: %s", self._path, exc)
            with contextlib.suppress(OSError):
                part.unlink()


_memories: dict[Path, LinkMemory] = {}
_memories_lock = threading.Lock()


def memory_for(options: ReadOptions) -> LinkMemory | None:
    """The memory a read with ``options`` uses: the cache folder's (one per folder, per
    process); None when ``options`` keep the cache out (``cache=False``) or pin a knob."""
    if not options.cache or options.max_concurrency is not None:
        return None
    if options.part_size_bytes is not None:
        return None
    from ..sources.cache.store import cache_folder  # here: its platformdirs import

    path = cache_folder() / FILE_NAME
    with _memories_lock:
        memory = _memories.get(path)
        if memory is None:
            memory = _memories[path] = LinkMemory(path)
        return memory


def forget_all(folder: Path) -> None:
    """Forget every origin's setting kept in the cache folder ``folder`` (its file, and this
    process's memory of it): ``remotetensors cache clear``."""
    path = folder / FILE_NAME
    with _memories_lock:
        _memories.pop(path, None)
    with contextlib.suppress(OSError):
        path.unlink()
