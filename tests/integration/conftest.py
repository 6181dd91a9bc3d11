from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remotetensors.sources.hub import api as hub_api
from tests.certificates import ThrowawayCA, throwaway_ca
from tests.emulators import Azurite, FakeGcs, start
from tests.hub_standin import HubStandIn
from tests.rawservers import RawServer, Reply, Request
from tests.servers import FaultyServer, Log, static_server


@pytest.fixture(scope="module")
def static_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("static")


@pytest.fixture(scope="module")
def static(static_root: Path) -> Iterator[tuple[str, Log, Path]]:
    """aiohttp's static handler over ``static_root``: (base URL, log, root)."""
    with static_server(static_root) as (url, log):
        yield url, log, static_root


@pytest.fixture
def faulty() -> Iterator[FaultyServer]:
    server = FaultyServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """An S3 endpoint (moto's server mode) on a free loopback port."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[FakeGcs]:
    """fake-gcs-server on a free loopback port (skips where it cannot start: tests/emulators)."""
    yield from start(FakeGcs)


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    """Azurite's blob service on a free loopback port (skips where it cannot start)."""
    yield from start(Azurite)


@pytest.fixture
def s3_env(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The standard AWS variables pointing at moto; returns the endpoint."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return moto_endpoint


@pytest.fixture
def hub_shape(request: pytest.FixtureRequest) -> str:
    """The hub's shape the stand-in speaks: ``"2026"`` unless a case asks for another with
    ``@pytest.mark.parametrize("hub_shape", ["2025"], indirect=True)``."""
    return str(getattr(request, "param", "2026"))


@pytest.fixture
def hub(hub_shape: str) -> Iterator[HubStandIn]:
    server = HubStandIn(hub_shape)
    # What this process learnt of an earlier stand-in on the same port (the OS hands freed
    # ports out again) is not true of this one: whether it has the one-call metadata route.
    hub_api._support.pop(server.endpoint, None)
    hub_api._names_commits.pop(server.endpoint, None)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def tls(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> ThrowawayCA:
    """A CA made for the test, trusted through ``SSL_CERT_FILE`` as a user would trust theirs
    (the variable is read for each new connection; a context is cached per bundle path)."""
    ca = throwaway_ca(tmp_path_factory.mktemp("ca"))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.ca_file))
    return ca


def over_tls(request: pytest.FixtureRequest) -> bool:
    """Whether the case runs on a data path over TLS (see :func:`data_path`)."""
    callspec = getattr(request.node, "callspec", None)
    return callspec is not None and "TLS" in str(callspec.params.get("data_path", ""))


@pytest.fixture
def scheme(request: pytest.FixtureRequest) -> str:
    """``https`` on a data path over TLS, else ``http``: for URLs a case writes itself."""
    return "https" if over_tls(request) else "http"


@pytest.fixture
def serve(request: pytest.FixtureRequest) -> Iterator[Callable[..., RawServer]]:
    """Start raw servers on free loopback ports; all are stopped after the test.

    On a data path over TLS (see :func:`data_path`), every server speaks HTTPS with a
    certificate of the test's CA (:func:`tls`, trusted through ``SSL_CERT_FILE``), unless the
    case names a context of its own or asks for plain HTTP (``tls=None``)."""
    started: list[RawServer] = []
    ca: ThrowawayCA | None = request.getfixturevalue("tls") if over_tls(request) else None

    def start(handler: Callable[[Request, int], Reply], **kwargs: Any) -> RawServer:
        if ca is not None:
            kwargs.setdefault("tls", ca.server)
        server = RawServer(handler, **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


DATA_PATHS = ["direct", "direct, bodies in threads", "httpx"]
"""The request paths every case of a module that asks for ``data_path`` runs on."""

TLS_PATHS = ["direct over TLS", "direct over TLS, bodies in threads"]
"""The direct paths once more with every server of :func:`serve` speaking HTTPS (bodies read by
the loop, and by worker threads): the hostile-network modules add them (see
:func:`data_paths`)."""


def data_paths(params: list[str]) -> Any:
    """A ``data_path`` fixture over ``params``; a module that wants other paths than
    :data:`DATA_PATHS` binds its own: ``data_path = data_paths([*DATA_PATHS, *TLS_PATHS])``."""

    @pytest.fixture(name="data_path", params=params)
    def data_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
        """Run a case with data bodies read directly into arrays (by the loop, and by worker
        threads as large bodies are), through httpx alone, and, where the module asks for
        them, directly over TLS; a module asks for it with ``pytestmark =
        pytest.mark.usefixtures("data_path")``. Returns the request path: ``direct`` or
        ``httpx``."""
        return take_data_path(request.param, monkeypatch)

    return data_path


data_path = data_paths(DATA_PATHS)


def take_data_path(param: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Set the case up for the data path ``param`` (one of :data:`DATA_PATHS`); returns the
    request path, ``direct`` or ``httpx``."""
    if param == "httpx":
        # A configured proxy turns the direct reader off; pretend there is one.
        monkeypatch.setattr("remotetensors.sources.http.client.proxy_in_environment", lambda: True)
        return "httpx"
    if param.endswith("bodies in threads"):
        # Every body left after its head goes to a thread, however small.
        monkeypatch.setattr("remotetensors.sources.http.direct.THREAD_BODY_BYTES", 1)
    elif param == "direct over TLS":
        # Every body stays in the loop, however large: the loop's side of a TLS connection.
        monkeypatch.setattr("remotetensors.sources.http.direct.THREAD_BODY_BYTES", 1 << 62)
    return "direct"
