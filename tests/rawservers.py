"""Raw-socket loopback HTTP servers that misbehave byte for byte, for the hostile-network tests.

A :class:`RawServer` accepts connections on a free loopback port (IPv4 or IPv6), reads each
request head, records it, and lets a handler write whatever bytes it likes: interim 1xx
answers, bare-LF or folded headers, a body cut after a few bytes, a trickle, a redirect loop.
Each connection runs on a thread of its own; :meth:`RawServer.stop` closes every socket. Given a
server-side ``tls`` context, a server speaks HTTPS (see ``tests/certificates.py`` for a CA made
in the test).
"""

from __future__ import annotations

import contextlib
import itertools
import re
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

Reply = bytes | Callable[[socket.socket], bool]
"""What a handler returns: bytes to send on a kept-alive connection, or a function that writes
the answer itself and returns whether the connection stays open."""


@dataclass
class Request:
    """One request head as the server read it (header names lower-cased)."""

    method: str
    target: str
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def range(self) -> tuple[int, int] | None:
        """(start, end exclusive) of a ``Range: bytes=a-b`` request."""
        match = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("range", ""))
        if match is None:
            return None
        return int(match.group(1)), int(match.group(2)) + 1


Handler = Callable[[Request, int], Reply]
"""Called with the request and its number (0-based, over the server's lifetime)."""


class RawServer:
    """A loopback server whose answers are written by ``handler``; counts its requests.
    With ``tls``, every connection is wrapped in it (its handshake on the connection's thread)."""

    def __init__(
        self, handler: Handler, *, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None
    ) -> None:
        self.handler = handler
        self.tls = tls
        self.requests: list[Request] = []
        self.connections = 0
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, 0))
        self._listener.listen(64)
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        authority = f"[{host}]" if family == socket.AF_INET6 else host
        self.url = f"{'https' if tls else 'http'}://{authority}:{self.port}"
        self._connections: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(10)
            with self._lock:
                self._connections.append(conn)
                self.connections += 1
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            with self._lock:
                self._threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        buffered = b""
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
                with self._lock:
                    self._connections.append(conn)
            while not self.stopping.is_set():
                while b"\r\n\r\n" not in buffered:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffered += chunk
                head, _, buffered = buffered.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                request = Request(method, target, headers)
                with self._lock:
                    number = len(self.requests)
                    self.requests.append(request)
                reply = self.handler(request, number)
                if isinstance(reply, bytes):
                    conn.sendall(reply)
                elif not reply(conn):
                    return
        except OSError:
            return
        finally:
            conn.close()

    def stop(self) -> None:
        self.stopping.set()
        self._listener.close()
        with self._lock:
            connections = list(self._connections)
            threads = list(self._threads)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        for thread in threads:
            thread.join(5)


def head(
    status: str, fields: Iterable[tuple[str, str]], *, eol: bytes = b"\r\n", raw: bytes = b""
) -> bytes:
    """A response head: ``HTTP/1.1 {status}``, the fields, ``raw`` extra lines, a blank line."""
    lines = [f"HTTP/1.1 {status}".encode()]
    lines += [f"{name}: {value}".encode("latin-1") for name, value in fields]
    return eol.join(lines) + eol + raw + eol


def partial(
    data: bytes,
    request: Request,
    *,
    fields: Iterable[tuple[str, str]] = (),
    eol: bytes = b"\r\n",
    raw: bytes = b"",
) -> tuple[bytes, bytes]:
    """The head and body of a correct 206 for ``request``'s range of ``data``."""
    asked = request.range
    assert asked is not None, request
    start, end = asked[0], min(asked[1], len(data))
    body = data[start:end]
    answer = head(
        "206 Partial Content",
        [
            ("Content-Range", f"bytes {start}-{end - 1}/{len(data)}"),
            ("Content-Length", str(len(body))),
            *fields,
        ],
        eol=eol,
        raw=raw,
    )
    return answer, body


def cut_after(answer: bytes, body: bytes, count: int) -> Callable[[socket.socket], bool]:
    """Send the head and the first ``count`` body bytes, then close the connection."""

    def write(conn: socket.socket) -> bool:
        conn.sendall(answer + body[:count])
        return False

    return write


@dataclass
class Seen:
    """What a handler that writes slowly saw: body bytes sent, and whether the client closed
    the connection before the answer was complete (set once it did)."""

    sent: int = 0
    client_left: threading.Event = field(default_factory=threading.Event)


def left_within(conn: socket.socket, seconds: float) -> bool:
    """Whether the client closed ``conn`` within ``seconds``. A client sends nothing while it
    waits for an answer, so the connection turning readable means it closed (or reset) it.
    Over TLS (no peeking there) the readable bytes are read: a close, or its ``close_notify``."""
    readable, _, _ = select.select([conn], [], [], seconds)
    if not readable:
        return False
    if not isinstance(conn, ssl.SSLSocket):
        try:
            return conn.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True
    before = conn.gettimeout()
    conn.settimeout(seconds)
    try:
        return conn.recv(1) == b""
    except TimeoutError:  # a record that held no byte for the application: still there
        return False
    except OSError:
        return True
    finally:
        with contextlib.suppress(OSError):
            conn.settimeout(before)


