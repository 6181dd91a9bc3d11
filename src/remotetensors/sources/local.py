"""Local files read with positioned reads straight into the destination buffer (no network)."""

from __future__ import annotations

import asyncio
import os

from ..errors import NotFoundError, PermissionDeniedError, RemoteFileChangedError
from .base import BlockingSource, ByteSource, Prefix, Suffix
from .recipe import SourceRecipe

_THREAD_MIN_BYTES = 4 * 1024 * 1024
"""Reads larger than this go to a worker thread so the event loop stays responsive."""


class LocalSource(ByteSource):
    """A file on a local disk, read with ``os.preadv`` into the caller's buffer.

    The file's size, mtime and inode at open are its validator; a file replaced or resized
    underneath raises :class:`RemoteFileChangedError`.
    """

    def __init__(self, path: str | os.PathLike[str], *, location: str | None = None) -> None:
        self._path = os.fspath(path)
        self._location = location or self._path
        self._fd: int | None = None
        self._validator: str | None = None
        self._identity: tuple[int, int, int] | None = None
        self._size = 0

    @property
    def location(self) -> str:
        return self._location

    def _stat_validator(self, stat: os.stat_result) -> str:
        return f"{stat.st_size}-{stat.st_mtime_ns}-{stat.st_ino}"

    def blocking(self) -> BlockingSource | None:
        return self

    async def open_prefix(self, length: int) -> Prefix:
        return self.open_prefix_now(length)

    def open_prefix_now(self, length: int) -> Prefix:
        """``open_prefix`` in the calling thread (a local open and read take microseconds)."""
        fd = self._open_now()
        data = os.pread(fd, min(length, self._size), 0)
        return Prefix(data, self._size, self._validator)

    async def open_suffix(self, length: int) -> Suffix:
        fd = self._open_now()
        start = max(0, self._size - length)
        return Suffix(os.pread(fd, self._size - start, start), self._size, self._validator)

    def _open_now(self) -> int:
        """Open the file and learn its size and validator; the descriptor."""
        try:
            fd = os.open(self._path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        except FileNotFoundError:
            # The reference's exact wording, which code written for safetensors may compare.
            raise NotFoundError(f"No such file or directory: {self._location}") from None
        except IsADirectoryError:
            raise NotFoundError(f"{self._location}: is a directory, not a file") from None
        except PermissionError as exc:
            raise PermissionDeniedError(f"{self._location}: {exc.strerror}") from None
        self._fd = fd
        stat = os.fstat(fd)
        self._size = stat.st_size
        self._validator = self._stat_validator(stat)
        self._identity = (stat.st_size, stat.st_mtime_ns, stat.st_ino)  # what _validator says
        return fd

    def recipe(self) -> SourceRecipe:
        if self._fd is None:
            raise RuntimeError("open_prefix must be called before recipe")
        return SourceRecipe("local", self._path, self._location, self._size, self._validator)

    async def read_into(self, start: int, buffer: memoryview) -> None:
        if self._fd is None:
            raise RuntimeError("open_prefix must be called before read_into")
        if len(buffer) >= _THREAD_MIN_BYTES:
            await asyncio.to_thread(self._read_exact, start, buffer)
        else:
            self._read_exact(start, buffer)

    def read_into_now(self, start: int, buffer: memoryview) -> None:
        """``read_into`` in the calling thread."""
        self._read_exact(start, buffer)

    def _read_exact(self, start: int, buffer: memoryview) -> None:
        if self._fd is None:
            raise RuntimeError("open_prefix must be called before read_into")
        stat = os.fstat(self._fd)
        if (stat.st_size, stat.st_mtime_ns, stat.st_ino) != self._identity:
            raise RemoteFileChangedError(
                f"{self._location}: the file changed since it was opened (size, mtime or inode "
                "differ); open it again to read the new version"
            )
        done = 0
        while done < len(buffer):
            got = os.preadv(self._fd, [buffer[done:]], start + done)
            if got == 0:
                raise RemoteFileChangedError(
                    f"{self._location}: the file ended at byte {start + done}, before "
                    f"{start + len(buffer)}; it was truncated while being read"
                )
            done += got

    async def aclose(self) -> None:
        self.close_now()

    def close_now(self) -> None:
        """``aclose`` in the calling thread."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
