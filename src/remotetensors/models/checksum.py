"""Whole-file checksums, for bintensors files saved with ``save_with_checksum``."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable
from typing import Any

from ..errors import ChecksumMismatchError
from ..redact import redact_url
from ..sources.http.client import HttpOptions
from ..sources.resolve import open_source
from .sync import run_sync

Hasher = Callable[[], Any]
"""A hashlib constructor such as ``hashlib.sha1``: called with no argument, has update/digest."""

STREAM_CHUNK_BYTES = 8 * 1024 * 1024
"""Bytes per request while streaming; up to ``max_concurrency`` chunks are in flight."""


async def verify_checksum_async(
    location: str | os.PathLike[str],
    digest: bytes | str,
    *,
    hasher: Hasher | str = hashlib.sha1,
    max_concurrency: int = 4,
    http_options: HttpOptions | None = None,
) -> bytes:
    """Stream the whole file once and compare its digest with ``digest``.

    Args:
        location: any location ``safe_open`` reads.
        digest: the expected digest, raw bytes (what bintensors' ``save_with_checksum`` returns)
            or hex text.
        hasher: a hashlib constructor, or the name of one (``"sha256"``); SHA-1 by default, as
            bintensors.
        max_concurrency: chunks fetched at once (hashed in order).

    Returns:
        The digest, when it matches.

    Raises:
        ChecksumMismatchError: the digests differ (both are named).
        and whatever the source raises.
    """
    make = (lambda: hashlib.new(hasher)) if isinstance(hasher, str) else hasher
    expected = bytes.fromhex(digest) if isinstance(digest, str) else bytes(digest)
    # Not through the persistent cache: a checksum is of the bytes the server has now.
    source = open_source(location, http_options=http_options, cache=False)
    try:
        state = make()
        prefix = await source.open_prefix(STREAM_CHUNK_BYTES)
        state.update(prefix.data)
        starts = range(len(prefix.data), prefix.size, STREAM_CHUNK_BYTES)
        pending: list[asyncio.Task[bytes]] = []
        try:
            for start in starts:
                end = min(start + STREAM_CHUNK_BYTES, prefix.size)
                pending.append(asyncio.ensure_future(source.read(start, end)))
                if len(pending) >= max_concurrency:
                    state.update(await pending.pop(0))  # in file order
            while pending:
                state.update(await pending.pop(0))
        except BaseException:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            raise
    finally:
        await source.aclose()
    seen: bytes = state.digest()
    if seen != expected:
        raise ChecksumMismatchError(
            f"{redact_url(os.fspath(location))}: checksum mismatch: expected {expected.hex()}, "
            f"the file has {seen.hex()}"
        )
    return seen


def verify_checksum(
    location: str | os.PathLike[str],
    digest: bytes | str,
    *,
    hasher: Hasher | str = hashlib.sha1,
    max_concurrency: int = 4,
    http_options: HttpOptions | None = None,
) -> bytes:
    """Sync twin of :func:`verify_checksum_async`."""
    return run_sync(
        verify_checksum_async(
            location,
            digest,
            hasher=hasher,
            max_concurrency=max_concurrency,
            http_options=http_options,
        )
    )
