"""Loopback servers for the TLS tests: a raw-socket HTTP server behind TLS, and a server that
answers a client's first bytes (its TLS ClientHello) with bytes of the test's choosing.

Certificates come from a throwaway CA made in the test (``trustme``); nothing here trusts or
reaches anything beyond loopback.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading

import trustme

from tests.rawservers import Handler, RawServer


class TlsServer(RawServer):
    """A :class:`RawServer` whose connections speak TLS with ``context`` (a server context
    holding the certificate to present; assign another to present it from the next connection
    on). Counts handshakes: ``connections`` (TCP connections accepted, each one handshake
    tried), ``handshakes`` (completed) and ``failed_handshakes``."""

    def __init__(self, handler: Handler, context: ssl.SSLContext) -> None:
        self.context = context
        self.handshakes = 0
        self.failed_handshakes = 0
        super().__init__(handler)
        self.url = self.url.replace("http://", "https://", 1)

    def _serve(self, conn: socket.socket) -> None:
        try:
            tls = self.context.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError):  # the client refused the certificate, or went away
            with self._lock:
                self.failed_handshakes += 1
            conn.close()
            return
        with self._lock:
            self.handshakes += 1
            self._connections.append(tls)  # shut down by stop(), as plain connections are
        super()._serve(tls)


def server_context(cert: trustme.LeafCert) -> ssl.SSLContext:
    """A server context presenting ``cert``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    return context


class ReplyServer:
    """Reads a client's first bytes on each connection, answers ``reply`` and closes: a plain
    HTTP server on a TLS port (its 400 to a ClientHello), or a TLS server whose only answer is
    a fatal alert. ``connections`` counts the connections accepted."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.connections = 0
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self.url = f"https://127.0.0.1:{self.port}"
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            with conn, contextlib.suppress(OSError):
                conn.settimeout(10)
                conn.recv(65536)
                conn.sendall(self.reply)

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(5)
        self._listener.close()


PLAIN_HTTP_ANSWER = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n"
    b"Connection: close\r\n\r\nBad Request"
)
"""What a plain HTTP server (nginx without ``ssl`` on the port) answers a TLS ClientHello."""

HANDSHAKE_FAILURE_ALERT = bytes([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28])
"""A TLS record: alert (21), TLS 1.2, 2 bytes: fatal (2), handshake_failure (40); what a
server that refuses every handshake the client offers sends."""
