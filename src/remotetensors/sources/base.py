"""The ByteSource contract: a file's first bytes and size, exact byte ranges, a validator.

A source answers "give me bytes [a, b)" and "write bytes [a, b) into this buffer"; everything
else (headers, tensors, planning) sits above it.
"""

from __future__ import annotations

import abc
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .recipe import SourceRecipe


@dataclass(frozen=True, slots=True)
class Prefix:
    """The first bytes of a file, from the request that opened it.

    Attributes:
        data: bytes ``[0, len(data))`` of the file: as many as asked for, fewer if the file is
            shorter.
        size: total size of the file in bytes.
        validator: what identifies this version of the file (an HTTP ETag, an S3 ETag or
            version id, a local file's mtime and inode), or ``None`` when the backend has none.
    """

    data: bytes
    size: int
    validator: str | None


@dataclass(frozen=True, slots=True)
class Suffix:
    """The last bytes of a file, from the request that opened it (a zip's end of central
    directory lives there).

    Attributes:
        data: bytes ``[size - len(data), size)`` of the file: as many as asked for, the whole
            file if it is shorter.
        size: total size of the file in bytes.
        validator: as :attr:`Prefix.validator`.
    """

    data: bytes
    size: int
    validator: str | None

    @property
    def start(self) -> int:
        """Absolute offset of ``data``'s first byte."""
        return self.size - len(self.data)


class BlockingSource(Protocol):
    """The ``ByteSource`` operations as plain functions that block the calling thread."""

    @property
    def location(self) -> str: ...

    def open_prefix_now(self, length: int) -> Prefix: ...

    def read_into_now(self, start: int, buffer: memoryview) -> None: ...

    def close_now(self) -> None: ...


