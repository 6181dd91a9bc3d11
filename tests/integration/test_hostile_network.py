"""A hostile network, round two: raw-socket servers that misbehave byte for byte.

Every case runs on both data paths (the direct reader of ``sources/http/direct.py`` and httpx) and
asserts the right bytes or the named error, a bounded number of requests counted on the server
(and, where the client gives up on an answer, that the server saw it close the connection), and
that nothing is left on stderr or in the log. No case asserts a duration: a call that would hang
fails at the bound of ``tests/waiting.py``.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import itertools
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import remotetensors as rt
from remotetensors.reading.progress import SHOW_AFTER_SECONDS
from remotetensors.redact import redact_url
from tests.integration.conftest import DATA_PATHS, TLS_PATHS, data_paths
from tests.rawservers import (
    RawServer,
    Reply,
    Request,
    Seen,
    cut_after,
    head,
    partial,
    stall,
    trickle,
)
from tests.reference import write_reference
from tests.waiting import finishes, until

FAST = rt.HttpOptions(
    backoff_initial_seconds=0.01,
    backoff_max_seconds=0.05,
    read_timeout_seconds=3.0,
    max_attempts=4,
)
WINDOW = rt.ReadOptions().header_window_bytes


# Every case runs on each data path (see conftest.py).
pytestmark = pytest.mark.usefixtures("data_path")
# ... and over TLS too: the direct reader's HTTPS bodies, in the loop and in worker threads.
data_path = data_paths([*DATA_PATHS, *TLS_PATHS])


@pytest.fixture(autouse=True)
def quiet(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """No case may leave 'Future exception was never retrieved' or any other noise behind."""
    yield
    gc.collect()  # unretrieved exceptions are reported when their futures are collected
    time.sleep(0.05)
    err = capfd.readouterr().err
    for noise in ("never retrieved", "Traceback", "Exception ignored", "Task was destroyed"):
        assert noise not in err, err
    loud = [r for r in caplog.records if r.levelno >= 30]
    assert not loud, [r.getMessage() for r in loud]


def model(seed: int) -> tuple[bytes, np.ndarray]:
    """A file whose tensor ``w`` (256 KiB) lies mostly beyond the first window."""
    w = np.random.default_rng(seed).standard_normal(64 * 1024).astype(np.float32)
    return write_reference({"w": w}), w


OLD, OLD_W = model(1)
NEW, NEW_W = model(2)
assert len(OLD) == len(NEW) > WINDOW


def data_requests(server: RawServer) -> list[Request]:
    return [r for r in server.requests if r.range is not None and r.range[0] > 0]


def assert_path(server: RawServer, path: str) -> None:
    """The data requests went through the path under test (httpx adds its default
    ``Accept: */*``, the direct reader sends none; both name remotetensors as the agent)."""
    data = data_requests(server)
    assert data
    for request in data:
        assert (request.headers.get("accept") == "*/*") == (path == "httpx"), request.headers
        assert request.headers.get("user-agent", "").startswith("remotetensors/")


def good(
    data: bytes = OLD,
    fields: tuple[tuple[str, str], ...] = (("ETag", '"v1"'),),
    **kwargs: Any,
) -> Callable[[Request, int], Reply]:
    def answer(request: Request, number: int) -> Reply:
        answer, body = partial(data, request, fields=fields, **kwargs)
        return answer + body

    return answer


# --- 1. validators: an answer that cannot be tied to the version opened is never data ----------


def replaced_after_first(
    first: tuple[tuple[str, str], ...], later: tuple[tuple[str, str], ...]
) -> Callable[[Request, int], Reply]:
    """Serve OLD with ``first`` headers, then NEW (same size) with ``later``; ignore If-*."""

    def answer(request: Request, number: int) -> Reply:
        data, fields = (OLD, first) if number == 0 else (NEW, later)
        answer, body = partial(data, request, fields=fields)
        return answer + body

    return answer


@pytest.mark.parametrize(
    ("first", "later", "message"),
    [
        ((("ETag", '"v1"'),), (), "carries no ETag"),
        ((("ETag", '"v1"'),), (("ETag", 'W/"v1"'),), "weak and a strong"),
        (
            (("ETag", 'W/"1"'), ("Last-Modified", "Mon, 23 Nov 2026 08:00:00 GMT")),
            (("ETag", 'W/"1"'), ("Last-Modified", "Mon, 23 Nov 2026 09:00:00 GMT")),
            "Last-Modified Mon, 23 Nov 2026 08:00:00 GMT, now",
        ),
        (
            (("Last-Modified", "Mon, 23 Nov 2026 08:00:00 GMT"),),
            (),
            "carries no Last-Modified",
        ),
    ],
    ids=["etag-stripped", "etag-weakened", "weak-etag-same-last-modified-moved", "lm-stripped"],
)
def test_a_later_answer_that_cannot_be_tied_to_the_version_opened_is_refused(
    serve: Callable[..., RawServer],
    first: tuple[tuple[str, str], ...],
    later: tuple[tuple[str, str], ...],
    message: str,
) -> None:
    server = serve(replaced_after_first(first, later))
    with (
        rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f,
        pytest.raises(rt.RemoteFileChangedError, match=message) as caught,
    ):
        f.get_tensor("w")
    assert server.url in str(caught.value)
    assert len(server.requests) == 2  # refused at once: no retry can make it trustworthy


def test_last_modified_alone_is_sent_as_if_unmodified_since(
    serve: Callable[..., RawServer], data_path: str
) -> None:
    stamp = "Mon, 23 Nov 2026 08:00:00 GMT"
    changed = threading.Event()

    def answer(request: Request, number: int) -> Reply:
        condition = request.headers.get("if-unmodified-since")
        if changed.is_set() and condition is not None:
            return head("412 Precondition Failed", [("Content-Length", "0")])
        answer, body = partial(OLD, request, fields=[("Last-Modified", stamp)])
        return answer + body

    server = serve(answer)
    with rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
        assert data_requests(server)[0].headers["if-unmodified-since"] == stamp
        assert "if-match" not in data_requests(server)[0].headers
        assert_path(server, data_path)
        changed.set()
        with pytest.raises(rt.RemoteFileChangedError, match="HTTP 412 for If-Unmodified-Since"):
            f.get_tensor("w")
    assert len(server.requests) == 3


def test_a_server_without_validators_is_read_by_size_alone(
    serve: Callable[..., RawServer], data_path: str
) -> None:
    server = serve(good(fields=()))
    with rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    request = data_requests(server)[0]
    assert "if-match" not in request.headers
    assert "if-unmodified-since" not in request.headers
    assert len(server.requests) == 2


# --- 2. bounded resumes, a throughput floor and a deadline --------------------------------------


@pytest.mark.parametrize("sent", [1, 100])
def test_a_server_that_sends_a_few_bytes_per_connection_fails_after_max_attempts(
    serve: Callable[..., RawServer], sent: int
) -> None:
    def answer(request: Request, number: int) -> Reply:
        answer, body = partial(OLD, request, fields=[("ETag", '"v1"')])
        return answer + body if number == 0 else cut_after(answer, body, sent)

    server = serve(answer)
    with (
        rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f,
        pytest.raises(rt.TransportError, match=r"body cut.*gave up after 4 attempts") as caught,
    ):
        finishes(lambda: f.get_tensor("w"))
    assert not isinstance(caught.value, rt.RequestTimeoutError)
    assert len(server.requests) == 1 + FAST.max_attempts


def test_resumes_that_make_real_progress_finish_the_read(
    serve: Callable[..., RawServer], data_path: str
) -> None:
    def answer(request: Request, number: int) -> Reply:
        answer, body = partial(OLD, request, fields=[("ETag", '"v1"')])
        if number == 0:
            return answer + body
        return cut_after(answer, body, (len(body) + 1) // 2)  # half of what is missing

    server = serve(answer)
    with rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    ranges = [r.range for r in data_requests(server) if r.range is not None]
    assert ranges[0] == (WINDOW, len(OLD))
    assert all(b[0] > a[0] and b[1] == len(OLD) for a, b in itertools.pairwise(ranges))
    assert len(server.requests) <= 2 + (len(OLD) - WINDOW).bit_length()
    assert_path(server, data_path)


@pytest.mark.parametrize("sent", [0, 100])
def test_a_body_that_stalls_fails_on_the_read_timeout_after_max_attempts(
    serve: Callable[..., RawServer], sent: int
) -> None:
    options = rt.HttpOptions(read_timeout_seconds=0.3, max_attempts=3, backoff_initial_seconds=0.01)
    holder: list[RawServer] = []
    stalled: list[Seen] = []

    def answer(request: Request, number: int) -> Reply:
        answer, body = partial(OLD, request, fields=[("ETag", '"v1"')])
        if number == 0:
            return answer + body
        stalled.append(Seen())  # the server sends nothing more until the client leaves
        return stall(answer + body[:sent], stop=holder[0].stopping, seen=stalled[-1])

    server = serve(answer)
    holder.append(server)
    with (
        rt.safe_open(f"{server.url}/m.safetensors", http_options=options) as f,
        pytest.raises(rt.RequestTimeoutError, match="gave up after 3 attempts") as caught,
    ):
        finishes(lambda: f.get_tensor("w"))
    assert caught.value.bound == "read_timeout_seconds"
    assert len(server.requests) == 1 + options.max_attempts
    # Each stalled attempt ended with the client closing its connection (not the server).
    assert len(stalled) == options.max_attempts
    assert until(lambda: all(seen.client_left.is_set() for seen in stalled))


def test_a_trickle_trips_the_throughput_floor(serve: Callable[..., RawServer]) -> None:
    options = rt.HttpOptions(
        read_timeout_seconds=3.0, min_bytes_per_second=1000.0, throughput_window_seconds=0.5
    )
    holder: list[RawServer] = []
    seen = Seen()

    def answer(request: Request, number: int) -> Reply:
        answer, body = partial(OLD, request, fields=[("ETag", '"v1"')])
        if number == 0:
            return answer + body
        # 10 bytes/s: the read timeout alone never trips, the trickle would last hours.
        return trickle(answer, body, every_seconds=0.1, stop=holder[0].stopping, seen=seen)

    server = serve(answer)
    holder.append(server)
    with (
        rt.safe_open(f"{server.url}/m.safetensors", http_options=options) as f,
        pytest.raises(rt.RequestTimeoutError, match="below min_bytes_per_second=1000") as caught,
    ):
        finishes(lambda: f.get_tensor("w"))
    assert caught.value.bound == "min_bytes_per_second"
    assert len(server.requests) == 2  # not retried
    assert until(seen.client_left.is_set)  # the client gave up on the connection


def trickling_server(serve: Callable[..., RawServer], *, from_answer: int = 1) -> RawServer:
    """Answers whole before ``from_answer``, then a trickle far below 1000 bytes/s."""
    holder: list[RawServer] = []

    def answer(request: Request, number: int) -> Reply:
        answer, body = partial(OLD, request, fields=[("ETag", '"v1"')])
        if number < from_answer:
            return answer + body
        return trickle(answer, body, every_seconds=0.1, stop=holder[0].stopping)

    holder.append(serve(answer))
    return holder[0]


async def test_a_tripped_floor_leaves_the_reading_task_fit_to_go_on(
    serve: Callable[..., RawServer],
) -> None:
    # The floor cancels the task that runs the attempt (here the caller's own: opening reads
    # the header in it) and withdraws that cancellation when it raises its own error: nothing
    # of it may reach the caller's next await.
    server = trickling_server(serve, from_answer=0)
    options = rt.HttpOptions(min_bytes_per_second=1000.0, throughput_window_seconds=0.3)
    with pytest.raises(rt.RequestTimeoutError, match="below min_bytes_per_second"):
        await rt.open_async(f"{server.url}/m.safetensors", http_options=options)
    task = asyncio.current_task()
    assert task is not None
    if sys.version_info >= (3, 11):
        assert task.cancelling() == 0
    await asyncio.sleep(0.05)  # no stray CancelledError


async def test_cancelling_a_slow_read_cancels_it_rather_than_tripping_the_floor(
    serve: Callable[..., RawServer],
) -> None:
    server = trickling_server(serve)
    options = rt.HttpOptions(min_bytes_per_second=1000.0, throughput_window_seconds=0.3)
    async with rt.open_async(f"{server.url}/m.safetensors", http_options=options) as f:
        reading = asyncio.ensure_future(f.get_tensor("w"))
        await asyncio.sleep(0.15)  # inside the first window
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading


def test_a_steady_but_slow_answer_trips_the_deadline(serve: Callable[..., RawServer]) -> None:
    options = rt.HttpOptions(read_timeout_seconds=3.0, request_deadline_seconds=0.6)
    holder: list[RawServer] = []
    seen = Seen()
    body_bytes: list[int] = []

    def answer(request: Request, number: int) -> Reply:
        answer, body = partial(OLD, request, fields=[("ETag", '"v1"')])
        if number == 0:
            return answer + body
        # 80 KiB/s: far above the floor, but the 192 KiB take 2.4 s.
        body_bytes.append(len(body))
        stop = holder[0].stopping
        return trickle(answer, body, every_seconds=0.05, piece=4096, stop=stop, seen=seen)

    server = serve(answer)
    holder.append(server)
    with (
        rt.safe_open(f"{server.url}/m.safetensors", http_options=options) as f,
        pytest.raises(rt.RequestTimeoutError, match=r"request_deadline_seconds=0\.6") as caught,
    ):
        finishes(lambda: f.get_tensor("w"))
    assert caught.value.bound == "request_deadline_seconds"
    assert len(server.requests) == 2
    # The client cut the answer short: it left before the server had sent the whole body.
    assert until(seen.client_left.is_set)
    assert seen.sent < body_bytes[0]


@pytest.fixture
def unaccepting_port() -> Iterator[int]:
    """A loopback port whose accept queue is full: it drops new SYNs, so a handshake with it
    never completes and only connect_timeout_seconds ends an attempt."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    time.sleep(0.1)
    yield port
    for sock in (*fillers, listener):
        sock.close()


NO_HANDSHAKE = rt.HttpOptions(
    connect_timeout_seconds=0.3, max_attempts=2, backoff_initial_seconds=0.01
)


def test_a_connection_that_is_never_accepted_times_out(unaccepting_port: int) -> None:
    url = f"http://127.0.0.1:{unaccepting_port}/m.safetensors"
    with pytest.raises(rt.RequestTimeoutError, match="timed out") as caught:
        finishes(lambda: rt.safe_open(url, http_options=NO_HANDSHAKE))
    # Both attempts waited for the handshake until connect_timeout_seconds (a refused or
    # failed connection is another error, a hang never returns).
    assert "gave up after 2 attempts" in str(caught.value)


async def test_a_connect_timeout_leaves_the_opening_task_fit_to_go_on(
    unaccepting_port: int,
) -> None:
    with pytest.raises(rt.RequestTimeoutError, match="timed out"):
        await rt.open_async(
            f"http://127.0.0.1:{unaccepting_port}/m.safetensors", http_options=NO_HANDSHAKE
        )
    task = asyncio.current_task()
    assert task is not None
    if sys.version_info >= (3, 11):
        assert task.cancelling() == 0
    await asyncio.sleep(0.05)  # no stray CancelledError


# --- 3. interim 1xx answers are skipped --------------------------------------------------------


@pytest.mark.parametrize(
    "interim",
    [
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
    ],
    ids=["100", "103", "100-103"],
)
def test_interim_answers_are_skipped(
    serve: Callable[..., RawServer], interim: bytes, data_path: str
) -> None:
    def answer(request: Request, number: int) -> Reply:
        answer, body = partial(OLD, request, fields=[("ETag", '"v1"')])
        return interim + answer + body

    server = serve(answer)
    with rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    assert len(server.requests) == 2
    assert_path(server, data_path)


# --- 4. IPv6 literal hosts ---------------------------------------------------------------------


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback (::1) on this machine")
def test_an_ipv6_literal_host_keeps_its_brackets(
    serve: Callable[..., RawServer], data_path: str
) -> None:
    server = serve(good(), host="::1")
    assert server.url.split("://")[1].startswith("[::1]:")
    with rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    assert [r.headers["host"] for r in server.requests] == [f"[::1]:{server.port}"] * 2
    assert_path(server, data_path)


# --- 5. secrets: userinfo is Basic auth for the origin only, and never shown --------------------

BASIC = "Basic " + base64.b64encode(b"user:s3cr3t").decode()


def test_userinfo_is_sent_as_basic_auth_to_the_origin_and_never_shown(
    serve: Callable[..., RawServer], data_path: str
) -> None:
    def answer(request: Request, number: int) -> Reply:
        if request.headers.get("authorization") != BASIC:
            return head("401 Unauthorized", [("Content-Length", "0")])
        answer, body = partial(OLD, request, fields=[("ETag", '"v1"')])
        return answer + body

    server = serve(answer)
    url = server.url.replace("://", "://user:s3cr3t@", 1) + "/m.safetensors"
    with rt.safe_open(url, http_options=FAST) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
        assert "s3cr3t" not in repr(f)
        assert "user:***@" in repr(f)
    assert [r.headers.get("authorization") for r in server.requests] == [BASIC, BASIC]
    assert_path(server, data_path)


def test_userinfo_never_reaches_a_redirect_target(
    serve: Callable[..., RawServer], data_path: str
) -> None:
    target = serve(good())
    origin = serve(
        lambda request, number: head(
            "302 Found", [("Location", f"{target.url}/cdn/m"), ("Content-Length", "0")]
        )
    )
    url = origin.url.replace("://", "://user:s3cr3t@", 1) + "/m.safetensors"
    with rt.safe_open(url, http_options=FAST) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    assert [r.headers.get("authorization") for r in origin.requests] == [BASIC]
    assert len(target.requests) == 2
    assert all("authorization" not in r.headers for r in target.requests)
    assert_path(target, data_path)


SECRET_URL_TAIL = "/m.safetensors?token=tok123&X-Amz-Signature=sig456&v=1"


def test_errors_and_reprs_name_the_url_without_secrets(serve: Callable[..., RawServer]) -> None:
    def answer(request: Request, number: int) -> Reply:
        if number == 0:
            answer, body = partial(OLD, request, fields=[("ETag", '"v1"')])
            return answer + body
        return head("500 Oops", [("Content-Length", "0")])

    server = serve(answer)
    missing = serve(lambda request, number: head("404 Not Found", [("Content-Length", "0")]))
    shown = server.url.replace("://", "://user:***@", 1) + (
        "/m.safetensors?token=***&X-Amz-Signature=***&v=1"
    )
    secret = server.url.replace("://", "://user:s3cr3t@", 1) + SECRET_URL_TAIL
    with rt.safe_open(secret, http_options=FAST) as f:
        assert shown in repr(f)
        with pytest.raises(rt.TransportError, match="HTTP 500") as caught:
            f.get_tensor("w")
    assert str(caught.value).startswith(shown)
    assert len(server.requests) == 1 + FAST.max_attempts
    with pytest.raises(rt.NotFoundError) as gone:
        rt.safe_open(missing.url.replace("://", "://user:s3cr3t@", 1) + SECRET_URL_TAIL)
    for error in (caught.value, gone.value):
        for leaked in ("s3cr3t", "tok123", "sig456"):
            assert leaked not in str(error)
            assert leaked not in repr(error)


def test_the_progress_label_carries_no_secrets(
    serve: Callable[..., RawServer], capfd: pytest.CaptureFixture[str]
) -> None:
    def answer(request: Request, number: int) -> Reply:
        answer, body = partial(OLD, request, fields=[("ETag", '"v1"')])
        if number == 0:
            return answer + body

        def slow(conn: socket.socket) -> bool:
            time.sleep(SHOW_AFTER_SECONDS + 0.3)  # long enough for the bar to show
            conn.sendall(answer + body)
            return True

        return slow

    server = serve(answer)
    url = server.url.replace("://", "://user:s3cr3t@", 1) + SECRET_URL_TAIL
    options = rt.ReadOptions(progress=True)
    with rt.safe_open(url, http_options=FAST, options=options) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    err = capfd.readouterr().err
    assert "m.safetensors?token=***" in err
    for leaked in ("s3cr3t", "tok123", "sig456"):
        assert leaked not in err


def test_redact_url() -> None:
    assert redact_url("https://u:p@h:1/a?sig=x&b=2#f") == "https://u:***@h:1/a?sig=***&b=2#f"
    assert redact_url("https://tok@h/a") == "https://***@h/a"
    assert redact_url("https://h/a?Key-Pair-Id=k&Policy=p&Expires=9") == (
        "https://h/a?Key-Pair-Id=***&Policy=***&Expires=9"
    )
    assert redact_url("hf://org/name") == "hf://org/name"
    assert redact_url("/local/path") == "/local/path"


# --- 6. every failure a clear RemoteTensorsError naming the URL ---------------------------------


def test_a_redirect_loop_is_a_bad_response(serve: Callable[..., RawServer]) -> None:
    def answer(request: Request, number: int) -> Reply:
        if number == 0:
            answer, body = partial(OLD, request, fields=[("ETag", '"v1"')])
            return answer + body
        other = "/b" if request.target.startswith("/m") else "/m.safetensors?token=tok123"
        return head("302 Found", [("Location", other), ("Content-Length", "0")])

    server = serve(answer)
    with (
        rt.safe_open(f"{server.url}/m.safetensors?token=tok123", http_options=FAST) as f,
        pytest.raises(rt.BadResponseError, match="redirect loop") as caught,
    ):
        f.get_tensor("w")
    assert str(caught.value).startswith(f"{server.url}/m.safetensors?token=***:")
    assert "tok123" not in str(caught.value)
    assert len(server.requests) <= 2 + 21  # at most one attempt's worth of redirects


@pytest.mark.parametrize("value", ["²", "soon", "-1", "1e3", "Mon, 99 Foo 2026"])
def test_a_malformed_retry_after_falls_back_to_backoff(
    serve: Callable[..., RawServer], value: str, data_path: str
) -> None:
    def answer(request: Request, number: int) -> Reply:
        if number == 1:
            fields = [("Retry-After", value), ("Content-Length", "0")]
            return head("503 Service Unavailable", fields)
        answer, body = partial(OLD, request, fields=[("ETag", '"v1"')])
        return answer + body

    server = serve(answer)
    with rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    assert len(server.requests) == 3


@pytest.mark.parametrize(
    ("eol", "raw"),
    [(b"\n", b""), (b"\r\n", b"X-Note: first part\r\n  folded part\r\n")],
    ids=["bare-lf", "obs-fold"],
)
def test_bare_lf_and_folded_heads_are_read_as_rfc_9112_allows(
    serve: Callable[..., RawServer], eol: bytes, raw: bytes, data_path: str
) -> None:
    server = serve(good(eol=eol, raw=raw))
    with rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    assert len(server.requests) == 2
    assert_path(server, data_path)


MALFORMED: dict[str, Callable[[bytes, bytes], bytes]] = {
    "conflicting-content-length": lambda answer, body: (
        answer.replace(b"\r\n\r\n", f"\r\nContent-Length: {len(body) + 1}\r\n\r\n".encode(), 1)
        + body
    ),
    "status-not-a-number": lambda answer, body: answer.replace(b" 206 ", b" 2O6 ", 1) + body,
    "field-without-colon": lambda answer, body: (
        answer.replace(b"\r\n\r\n", b"\r\nthis is no field\r\n\r\n", 1) + body
    ),
    "space-before-colon": lambda answer, body: (
        answer.replace(b"Content-Length:", b"Content-Length :", 1) + body
    ),
    "not-http": lambda answer, body: b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
}


@pytest.mark.parametrize("fault", sorted(MALFORMED))
def test_a_malformed_head_is_a_bad_response_naming_the_url(
    serve: Callable[..., RawServer], fault: str
) -> None:
    def answer(request: Request, number: int) -> Reply:
        answer, body = partial(OLD, request, fields=[("ETag", '"v1"')])
        if number == 0:
            return answer + body
        broken = MALFORMED[fault](answer, body)

        def write(conn: socket.socket) -> bool:
            conn.sendall(broken)
            return False

        return write

    server = serve(answer)
    with (
        rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f,
        pytest.raises(rt.BadResponseError, match=r"not valid HTTP/1\.1") as caught,
    ):
        f.get_tensor("w")
    assert str(caught.value).startswith(f"{server.url}/m.safetensors:")
    assert len(server.requests) == 2  # a broken answer is not retried


@pytest.mark.parametrize("connection", ["close", "keep-alive, Close"])
def test_connection_close_is_honoured(
    serve: Callable[..., RawServer], connection: str, data_path: str
) -> None:
    def answer(request: Request, number: int) -> Reply:
        answer, body = partial(OLD, request, fields=[("ETag", '"v1"'), ("Connection", connection)])

        def write(conn: socket.socket) -> bool:
            conn.sendall(answer + body)
            return False

        return write

    server = serve(answer)
    with rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f:
        for _ in range(3):
            assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    assert len(server.requests) == 4  # no request was lost on a closed connection
    assert server.connections == 4
    assert_path(server, data_path)
