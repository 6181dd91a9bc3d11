"""The persistent cache's folder: entries of data (JSON and bytes), checked, written atomically,
evicted least recently used first.

An entry is one file, named by the SHA-256 of its key (a string made by :mod:`.keys`)::

    b"rtcache1" | SHA-256 of the rest (32 bytes) | meta length (u32, little-endian) | meta | payload

``meta`` is a JSON object (it holds the key's hash, the entry's kind and what a listing shows;
never the key itself, which may hold a signed URL); ``payload`` is opaque bytes. Nothing is
ever unpickled. What this module guarantees:

- an entry is read back only when its magic, checksum and key hash all hold: a corrupted,
  truncated or foreign file (another key's entry copied over, a file of another format) is
  dropped and reads as a miss, never as a wrong answer and never as an exception; only the
  very file read is dropped: a whole entry that another process renamed into its place
  meanwhile stays;
- writes go to a temporary file in the entry's own folder and are renamed into place
  (:func:`os.replace`), so a reader, in this process or another, sees the old entry or the new
  one whole, and a process killed mid-write leaves only a ``.part`` file that reads ignore and
  :meth:`CacheStore.prune` removes;
- a read that hits touches the entry's modification time: eviction (when the folder grows past
  ``max_bytes``, down to 90 % of it) removes the least recently used entries first;
- every failure of the folder itself (read-only, full, removed underneath) makes the cache a
  no-op for that entry, logged at debug level: the cache never makes a read fail.

No network here: sources decide what to keep, this module keeps it.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import struct
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

__all__ = [
    "CACHE_VARIABLE",
    "DEFAULT_MAX_BYTES",
    "MAX_BYTES_VARIABLE",
    "CacheStore",
    "Entry",
    "EntryInfo",
    "cache_folder",
    "default_store",
]

MAGIC = b"rtcache1"
"""The first bytes of every entry; a new layout gets a new magic (old entries: misses)."""

_DIGEST = 32
_LENGTH = struct.Struct("<I")
_HEAD = len(MAGIC) + _DIGEST + _LENGTH.size
_PART = ".part"
_JSON = json.JSONEncoder(separators=(",", ":"))
_STALE_PART_SECONDS = 3600.0
"""A ``.part`` file older than this is a write that never finished (its process died)."""

CACHE_VARIABLE = "REMOTETENSORS_CACHE"
"""The cache's folder; the platform's user cache folder (``platformdirs``) when unset."""

MAX_BYTES_VARIABLE = "REMOTETENSORS_CACHE_MAX_BYTES"
"""The cache's bound in bytes; :data:`DEFAULT_MAX_BYTES` when unset."""

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
"""Default bound of the cache folder: 256 MiB, about 4,000 header windows of 64 KiB."""

EVICT_TO = 0.9
"""Eviction removes entries until the folder holds this share of ``max_bytes``."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry read back whole and checked.

    Attributes:
        meta: the JSON object written with it.
        payload: its bytes.
    """

    meta: Mapping[str, Any]
    payload: bytes


@dataclass(frozen=True, slots=True)
class EntryInfo:
    """One entry as a listing shows it (read and checked; ``ok`` False when it is not whole).

    Attributes:
        path: the entry's file.
        kind: what it holds (``"file"``, ``"ref"``, ``"listing"``, ...; ``"?"`` when unreadable).
        shown: what it is about, as messages name it (a location, secrets redacted).
        bytes: the entry's size on disk.
        last_used: when it was last read or written (seconds since the epoch).
        ok: whether it reads back whole (magic, checksum and key).
    """

    path: Path
    kind: str
    shown: str
    bytes: int
    last_used: float
    ok: bool

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: kind, shown, bytes, last_used, ok, path."""
        return {
            "kind": self.kind,
            "shown": self.shown,
            "bytes": self.bytes,
            "last_used": round(self.last_used, 3),
            "ok": self.ok,
            "path": str(self.path),
        }


def key_hash(key: str) -> str:
    """The hex SHA-256 of ``key``: the entry's file name, and what its meta must carry."""
    return hashlib.sha256(key.encode()).hexdigest()


def encode(key: str, meta: Mapping[str, Any], payload: bytes) -> bytes:
    """An entry's bytes (see the module); ``meta`` gains the key's hash."""
    return _encode(key_hash(key), meta, payload)


