"""Populate the pages of large destination buffers in a worker thread while the network fills them.

A fresh array's memory is mapped on first write: for a 512 MiB tensor that is 131,072 page
faults, which the kernel serves in the thread that writes, the event loop's, one after another
with the copy out of the socket. On a virtual machine the first touch of fresh memory costs more
than the transfer itself (0.6 s for 512 MiB here, where curl moves the bytes in 0.26 s).

``madvise(MADV_POPULATE_WRITE)`` (Linux 5.14) maps pages writable exactly as a write would,
without writing: it never changes a byte, so it may run while the socket fills the same pages,
ahead of or behind it. Run in a worker thread (ctypes releases the GIL), the faults are served on
another core while the loop copies. Elsewhere, or when the kernel refuses, nothing happens.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import threading
from collections.abc import Callable, Sequence

MIN_BYTES = 32 * 1024 * 1024
"""Buffers smaller than this are left alone: their faults cost less than a thread's start."""

STEP_BYTES = 8 * 1024 * 1024
"""Bytes populated per call (between two calls, the thread checks whether to stop)."""

_MADV_POPULATE_WRITE = 23
_PAGE = 4096


@functools.lru_cache(maxsize=1)
def _madvise() -> Callable[[int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # here: most reads never need it

    try:
        # The process's own symbols, libc's among them. Not ctypes.util.find_library("c"):
        # it runs ldconfig in a subprocess, 65 ms here, which delayed every large read.
        function = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


def _address(buffer: memoryview) -> int:
    import numpy as np

    return int(np.frombuffer(buffer, dtype=np.uint8).ctypes.data)


def _populate(buffers: Sequence[memoryview], stop: threading.Event) -> None:
    """Populate ``buffers`` in order, front to back (the order reads fill them),
    ``STEP_BYTES`` at a time, until done or ``stop``."""
    madvise = _madvise()
    if madvise is None:
        return
    spans: list[tuple[int, int]] = []
    for buffer in buffers:
        start = _address(buffer)
        first = -(-start // _PAGE) * _PAGE
        last = (start + buffer.nbytes) // _PAGE * _PAGE
        if last > first:
            spans.append((first, last))
    for first, last in spans:
        for at in range(first, last, STEP_BYTES):
            if stop.is_set():
                return
            if madvise(at, min(STEP_BYTES, last - at), _MADV_POPULATE_WRITE) != 0:
                return  # an older kernel (EINVAL) or no memory to spare: leave it to the faults


class Populating:
    """The pages of ``buffers`` (those of at least :data:`MIN_BYTES`) populated in a thread,
    in the order given (give them in the order they fill).

    Use as an async context manager around the reads that fill them; leaving it stops the
    thread at its next step and waits for it. The thread holds the buffers until it ends, so
    their memory stays mapped while it works.
    """

    def __init__(self, buffers: Sequence[memoryview]) -> None:
        self._buffers = [b for b in buffers if b.nbytes >= MIN_BYTES]
        self._stop = threading.Event()
        self._job: asyncio.Future[None] | None = None

    async def __aenter__(self) -> Populating:
        if self._buffers and _madvise() is not None:
            loop = asyncio.get_running_loop()
            self._job = loop.run_in_executor(None, _populate, self._buffers, self._stop)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._job is not None:
            await asyncio.shield(self._job)