class ByteSource(abc.ABC):
    """Bytes of one file somewhere.

    ``open_prefix`` (or ``open_suffix``) is called first and once; it fixes the size and the
    validator. Every later read is checked against them: a source raises
    :class:`~remotetensors.errors.RemoteFileChangedError` rather than return bytes of another
    version of the file, as far as the backend can tell versions apart (one that reports only
    a size cannot see a rewrite that keeps it; see each source). Reads may run concurrently.
    """

    @property
    @abc.abstractmethod
    def location(self) -> str:
        """The file's location as the user gave it; named in every error."""

    @abc.abstractmethod
    async def open_prefix(self, length: int) -> Prefix:
        """Fetch bytes ``[0, min(length, size))`` and learn the size, in one request.

        A source with the persistent cache in front of it
        (:class:`~.cache.source.CachedSource`) answers a kept file with the bytes kept from
        its start instead, more or fewer than ``length`` and without a request: a reader asks
        for what it needs with :func:`~.cache.source.read_metadata`.

        Raises:
            NotFoundError, PermissionDeniedError, TransportError, BadResponseError.
        """

    async def open_suffix(self, length: int) -> Suffix:
        """Fetch bytes ``[max(0, size - length), size)`` and learn the size: the other first
        call (instead of :meth:`open_prefix`), for formats whose index sits at the end.

        One request where the backend can ask for a suffix (HTTP, local files, fsspec); this
        default takes two, a one-byte prefix and then the tail.

        Raises:
            as :meth:`open_prefix`.
        """
        prefix = await self.open_prefix(1)
        start = max(0, prefix.size - length)
        if start == 0 and prefix.size <= len(prefix.data):
            return Suffix(prefix.data, prefix.size, prefix.validator)
        return Suffix(await self.read(start, prefix.size), prefix.size, prefix.validator)

    @abc.abstractmethod
    async def read_into(self, start: int, buffer: memoryview) -> None:
        """Write bytes ``[start, start + len(buffer))`` of the file into ``buffer``, exactly.

        Raises:
            RemoteFileChangedError: the file is no longer the version ``open_prefix`` saw.
            BadResponseError, TransportError, NotFoundError, PermissionDeniedError.
        """

    async def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the file (``end`` exclusive)."""
        buffer = bytearray(end - start)
        if buffer:
            await self.read_into(start, memoryview(buffer))
        return bytes(buffer)

    def blocking(self) -> BlockingSource | None:
        """This source's blocking twin, or ``None`` (the default).

        Only sources whose operations cost less than a trip through the event loop (local
        files) have one; the sync API then opens them and reads small tensors in the calling
        thread, without crossing to the IO thread.
        """
        return None

    def receives_in_threads(self) -> bool:
        """Whether large reads land in their buffers from worker threads, one per read in
        flight, so that the page faults of fresh buffers are already spread over cores (the
        reader then maps no pages ahead, see :mod:`..prefault`). False unless a source says so.
        """
        return False

    def recipe(self) -> SourceRecipe:
        """How to open this file, at the version opened here, in another process.

        Raises:
            NotImplementedError: this kind of source cannot be reopened elsewhere.
            RuntimeError: the source has not been opened yet.
        """
        raise NotImplementedError(f"{self.location}: this source cannot be reopened elsewhere")

    async def aclose(self) -> None:  # noqa: B027 (most sources hold nothing to release)
        """Release connections or file handles; the source is unusable afterwards."""


@dataclass(slots=True)
class Traffic:
    """What crossed the network for one file (or a whole model, summed).

    Attributes:
        requests: reads asked of the source (a header window, a range; a read that the source
            retried or resumed internally counts once, and so does one that an fsspec source
            follows with the ``info`` call checking its version; a failed read counts too).
        bytes: bytes received into memory.
        seconds: wall time during which at least one read was in flight (concurrent reads
            overlap, so this is not their sum).
    """

    requests: int = 0
    bytes: int = 0
    seconds: float = 0.0
    _in_flight: int = field(default=0, repr=False, compare=False)
    _since: float = field(default=0.0, repr=False, compare=False)

    def _begin(self) -> None:
        self.requests += 1
        if self._in_flight == 0:
            self._since = time.perf_counter()
        self._in_flight += 1

    def _end(self, received: int) -> None:
        self.bytes += received
        self._in_flight -= 1
        if self._in_flight == 0:
            self.seconds += time.perf_counter() - self._since

    def as_dict(self) -> dict[str, float]:
        """``{"requests", "bytes", "seconds"}``."""
        return {"requests": self.requests, "bytes": self.bytes, "seconds": self.seconds}

    @classmethod
    def total(cls, parts: Iterable[Traffic]) -> Traffic:
        """The sum of ``parts`` (``seconds`` summed: an upper bound of the wall time)."""
        result = cls()
        for part in parts:
            result.requests += part.requests
            result.bytes += part.bytes
            result.seconds += part.seconds
        return result


class CountingSource(ByteSource):
    """Any source, with every read counted in a :class:`Traffic`; the same for every backend,
    because it counts above them. Reads pass through unchanged, and so does a blocking twin
    (:meth:`blocking`), whose reads are counted the same way: a local file read in the calling
    thread counts as it would through the event loop."""

    def __init__(self, inner: ByteSource, traffic: Traffic | None = None) -> None:
        self.inner = inner
        self.traffic = traffic if traffic is not None else Traffic()
        twin = inner.blocking()
        self._blocking = None if twin is None else _CountingBlocking(twin, self.traffic)

    @property
    def location(self) -> str:
        return self.inner.location

    async def open_prefix(self, length: int) -> Prefix:
        self.traffic._begin()
        received = 0
        try:
            prefix = await self.inner.open_prefix(length)
            received = len(prefix.data)
            return prefix
        finally:
            self.traffic._end(received)

    async def open_suffix(self, length: int) -> Suffix:
        self.traffic._begin()
        received = 0
        try:
            suffix = await self.inner.open_suffix(length)
            received = len(suffix.data)
            return suffix
        finally:
            self.traffic._end(received)

    async def read_into(self, start: int, buffer: memoryview) -> None:
        self.traffic._begin()
        received = 0
        try:
            await self.inner.read_into(start, buffer)
            received = len(buffer)
        finally:
            self.traffic._end(received)

    def blocking(self) -> BlockingSource | None:
        return self._blocking

    def receives_in_threads(self) -> bool:
        return self.inner.receives_in_threads()

    def recipe(self) -> SourceRecipe:
        return self.inner.recipe()

    async def aclose(self) -> None:
        await self.inner.aclose()


class _CountingBlocking:
    """A blocking twin with its reads counted in ``traffic``, as :class:`CountingSource`
    counts the async ones (one request per call, the bytes it delivered). Blocking reads may
    run in several threads at once (torch loading reads a local file from worker threads), so
    the counts change under a lock; the reads themselves run outside it."""

    __slots__ = ("_inner", "_lock", "_traffic")

    def __init__(self, inner: BlockingSource, traffic: Traffic) -> None:
        self._inner = inner
        self._traffic = traffic
        self._lock = threading.Lock()

    @property
    def location(self) -> str:
        return self._inner.location

    def open_prefix_now(self, length: int) -> Prefix:
        with self._lock:
            self._traffic._begin()
        received = 0
        try:
            prefix = self._inner.open_prefix_now(length)
            received = len(prefix.data)
            return prefix
        finally:
            with self._lock:
                self._traffic._end(received)

    def read_into_now(self, start: int, buffer: memoryview) -> None:
        with self._lock:
            self._traffic._begin()
        received = 0
        try:
            self._inner.read_into_now(start, buffer)
            received = len(buffer)
        finally:
            with self._lock:
                self._traffic._end(received)

    def close_now(self) -> None:
        self._inner.close_now()
