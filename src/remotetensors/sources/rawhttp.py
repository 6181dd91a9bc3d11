"""A minimal HTTP/1.1 client for ranged GETs whose body lands straight in the caller's buffer.

httpx reads the socket 64 KiB at a time and hands each piece over as a new ``bytes`` object,
which caps a single large range at a fraction of what the network and the kernel can do. Here
an :class:`asyncio.BufferedProtocol` gives the kernel the destination buffer itself: the body
of a 206 is received directly into the numpy array, with no intermediate copy.

It speaks only what ranged GETs need: a request line and headers out; a status line, headers
and a ``Content-Length`` body in. Anything else (chunked or compressed bodies, a status the
caller does not accept) makes it close the connection without reading the body, and the caller
decides what to do. Connections are kept alive and reused per host.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

import httpx

from ..status import activity, bytes_listener
from .tls import shared_ssl_context

_MAX_HEAD_BYTES = 64 * 1024
_SCRATCH_BYTES = 64 * 1024

T = TypeVar("T")

Accept = Callable[[int, httpx.Headers], bool]
"""Called with the status and headers; True lets the body be read into the target."""


class RawConnectionError(ConnectionError):
    """The connection failed or closed; ``received`` body bytes had been written by then."""

    def __init__(self, message: str, received: int = 0, *, before_response: bool = False) -> None:
        super().__init__(message)
        self.received = received
        self.before_response = before_response


class RawTimeoutError(TimeoutError):
    """No bytes arrived for the read timeout; ``received`` body bytes had been written."""

    def __init__(self, message: str, received: int = 0) -> None:
        super().__init__(message)
        self.received = received


@dataclass(frozen=True, slots=True)
class RawResponse:
    """Status and headers of a response, and how many body bytes went into the target."""

    status: int
    headers: httpx.Headers
    received: int
    body_read: bool


class _Protocol(asyncio.BufferedProtocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._scratch = bytearray(_SCRATCH_BYTES)
        self._head = bytearray()
        self._mode = "idle"
        self._target = memoryview(bytearray())
        self._expected = 0
        self.received = 0
        self.progress = 0  # bytes seen in total, for the read-timeout watchdog
        self._accept: Accept | None = None
        self.on_body_bytes: Callable[[int], None] | None = None
        self.head_done: asyncio.Future[tuple[int, httpx.Headers, bool]] | None = None
        self.body_done: asyncio.Future[None] | None = None
        self.keep_alive = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def begin(self, target: memoryview, accept: Accept) -> None:
        loop = asyncio.get_running_loop()
        self._head.clear()
        self._mode = "head"
        self._target = target
        self._expected = len(target)
        self.received = 0
        self._accept = accept
        self.head_done = loop.create_future()
        self.body_done = loop.create_future()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._mode == "body":
            return self._target[self.received :]
        return memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> None:
        self.progress += nbytes
        activity()  # bytes are flowing: no "waiting" status while a long part downloads
        if self._mode == "body":
            self.received += nbytes
            if self.on_body_bytes is not None:
                self.on_body_bytes(nbytes)
            self._finish_if_complete()
        elif self._mode == "head":
            self._head += self._scratch[:nbytes]
            self._parse_head()
        else:  # bytes nobody asked for: the connection cannot be trusted any more
            self._close()

    def _parse_head(self) -> None:
        end = self._head.find(b"\r\n\r\n")
        if end < 0:
            if len(self._head) > _MAX_HEAD_BYTES:
                self._fail(RawConnectionError("response headers longer than 64 KiB"))
            return
        lines = bytes(self._head[:end]).decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            self._fail(RawConnectionError(f"not an HTTP/1.x status line: {lines[0][:80]!r}"))
            return
        status = int(parts[1])
        fields: list[tuple[str, str]] = []
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                fields.append((name.strip(), value.strip()))
        headers = httpx.Headers(fields)
        leftover = bytes(self._head[end + 4 :])
        self._head.clear()
        self.keep_alive = headers.get("Connection", "").lower() != "close"
        length = headers.get("Content-Length", "")
        assert self._accept is not None
        usable = (
            self._accept(status, headers)
            and "Transfer-Encoding" not in headers
            and length.isdigit()
            and int(length) == self._expected
        )
        assert self.head_done is not None
        if not self.head_done.done():
            self.head_done.set_result((status, headers, usable))
        if not usable:
            # Leave the body unread: closing the connection is what stops the download.
            self._mode = "idle"
            self._close()
            return
        if len(leftover) > self._expected:
            self._fail(RawConnectionError("the body is longer than its Content-Length"))
            return
        self._target[: len(leftover)] = leftover
        self.received = len(leftover)
        self._mode = "body"
        self._finish_if_complete()

    def _finish_if_complete(self) -> None:
        if self.received == self._expected:
            self._mode = "idle"
            if self.body_done is not None and not self.body_done.done():
                self.body_done.set_result(None)

    def _fail(self, error: BaseException) -> None:
        head, body = self.head_done, self.body_done
        if head is not None and not head.done():
            head.set_exception(error)
            if body is not None and not body.done():
                body.cancel()  # nobody will wait for a body that never started
        elif body is not None and not body.done():
            if (
                head is not None
                and not head.cancelled()
                and head.exception() is None
                and head.result()[2]
            ):
                body.set_exception(error)
            else:
                body.cancel()
        self._close()

    def _close(self) -> None:
        self._mode = "idle"
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        before = self.head_done is not None and not self.head_done.done()
        self._fail(
            RawConnectionError(
                f"connection closed after {self.received} of {self._expected} body bytes",
                self.received,
                before_response=before and self.received == 0,
            )
        )

    def eof_received(self) -> bool | None:
        return False


class RawRangeClient:
    """Pooled keep-alive connections for ranged GETs into buffers.

    Args:
        connect_timeout_seconds: time to establish a connection (and TLS).
        read_timeout_seconds: longest wait for the next bytes.
        max_idle_per_host: idle connections kept per host.
    """

    def __init__(
        self,
        *,
        connect_timeout_seconds: float,
        read_timeout_seconds: float,
        max_idle_per_host: int = 32,
    ) -> None:
        self._connect_timeout = connect_timeout_seconds
        self._read_timeout = read_timeout_seconds
        self._max_idle = max_idle_per_host
        self._idle: dict[tuple[str, str, int], list[_Protocol]] = {}

    async def get_into(
        self, url: str, headers: dict[str, str], target: memoryview, accept: Accept
    ) -> RawResponse:
        """GET ``url``; if ``accept`` approves the answer, its body goes into ``target``.

        The body is read only when it has exactly ``len(target)`` bytes, no transfer coding,
        and ``accept(status, headers)`` is true; otherwise the connection is closed unread.

        Raises:
            RawConnectionError, RawTimeoutError: with the body bytes received so far.
        """
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        host = parts.hostname or ""
        port = parts.port or (443 if scheme == "https" else 80)
        key = (scheme, host, port)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host_header = host if parts.port is None else f"{host}:{port}"
        lines = [f"GET {path} HTTP/1.1", f"Host: {host_header}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        # A pooled connection the server already closed fails before any response: retry once
        # on a fresh connection, as every HTTP client does.
        for reuse in (True, False):
            protocol = await self._connection(key, reuse=reuse)
            try:
                return await self._exchange(protocol, key, request, target, accept)
            except RawConnectionError as exc:
                if not (exc.before_response and protocol.progress == 0 and reuse):
                    raise
        raise AssertionError("unreachable")

    async def _connection(self, key: tuple[str, str, int], *, reuse: bool) -> _Protocol:
        idle = self._idle.get(key, [])
        while reuse and idle:
            protocol = idle.pop()
            if not protocol.closed:
                protocol.progress = 0
                return protocol
        scheme, host, port = key
        context = None
        if scheme == "https":
            context = shared_ssl_context()
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await asyncio.wait_for(
                loop.create_connection(
                    _Protocol, host, port, ssl=context, server_hostname=host if context else None
                ),
                self._connect_timeout,
            )
        except asyncio.TimeoutError:
            raise RawTimeoutError(f"connect to {host}:{port} timed out") from None
        except OSError as exc:
            raise RawConnectionError(f"cannot connect to {host}:{port}: {exc}") from None
        return protocol

    async def _exchange(
        self,
        protocol: _Protocol,
        key: tuple[str, str, int],
        request: bytes,
        target: memoryview,
        accept: Accept,
    ) -> RawResponse:
        protocol.begin(target, accept)
        # Protocol callbacks run outside the task: hand them the task's listener.
        protocol.on_body_bytes = bytes_listener()
        assert protocol.transport is not None
        assert protocol.head_done is not None
        assert protocol.body_done is not None
        protocol.transport.write(request)
        try:
            status, headers, usable = await self._wait(protocol, protocol.head_done)
            if usable:
                await self._wait(protocol, protocol.body_done)
        except BaseException:
            # Nobody will wait for these any more: settle them now, so that closing the
            # connection does not leave an exception in them that is never retrieved.
            for future in (protocol.head_done, protocol.body_done):
                if not future.done():
                    future.cancel()
            protocol._close()
            raise
        if usable and protocol.keep_alive and not protocol.closed:
            idle = self._idle.setdefault(key, [])
            if len(idle) < self._max_idle:
                idle.append(protocol)
            else:
                protocol._close()
        return RawResponse(status, headers, protocol.received if usable else 0, usable)

    async def _wait(self, protocol: _Protocol, future: asyncio.Future[T]) -> T:
        """Wait for ``future`` while bytes keep arriving; fail after a silent read timeout."""
        while True:
            seen = protocol.progress
            started = time.monotonic()
            try:
                return await asyncio.wait_for(asyncio.shield(future), self._read_timeout)
            except asyncio.TimeoutError:
                if protocol.progress == seen:
                    raise RawTimeoutError(
                        f"no data for {time.monotonic() - started:.1f} s", protocol.received
                    ) from None

    async def aclose(self) -> None:
        """Close every idle connection."""
        for idle in self._idle.values():
            for protocol in idle:
                protocol._close()
        self._idle.clear()
