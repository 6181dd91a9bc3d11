"""No socket is left to the garbage collector: a TLS handshake cancelled half way on the httpx
path (httpcore 1.0 leaves its connection open, see ``sources/http/cancelsafe.py``), and the
direct reader's connections when its client is closed while a request runs, or just before the
loop closes. Each case runs under ``asyncio.run``, collects, and fails on any
``ResourceWarning`` ("unclosed socket", "unclosed transport")."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
import warnings
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpcore
import pytest
import trustme

import remotetensors as rt
from remotetensors.sources.http.cancelsafe import ClosingBackend, mend
from remotetensors.sources.http.client import HttpOptions
from remotetensors.sources.http.direct import RawRangeClient
from remotetensors.sources.http.source import HttpSource
from tests.rawservers import RawServer, Reply, Request, partial
from tests.tlsservers import TlsServer, server_context

DATA = bytes(range(256)) * 64


def leaked(run: Callable[[], Coroutine[Any, Any, None]]) -> list[str]:
    """The ResourceWarnings seen while ``run()`` runs under ``asyncio.run`` and after a
    collection."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(run())
        gc.collect()
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


@pytest.fixture
def silent_tls_port() -> Iterator[int]:
    """A loopback port whose server accepts connections and never answers: a TLS handshake
    there waits until the client gives up."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(5)
    listener.close()
    for conn in accepted:
        conn.close()


def test_a_tls_handshake_cancelled_on_the_httpx_path_closes_its_connection(
    silent_tls_port: int,
) -> None:
    # The request deadline cancels the attempt in the middle of httpcore's start_tls.
    options = HttpOptions(direct_reads=False, max_attempts=1, request_deadline_seconds=0.3)

    async def run() -> None:
        source = HttpSource(f"https://127.0.0.1:{silent_tls_port}/m.safetensors", options=options)
        try:
            with pytest.raises(rt.RequestTimeoutError):
                await source.open_prefix(1024)
        finally:
            await source.aclose()

    assert leaked(run) == []


def test_every_pool_of_our_httpx_client_is_mended(monkeypatch: pytest.MonkeyPatch) -> None:
    # httpx offers no way to hand httpcore a network backend: mend() reaches the pools. This
    # fails if an httpx or httpcore release moves them.
    client = HttpOptions().new_client()
    transport: Any = client.httpx._transport
    assert isinstance(transport._pool._network_backend, ClosingBackend)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # a proxy's pool too
    import httpx

    proxied = httpx.AsyncClient()
    assert mend(proxied) == 2
    assert mend(proxied) == 0  # once is enough
    inner: Any = proxied._mounts
    assert all(isinstance(t._pool._network_backend, ClosingBackend) for t in inner.values() if t)
    assert isinstance(ClosingBackend(httpcore.AnyIOBackend()), httpcore.AsyncNetworkBackend)


@pytest.fixture(params=["http", "https"])
def slow_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A server that answers every range after 0.3 s, over plain HTTP or TLS: (base URL, the
    CA bundle to trust)."""

    def handler(asked: Request, _: int) -> Reply:
        time.sleep(0.3)
        answer, body = partial(DATA, asked)
        return answer + body

    ca = trustme.CA()
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    server = (
        TlsServer(handler, server_context(ca.issue_cert("127.0.0.1")))
        if request.param == "https"
        else RawServer(handler)
    )
    yield server.url, str(bundle)
    server.stop()


def _client(bundle: str) -> RawRangeClient:
    return RawRangeClient(connect_timeout_seconds=5, read_timeout_seconds=5, ca_bundle=bundle)


def test_a_direct_client_closed_while_a_request_runs_closes_its_connection_after(
    slow_server: tuple[str, str],
) -> None:
    base, bundle = slow_server
    got: list[bytes] = []

    async def run() -> None:
        client = _client(bundle)
        buffer = bytearray(1000)
        read = asyncio.ensure_future(
            client.get_into(f"{base}/m", {"Range": "bytes=0-999"}, lambda *_: memoryview(buffer))
        )
        await asyncio.sleep(0.05)  # the request is on its way
        await client.aclose()
        assert (await read).status == 206  # it ends well, and its connection is not kept
        got.append(bytes(buffer))

    assert leaked(run) == []
    assert got == [DATA[:1000]]


def test_a_direct_client_is_closed_when_aclose_returns(slow_server: tuple[str, str]) -> None:
    base, bundle = slow_server
    sockets: list[Any] = []

    async def run() -> None:
        client = _client(bundle)
        buffer = bytearray(10)
        url = f"{base}/m"
        await client.get_into(url, {"Range": "bytes=0-9"}, lambda *_: memoryview(buffer))
        idle: Any = client._idle
        (protocol,) = (p for kept in idle.values() for p in kept)
        sockets.append(protocol.transport.get_extra_info("socket"))
        await client.aclose()
        # Not at the loop's next turn: a loop closed right after would never take it.
        assert sockets[0].fileno() == -1
        assert protocol.closed
        # A client used again keeps its connections again (and is closed again).
        await client.get_into(url, {"Range": "bytes=0-9"}, lambda *_: memoryview(buffer))
        assert sum(len(kept) for kept in idle.values()) == 1
        await client.aclose()
        assert not idle

    assert leaked(run) == []
