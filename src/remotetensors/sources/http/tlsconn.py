"""HTTPS connections of the direct reader whose bodies are decrypted off the event loop.

asyncio's TLS transport decrypts in the event loop's thread: every byte of every connection
on one core (0.5-0.8 s of the loop's CPU for a 512 MiB body here; see
``benchmarks/results/2026-11-25-perf3-profile.md``). Here a connection is a plain socket and
an :class:`ssl.SSLObject` fed from it (:class:`TlsStream`), which whoever holds the connection
drives:

- :func:`connect_tls` connects and shakes hands in a worker thread (blocking, bounded by the
  connect timeout), with the same context and host name check as before, so a handshake fails
  with the same ``ssl`` errors, which :mod:`.tls` reads the same way;
- :class:`TlsTransport` drives the direct reader's protocol (:class:`~.direct._Protocol`) from
  the stream, non-blocking, on the loop: requests out, heads and small bodies in;
- for a large body the protocol borrows the stream (:meth:`TlsTransport.lend`) and a body
  thread receives from it as from a plain socket: one ``recv_into`` takes up to 256 KiB of
  records off the socket, and ``SSLObject.read`` decrypts each record straight into the
  destination, the GIL released, on one core fewer than the machine has (:data:`_DECRYPTING`:
  more threads than cores only fight for the GIL and the cores). The loop does not
  touch the stream until the thread gives it back (:meth:`TlsTransport.take_back`); to stop a
  thread early it shuts down a duplicate of the socket's descriptor, which ends the thread's
  wait without touching the TLS state the thread is using, and closing waits for the thread.

Why not a blocking :class:`ssl.SSLSocket` in the thread: OpenSSL then reads the socket itself,
two system calls per 16 KiB record (its header, then its body; the ``ssl`` module cannot turn
read-ahead on), and a 512 MiB body cost 10-30% more CPU than asyncio's transport, which took
longer in wall time than the loop alone on this machine's two cores (``benchmarks/results/
2026-11-25-perf3.md``). Fed from a memory BIO, a record costs one call and no system call, as
in asyncio's transport.

A close without TLS's ``close_notify`` ends the stream as a close does (as the ``ssl``
module's ``suppress_ragged_eofs``, asyncio and httpx read TLS): a body delimited by the close
then ends there, and one with a length that came short is a cut, as over plain TCP.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

_CONNECT_THREADS = 16
_connect_pool: ThreadPoolExecutor | None = None

_CHUNK_BYTES = 256 * 1024
"""Ciphertext taken off the socket per system call (16 records)."""

_DECRYPTING = threading.BoundedSemaphore(max(1, (os.cpu_count() or 1) - 1))
"""Body threads that decrypt at once: one core fewer than the machine has (and at least one).
Decryption releases the GIL for each record and takes it back after; more threads decrypting
than cores only fight for it and for the cores (on two cores, eight body threads decrypting a
512 MiB body took 0.99 s of CPU, one at a time 0.55 s: asyncio's loop took 0.50 s). The core
left is the event loop's."""


def _connect_threads() -> ThreadPoolExecutor:
    # Not the body threads' pool: a connection must not wait for 64 bodies to end.
    global _connect_pool
    if _connect_pool is None:
        _connect_pool = ThreadPoolExecutor(_CONNECT_THREADS, thread_name_prefix="remotetensors-tls")
    return _connect_pool


class TlsStream:
    """A TLS connection as a non-blocking socket would be used: :meth:`recv_into` gives
    plaintext, raising :class:`BlockingIOError` when it needs ciphertext that has not come;
    :meth:`send` encrypts. One thread at a time uses it.

    Args:
        sock: the connected socket (non-blocking once the handshake is done).
        tls: the TLS state, fed from ``incoming`` and writing to ``outgoing``.
    """

    __slots__ = ("_chunk", "_incoming", "_outgoing", "_tls", "lent", "sock")

    def __init__(
        self,
        sock: socket.socket,
        tls: ssl.SSLObject,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
    ) -> None:
        self.sock = sock
        self._tls = tls
        self._incoming = incoming
        self._outgoing = outgoing
        self._chunk = memoryview(bytearray(_CHUNK_BYTES))
        self.lent = False
        """Whether a body thread holds the stream (its reads then take a decrypting slot)."""

    def fileno(self) -> int:
        return self.sock.fileno()

    def pending(self) -> bool:
        """Whether bytes are held that the socket's readiness will not announce."""
        return bool(self._tls.pending() or self._incoming.pending)

    def recv_into(self, buffer: memoryview) -> int:
        """Up to ``len(buffer)`` bytes of plaintext into ``buffer``; 0 when the peer closed.

        Raises:
            BlockingIOError: nothing to read yet (wait for the socket to become readable).
            ssl.SSLError, OSError: a broken record, an alert, a reset.
        """
        if not self.lent:  # the loop's own reads (heads, small bodies) never wait for a slot
            return self._decrypt_into(buffer)
        with _DECRYPTING:  # never held while waiting: the socket is non-blocking
            return self._decrypt_into(buffer)

    def _decrypt_into(self, buffer: memoryview) -> int:
        while True:
            try:
                # With a buffer, read() fills it and returns the count (typeshed says bytes).
                count = int(self._tls.read(len(buffer), buffer))
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return 0  # close_notify, or a close without it: the end of the stream
            else:
                return count + self._more(buffer[count:]) if count else 0
            finally:
                if self._outgoing.pending:  # a key update's answer, a ticket's acknowledgement
                    self._flush()
            count = self.sock.recv_into(self._chunk)  # BlockingIOError when none has come
            if count:
                self._incoming.write(self._chunk[:count])
            else:
                self._incoming.write_eof()

    def _more(self, buffer: memoryview) -> int:
        """Decrypt the records already received into ``buffer``, as far as it holds them: one
        trip through the caller's loop per system call's worth, not per 16 KiB record (that
        loop's bookkeeping cost more than the decryption). Never waits; the end of the stream
        or an error is left for the next call to report."""
        count = 0
        while count < len(buffer) and self._incoming.pending:
            try:
                more = int(self._tls.read(len(buffer) - count, buffer[count:]))
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break
            if not more:
                break
            count += more
        return count

    def send(self, data: bytes | bytearray | memoryview) -> int:
        """Encrypt ``data`` and send what the socket takes; returns ``len(data)``: what it
        did not take yet is held and goes out with :meth:`flush`.

        Raises:
            OSError: the connection failed.
        """
        self._tls.write(data)
        self._flush()
        return len(data)

    def unsent(self) -> bool:
        """Whether encrypted bytes wait for the socket to take them."""
        return bool(self._outgoing.pending)

    def flush(self) -> None:
        """Send what :meth:`send` held back, as far as the socket takes it."""
        self._flush()

    def _flush(self) -> None:
        while self._outgoing.pending:
            data = self._outgoing.read()
            try:
                sent = self.sock.send(data)
            except BlockingIOError:
                sent = 0
            if sent < len(data):
                # Put the rest back in front: a MemoryBIO has no "unread", so rebuild it.
                rest = data[sent:] + self._outgoing.read()
                self._outgoing.write(rest)
                return

    def close(self) -> None:
        self.sock.close()


async def connect_tls(
    host: str, port: int, context: ssl.SSLContext, *, timeout_seconds: float
) -> TlsStream:
    """A TLS connection to ``host:port``, its handshake done and the server's certificate
    verified for ``host``, its socket non-blocking.

    The thread's socket gives up after ``timeout_seconds`` (the caller's own timer usually
    ends the wait first); a connection that completes after the caller stopped waiting is
    closed.

    Raises:
        OSError: the connection failed, or timed out (``TimeoutError``).
        ssl.SSLError: the handshake failed (read by :func:`.tls.handshake_failure`).
    """
    job: Future[TlsStream] = _connect_threads().submit(
        _connect, host, port, context, timeout_seconds
    )
    try:
        return await asyncio.wrap_future(job)
    except asyncio.CancelledError:
        job.add_done_callback(_close_unclaimed)
        raise


def _connect(host: str, port: int, context: ssl.SSLContext, timeout: float) -> TlsStream:
    raw = socket.create_connection((host, port), timeout=timeout)
    try:
        # Small request heads go out at once (asyncio's transports set it too).
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = context.wrap_bio(incoming, outgoing, server_hostname=host)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                raw.sendall(outgoing.read())
                data = raw.recv(_CHUNK_BYTES)
                if data:
                    incoming.write(data)
                else:  # the server went away mid-handshake: the next step raises SSLEOFError
                    incoming.write_eof()
        raw.sendall(outgoing.read())  # the client's Finished
    except BaseException:
        raw.close()
        raise
    raw.setblocking(False)
    return TlsStream(raw, tls, incoming, outgoing)


def _close_unclaimed(job: Future[TlsStream]) -> None:
    """A connection that nobody waits for any more: closed, not left to the collector."""
    if not job.cancelled() and job.exception() is None:
        job.result().close()


class TlsTransport(asyncio.Transport):
    """An asyncio transport over a :class:`TlsStream` (see the module), feeding a
    :class:`asyncio.BufferedProtocol`.

    Args:
        loop: the loop whose thread runs every method but a borrower's reads.
        stream: the connection, its handshake done.
        protocol: told ``connection_made`` now, ``buffer_updated`` as bytes come,
            ``eof_received`` and ``connection_lost`` (always soon after :meth:`close`).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        stream: TlsStream,
        protocol: asyncio.BufferedProtocol,
    ) -> None:
        super().__init__()
        self._loop = loop
        self._stream = stream
        self._fd = stream.fileno()
        self._protocol = protocol
        self._watching = False  # a reader is registered with the loop
        self._paused = False
        self._lent = False  # a body thread reads the stream
        self._closing = False
        self._waker: socket.socket | None = None
        # Between the loop and a borrowing thread: whether the thread has ended, and whether
        # the connection's sockets are closed (by whichever of the two comes last).
        self._handover = threading.Lock()
        self._thread_ended = False
        self._released = False
        self._finished = False
        protocol.connection_made(self)
        self._watch()

    # --- what the direct reader asks of a transport ---------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":
            return self._stream.sock
        if name == "peername":
            with contextlib.suppress(OSError):
                return self._stream.sock.getpeername()
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
            if self._stream.pending():  # bytes held that no readiness event will announce
                self._loop.call_soon(self._read_ready)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return
        try:
            self._stream.send(data)
        except OSError:
            self.close()
            return
        if self._stream.unsent():
            self._loop.add_writer(self._fd, self._write_ready)

    def close(self) -> None:
        """Stop reading and close; a borrowing thread is woken and the close waits for it."""
        if self._closing:
            return
        with self._handover:
            self._closing = True
            waiting = self._lent and not self._thread_ended
        self._unwatch()
        with contextlib.suppress(OSError, ValueError):
            self._loop.remove_writer(self._fd)
        if waiting:
            self.wake()
            return
        self._finish()

    def abort(self) -> None:
        self.close()

    # --- a body thread borrows the stream ----------------------------------------------------

    def lend(self) -> TlsStream:
        """The stream, for a body thread to receive from until :meth:`take_back`; the loop
        reads nothing meanwhile."""
        self._lent = self._stream.lent = True
        self._thread_ended = False
        self.pause_reading()
        return self._stream

    def thread_ended(self) -> None:
        """In the borrowing thread, as it ends: where the transport was closed meanwhile, the
        connection's sockets are closed now, from the thread (the loop's :meth:`take_back`
        may never come: a loop closed or stopped before the thread ended)."""
        with self._handover:
            self._thread_ended = True
            if self._closing:
                self._release()

    def take_back(self) -> None:
        """The thread is done with the stream (in the loop); a close asked meanwhile happens
        now. Reading resumes when the protocol asks (:meth:`resume_reading`)."""
        self._lent = self._stream.lent = False
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
        # What one system call brought (up to 16 records), record by record, while nobody
        # paused the reading (a body thread may take over after any of them).
        while not (self._paused or self._lent or self._closing):
            try:
                received = self._stream.recv_into(memoryview(self._protocol.get_buffer(-1)))
            except BlockingIOError:
                return
            except OSError:  # a reset, a TLS alert or a broken record: the connection is gone
                self.close()
                return
            if not received:
                self._protocol.eof_received()
                self.close()
                return
            self._protocol.buffer_updated(received)
            if not self._stream.pending():
                return

    def _write_ready(self) -> None:
        try:
            self._stream.flush()
        except OSError:
            self.close()
            return
        if not self._stream.unsent():
            with contextlib.suppress(OSError, ValueError):
                self._loop.remove_writer(self._fd)

    def _finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        with self._handover:
            self._release()
        self._loop.call_soon(self._protocol.connection_lost, None)

    def _release(self) -> None:
        """Close the connection's sockets, once (the caller holds ``_handover``)."""
        if self._released:
            return
        self._released = True
        if self._waker is not None:
            self._waker.close()
        self._stream.close()
