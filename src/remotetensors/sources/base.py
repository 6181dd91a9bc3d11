"""The ByteSource contract: a file's first bytes and size, exact byte ranges, a validator.

A source answers "give me bytes [a, b)" and "write bytes [a, b) into this buffer"; everything
else (headers, tensors, planning) sits above it.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Protocol


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


class BlockingSource(Protocol):
    """The ``ByteSource`` operations as plain functions that block the calling thread."""

    @property
    def location(self) -> str: ...

    def open_prefix_now(self, length: int) -> Prefix: ...

    def read_into_now(self, start: int, buffer: memoryview) -> None: ...

    def close_now(self) -> None: ...


class ByteSource(abc.ABC):
    """Bytes of one file somewhere.

    ``open_prefix`` is called first and once; it fixes the size and the validator. Every later
    read is checked against them: a source raises
    :class:`~remotetensors.errors.RemoteFileChangedError` rather than return bytes of another
    version of the file. Reads may run concurrently.
    """

    @property
    @abc.abstractmethod
    def location(self) -> str:
        """The file's location as the user gave it; named in every error."""

    @abc.abstractmethod
    async def open_prefix(self, length: int) -> Prefix:
        """Fetch bytes ``[0, min(length, size))`` and learn the size, in one request.

        Raises:
            NotFoundError, PermissionDeniedError, TransportError, BadResponseError.
        """

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

    async def aclose(self) -> None:  # noqa: B027 (most sources hold nothing to release)
        """Release connections or file handles; the source is unusable afterwards."""
