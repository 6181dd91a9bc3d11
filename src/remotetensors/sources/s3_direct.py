"""An S3 object's ranged reads through a presigned URL and the direct HTTP client.

s3fs sends every request through aiobotocore on fsspec's own event loop: one thread parses
every answer and gathers every body into ``bytes`` (then copied into the array). On a link that
caps each connection at 100 MB/s, that thread was the bound: a 512 MiB tensor read at 0.31
GB/s where the same nginx gave 1.2 GB/s to our HTTP reader and 0.6 to Run:ai Model Streamer
(``benchmarks/results/2026-11-28-perf4.md``). So once an object is open, its ranges are read
as HTTP GETs of a presigned URL (the credentials s3fs resolved sign it, on its loop: no
request) by :class:`~.http.direct.RawRangeClient`, whose bodies land straight in the array from
worker threads, as an HTTP file's do.

Nothing is trusted that the S3 path would not trust: every GET carries ``If-Match`` with the
ETag the object was opened at (a rewrite answers 412), and an answer is taken only when it is
206 with exactly the ``Content-Range`` asked (the object's size as opened) and that ETag. Any
other answer, and any failure of the connection, hands the read back to the S3 path
(:meth:`S3DirectReads.read_into` returns False), which retries, or raises the error the user
would have had: an expired or refused signature (400, 403) is signed again for the next read.

Used only where the S3 path's requests are plain GETs that a presigned URL reproduces: not for
requester-pays buckets, customer-key encryption or other additional request arguments, nor
behind a proxy (``HTTP(S)_PROXY``), whose settings the direct client does not take.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from .http.direct import (
    RawBodyTooLongError,
    RawConnectionError,
    RawProtocolError,
    RawRangeClient,
    RawTimeoutError,
)
from .http.transport import TlsFailed

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from .http.head import Fields

__all__ = ["S3DirectReads"]

SIGNED_SECONDS = 3600
"""How long a presigned URL is valid (seconds)."""

RESIGN_BEFORE_SECONDS = 300
"""A URL this close to its expiry (seconds) is signed again before a read."""

FRESH_SECONDS = 60
"""A URL refused within this many seconds of its signing (a signature version or a policy the
bucket refuses, not an expiry) turns the direct reads off for the object."""

CONNECT_SECONDS = 10.0
READ_SECONDS = 60.0
"""The direct client's timeouts (seconds): to connect, and the longest wait for bytes (a read
that times out goes back to the S3 path, whose own timeouts then apply)."""

_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")


class S3DirectReads:
    """Ranged GETs of one object through a presigned URL (see the module).

    Args:
        sign: makes a presigned ``get_object`` URL of the object, valid ``SIGNED_SECONDS``
            (awaited on the filesystem's loop by the caller's wrapper).
        clock: seconds, monotonic (the URL's age).
    """

    def __init__(
        self,
        sign: Callable[[], Coroutine[Any, Any, str]],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sign = sign
        self._clock = clock
        self._url: str | None = None
        self._signed_at = 0.0
        self._client: RawRangeClient | None = None
        self._off = False  # a fresh URL was refused: every read takes the S3 path

    @staticmethod
    def usable(fs: Any) -> bool:
        """Whether ``fs`` (an ``S3FileSystem``) sends plain GETs that a presigned URL
        reproduces, with no proxy between (see the module)."""
        if any(os.environ.get(name) for name in _PROXY_VARIABLES):
            return False
        if getattr(fs, "req_kw", None) or getattr(fs, "s3_additional_kwargs", None):
            return False
        config = getattr(fs, "config_kwargs", None) or {}
        client = getattr(fs, "client_kwargs", None) or {}
        return not (config.get("proxies") or client.get("verify") is False)

    @property
    def plain(self) -> bool:
        """Whether the signed URL is plain HTTP (bodies received in worker threads that fault
        their own pages; see :meth:`RawRangeClient.receives_in_threads`)."""
        return self._url is not None and RawRangeClient.receives_in_threads(self._url)

    async def prepare(self) -> None:
        """Sign the URL now (no request), so that :attr:`plain` can be told."""
        await self._signed()

    async def read_into(self, start: int, buffer: memoryview, *, size: int, etag: str) -> bool:
        """Read bytes ``[start, start + len(buffer))`` of the object, opened at ``size`` bytes
        and ETag ``etag``, into ``buffer``; False when the answer was not exactly that (then
        ``buffer`` may hold part of it, and the caller reads it the S3 way)."""
        end = start + len(buffer)
        if self._off:
            return False
        try:
            url = await self._signed()
        except Exception:  # credentials that cannot sign: the S3 path says why
            return False
        if self._client is None:
            self._client = RawRangeClient(
                connect_timeout_seconds=CONNECT_SECONDS, read_timeout_seconds=READ_SECONDS
            )
        asked = f"bytes {start}-{end - 1}/{size}"

        def accept(status: int, fields: Fields) -> memoryview | None:
            if status != 206 or fields.get("content-range") != asked:
                return None
            if fields.get("etag") != etag:
                return None
            return buffer

        headers = {"Range": f"bytes={start}-{end - 1}", "If-Match": etag}
        try:
            response = await self._client.get_into(url, headers, accept)
        except (
            RawConnectionError,
            RawTimeoutError,
            RawProtocolError,
            RawBodyTooLongError,
            TlsFailed,
            OSError,
            ValueError,
        ):
            return False
        if response.status in (400, 403):
            # A URL signed just now and refused: this bucket takes no presigned reads (a
            # signature version it refuses, a policy), and every read would pay a request
            # more: the S3 path alone from now on. An older one may have expired early
            # (credentials that rotate): sign again for the next read.
            self._off = self._clock() - self._signed_at < FRESH_SECONDS
            self._url = None
        return response.body_read and response.received == len(buffer)

    def _due(self) -> bool:
        """Whether the URL must be signed (again) before the next read."""
        age = self._clock() - self._signed_at
        return self._url is None or age > SIGNED_SECONDS - RESIGN_BEFORE_SECONDS

    async def _signed(self) -> str:
        if self._url is None or self._due():
            self._url = await self._sign()
            self._signed_at = self._clock()
        return self._url

    async def aclose(self) -> None:
        """Close the direct client's connections."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()