def _encode(digest: str, meta: Mapping[str, Any], payload: bytes) -> bytes:
    """:func:`encode`, given the key's hash."""
    text = _JSON.encode({**meta, "key": digest}).encode()
    head = _LENGTH.pack(len(text))
    checksum = hashlib.sha256(head)
    checksum.update(text)
    checksum.update(payload)
    return b"".join((MAGIC, checksum.digest(), head, text, payload))


def decode(data: bytes, key: str | None) -> Entry | None:
    """The entry in ``data``, or None when it is not whole: wrong magic, checksum or length, a
    meta that is not a JSON object, or (``key`` given) another key's entry."""
    if len(data) < _HEAD or not data.startswith(MAGIC):
        return None
    digest = data[len(MAGIC) : len(MAGIC) + _DIGEST]
    body = memoryview(data)[len(MAGIC) + _DIGEST :]
    if hashlib.sha256(body).digest() != digest:
        return None
    (length,) = _LENGTH.unpack_from(body)
    if _LENGTH.size + length > len(body):
        return None
    try:
        meta = json.loads(bytes(body[_LENGTH.size : _LENGTH.size + length]))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(meta, dict) or (key is not None and meta.get("key") != key_hash(key)):
        return None
    return Entry(meta, bytes(body[_LENGTH.size + length :]))


