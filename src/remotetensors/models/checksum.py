"""Whole-file checksums: for bintensors files saved with ``save_with_checksum``, and for a hub
file against the SHA-256 its repo's listing gives (:func:`verify_listed_async`)."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable
from typing import Any

from ..errors import ChecksumMismatchError, LocationError, NotFoundError
from ..redact import redact_url
from ..sources.http.client import HttpOptions
from ..sources.hub.repo import HubPath
from ..sources.resolve import HubPlace, open_source, split_location
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


async def verify_listed_async(
    location: str,
    *,
    token: str | bool | None = None,
    revision: str | None = None,
    http_options: HttpOptions | None = None,
    max_concurrency: int = 4,
) -> tuple[str, str, int | None]:
    """Stream a hub file whole and check its SHA-256 against the one its repo lists for it.

    The listing (of the file's folder, at the revision's commit; kept in the persistent cache
    by commit) names the file's LFS sha256 and size; the file is then read at that very
    commit, so a push in between cannot make a mismatch.

    Returns:
        ``(location at the commit, sha256 hex, listed size)`` when the digests match.

    Raises:
        LocationError: not a file of a hub repo.
        NotFoundError: the listing has no such file; or the file is not in LFS (the hub lists
            no sha256 for it, only a git blob id): pass the digest to :func:`verify_checksum`.
        ChecksumMismatchError: the digests differ (both named).
        and whatever the hub's answers raise.
    """
    place, name = split_location(
        location, revision=revision, token=token, http_options=http_options
    )
    if not isinstance(place, HubPlace) or name is None:
        raise LocationError(
            f"{redact_url(location)}: only a file of a hub repo (hf://org/name/file) has a "
            "listed sha256; for another location, give the digest to compare with"
        )
    path = place.path.child(name).path
    listed = await place.repo.listed_file(path)
    if listed is None:
        raise NotFoundError(
            f"{redact_url(location)}: the repo's listing at {place.repo.revision} has no {path!r}"
        )
    if listed.sha256 is None:
        raise NotFoundError(
            f"{redact_url(location)}: not an LFS file: the hub lists no sha256 for it (only "
            f"its git blob id {listed.oid}); give the digest to compare with"
        )
    parsed = place.path
    pinned = str(HubPath(parsed.repo_type, parsed.repo_id, place.repo.revision, path))
    await verify_checksum_async(
        pinned,
        listed.sha256,
        hasher="sha256",
        max_concurrency=max_concurrency,
        http_options=http_options,
    )
    return pinned, listed.sha256, listed.size
