"""httpcore's network backend with one leak mended: a TLS handshake cancelled half way closes
its connection.

httpcore 1.0 (``_backends/anyio.py``, ``start_tls``) closes the TCP stream when the handshake
fails with an ``Exception``, but not when the task is cancelled meanwhile: ``CancelledError``
is a ``BaseException``, and the stream, which no connection holds yet (``_connect`` had not
returned it), is left to the collector, its socket open until then ("ResourceWarning:
unclosed transport", "unclosed socket"). encode/httpcore#443 reported the orphaned TCP socket
of a failed TLS setup; the cancellation case is still there in httpcore 1.0.9. Our requests are
cancelled mid-handshake by the throughput floor, the request deadline, a caller's timeout, or a
sibling read's failure.

:func:`mend` puts :class:`ClosingBackend` under every connection pool of an httpx client that
remotetensors makes: its streams close themselves when ``start_tls`` ends in any exception. A
client that the caller passes is left as it is.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

__all__ = ["ClosingBackend", "mend"]


class _ClosingStream(httpcore.AsyncNetworkStream):
    """``inner``, closed when its TLS handshake ends in any exception, a cancellation too."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            return await self._inner.start_tls(ssl_context, server_hostname, timeout)
        except BaseException:
            # The close starts at once (the transport is closed before aclose first waits);
            # a second cancellation of that wait changes nothing: the first error is raised.
            with contextlib.suppress(BaseException):
                await self._inner.aclose()
            raise

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class ClosingBackend(httpcore.AsyncNetworkBackend):
    """``inner`` (httpcore's own backend), whose streams close themselves when their TLS
    handshake fails or is cancelled (see the module)."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(
            host, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )
        return _ClosingStream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options
        )
        return _ClosingStream(stream)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def mend(client: httpx.AsyncClient) -> int:
    """Put :class:`ClosingBackend` under every connection pool of ``client`` (its transport
    and the proxies it mounted from the environment). Returns the pools mended.

    httpx gives no way to pass httpcore a network backend, so this reaches the pools'
    ``_network_backend`` (httpx 0.28, httpcore 1.0); a pool without one is left as it is
    (``tests/integration/test_socket_leaks.py`` checks that our clients' pools are mended).
    """
    transports: list[Any] = [getattr(client, "_transport", None)]
    transports += list(getattr(client, "_mounts", {}).values())
    mended = 0
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if isinstance(backend, httpcore.AsyncNetworkBackend) and not isinstance(
            backend, ClosingBackend
        ):
            pool._network_backend = ClosingBackend(backend)  # type: ignore[union-attr]
            mended += 1
    return mended
