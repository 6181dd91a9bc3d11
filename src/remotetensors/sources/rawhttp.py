"""A minimal HTTP/1.1 client for ranged GETs whose body lands straight in the caller's buffer.

httpx reads the socket 64 KiB at a time and hands each piece over as a new ``bytes`` object,
which caps a single large range at a fraction of what the network and the kernel can do. Here
an :class:`asyncio.BufferedProtocol` gives the kernel the destination buffer itself: the body
of a 206 is received directly into the numpy array, with no intermediate copy.

It speaks only what ranged GETs need. The request is serialised, and the response head parsed,
by h11 (the parser under httpx), so both paths accept and refuse the same heads; only the body
bypasses it. The rules, after RFC 9112:

- status line ``HTTP/1.x SP 3DIGIT SP reason``, field lines ``name: value`` with token names
  and no control characters in values, a head of at most 64 KiB (h11 refuses the rest:
  ``RawProtocolError``);
- a bare LF as line terminator and obs-fold continuation lines are accepted as RFC 9112 lets a
  recipient do (sections 2.2 and 5.2; the fold is replaced by a space), as httpx does;
- 1xx interim answers (``100 Continue``, ``103 Early Hints``) are skipped; ``101`` is refused;
- duplicate ``Content-Length`` fields with different values, or a ``Content-Length`` that is
  not a number, are refused (``RawProtocolError``);
- the body is read only when the caller, shown the status and headers, names a buffer for it,
  and the response has no ``Transfer-Encoding`` and a ``Content-Length`` equal to that buffer's
  length; any other answer makes the connection close without its body being read, and the
  caller decides;
- bytes beyond the announced body, or bytes that arrive when no request is outstanding, make
  the connection unusable;
- a connection is kept for reuse only after a complete, accepted body, from an HTTP/1.1 answer
  without a ``close`` token in ``Connection`` (HTTP/1.0 needs ``keep-alive``); after any error,
  timeout or refused answer it is closed.

The ``Host`` header is the URL's authority without userinfo, so IPv6 literals keep their
brackets (``Host: [::1]:8080``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

import h11
import httpx

from ..status import activity, bytes_listener
from .tls import shared_ssl_context

_MAX_HEAD_BYTES = 64 * 1024
_SCRATCH_BYTES = 64 * 1024

T = TypeVar("T")

Accept = Callable[[int, httpx.Headers], memoryview | None]
"""Called with the status and headers; returns the buffer the body goes into (its length is
the body length the response must announce), or None to close the connection unread."""


class RawConnectionError(ConnectionError):
    """The connection failed or closed; ``received`` body bytes had been written by then."""

    def __init__(self, message: str, received: int = 0, *, before_response: bool = False) -> None:
        super().__init__(message)
        self.received = received
        self.before_response = before_response


class RawProtocolError(RawConnectionError):
    """The response head broke HTTP/1.1 syntax; nothing of it was used."""


class Meter:
    """Counts bytes received (head and body) across the requests it is passed to."""

    __slots__ = ("bytes",)

    def __init__(self) -> None:
        self.bytes = 0


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
        self._parser: h11.Connection | None = None
        self.meter: Meter | None = None
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

    def begin(self, parser: h11.Connection, accept: Accept, meter: Meter | None) -> None:
        loop = asyncio.get_running_loop()
        self._parser = parser
        self.meter = meter
        self._mode = "head"
        self._target = memoryview(bytearray())
        self._expected = 0
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
        if self.meter is not None:
            self.meter.bytes += nbytes
        activity()  # bytes are flowing: no "waiting" status while a long part downloads
        if self._mode == "body":
            self.received += nbytes
            if self.on_body_bytes is not None:
                self.on_body_bytes(nbytes)
            self._finish_if_complete()
        elif self._mode == "head":
            assert self._parser is not None
            self._parser.receive_data(bytes(self._scratch[:nbytes]))
            self._parse_head()
        else:  # bytes nobody asked for: the connection cannot be trusted any more
            self._close()

    def _parse_head(self) -> None:
        parser = self._parser
        assert parser is not None
        try:
            while True:
                event = parser.next_event()
                if event is h11.NEED_DATA:
                    return
                if isinstance(event, h11.InformationalResponse) and event.status_code != 101:
                    continue  # 100 Continue, 103 Early Hints: the real answer follows
                if isinstance(event, h11.Response):
                    break
                raise h11.RemoteProtocolError(f"unexpected {type(event).__name__}")
        except h11.RemoteProtocolError as exc:
            self._fail(RawProtocolError(f"malformed response head: {exc}"))
            return
        status = event.status_code
        headers = httpx.Headers([(bytes(k), bytes(v)) for k, v in event.headers])
        leftover = parser.trailing_data[0]
        self._parser = None
        tokens = {
            token.strip().lower()
            for value in headers.get_list("Connection")
            for token in value.split(",")
        }
        if event.http_version == b"1.1":
            self.keep_alive = "close" not in tokens
        else:
            self.keep_alive = "keep-alive" in tokens and "close" not in tokens
        length = headers.get("Content-Length", "")
        assert self._accept is not None
        target = self._accept(status, headers)
        usable = (
            target is not None
            and "Transfer-Encoding" not in headers
            and length.isdigit()
            and int(length) == len(target)
        )
        if target is not None and usable:
            self._target = target
            self._expected = len(target)
        assert self.head_done is not None
        if not self.head_done.done():
            self.head_done.set_result((status, headers, usable))
        if not usable:
            # Leave the body unread: closing the connection is what stops the download.
            self._mode = "idle"
            self._close()
            return
        if len(leftover) > self._expected:
            self._fail(RawProtocolError("the body is longer than its Content-Length"))
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

    def abandon(self) -> None:
        """Nobody waits any more (a timeout, a cancellation): close without leaving a future
        holding an exception that no one will retrieve."""
        for future in (self.head_done, self.body_done):
            if future is not None and not future.done():
                future.cancel()
        self._close()

    def _close(self) -> None:
        self._mode = "idle"
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        before = self.head_done is not None and not self.head_done.done()
        message = (
            "connection closed before a response"
            if before
            else f"connection closed after {self.received} of {self._expected} body bytes"
        )
        self._fail(RawConnectionError(message, self.received, before_response=before))

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
        self,
        url: str,
        headers: dict[str, str],
        accept: Accept,
        meter: Meter | None = None,
    ) -> RawResponse:
        """GET ``url``; the body goes into the buffer ``accept(status, headers)`` returns.

        The body is read only when ``accept`` returns a buffer and the response announces
        exactly that many bytes with no transfer coding; otherwise the connection is closed
        unread. A body of length 0 is complete at once, and keeps the connection.

        ``meter``, when given, counts every byte received for this request.

        Raises:
            RawConnectionError, RawTimeoutError: with the body bytes received so far.
            RawProtocolError: the answer broke HTTP/1.1 (see the module docstring).
        """
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        host = parts.hostname or ""
        port = parts.port or (443 if scheme == "https" else 80)
        key = (scheme, host, port)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        # The authority as written, minus userinfo: IPv6 literals keep their brackets.
        authority = parts.netloc.rpartition("@")[2]
        fields = [("Host", authority), *headers.items()]
        # A pooled connection the server already closed fails before any response: retry once
        # on a fresh connection, as every HTTP client does.
        for reuse in (True, False):
            protocol = await self._connection(key, reuse=reuse)
            parser = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD_BYTES)
            try:
                request = parser.send(h11.Request(method="GET", target=path, headers=fields))
            except h11.LocalProtocolError as exc:
                raise ValueError(f"cannot send this request: {exc}") from None
            assert request is not None
            parser.send(h11.EndOfMessage())
            try:
                return await self._exchange(protocol, key, parser, request, accept, meter)
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
        parser: h11.Connection,
        request: bytes,
        accept: Accept,
        meter: Meter | None,
    ) -> RawResponse:
        protocol.begin(parser, accept, meter)
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
            protocol.abandon()
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
            try:
                return await asyncio.wait_for(asyncio.shield(future), self._read_timeout)
            except asyncio.TimeoutError:
                if protocol.progress == seen:
                    raise RawTimeoutError(
                        f"no data for {self._read_timeout:g} s", protocol.received
                    ) from None

    async def aclose(self) -> None:
        """Close every idle connection."""
        for idle in self._idle.values():
            for protocol in idle:
                protocol._close()
        self._idle.clear()
