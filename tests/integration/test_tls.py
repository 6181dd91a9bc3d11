"""A hostile network, round three, rule 4: a TLS handshake that fails for good is one
:class:`TlsError` at once, never retried, saying how to trust a CA.

Servers on loopback present certificates from a throwaway CA made here (``trustme``): from an
issuer nobody trusts, for another name, expired, not yet valid; a plain HTTP server and a server
that answers every ClientHello with a fatal alert stand on TLS ports. Every case runs on each
request path (the direct reader, with bodies read by the loop and by threads, and httpx: see
conftest.py) and counts the handshakes the server saw and the retries reported; none asserts a
duration (a call that would hang fails at the bound of ``tests/waiting.py``).
"""

from __future__ import annotations

import asyncio
import datetime
import gc
import json
import socket
import ssl
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import trustme

import remotetensors as rt
from remotetensors import status
from remotetensors.cli import main
from remotetensors.sources.http.client import HttpOptions
from remotetensors.sources.http.tls import CA_VARIABLES
from remotetensors.sources.http.whole import get_whole
from tests.rawservers import Reply, Request, head, partial
from tests.reference import write_reference
from tests.tlsservers import (
    HANDSHAKE_FAILURE_ALERT,
    PLAIN_HTTP_ANSWER,
    ReplyServer,
    TlsServer,
    server_context,
)
from tests.waiting import finishes, until

pytestmark = pytest.mark.usefixtures("data_path")


FAST = rt.HttpOptions(backoff_initial_seconds=0.01, backoff_max_seconds=0.05, max_attempts=4)

W = np.arange(64 * 1024, dtype=np.float32)
DATA = write_reference({"w": W})
assert len(DATA) > rt.ReadOptions().header_window_bytes  # the tensor needs a data request

NOW = datetime.datetime.now(datetime.timezone.utc)


@pytest.fixture(autouse=True)
def quiet(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """No case may leave noise behind: asyncio's 'Fatal error on SSL transport', an exception
    never retrieved, a warning in the log."""
    yield
    gc.collect()  # unretrieved exceptions are reported when their futures are collected
    err = capfd.readouterr().err
    for noise in ("never retrieved", "Traceback", "Exception ignored", "Fatal error"):
        assert noise not in err, err
    loud = [r for r in caplog.records if r.levelno >= 30]
    assert not loud, [r.getMessage() for r in loud]


@pytest.fixture(autouse=True)
def no_ca_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each case says which CAs it trusts: none from the machine's environment."""
    for name in CA_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def ca() -> trustme.CA:
    """The throwaway CA a test trusts (when it says so); one per test, so that no context
    built for another test's CA can make a case pass."""
    return trustme.CA()


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    """``ca``'s certificate as a PEM file."""
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture
def serve_tls() -> Iterator[Callable[..., TlsServer]]:
    """Start TLS servers presenting the certificate given; all are stopped after the test."""
    started: list[TlsServer] = []

    def start(
        cert: trustme.LeafCert, handler: Callable[[Request, int], Reply] | None = None
    ) -> TlsServer:
        server = TlsServer(handler or answer_ranges, server_context(cert))
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def serve_reply() -> Iterator[Callable[[bytes], ReplyServer]]:
    started: list[ReplyServer] = []

    def start(reply: bytes) -> ReplyServer:
        started.append(ReplyServer(reply))
        return started[-1]

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def retries() -> Iterator[list[status.Retrying]]:
    """The retries reported while the test runs."""
    seen: list[status.Retrying] = []
    with status.subscribe(seen.append):
        yield seen


def answer_ranges(request: Request, number: int) -> Reply:
    """``/m.safetensors`` with byte ranges; nothing else (a model's configs) is here."""
    if not request.target.startswith("/m.safetensors"):
        return head("404 Not Found", [("Content-Length", "0")])
    answer, body = partial(DATA, request, fields=[("ETag", '"v1"')])
    return answer + body


def read_w(url: str, options: HttpOptions = FAST) -> np.ndarray:
    with rt.safe_open(url, http_options=options) as f:
        return finishes(lambda: f.get_tensor("w"))


def assert_path(server: TlsServer, path: str) -> None:
    """The data requests went through the path under test (httpx adds its default
    ``Accept: */*``, the direct reader sends none; both name remotetensors as the agent)."""
    data = [r for r in server.requests if r.range is not None and r.range[0] > 0]
    assert data
    for request in data:
        assert (request.headers.get("accept") == "*/*") == (path == "httpx"), request.headers
        assert request.headers.get("user-agent", "").startswith("remotetensors/")


# --- a CA the caller trusts ----------------------------------------------------------------------


@pytest.mark.parametrize("how", ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "ca_bundle"])
def test_a_ca_trusted_by_variable_or_option_reads_the_right_bytes(
    serve_tls: Callable[..., TlsServer],
    ca: trustme.CA,
    ca_file: str,
    how: str,
    monkeypatch: pytest.MonkeyPatch,
    data_path: str,
) -> None:
    server = serve_tls(ca.issue_cert("127.0.0.1"))
    options = FAST
    if how == "ca_bundle":
        options = rt.HttpOptions(max_attempts=FAST.max_attempts, ca_bundle=Path(ca_file))
    else:
        monkeypatch.setenv(how, ca_file)
    assert read_w(f"{server.url}/m.safetensors", options).tobytes() == W.tobytes()
    assert server.failed_handshakes == 0
    assert_path(server, data_path)


