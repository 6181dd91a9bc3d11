"""HTTPS connections of the direct reader whose bodies are decrypted off the event loop.

asyncio's TLS transport decrypts in the event loop's thread: it receives into a buffer of its
own, copies that into a ``MemoryBIO``, and ``SSLObject.read`` decrypts 16 KiB records into the
destination, every byte of every connection on one core (0.5-0.8 s of the loop's CPU for a
512 MiB body here, two copies more than curl makes; see
``benchmarks/results/2026-11-25-perf3-profile.md``). Here a connection is a plain
:class:`ssl.SSLSocket` instead:

- :func:`connect_tls` connects and shakes hands in a worker thread (blocking, bounded by the
  connect timeout), with the same context and host name check as before, so a handshake fails
  with the same ``ssl`` errors, which :mod:`.tls` reads the same way;
- :class:`TlsTransport` drives the direct reader's protocol (:class:`~.direct._Protocol`) from
  that socket, non-blocking, on the loop: requests out, heads and small bodies in, as asyncio's
  transport did;
- for a large body the protocol borrows the socket (:meth:`TlsTransport.lend`) and a body thread
  receives from it as from a plain one: ``recv_into`` decrypts each record straight into the
  destination with the GIL released, on as many cores as bodies are in flight. The loop does
  not touch the socket until the thread gives it back (:meth:`TlsTransport.take_back`); to stop
  a thread early it shuts down a duplicate of the descriptor, which ends the thread's wait
  without touching the TLS state the thread is using, and closing waits for the thread.

A close without TLS's ``close_notify`` ends the stream as a close does (the ``ssl`` module's
``suppress_ragged_eofs``, as asyncio and httpx read TLS): a body delimited by the close then
ends there, and one with a length that came short is a cut, as over plain TCP.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

_CONNECT_THREADS = 16
_connect_pool: ThreadPoolExecutor | None = None


def _connect_threads() -> ThreadPoolExecutor:
    # Not the body threads' pool: a connection must not wait for 64 bodies to end.
    global _connect_pool
    if _connect_pool is None:
        _connect_pool = ThreadPoolExecutor(_CONNECT_THREADS, thread_name_prefix="remotetensors-tls")
    return _connect_pool


async def connect_tls(
    host: str, port: int, context: ssl.SSLContext, *, timeout_seconds: float
) -> ssl.SSLSocket:
    """A TLS connection to ``host:port``, its handshake done and the server's certificate
    verified for ``host``, as a non-blocking socket.

    The thread's socket gives up after ``timeout_seconds`` (the caller's own timer usually
    ends the wait first); a connection that completes after the caller stopped waiting is
    closed.

    Raises:
        OSError: the connection failed, or timed out (``TimeoutError``).
        ssl.SSLError: the handshake failed (read by :func:`.tls.handshake_failure`).
    """
    job: Future[ssl.SSLSocket] = _connect_threads().submit(
        _connect, host, port, context, timeout_seconds
    )
    try:
        return await asyncio.wrap_future(job)
    except asyncio.CancelledError:
        job.add_done_callback(_close_unclaimed)
        raise


def _connect(host: str, port: int, context: ssl.SSLContext, timeout: float) -> ssl.SSLSocket:
    raw = socket.create_connection((host, port), timeout=timeout)
    try:
        # Small request heads go out at once (asyncio's transports set it too).
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tls = context.wrap_socket(raw, server_hostname=host)
    except BaseException:
        raw.close()
        raise
    tls.setblocking(False)
    return tls


def _close_unclaimed(job: Future[ssl.SSLSocket]) -> None:
    """A connection that nobody waits for any more: closed, not left to the collector."""
    if not job.cancelled() and job.exception() is None:
        job.result().close()


class TlsTransport(asyncio.Transport):
    """An asyncio transport over a connected, non-blocking :class:`ssl.SSLSocket` (see the
    module), feeding a :class:`asyncio.BufferedProtocol`.

    Args:
        loop: the loop whose thread runs every method but a borrower's reads.
        sock: the connection, its handshake done.
        protocol: told ``connection_made`` now, ``buffer_updated`` as bytes come,
            ``eof_received`` and ``connection_lost`` (always soon after :meth:`close`).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: ssl.SSLSocket,
        protocol: asyncio.BufferedProtocol,
    ) -> None:
        super().__init__()
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._out = bytearray()
        self._watching = False  # a reader is registered with the loop
        self._paused = False
        self._lent = False  # a body thread reads the socket
        self._closing = False
        self._waker: socket.socket | None = None
        protocol.connection_made(self)
        self._watch()

    # --- what the direct reader asks of a transport ---------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name in ("socket", "ssl_object"):
            return self._sock
        if name == "peername":
            with contextlib.suppress(OSError):
                return self._sock.getpeername()
        return default

    def is_closing(self) -> bool:
        return self._closing

    def is_reading(self) -> bool:
        return not self._paused and not self._closing

    def pause_reading(self) -> None:
        self._paused = True
        self._unwatch()

    def resume_reading(self) -> None:
        self._paused = False
        if not self._lent and not self._closing:
            self._watch()
            if self._sock.pending():  # decrypted bytes that no readiness event will announce
                self._loop.call_soon(self._read_ready)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return
        self._out += data
        self._flush()

    def close(self) -> None:
        """Stop reading and close; a borrowing thread is woken and the close waits for it."""
        if self._closing:
            return
        self._closing = True
        self._unwatch()
        with contextlib.suppress(OSError, ValueError):
            self._loop.remove_writer(self._fd)
        if self._lent:
            self.wake()
            return
        self._finish()

    def abort(self) -> None:
        self.close()

    # --- a body thread borrows the socket -------------------------------------------------------

    def lend(self) -> ssl.SSLSocket:
        """The socket, for a body thread to receive from until :meth:`take_back`; the loop
        reads nothing meanwhile."""
        self._lent = True
        self.pause_reading()
        return self._sock

    def take_back(self) -> None:
        """The thread is done with the socket (in the loop); a close asked meanwhile happens
        now. Reading resumes when the protocol asks (:meth:`resume_reading`)."""
        self._lent = False
        if self._closing:
            self._finish()

    def waker(self) -> socket.socket:
        """A duplicate of the connection's descriptor (closed with the transport): shutting it
        down ends a borrowing thread's wait without touching the TLS state the thread holds.

        Raises:
            OSError: the descriptor cannot be duplicated (out of descriptors).
        """
        if self._waker is None:
            self._waker = socket.socket(fileno=os.dup(self._fd))
        return self._waker

    def wake(self) -> None:
        """End a borrowing thread's wait: shut the connection down under it."""
        with contextlib.suppress(OSError):
            self.waker().shutdown(socket.SHUT_RDWR)

    # --- the loop's side --------------------------------------------------------------------------

    def _watch(self) -> None:
        if not self._watching:
            self._loop.add_reader(self._fd, self._read_ready)
            self._watching = True

    def _unwatch(self) -> None:
        if self._watching:
            self._loop.remove_reader(self._fd)
            self._watching = False

    def _read_ready(self) -> None:
        # One record per call, as asyncio's transports read once per event; more while the
        # TLS layer holds decrypted bytes that the descriptor's readiness does not show.
        while not (self._paused or self._lent or self._closing):
            try:
                received = self._sock.recv_into(self._protocol.get_buffer(-1))
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                return
            except OSError:  # a reset, a TLS alert or a broken record: the connection is gone
                self.close()
                return
            if not received:
                self._protocol.eof_received()
                self.close()
                return
            self._protocol.buffer_updated(received)
            if not self._sock.pending():
                return

    def _flush(self) -> None:
        while self._out and not self._closing:
            try:
                sent = self._sock.send(self._out)
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                self._loop.add_writer(self._fd, self._flush)
                return
            except OSError:
                self.close()
                return
            del self._out[:sent]
        with contextlib.suppress(OSError, ValueError):
            self._loop.remove_writer(self._fd)

    def _finish(self) -> None:
        for sock in (self._waker, self._sock):
            if sock is not None:
                sock.close()
        self._loop.call_soon(self._protocol.connection_lost, None)