class CacheStore:
    """A folder of entries (see the module), bounded to ``max_bytes``.

    Safe to share between threads and processes: readers never see half an entry, and two
    writers of one key leave one of their entries whole.

    Args:
        folder: where entries live (created when the first entry is written).
        max_bytes: bound of the folder's size; least recently used entries go first.
    """

    def __init__(self, folder: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES):
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self._entries = self.folder / "entries"
        self._entries_name = os.fspath(self._entries)  # str paths: a scan writes thousands
        self._lock = threading.Lock()
        self._total: int | None = None  # bytes in the folder, as this process last knew them
        self._serial = itertools.count(1)  # next() is atomic: no lock for names

    def __repr__(self) -> str:
        return f"CacheStore({str(self.folder)!r}, max_bytes={self.max_bytes})"

    def path_of(self, key: str) -> Path:
        """The file of ``key``'s entry."""
        return Path(self._name_of(key_hash(key)))

    def _name_of(self, digest: str) -> str:
        """The file of the entry whose key hashes to ``digest``, as a str."""
        return f"{self._entries_name}{os.sep}{digest[:2]}{os.sep}{digest}"

    # --- reading and writing ---------------------------------------------------------------------

    def get(self, key: str) -> Entry | None:
        """The entry of ``key``, or None (a miss: absent, or not whole and now dropped).

        Touches the entry (its modification time), so that eviction keeps it longest."""
        path = self._name_of(key_hash(key))
        read = _read(path)
        if read is None:
            return None
        data, seen = read
        entry = decode(data, key)
        if entry is None:
            log.debug(
                "cache entry %s is not whole (corrupted, truncated or foreign): dropped", path
            )
            self._drop_read(Path(path), seen)
            return None
        # Removed meanwhile, or a read-only folder: the entry was whole all the same.
        with contextlib.suppress(OSError):
            os.utime(path)
        return entry

    def put(self, key: str, meta: Mapping[str, Any], payload: bytes = b"") -> bool:
        """Write ``key``'s entry (replacing any), atomically; then evict if over the bound.

        Returns:
            Whether the entry was written (False when the folder cannot be written; logged).
        """
        digest = key_hash(key)
        data = _encode(digest, meta, payload)
        path = self._name_of(digest)
        part = self._part_name(path)
        try:
            try:
                old = os.stat(path).st_size
            except OSError:
                old = 0
            try:
                handle = open(part, "wb")  # noqa: SIM115 (closed below, after the retry)
            except FileNotFoundError:  # the entry's folder, made by its first write only
                os.makedirs(os.path.dirname(part), exist_ok=True)
                handle = open(part, "wb")  # noqa: SIM115
            with handle:
                handle.write(data)
            os.replace(part, path)
        except OSError as exc:
            log.debug("cache entry %s not written: %s", path, exc)
            self._remove(Path(part))
            return False
        self._grew(len(data) - old)
        return True

    def drop(self, key: str) -> None:
        """Remove ``key``'s entry, if any."""
        self._remove(self.path_of(key))

    # --- the folder as a whole -----------------------------------------------------------------

    def entries(self) -> Iterator[EntryInfo]:
        """Every entry of the folder, read and checked (unordered); ``.part`` files left out."""
        for info, _ in self._read_all():
            yield info

    def _read_all(self) -> Iterator[tuple[EntryInfo, os.stat_result]]:
        """:meth:`entries`, each with the status of the very file read (see :meth:`_drop_read`)."""
        for path in self._files():
            read = _read(path)
            if read is None:
                continue
            data, seen = read
            entry = decode(data, None)
            ok = entry is not None and entry.meta.get("key") == path.name
            meta = entry.meta if entry is not None else {}
            info = EntryInfo(
                path,
                str(meta.get("kind", "?")),
                str(meta.get("shown", "")),
                len(data),
                seen.st_mtime,
                ok,
            )
            yield info, seen

    def usage(self) -> tuple[int, int]:
        """(entries, bytes) in the folder, ``.part`` files left out; from the file sizes."""
        count = total = 0
        for path in self._files():
            try:
                total += path.stat().st_size
            except OSError:
                continue
            count += 1
        return count, total

    def prune(
        self, *, max_bytes: int | None = None, older_than_seconds: float | None = None
    ) -> tuple[int, int]:
        """Remove entries unused for ``older_than_seconds``, and then the least recently used
        until the folder holds at most ``max_bytes``; also entries that are not whole and
        ``.part`` files of writes that never finished.

        Returns:
            (entries removed, bytes freed).
        """
        now = time.time()
        removed = freed = 0
        kept: list[tuple[float, int, Path]] = []
        for info, seen in self._read_all():
            stale = older_than_seconds is not None and now - info.last_used > older_than_seconds
            if not info.ok:
                if self._drop_read(info.path, seen):
                    removed, freed = removed + 1, freed + info.bytes
            elif stale:
                if self._remove(info.path):
                    removed, freed = removed + 1, freed + info.bytes
            else:
                kept.append((info.last_used, info.bytes, info.path))
        for part in self._parts():
            try:
                if now - part.stat().st_mtime > _STALE_PART_SECONDS:
                    part.unlink()
            except OSError:
                continue
        total = sum(size for _, size, _ in kept)
        if max_bytes is not None:
            for _, size, path in sorted(kept):
                if total <= max_bytes:
                    break
                if self._remove(path):
                    removed, freed, total = removed + 1, freed + size, total - size
        with self._lock:
            self._total = total
        return removed, freed

    def clear(self) -> tuple[int, int]:
        """Remove every entry (and ``.part`` file). Returns (entries removed, bytes freed)."""
        removed = freed = 0
        for path in [*self._files(), *self._parts()]:
            try:
                size = path.stat().st_size
                path.unlink()
            except OSError:
                continue
            if not path.name.endswith(_PART):
                removed, freed = removed + 1, freed + size
        with self._lock:
            self._total = 0
        return removed, freed

    # --- helpers -------------------------------------------------------------------------------

    def _grew(self, delta: int) -> None:
        """Account for ``delta`` bytes written; evict when over the bound. The first write of
        a process counts the folder once; later ones keep the count (other processes' writes
        are seen at the next eviction, which counts afresh)."""
        with self._lock:
            if self._total is None:
                self._total = self.usage()[1]
            else:
                self._total += delta
            over = self._total > self.max_bytes
        if over:
            self.prune(max_bytes=int(self.max_bytes * EVICT_TO))

    def _files(self) -> Iterator[Path]:
        for path in self._walk():
            if not path.name.endswith(_PART):
                yield path

    def _parts(self) -> Iterator[Path]:
        for path in self._walk():
            if path.name.endswith(_PART):
                yield path

    def _walk(self) -> Iterator[Path]:
        try:
            folders = list(os.scandir(self._entries))
        except OSError:
            return
        for folder in folders:
            try:
                files = list(os.scandir(folder.path))
            except OSError:
                continue
            for item in files:
                if item.is_file(follow_symlinks=False):
                    yield Path(item.path)

    def _remove(self, path: Path) -> bool:
        try:
            path.unlink()
        except OSError:
            return False
        return True

    def _part_of(self, path: Path) -> Path:
        """A name beside ``path`` that no other write or drop uses, in this process or another
        (a ``.part`` file: reads ignore it, :meth:`prune` removes it once stale)."""
        return Path(self._part_name(os.fspath(path)))

    def _part_name(self, path: str) -> str:
        """:meth:`_part_of`, as a str."""
        serial = next(self._serial)
        return f"{path}.{os.getpid()}.{threading.get_ident()}.{serial}{_PART}"

    def _drop_read(self, path: Path, seen: os.stat_result) -> bool:
        """Remove the entry at ``path`` that was read as not whole, ``seen`` being the status of
        the very file read; whatever was written there since (another process's
        :meth:`put`, a whole entry) stays. Returns whether the file read was removed.

        Unlinking ``path`` would remove what is there now, not what was read: the file is first
        moved aside (a rename, atomic), and only the file read is removed; a file moved aside
        that turns out to be a newer one goes back, unless yet another has been written since.
        """
        try:
            if not _same_file(os.stat(path), seen):
                return False  # replaced since it was read (the usual case of a race)
            aside = self._part_of(path)
            os.rename(path, aside)
        except OSError:
            return False  # gone already, or the folder cannot be written
        try:
            moved = os.stat(aside)
        except OSError:
            return False
        if _same_file(moved, seen):
            return self._remove(aside)
        # Replaced between the check and the rename: that entry goes back, unless yet another
        # writer has put one in place meanwhile (os.link never replaces a file).
        try:
            os.link(aside, path)
        except FileExistsError:
            pass
        except OSError:  # a filesystem without hard links
            with contextlib.suppress(OSError):
                os.rename(aside, path)
        self._remove(aside)
        return False