def test_a_variable_set_after_a_failure_counts_from_the_next_open(
    serve_tls: Callable[..., TlsServer],
    ca: trustme.CA,
    ca_file: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As a notebook user does: read the error, set the variable it names, try again (the
    # process keeps its contexts, but not one for CAs the environment no longer names).
    server = serve_tls(ca.issue_cert("127.0.0.1"))
    url = f"{server.url}/m.safetensors"
    with pytest.raises(rt.TlsError, match="SSL_CERT_FILE"):
        read_w(url)
    monkeypatch.setenv("SSL_CERT_FILE", ca_file)
    assert read_w(url).tobytes() == W.tobytes()
    assert server.connections == 2
    assert until(lambda: server.failed_handshakes == 1)


def test_the_option_wins_over_the_environment(
    serve_tls: Callable[..., TlsServer],
    ca: trustme.CA,
    ca_file: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = tmp_path / "other.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    monkeypatch.setenv("SSL_CERT_FILE", str(other))
    server = serve_tls(ca.issue_cert("127.0.0.1"))
    options = rt.HttpOptions(ca_bundle=ca_file)
    assert read_w(f"{server.url}/m.safetensors", options).tobytes() == W.tobytes()


# --- certificates that cannot be trusted: one handshake, one error -------------------------------

CERTIFICATES: dict[str, tuple[Callable[[trustme.CA], trustme.LeafCert], rt.TlsErrorKind, str]] = {
    "unknown-issuer": (
        lambda ca: trustme.CA().issue_cert("127.0.0.1"),
        rt.TlsErrorKind.UNKNOWN_ISSUER,
        "unable to get local issuer certificate",
    ),
    "wrong-host": (
        lambda ca: ca.issue_cert("files.example.org"),
        rt.TlsErrorKind.WRONG_HOST,
        "certificate is not valid for '127.0.0.1'",
    ),
    "expired": (
        lambda ca: ca.issue_cert(
            "127.0.0.1",
            not_before=NOW - datetime.timedelta(days=30),
            not_after=NOW - datetime.timedelta(days=1),
        ),
        rt.TlsErrorKind.EXPIRED,
        "certificate has expired",
    ),
    "not-yet-valid": (
        lambda ca: ca.issue_cert("127.0.0.1", not_before=NOW + datetime.timedelta(days=1)),
        rt.TlsErrorKind.NOT_YET_VALID,
        "certificate is not yet valid",
    ),
}


def assert_says_how_to_trust_a_ca(error: rt.TlsError) -> None:
    message = str(error)
    for remedy in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "HttpOptions(ca_bundle=...)"):
        assert remedy in message, message
    assert_never_suggests_turning_verification_off(error)


def assert_never_suggests_turning_verification_off(error: rt.TlsError) -> None:
    message = str(error).lower()
    for unsafe in ("verify=false", "verify_ssl", "insecure", "disable", "cert_none"):
        assert unsafe not in message, message


@pytest.mark.parametrize("case", sorted(CERTIFICATES))
def test_an_untrusted_certificate_fails_at_once_saying_how_to_trust_a_ca(
    serve_tls: Callable[..., TlsServer],
    ca: trustme.CA,
    ca_file: str,
    case: str,
    monkeypatch: pytest.MonkeyPatch,
    retries: list[status.Retrying],
) -> None:
    make, kind, openssl_said = CERTIFICATES[case]
    server = serve_tls(make(ca))
    monkeypatch.setenv("SSL_CERT_FILE", ca_file)  # the test's CA is trusted, this cert is not
    url = f"{server.url}/m.safetensors?token=tok123"
    with pytest.raises(rt.TlsError) as caught:
        read_w(url)
    error = caught.value
    assert error.kind is kind
    assert isinstance(error, rt.TransportError)
    message = str(error)
    assert message.startswith(f"{server.url}/m.safetensors?token=***: TLS handshake with ")
    assert f"127.0.0.1:{server.port} failed: {kind.value}" in message
    assert openssl_said in message
    assert "not retried" in message
    assert "tok123" not in message
    assert_says_how_to_trust_a_ca(error)
    assert server.connections == 1  # one handshake: not retried
    assert until(lambda: server.failed_handshakes == 1)
    assert not server.requests
    assert not retries


def test_a_certificate_nobody_was_told_to_trust_fails_at_once(
    serve_tls: Callable[..., TlsServer], ca: trustme.CA, retries: list[status.Retrying]
) -> None:
    server = serve_tls(ca.issue_cert("127.0.0.1"))  # no CA named: certifi's bundle alone
    with pytest.raises(rt.TlsError) as caught:
        read_w(f"{server.url}/m.safetensors")
    assert caught.value.kind is rt.TlsErrorKind.UNKNOWN_ISSUER
    assert_says_how_to_trust_a_ca(caught.value)
    assert server.connections == 1
    assert not retries


# --- a server that speaks no TLS, or refuses the handshake ---------------------------------------


@pytest.mark.parametrize(
    ("reply", "kind", "said", "remedy"),
    [
        (PLAIN_HTTP_ANSWER, rt.TlsErrorKind.NOT_TLS, "wrong version number", "use an http:// URL"),
        (
            HANDSHAKE_FAILURE_ALERT,
            rt.TlsErrorKind.REFUSED,
            "alert handshake failure",
            "client certificate",
        ),
    ],
    ids=["plain-http-on-the-tls-port", "handshake-refused"],
)
def test_a_server_that_speaks_no_tls_or_refuses_the_handshake_fails_at_once(
    serve_reply: Callable[[bytes], ReplyServer],
    reply: bytes,
    kind: rt.TlsErrorKind,
    said: str,
    remedy: str,
    retries: list[status.Retrying],
) -> None:
    server = serve_reply(reply)
    with pytest.raises(rt.TlsError) as caught:
        read_w(f"{server.url}/m.safetensors")
    error = caught.value
    assert error.kind is kind
    assert str(error).startswith(
        f"{server.url}/m.safetensors: TLS handshake with 127.0.0.1:{server.port} failed: "
    )
    assert said in str(error)
    assert remedy in str(error)
    assert_never_suggests_turning_verification_off(error)
    assert server.connections == 1
    assert not retries


def test_a_connection_cut_mid_handshake_is_retried_as_a_network_failure(
    serve_reply: Callable[[bytes], ReplyServer], retries: list[status.Retrying]
) -> None:
    # The server closes before it says anything: a restart, an overloaded balancer. That is
    # no verdict on its TLS, and another attempt may succeed.
    server = serve_reply(b"")
    with pytest.raises(rt.TransportError, match="gave up after 4 attempts") as caught:
        read_w(f"{server.url}/m.safetensors")
    assert not isinstance(caught.value, rt.TlsError)
    assert server.connections == FAST.max_attempts
    assert len(retries) == FAST.max_attempts - 1


# --- later data requests and redirects -----------------------------------------------------------


def test_a_certificate_replaced_by_an_untrusted_one_fails_the_next_data_request(
    serve_tls: Callable[..., TlsServer],
    ca: trustme.CA,
    ca_file: str,
    monkeypatch: pytest.MonkeyPatch,
    retries: list[status.Retrying],
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", ca_file)

    def answer(request: Request, number: int) -> Reply:
        answer, body = partial(DATA, request, fields=[("ETag", '"v1"'), ("Connection", "close")])

        def write(conn: socket.socket) -> bool:
            conn.sendall(answer + body)
            return False  # every request needs a new connection, and a new handshake

        return write

    server = serve_tls(ca.issue_cert("127.0.0.1"), answer)
    with rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f:
        server.context = server_context(trustme.CA().issue_cert("127.0.0.1"))
        with pytest.raises(rt.TlsError) as caught:
            finishes(lambda: f.get_tensor("w"))
    assert caught.value.kind is rt.TlsErrorKind.UNKNOWN_ISSUER
    assert until(lambda: server.failed_handshakes == 1)  # the server learns of it a bit later
    assert server.connections == 2
    assert server.handshakes == 1
    assert len(server.requests) == 1
    assert not retries


def test_a_redirect_to_an_untrusted_host_fails_at_once_naming_it(
    serve_tls: Callable[..., TlsServer],
    ca: trustme.CA,
    ca_file: str,
    monkeypatch: pytest.MonkeyPatch,
    retries: list[status.Retrying],
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", ca_file)
    cdn = serve_tls(trustme.CA().issue_cert("127.0.0.1"))
    origin = serve_tls(
        ca.issue_cert("127.0.0.1"),
        lambda request, number: head(
            "302 Found", [("Location", f"{cdn.url}/cdn/m"), ("Content-Length", "0")]
        ),
    )
    with pytest.raises(rt.TlsError) as caught:
        read_w(f"{origin.url}/m.safetensors")
    message = str(caught.value)
    assert message.startswith(f"{origin.url}/m.safetensors: TLS handshake with ")
    assert f"127.0.0.1:{cdn.port} failed: certificate from an unknown issuer" in message
    assert len(origin.requests) == 1
    assert cdn.connections == 1
    assert not retries


def test_a_callers_client_that_trusts_the_server_reads_the_whole_file(
    serve_tls: Callable[..., TlsServer],
    ca: trustme.CA,
    data_path: str,
) -> None:
    # The caller's httpx client trusts the CA through its own ``verify``; the direct reader,
    # which takes later data requests, trusts only what the options and the environment name.
    # Its failed handshake hands the file over to the caller's client, which reads on.
    server = serve_tls(ca.issue_cert("127.0.0.1"))
    context = ssl.create_default_context()
    ca.configure_trust(context)

    async def read() -> np.ndarray:
        async with (
            httpx.AsyncClient(verify=context) as client,
            rt.open_model_async(
                f"{server.url}/m.safetensors", client=client, http_options=FAST
            ) as model,
        ):
            arrays: dict[str, np.ndarray] = await model.get_tensors(["w"])
        return arrays["w"]

    assert finishes(lambda: asyncio.run(read())).tobytes() == W.tobytes()
    failed = 1 if data_path == "direct" else 0  # once, and then never tried again
    assert until(lambda: server.failed_handshakes == failed)
    assert server.connections == server.handshakes + failed


# --- the hub's API (small answers read whole) and the hub ----------------------------------------


def test_a_small_answer_read_whole_fails_at_once(
    serve_tls: Callable[..., TlsServer], retries: list[status.Retrying]
) -> None:
    server = serve_tls(trustme.CA().issue_cert("127.0.0.1"))
    url = f"{server.url}/api/models/org/name/tree/main"
    with pytest.raises(rt.TlsError) as caught:
        finishes(
            lambda: asyncio.run(get_whole(url, {}, client=None, options=FAST, shown="listing"))
        )
    assert str(caught.value).startswith(f"listing: TLS handshake with 127.0.0.1:{server.port}")
    assert_says_how_to_trust_a_ca(caught.value)
    assert server.connections == 1
    assert not retries


def test_a_hub_whose_certificate_is_untrusted_fails_without_retries(
    serve_tls: Callable[..., TlsServer],
    monkeypatch: pytest.MonkeyPatch,
    retries: list[status.Retrying],
) -> None:
    server = serve_tls(trustme.CA().issue_cert("127.0.0.1"))
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    options = rt.ReadOptions(read_configs=False)
    with pytest.raises(rt.TlsError, match="certificate from an unknown issuer"):
        finishes(
            lambda: rt.open_model("hf://org/name", token=False, options=options, http_options=FAST)
        )
    # One handshake per request that discovery sends at once (the single file, the index and
    # the hub's metadata endpoint); none of them tried again.
    assert 1 <= server.connections <= 3
    assert not retries


# --- the command line -----------------------------------------------------------------------------


def test_the_command_line_says_how_to_trust_a_ca_and_takes_one(
    serve_tls: Callable[..., TlsServer],
    ca: trustme.CA,
    ca_file: str,
    capfd: pytest.CaptureFixture[str],
    retries: list[status.Retrying],
) -> None:
    server = serve_tls(ca.issue_cert("127.0.0.1"))
    url = f"{server.url}/m.safetensors"
    assert main(["info", url, "--retries", "3"]) == 1
    out, err = capfd.readouterr()
    assert err.startswith(f"remotetensors: error: {url}: TLS handshake with 127.0.0.1:")
    assert "--ca-bundle" in err
    assert len(err.splitlines()) == 1
    assert not retries  # the file and the configs beside it: each tried once
    # The configs read beside the file are cancelled once its handshake fails, some of them
    # half way through their own: on the httpx path httpcore 1.0 left those sockets to the
    # collector, which warned (see sources/http/cancelsafe.py). None is left now.
    gc.collect()
    assert main(["info", url, "--ca-bundle", ca_file, "--json"]) == 0
    out, err = capfd.readouterr()
    assert json.loads(out)["tensors"] == 1


# --- the CA bundle itself ------------------------------------------------------------------------


@pytest.mark.parametrize("named_by", ["SSL_CERT_FILE", "ca_bundle"])
def test_a_ca_bundle_that_cannot_be_loaded_is_named(
    serve_tls: Callable[..., TlsServer],
    ca: trustme.CA,
    tmp_path: Path,
    named_by: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = serve_tls(ca.issue_cert("127.0.0.1"))
    missing = str(tmp_path / "no-such-bundle.pem")
    options = FAST
    if named_by == "ca_bundle":
        options = rt.HttpOptions(max_attempts=FAST.max_attempts, ca_bundle=missing)
    else:
        monkeypatch.setenv(named_by, missing)
    with pytest.raises(rt.TlsError) as caught:
        read_w(f"{server.url}/m.safetensors", options)
    assert caught.value.kind is rt.TlsErrorKind.CA_BUNDLE
    shown = "HttpOptions(ca_bundle=" if named_by == "ca_bundle" else f"{named_by}="
    assert str(caught.value).startswith(f"{shown}{missing!r}")
    assert "cannot load this CA bundle" in str(caught.value)
    assert server.connections == 0


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop runs on POSIX only")
def test_the_async_api_on_uvloop_fails_at_once(
    serve_tls: Callable[..., TlsServer], retries: list[status.Retrying]
) -> None:
    # uvloop's TLS transports are its own: their handshake errors must be told apart alike.
    uvloop = pytest.importorskip("uvloop")
    server = serve_tls(trustme.CA().issue_cert("127.0.0.1"))

    async def read() -> None:
        await rt.open_async(f"{server.url}/m.safetensors", http_options=FAST)

    with pytest.raises(rt.TlsError, match="certificate from an unknown issuer"):
        finishes(lambda: uvloop.run(read()))
    assert server.connections == 1
    assert not retries