def stall(
    answer: bytes, *, stop: threading.Event, seen: Seen | None = None
) -> Callable[[socket.socket], bool]:
    """Send ``answer`` (a head and part of its body), then nothing until the client closes the
    connection (noted in ``seen``) or the server stops."""

    def write(conn: socket.socket) -> bool:
        conn.sendall(answer)
        while not stop.is_set():
            if left_within(conn, 0.05):
                if seen is not None:
                    seen.client_left.set()
                return False
        return False

    return write


def trickle(
    answer: bytes,
    body: bytes,
    *,
    every_seconds: float,
    piece: int = 1,
    stop: threading.Event,
    seen: Seen | None = None,
) -> Callable[[socket.socket], bool]:
    """Send the head, then ``piece`` body bytes every ``every_seconds`` until done, stopped, or
    the client closes the connection (noted in ``seen``, with the body bytes sent)."""

    def write(conn: socket.socket) -> bool:
        conn.sendall(answer)
        for offset in range(0, len(body), piece):
            if stop.is_set():
                return False
            if left_within(conn, every_seconds):
                if seen is not None:
                    seen.client_left.set()
                return False
            conn.sendall(body[offset : offset + piece])
            if seen is not None:
                seen.sent += len(body[offset : offset + piece])
        return True

    return write


def chunked(
    body: bytes,
    sizes: Sequence[int] = (1, 3, 100, 4096, 65543),
    *,
    extensions: Sequence[bytes] = (b"",),
    trailer: bytes = b"",
    end: bool = True,
) -> bytes:
    """``body`` in chunked transfer coding (RFC 9112 7.1): chunks of ``sizes`` bytes (cycled),
    the i-th with ``extensions[i % len(extensions)]`` after its size; then, when ``end``, the
    last chunk, ``trailer`` (field lines, each ending in CRLF) and the blank line."""
    out = bytearray()
    offset = 0
    for number, size in enumerate(itertools.cycle(sizes)):
        if offset >= len(body):
            break
        piece = body[offset : offset + size]
        extension = extensions[number % len(extensions)]
        out += f"{len(piece):x}".encode() + extension + b"\r\n" + piece + b"\r\n"
        offset += size
    if end:
        out += b"0\r\n" + trailer + b"\r\n"
    return bytes(out)


class Paced:
    """Answers ranged GETs of ``data`` (a correct 206 each, with an ETag) at a paced rate, the
    shape of a real link on loopback: ``per_connection`` bytes per second for each connection
    (nginx's ``limit_rate``, a WAN or S3, where more connections carry more), ``total`` bytes
    per second for all of them together (a link that more connections cannot widen), or both.

    Use it as a :class:`RawServer`'s handler. It counts the answers it sends at once
    (``in_flight``, and ``peak``, the most at once: the client's streams) and the body bytes
    sent (``sent``), and nothing by the clock: tests assert counts, never times.
    """

    CHUNK = 16 * 1024

    def __init__(
        self, data: bytes, *, per_connection: float | None = None, total: float | None = None
    ) -> None:
        self.data = data
        self.per_connection = per_connection
        self.total = total
        self.in_flight = 0
        self.peak = 0
        self.sent = 0
        self._lock = threading.Lock()
        self._link_free_at = 0.0  # when the shared link has sent what was handed to it

    def __call__(self, request: Request, number: int) -> Reply:
        answer, body = partial(self.data, request, fields=[("ETag", '"paced"')])

        def write(conn: socket.socket) -> bool:
            with self._lock:
                self.in_flight += 1
                self.peak = max(self.peak, self.in_flight)
            try:
                conn.sendall(answer)
                began = time.monotonic()
                for offset in range(0, len(body), self.CHUNK):
                    piece = body[offset : offset + self.CHUNK]
                    self._wait_for_turn(len(piece), began, offset)
                    conn.sendall(piece)
                    with self._lock:
                        self.sent += len(piece)
            finally:
                with self._lock:
                    self.in_flight -= 1
            return True

        return write

    def _wait_for_turn(self, size: int, began: float, sent_before: int) -> None:
        """Sleep until ``size`` more bytes keep this connection, and the link, at their pace."""
        now = time.monotonic()
        until = now
        if self.per_connection is not None:
            until = max(until, began + (sent_before + size) / self.per_connection)
        if self.total is not None:
            with self._lock:
                self._link_free_at = max(self._link_free_at, now) + size / self.total
                until = max(until, self._link_free_at)
        if until > now:
            time.sleep(until - now)