def _read(path: str | Path) -> tuple[bytes, os.stat_result] | None:
    """The bytes of the file at ``path`` and its status (of the file opened, whatever replaces
    it meanwhile), or None when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            seen = os.fstat(handle.fileno())
            return handle.read(), seen
    except OSError:
        return None


def _same_file(now: os.stat_result, seen: os.stat_result) -> bool:
    """Whether two statuses are of one file, unchanged (a file renamed into place is another
    inode; an inode number reused by a new file is told apart by its time and size)."""
    return (now.st_dev, now.st_ino, now.st_mtime_ns, now.st_size) == (
        seen.st_dev,
        seen.st_ino,
        seen.st_mtime_ns,
        seen.st_size,
    )


def cache_folder() -> Path:
    """``REMOTETENSORS_CACHE``, else the platform's user cache folder for remotetensors."""
    given = os.environ.get(CACHE_VARIABLE)
    if given:
        return Path(given).expanduser()
    import platformdirs  # here: only a process that caches something pays for it

    return Path(platformdirs.user_cache_dir("remotetensors"))


def cache_max_bytes() -> int:
    """``REMOTETENSORS_CACHE_MAX_BYTES`` (an integer of bytes), else :data:`DEFAULT_MAX_BYTES`.

    Raises:
        ValueError: the variable is set to something else than an integer >= 0.
    """
    given = os.environ.get(MAX_BYTES_VARIABLE, "").strip()
    if not given:
        return DEFAULT_MAX_BYTES
    try:
        value = int(given)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(
            f"{MAX_BYTES_VARIABLE}={given!r}: expected a number of bytes (an integer >= 0)"
        )
    return value


_stores: dict[tuple[Path, int], CacheStore] = {}
_named: dict[tuple[str | None, ...], CacheStore] = {}
_stores_lock = threading.Lock()
_PLATFORM_NAMING = ("XDG_CACHE_HOME", "HOME", "LOCALAPPDATA")
"""The variables ``platformdirs`` reads for the user cache folder (when :data:`CACHE_VARIABLE`
is unset)."""


def default_store() -> CacheStore:
    """The store of the folder and bound the environment names now (one per pair, per
    process: its count of the folder's bytes is shared by the models that use it).

    Raises:
        ValueError: as :func:`cache_max_bytes`.
    """
    # Asked for by every file a model opens: the variables' values find it without a path.
    environ = os.environ
    named: tuple[str | None, ...] = (
        environ.get(CACHE_VARIABLE),
        environ.get(MAX_BYTES_VARIABLE),
    )
    if named[0] is None:
        named += tuple(environ.get(name) for name in _PLATFORM_NAMING)
    store = _named.get(named)
    if store is not None:
        return store
    folder, limit = cache_folder(), cache_max_bytes()
    with _stores_lock:
        store = _stores.get((folder, limit))
        if store is None:
            store = _stores[(folder, limit)] = CacheStore(folder, max_bytes=limit)
        _named[named] = store
        return store
