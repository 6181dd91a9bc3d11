"""A minimal HTTP/1.1 client for ranged GETs whose body lands straight in the caller's buffer.

httpx reads the socket 64 KiB at a time and hands each piece over as a new ``bytes`` object,
which caps a single large range at a fraction of what the network and the kernel can do. Here
an :class:`asyncio.BufferedProtocol` gives the kernel the destination buffer itself: the body
of a 206 is received directly into the numpy array, with no intermediate copy.

It speaks only what ranged GETs need. Heads are written and read by :mod:`.head`, which keeps
h11's rules (the parser under httpx), so both paths accept and refuse the same heads, at a
fraction of h11's CPU; a head that breaks them is ``RawProtocolError``. Beyond those rules:

- 1xx interim answers (``100 Continue``, ``103 Early Hints``) are skipped; ``101`` is refused;
- the body is read only when the caller, shown the status and headers, names a buffer for it;
  its framing is any of HTTP/1.1's (:mod:`.framing`): a ``Content-Length`` equal to the
  buffer's length, chunked transfer coding (extensions and trailers read past), or the bytes
  until the server closes the connection. Any other answer makes the connection close without
  its body being read, and the caller decides;
- a body that ends short of its buffer (a cut, a last chunk too soon) is an error that says how
  many bytes came (:class:`RawConnectionError`); one longer than its buffer is
  :class:`RawBodyTooLongError`; a malformed chunk is a cut, after the chunks that ended well
  (as httpx, whose h11 raises the same error for both, has it);
- bytes beyond a ``Content-Length`` body, or bytes that arrive when no request is outstanding,
  make the connection unusable;
- a connection is kept for reuse only after a complete, accepted body, from an HTTP/1.1 answer
  without a ``close`` token in ``Connection`` (HTTP/1.0 needs ``keep-alive``), whose end was not
  the connection's close; after any error, timeout or refused answer it is closed.

The request target and the ``Host`` header are the URL as httpx sends it (:func:`_address`):
spaces and non-ASCII characters percent-encoded once (a ``%20`` stays), dot segments removed,
the authority without userinfo (IPv6 literals keep their brackets: ``Host: [::1]:8080``) nor a
default port.

A body of at least :data:`THREAD_BODY_BYTES` is received in a worker thread: the transport stops
reading, the thread receives into the destination from the same connection (``recv_into``
releases the GIL), and the loop takes the connection back when the body is complete. The copy
out of the socket, and the page faults of a fresh array, then run on as many cores as there
are bodies in flight, where the loop's thread did them all one after another
(on two cores, medians of alternated rounds against nginx: four 128 MiB tensors went from 0.96
to 1.03 of ``curl --parallel``, one 512 MiB tensor from 0.89 to 1.05 of curl; see
``benchmarks/results/2026-11-23-round5.md``). Everything else is unchanged: the watchdog sees
the thread's bytes, and an error, a timeout or a cancellation shuts the socket down, which ends
the thread's wait at once. A thread reads every framing as the loop does (the same
:class:`~.framing.Body` says where its bytes go). Over HTTPS the connection is a socket and an
:class:`ssl.SSLObject` fed from it (:mod:`.tlsconn`), which the thread borrows, so that it
decrypts too, where asyncio's TLS transport decrypted every byte in the loop's thread (one
core for all of them).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import cast

import httpx

from ...status import activity, bytes_listener
from .framing import Body, BodyOverrun, FramingError, LengthBody, body_for
from .head import Fields, HeadError, parse_response_head, request_head
from .selfcancel import withdraw_own_cancel
from .tls import handshake_failure, origin_of, shared_ssl_context
from .tlsconn import TlsStream, TlsTransport, connect_tls
from .transport import Meter, TlsFailed

_SCRATCH_BYTES = 64 * 1024

THREAD_BODY_BYTES = 512 * 1024
"""Bodies at least this long (after the bytes that came with the head) are received in a
worker thread; a thread's hop costs tens of microseconds, 512 KiB a tenth of a
millisecond. The adaptive part size goes down to 1 MiB (see ``reading/streams.py``): every
part of a large read is received in a thread, whatever came with its head."""

_BODY_THREADS = 64
"""Bodies received at once in threads (more wait for a thread, their connections paused)."""

_REPORT_BYTES = 1024 * 1024
_REPORT_SECONDS = 0.05, 0.5
"""A body thread hands its byte counts to the loop (meters, progress bars) once at least
``_REPORT_BYTES`` and the first of these seconds have passed, or the second alone: a few
wake-ups of the loop per second and body, rather than one per receive."""

_POLL_SECONDS = 1.0
"""Longest single wait of a body thread for its socket to become readable: a bound on how late
it notices its ``stop`` event (the loop also shuts the socket down, which wakes it at once)."""

_NO_SCRATCH = memoryview(b"")
"""What a body that uses no scratch is handed instead (see :attr:`Body.uses_scratch`)."""


_executor: ThreadPoolExecutor | None = None


def _body_threads() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(_BODY_THREADS, thread_name_prefix="remotetensors-body")
    return _executor


Accept = Callable[[int, Fields], memoryview | None]
"""Called with the status and headers; returns the buffer the body goes into (its length is
the body's: a ``Content-Length`` must say the same, a chunked or close-delimited body must end
there), or None to close the connection unread."""


_CLOSE_WAIT_SECONDS = 5.0
"""The longest :meth:`RawRangeClient.aclose` waits for its idle connections to be closed (they
are, at the loop's next turn)."""


class RawConnectionError(ConnectionError):
    """The connection failed or closed; ``received`` body bytes had been written by then."""

    def __init__(self, message: str, received: int = 0, *, before_response: bool = False) -> None:
        super().__init__(message)
        self.received = received
        self.before_response = before_response


class RawProtocolError(RawConnectionError):
    """The response head broke HTTP/1.1 syntax; nothing of it was used."""


class RawBodyTooLongError(RawProtocolError):
    """The body ran past the ``length`` bytes of the buffer named for it."""

    def __init__(self, length: int) -> None:
        super().__init__(f"the body is longer than the {length} bytes expected")
        self.length = length


class RawTimeoutError(TimeoutError):
    """No bytes arrived for the read timeout; ``received`` body bytes had been written."""

    def __init__(self, message: str, received: int = 0) -> None:
        super().__init__(message)
        self.received = received


@dataclass(frozen=True, slots=True)
class RawResponse:
    """Status and headers of a response, and how many body bytes went into the target."""

    status: int
    headers: Fields
    received: int
    body_read: bool


class _Protocol(asyncio.BufferedProtocol):
    """One connection: a request's head goes out, its answer comes in (see the module rules).

    ``done`` resolves once per request: with the answer when its body is complete (or when the
    answer is refused and the connection closed unread), or with the error that ended it.

    Args:
        scratch: where head bytes (and a chunked body's framing) land before they are read;
            shared by the connections of one client (one loop), since the loop fills it and
            calls :meth:`buffer_updated` at once, before it reads any other socket.
        idle_seconds: a body thread gives up after this long without a byte.
    """

    def __init__(self, scratch: bytearray, *, idle_seconds: float) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.lost: asyncio.Future[None] | None = None  # resolved by connection_lost
        self._scratch = memoryview(scratch)
        self._head = bytearray()
        self.meter: Meter | None = None
        self._mode = "idle"
        self._body: Body | None = None
        self.progress = 0  # bytes seen in total, for the read-timeout watchdog
        self._accept: Accept | None = None
        self._answer: tuple[int, Fields] | None = None
        self.on_body_bytes: Callable[[int], None] | None = None
        self.done: asyncio.Future[RawResponse] | None = None
        self.keep_alive = False
        self._idle_seconds = idle_seconds
        # While a thread reads: a duplicate of the connection's descriptor, which the loop
        # shuts down to stop the thread (over plain TCP, the thread's own socket).
        self._body_socket: socket.socket | None = None
        self._stop_thread = threading.Event()

    @property
    def received(self) -> int:
        """Body bytes written into the current request's buffer (by a body thread too)."""
        return 0 if self._body is None else self._body.received

    @property
    def _expected(self) -> int:
        return 0 if self._body is None else len(self._body.target)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not an isinstance check: uvloop's TCP transport has every method of
        # asyncio.Transport without deriving from it.
        self.transport = cast("asyncio.Transport", transport)
        self.lost = asyncio.get_running_loop().create_future()

    def begin(self, accept: Accept, meter: Meter | None) -> asyncio.Future[RawResponse]:
        self.meter = meter
        self._mode = "head"
        self._head.clear()
        self._body = None
        self._accept = accept
        self._answer = None
        self.done = asyncio.get_running_loop().create_future()
        return self.done

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._mode == "body":
            assert self._body is not None
            return self._body.buffer(self._scratch)
        return self._scratch

    def buffer_updated(self, nbytes: int) -> None:
        self.progress += nbytes
        if self.meter is not None:
            self.meter.bytes += nbytes
        activity()  # bytes are flowing: no "waiting" status while a long part downloads
        if self._mode == "body":
            assert self._body is not None
            before = self._body.received
            try:
                self._body.updated(nbytes)
            except (FramingError, BodyOverrun) as exc:
                self._fail(self._failure(exc))
                return
            if self.on_body_bytes is not None and self._body.received > before:
                self.on_body_bytes(self._body.received - before)
            self._finish_if_done()
        elif self._mode == "head":
            self._head += self._scratch[:nbytes]
            self._parse_head()
        else:  # bytes nobody asked for: the connection cannot be trusted any more
            self._close()

    def _parse_head(self) -> None:
        try:
            while True:
                head = parse_response_head(self._head)
                if head is None:
                    return
                if head.status == 101:
                    raise HeadError("unexpected 101 Switching Protocols")
                if head.status >= 200:
                    break
                # 100 Continue, 103 Early Hints: the real answer follows
        except HeadError as exc:
            self._fail(RawProtocolError(f"malformed response head: {exc}"))
            return
        status = head.status
        headers = Fields(head.fields)
        self._answer = (status, headers)
        # The bytes after the head: the buffer itself, not a copy (a body thread may hold them
        # until it starts); the next head goes into a new one.
        leftover, self._head = memoryview(self._head), bytearray()
        tokens = {
            token.strip().lower()
            for value in headers.get_list("Connection")
            for token in value.split(",")
        }
        if head.http_version == b"1.1":
            self.keep_alive = "close" not in tokens
        else:
            self.keep_alive = "keep-alive" in tokens and "close" not in tokens
        assert self._accept is not None
        target = self._accept(status, headers)
        body = None if target is None else body_for(headers, target)
        if body is None:
            # Leave the body unread: closing the connection is what stops the download.
            self._mode = "idle"
            self._resolve(RawResponse(status, headers, 0, False))
            self._close()
            return
        if isinstance(body, LengthBody) and len(leftover) > len(body.target):
            self._fail(RawProtocolError("the body is longer than its Content-Length"))
            return
        self._body = body
        self._mode = "body"
        # The bytes that came with the head go in here, and the buffer that held them is freed
        # before the rest arrives (handing them to the thread kept 64 KiB alive beside every
        # part in flight for as long as its thread took to start).
        try:
            body.feed(leftover)
        except (FramingError, BodyOverrun) as exc:
            self._fail(self._failure(exc))
            return
        del leftover
        if len(body.target) - body.received >= THREAD_BODY_BYTES and self._receive_in_thread():
            return
        self._finish_if_done()

    def _failure(self, exc: FramingError | BodyOverrun) -> RawConnectionError:
        """The error for a body that broke its framing or ran past its buffer."""
        if isinstance(exc, BodyOverrun):
            return RawBodyTooLongError(exc.length)
        # A cut, as httpx has it: the bytes of the chunks that ended well are kept.
        return RawConnectionError(
            f"malformed chunked body after {self.received} of {self._expected} body bytes: {exc}",
            self.received,
        )

    def _receive_in_thread(self) -> bool:
        """Hand the rest of the body to a worker thread; False (the loop reads it) where the
        connection's socket cannot be had."""
        transport, body = self.transport, self._body
        if transport is None or body is None:
            return False
        sock: socket.socket | TlsStream
        if isinstance(transport, TlsTransport):
            # The thread borrows the TLS stream itself (its state cannot be copied); the loop
            # wakes it through a duplicate descriptor, and takes the stream back when it ends.
            try:
                self._body_socket = transport.waker()
            except OSError:  # out of descriptors: the loop reads
                return False
            sock, owned = transport.lend(), False
        else:
            raw = transport.get_extra_info("socket")
            if raw is None:
                return False
            transport.pause_reading()
            # A duplicate descriptor of the same connection, so the thread's socket object is
            # its own: the thread closes it when it ends, even if this loop is closed by then
            # (its done callback would never run). The loop only shuts it down (see _close).
            sock = self._body_socket = socket.socket(fileno=os.dup(raw.fileno()))
            owned = True
        self._stop_thread.clear()
        loop = asyncio.get_running_loop()
        try:
            ended = transport.thread_ended if isinstance(transport, TlsTransport) else None
            job = loop.run_in_executor(
                _body_threads(),
                functools.partial(_receive, owned=owned, ended=ended),
                sock,
                body,
                self._moved,
                functools.partial(self._counted, loop),
                self._stop_thread,
                self._idle_seconds,
            )
        except RuntimeError:  # the interpreter is shutting its executors down: the loop reads
            if owned:
                sock.close()
            self._body_socket = None
            if isinstance(transport, TlsTransport):
                transport.take_back()
            transport.resume_reading()
            return False
        job.add_done_callback(self._body_received)
        return True

    def _moved(self, nbytes: int) -> None:
        """In the body thread, after every receive: the watchdog reads ``progress``."""
        self.progress += nbytes  # only the thread writes it meanwhile
        activity()  # a time stamp: safe from any thread

    def _counted(self, loop: asyncio.AbstractEventLoop, nbytes: int) -> None:
        """In the body thread, now and then (see _REPORT_SECONDS): meters and progress bars."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody counts any more
            loop.call_soon_threadsafe(self._report, nbytes)

    def _report(self, nbytes: int) -> None:
        if self.meter is not None:
            self.meter.bytes += nbytes
        if self.on_body_bytes is not None:
            self.on_body_bytes(nbytes)

    def _body_received(self, job: asyncio.Future[None]) -> None:
        """In the loop, when the body thread ends (complete, failed or stopped)."""
        self._body_socket = None  # a plain thread closed its own; a TLS one's is the transport's
        if isinstance(self.transport, TlsTransport):
            self.transport.take_back()  # a close asked meanwhile happens now
        if self._mode != "body":  # abandoned, timed out or failed meanwhile: already closing
            return
        assert self._body is not None
        assert self.transport is not None
        error = None if job.cancelled() else job.exception()
        if isinstance(error, FramingError | BodyOverrun):
            self._fail(self._failure(error))
        elif error is None and self._body.done:
            self.transport.resume_reading()  # bytes beyond the body now close the connection
            self._finish_if_done()
        else:
            self._fail(
                RawConnectionError(
                    f"connection closed after {self.received} of {self._expected} body bytes",
                    self.received,
                )
            )

    def _finish_if_done(self) -> None:
        """Once the body's framing has ended: the answer if every byte came, else a cut."""
        body = self._body
        assert body is not None
        if not body.done:
            return
        self._mode = "idle"
        if body.received != len(body.target):
            self._fail(
                RawConnectionError(
                    f"the body ended after {body.received} of {len(body.target)} bytes",
                    body.received,
                )
            )
            return
        self.keep_alive = self.keep_alive and body.reusable
        assert self._answer is not None
        status, headers = self._answer
        self._resolve(RawResponse(status, headers, body.received, True))

    def _resolve(self, answer: RawResponse) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(answer)

    def _fail(self, error: BaseException) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(error)
        self._close()

    def stalled(self, seconds: float) -> None:
        """No byte arrived for ``seconds``: end the request with RawTimeoutError."""
        self._fail(RawTimeoutError(f"no data for {seconds:g} s", self.received))

    def abandon(self) -> None:
        """Nobody waits any more (a timeout, a cancellation): close without leaving a future
        holding an exception that no one will retrieve."""
        if self.done is not None and not self.done.done():
            self.done.cancel()
        self._close()

    def _close(self) -> None:
        self._mode = "idle"
        if self._body_socket is not None:
            # Wake a body thread waiting for bytes: shut the connection down under it.
            self._stop_thread.set()
            with contextlib.suppress(OSError):  # already gone
                self._body_socket.shutdown(socket.SHUT_RDWR)
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.lost is not None and not self.lost.done():
            self.lost.set_result(None)
        if self._mode == "body" and self._body is not None and self._body_socket is None:
            self._body.closed()  # the end of a body delimited by the close
            self._finish_if_done()
        before = self._answer is None
        message = (
            "connection closed before a response"
            if before
            else f"connection closed after {self.received} of {self._expected} body bytes"
        )
        self._fail(RawConnectionError(message, self.received, before_response=before))

    def eof_received(self) -> bool | None:
        return False


def _receive(
    sock: socket.socket | TlsStream,
    body: Body,
    moved: Callable[[int], None],
    counted: Callable[[int], None],
    stop: threading.Event,
    idle_seconds: float,
    *,
    poll_seconds: float = _POLL_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    owned: bool = True,
    ended: Callable[[], None] | None = None,
) -> None:
    """In a worker thread: receive the rest of ``body`` from ``sock`` (non-blocking, as the loop
    left it; a plain socket, or a TLS stream that decrypts as it receives), then close ``sock``
    when ``owned`` (a duplicate of its own; a borrowed TLS stream goes back to the loop, and
    ``ended`` tells its transport the thread is done with it, last of all). It
    ends when the body's framing ends (``body.done``), when the connection closes (told to
    ``body``, which it ends when the close delimits it), on an error, on ``stop``, or after
    ``idle_seconds`` without a byte (the loop's watchdog ends a stalled body first; this bound
    holds if the loop is gone, so that no thread outlives it waiting and the interpreter can
    exit). Each wait for bytes lasts at most ``poll_seconds``; ``clock`` (seconds, monotonic)
    measures the idle time and the reports. Every receive's size goes to ``moved``; the body
    bytes it brought go to ``counted`` now and then (see :data:`_REPORT_SECONDS`; the rest at
    the end).

    Raises:
        FramingError, BodyOverrun: from ``body`` (the loop fails the request with them).
    """
    # The thread's own scratch (the loop's is in use), for the bodies that use one.
    scratch = memoryview(bytearray(_SCRATCH_BYTES)) if body.uses_scratch else _NO_SCRATCH
    unreported = 0
    soonest, latest = _REPORT_SECONDS
    reported_at = last_byte_at = clock()
    wait: Callable[[], object]
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        wait = functools.partial(poller.poll, poll_seconds * 1000)
    else:  # Windows
        wait = functools.partial(select.select, [sock], [], [], poll_seconds)
    try:
        while not body.done:
            before = body.received
            try:
                nbytes = sock.recv_into(body.buffer(scratch))
            except BlockingIOError:
                if stop.is_set() or clock() - last_byte_at > idle_seconds:
                    break
                wait()  # bounded: the loop shuts the socket down to stop us sooner
                continue
            except OSError:
                nbytes = 0
            if nbytes == 0:
                if not stop.is_set():  # the server closed it, not the loop
                    body.closed()
                break
            moved(nbytes)
            body.updated(nbytes)
            unreported += max(body.received - before, 0)
            last_byte_at = clock()
            waited = last_byte_at - reported_at
            if waited >= latest or (waited >= soonest and unreported >= _REPORT_BYTES):
                counted(unreported)
                unreported = 0
                reported_at += waited
    finally:
        if owned:
            sock.close()  # a duplicate: the connection itself stays open for the loop
        if unreported:
            counted(unreported)
        if ended is not None:
            ended()


class _Watchdog:
    """Ends a request after ``seconds`` without a byte (one timer, re-armed while bytes flow)."""

    def __init__(self, protocol: _Protocol, seconds: float) -> None:
        self._protocol = protocol
        self._seconds = seconds
        self._seen = protocol.progress
        self._loop = asyncio.get_running_loop()
        self._timer = self._loop.call_later(seconds, self._check)

    def _check(self) -> None:
        if self._protocol.progress == self._seen:
            self._protocol.stalled(self._seconds)
            return
        self._seen = self._protocol.progress
        self._timer = self._loop.call_later(self._seconds, self._check)

    def cancel(self) -> None:
        self._timer.cancel()


@functools.lru_cache(maxsize=4096)
def _address(url: str) -> tuple[tuple[str, str, int], str, str]:
    """The pool key ``(scheme, host, port)``, the request target and the ``Host`` value, as
    httpx sends them (see the module): both paths send one URL alike, and a URL that a redirect
    gave (already encoded by httpx's join) is not encoded again.

    Raises:
        ValueError: httpx refuses the URL (a control character, a bad port).
    """
    plain = _plain_address(url)
    if plain is not None:
        return plain
    try:
        parts = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ValueError(f"invalid URL: {exc}") from None
    scheme = parts.scheme
    port = parts.port or (443 if scheme == "https" else 80)
    host = parts.raw_host.decode("ascii")  # IDNA-encoded; an IPv6 literal without brackets
    return (scheme, host, port), parts.raw_path.decode("ascii"), parts.netloc.decode("ascii")


_PLAIN = re.compile(
    r"(https?)://([a-z0-9.-]+)(?::([0-9]{1,5}))?(/[A-Za-z0-9._~:/?\[\]@!$&'()*+,;=%-]*)?\Z"
)
"""A URL that httpx would send as it is written: a lower-case scheme and host name (no IPv6
literal, no userinfo), an optional port, and a path and query of the characters RFC 3986 lets
stand unencoded (and ``%``), no fragment."""


_LONE_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _plain_address(url: str) -> tuple[tuple[str, str, int], str, str] | None:
    """:func:`_address` of a URL that needs no encoding (:data:`_PLAIN`), without httpx's
    parsing (a CDN's signed URLs, 600 characters each and each asked once, made it a sixth of
    a 300-repo scan's CPU); None for any other URL."""
    match = _PLAIN.match(url)
    if match is None:
        return None
    scheme, host, port_text, target = match.groups()
    default = 443 if scheme == "https" else 80
    port = int(port_text) if port_text else default
    if not 0 < port < 65536 or (target and (_LONE_PERCENT.search(target) or "/." in target)):
        return None  # httpx would encode a "%" that starts no escape, or drop dot segments
    netloc = host if port == default else f"{host}:{port}"
    return (scheme, host, port), target or "/", netloc


class RawRangeClient:
    """Pooled keep-alive connections for ranged GETs into buffers.

    Args:
        connect_timeout_seconds: time to establish a connection (and TLS).
        read_timeout_seconds: longest wait for the next bytes.
        max_idle_per_host: idle connections kept per host.
        ca_bundle: the CAs that HTTPS servers are verified with (see :mod:`.tls`; None: those
            the environment names, else certifi's).
    """

    def __init__(
        self,
        *,
        connect_timeout_seconds: float,
        read_timeout_seconds: float,
        max_idle_per_host: int = 32,
        ca_bundle: str | os.PathLike[str] | None = None,
    ) -> None:
        self._connect_timeout = connect_timeout_seconds
        self._read_timeout = read_timeout_seconds
        self._max_idle = max_idle_per_host
        self._ca_bundle = ca_bundle
        self._idle: dict[tuple[str, str, int], list[_Protocol]] = {}
        self._scratch = bytearray(_SCRATCH_BYTES)
        self._closings = 0  # aclose calls: a request begun before the last one keeps nothing

    @staticmethod
    def receives_in_threads(url: str) -> bool:
        """Whether bodies of at least :data:`THREAD_BODY_BYTES` from ``url`` are received in
        worker threads that fault the destination's fresh pages as they go, so that nobody
        need map them ahead: over plain TCP. Over TLS the threads decrypt into the
        destination (see :mod:`.tlsconn`), and first touches from OpenSSL's writes cost more
        CPU than pages mapped ahead on another core: a 512 MiB body with one stream took 0.56
        s of CPU, 0.38 s with its pages mapped ahead (``benchmarks/results/2026-11-25-
        perf3.md``), so there the reader maps them ahead as for the loop's bodies."""
        try:
            return _address(url)[0][0] == "http"
        except ValueError:  # a URL that cannot be sent has no bodies
            return False

    async def get_into(
        self,
        url: str,
        headers: dict[str, str],
        accept: Accept,
        meter: Meter | None = None,
    ) -> RawResponse:
        """GET ``url``; the body goes into the buffer ``accept(status, headers)`` returns.

        The body is read only when ``accept`` returns a buffer and the response's framing can
        fill exactly that many bytes (a ``Content-Length`` equal to them, chunked, or until the
        connection closes); otherwise the connection is closed unread. A body of length 0 with
        a ``Content-Length`` is complete at once, and keeps the connection.

        ``meter``, when given, counts every byte received for this request.

        Raises:
            RawConnectionError, RawTimeoutError: with the body bytes received so far (a body
                that ended short, or whose chunks broke their syntax, included).
            RawBodyTooLongError: the body ran past the buffer.
            RawProtocolError: the answer broke HTTP/1.1 (see the module docstring).
            ValueError: the URL or a header cannot be sent.
            TlsFailed: the TLS handshake failed in a way another attempt cannot mend.
            TlsError: the CA bundle named cannot be loaded.
        """
        key, target, authority = _address(url)
        begun = self._closings
        try:
            request = request_head(target, [("Host", authority), *headers.items()])
        except HeadError as exc:
            raise ValueError(f"cannot send this request: {exc}") from None
        # A pooled connection the server already closed fails before any response: retry once
        # on a fresh connection, as every HTTP client does.
        for reuse in (True, False):
            protocol = await self._connection(key, reuse=reuse)
            try:
                return await self._exchange(protocol, key, request, accept, meter, begun)
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
            context = shared_ssl_context(self._ca_bundle)
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        expired: list[bool] = []

        def expire() -> None:
            expired.append(True)
            task.cancel()

        timer = loop.call_later(self._connect_timeout, expire)  # see .selfcancel
        try:
            factory = functools.partial(
                _Protocol, self._scratch, idle_seconds=self._read_timeout + 1.0
            )
            if context is None:
                _, protocol = await loop.create_connection(factory, host, port)
            else:
                # The thread's own bound outlasts the timer above, which ends the wait first.
                stream = await connect_tls(
                    host, port, context, timeout_seconds=self._connect_timeout + 1.0
                )
                protocol = factory()
                TlsTransport(loop, stream, protocol)
        except asyncio.CancelledError:
            if expired and withdraw_own_cancel(task):
                raise RawTimeoutError(f"connect to {host}:{port} timed out") from None
            raise
        except OSError as exc:
            failure = handshake_failure(exc) if isinstance(exc, ssl.SSLError) else None
            if failure is not None:
                raise TlsFailed(origin_of(host, port), failure) from None
            raise RawConnectionError(f"cannot connect to {host}:{port}: {exc}") from None
        finally:
            timer.cancel()
        return protocol

    async def _exchange(
        self,
        protocol: _Protocol,
        key: tuple[str, str, int],
        request: bytes,
        accept: Accept,
        meter: Meter | None,
        begun: int,
    ) -> RawResponse:
        """Send ``request`` on ``protocol`` and wait for its answer; then keep the connection
        idle if it can serve another request and the client was not closed since the request
        began (``begun``: the count of :meth:`aclose` calls then), else close it."""
        done = protocol.begin(accept, meter)
        # Protocol callbacks run outside the task: hand them the task's listener.
        protocol.on_body_bytes = bytes_listener()
        assert protocol.transport is not None
        protocol.transport.write(request)
        watchdog = _Watchdog(protocol, self._read_timeout)
        try:
            answer = await done
        except BaseException:
            protocol.abandon()
            raise
        finally:
            watchdog.cancel()
        reusable = answer.body_read and protocol.keep_alive and not protocol.closed
        if reusable and begun == self._closings:
            idle = self._idle.setdefault(key, [])
            if len(idle) < self._max_idle:
                idle.append(protocol)
            else:
                protocol._close()
        elif answer.body_read:  # not to be used again (Connection: close, its body's framing,
            protocol._close()  # or the client was closed while the request ran)
        return answer

    async def aclose(self) -> None:
        """Close every idle connection, and return once they are closed (their sockets too,
        TLS or not); a connection in use closes when its request ends, instead of waiting
        idle in a client that nobody will close again (its socket was left to the collector:
        "ResourceWarning: unclosed socket"). Requests sent later work as before (a client
        used again must be closed again).
        """
        self._closings += 1
        closing = [protocol for idle in self._idle.values() for protocol in idle]
        self._idle.clear()
        for protocol in closing:
            protocol._close()
        # connection_lost comes at the loop's next turn (asyncio's transports close their
        # socket then): a loop closed before that turn would leave the sockets open.
        loop = asyncio.get_running_loop()
        lost = [
            p.lost
            for p in closing
            if p.lost is not None and not p.lost.done() and p.lost.get_loop() is loop
        ]
        if lost:
            await asyncio.wait(lost, timeout=_CLOSE_WAIT_SECONDS)
