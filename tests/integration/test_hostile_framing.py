"""A hostile network, round three: every legal HTTP/1.1 framing of an answer is read.

A 206 may come in chunked transfer coding (with chunk extensions and trailers), or end when the
server closes the connection (no ``Content-Length``, no chunking), with header names in any
case and values padded with spaces and tabs. Every case runs on every data path (the direct
reader, the direct reader with bodies received in worker threads, and httpx: see conftest.py)
and compares the bytes with the file's. A cut body is resumed from its first missing byte, as
one with a ``Content-Length`` is; a body longer than its ``Content-Range`` is refused. URLs
with spaces and non-ASCII characters are sent percent-encoded once, as httpx sends them.
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import Callable

import httpx
import pytest

import remotetensors as rt
from tests.integration.conftest import DATA_PATHS, TLS_PATHS, data_paths
from tests.integration.test_hostile_network import (
    FAST,
    OLD,
    OLD_W,
    WINDOW,
    assert_path,
    data_requests,
    good,
    quiet,  # noqa: F401  (the autouse fixture: no noise left behind)
)
from tests.rawservers import RawServer, Reply, Request, Seen, chunked, head, stall

pytestmark = pytest.mark.usefixtures("data_path")
# ... and over TLS too: the direct reader's HTTPS bodies, in the loop and in worker threads.
data_path = data_paths([*DATA_PATHS, *TLS_PATHS])

ETAG = ("ETag", '"v1"')


def asked(request: Request, data: bytes = OLD) -> tuple[str, bytes]:
    """The ``Content-Range`` value and the bytes of ``request``'s range of ``data``."""
    assert request.range is not None, request
    start, end = request.range[0], min(request.range[1], len(data))
    return f"bytes {start}-{end - 1}/{len(data)}", data[start:end]


def closing(answer: bytes) -> Callable[[socket.socket], bool]:
    """Send ``answer``, then close the connection (the end of a close-delimited body)."""

    def write(conn: socket.socket) -> bool:
        conn.sendall(answer)
        return False

    return write


# --- every framing of a 206 --------------------------------------------------------------------

EXTENSIONS = (b"", b";a", b";name=value", b';q="x;y"', b"; n = v", b";e \t")
TRAILER = b"X-Checksum: abc\r\nx-other:\t v \r\n"


def framed(framing: str, request: Request) -> Reply:
    """A correct 206 for ``request`` in ``framing`` (see :data:`FRAMINGS`)."""
    span, body = asked(request)
    if framing == "chunked":
        fields = [("Content-Range", span), ("Transfer-Encoding", "chunked"), ETAG]
        return head("206 Partial Content", fields) + chunked(body, extensions=EXTENSIONS)
    if framing == "chunked, a trailer":
        fields = [("Content-Range", span), ("Transfer-Encoding", "chunked"), ETAG]
        return head("206 Partial Content", fields) + chunked(body, trailer=TRAILER)
    if framing == "chunked, one chunk":
        fields = [("Content-Range", span), ("Transfer-Encoding", "chunked"), ETAG]
        return head("206 Partial Content", fields) + chunked(body, (len(body),))
    if framing == "chunked and Content-Length":
        encoded = chunked(body)  # Transfer-Encoding overrides Content-Length (RFC 9112 6.3)
        fields = [
            ("Content-Range", span),
            ("Content-Length", str(len(encoded))),
            ("Transfer-Encoding", "chunked"),
            ETAG,
        ]
        return closing(head("206 Partial Content", fields) + encoded)
    if framing == "until close":
        return closing(head("206 Partial Content", [("Content-Range", span), ETAG]) + body)
    if framing == "until close, HTTP/1.0":
        answer = head("206 Partial Content", [("Content-Range", span), ETAG])
        return closing(answer.replace(b"HTTP/1.1", b"HTTP/1.0", 1) + body)
    if framing == "lower-case names":
        fields = [("content-range", span), ("content-length", str(len(body))), ("etag", '"v1"')]
        return head("206 Partial Content", fields) + body
    if framing == "upper-case names, chunked":
        fields = [("CONTENT-RANGE", span), ("TRANSFER-ENCODING", "Chunked"), ("ETAG", '"v1"')]
        return head("206 Partial Content", fields) + chunked(body)
    assert framing == "values padded with spaces and tabs"
    fields = [
        ("Content-Range", f"\t  {span} \t"),
        ("Content-Length", f"   {len(body)}\t"),
        ("ETag", ' \t"v1"  '),
    ]
    return head("206 Partial Content", fields) + body


FRAMINGS = {
    # framing: whether the connection carries the next request
    "chunked": True,
    "chunked, a trailer": True,
    "chunked, one chunk": True,
    "chunked and Content-Length": False,
    "until close": False,
    "until close, HTTP/1.0": False,
    "lower-case names": True,
    "upper-case names, chunked": True,
    "values padded with spaces and tabs": True,
}


@pytest.mark.parametrize("framing", list(FRAMINGS))
def test_every_framing_of_a_206_gives_the_files_bytes(
    serve: Callable[..., RawServer], framing: str, data_path: str
) -> None:
    server = serve(lambda request, number: framed(framing, request))
    with rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f:
        for _ in range(2):
            assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    assert len(server.requests) == 3  # nothing retried, nothing asked twice
    assert_path(server, data_path)
    # A complete chunked or Content-Length body leaves its connection fit for the next request;
    # a body that the close ended does not (nor one with both framings: RFC 9112 6.3).
    if FRAMINGS[framing]:
        assert server.connections == 1
    elif framing != "chunked and Content-Length" or data_path != "httpx":  # h11 keeps it
        assert server.connections == 3


def test_a_redirect_whose_chunked_body_carries_a_stale_content_length_is_followed(
    serve: Callable[..., RawServer], data_path: str
) -> None:
    # The Content-Length counts the chunked encoding (as a proxy may leave it): it says nothing
    # of the body, which is then left unread rather than read to a wrong length.
    page = chunked(b"moved", (2,))

    def answer(request: Request, number: int) -> Reply:
        if request.target == "/m.safetensors":
            fields = [
                ("Location", "/cdn/m.safetensors"),
                ("Transfer-Encoding", "chunked"),
                ("Content-Length", str(len(page))),
            ]
            return head("302 Found", fields) + page
        return framed("chunked", request)

    server = serve(answer)
    with rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    assert [r.target for r in server.requests] == ["/m.safetensors"] + ["/cdn/m.safetensors"] * 2
    assert_path(server, data_path)


# --- cut bodies: resumed from the first missing byte, never wrong bytes -----------------------


def cut(kind: str, request: Request, sent: int) -> Reply:
    """A 206 for ``request`` whose body ends after ``sent`` of its bytes, as ``kind`` says."""
    span, body = asked(request)
    te = [("Content-Range", span), ("Transfer-Encoding", "chunked"), ETAG]
    if kind == "chunked, cut inside a chunk":
        # Small chunks, then one announcing the rest of the body, cut after ``sent`` bytes.
        before = sent // 2
        last = f"{len(body) - before:x}\r\n".encode() + body[before:sent]
        encoded = chunked(body[:before], (4096,), end=False) + last
        return closing(head("206 Partial Content", te) + encoded)
    if kind == "chunked, a last chunk too soon":
        return head("206 Partial Content", te) + chunked(body[:sent], (4096,))
    if kind == "chunked, a malformed chunk size":
        encoded = chunked(body[:sent], (4096,), end=False) + b"zz\r\n" + body[sent:]
        return closing(head("206 Partial Content", te) + encoded)
    assert kind == "until close, cut"
    return closing(head("206 Partial Content", [("Content-Range", span), ETAG]) + body[:sent])


CUTS = [
    "chunked, cut inside a chunk",
    "chunked, a last chunk too soon",
    "chunked, a malformed chunk size",
    "until close, cut",
]


@pytest.mark.parametrize("kind", CUTS)
def test_a_cut_body_resumes_from_its_first_missing_byte(
    serve: Callable[..., RawServer], kind: str, data_path: str
) -> None:
    def answer(request: Request, number: int) -> Reply:
        if number == 0:
            return framed("chunked", request)
        body = asked(request)[1]
        return cut(kind, request, (len(body) + 1) // 2)  # half of what is missing

    server = serve(answer)
    with rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    ranges = [r.range for r in data_requests(server) if r.range is not None]
    assert ranges[0] == (WINDOW, len(OLD))
    assert all(b[0] > a[0] and b[1] == len(OLD) for a, b in itertools.pairwise(ranges))
    assert len(server.requests) <= 2 + (len(OLD) - WINDOW).bit_length()
    assert_path(server, data_path)


@pytest.mark.parametrize("kind", CUTS)
def test_a_server_that_sends_a_few_bytes_per_connection_fails_after_max_attempts(
    serve: Callable[..., RawServer], kind: str
) -> None:
    def answer(request: Request, number: int) -> Reply:
        return framed("chunked", request) if number == 0 else cut(kind, request, 100)

    server = serve(answer)
    with (
        rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f,
        pytest.raises(rt.TransportError, match=r"gave up after 4 attempts") as caught,
    ):
        f.get_tensor("w")
    assert not isinstance(caught.value, rt.RequestTimeoutError)
    assert len(server.requests) == 1 + FAST.max_attempts


def test_a_chunked_body_with_every_byte_but_no_last_chunk_is_used(
    serve: Callable[..., RawServer], data_path: str
) -> None:
    def answer(request: Request, number: int) -> Reply:
        if number == 0:
            return framed("chunked", request)
        body = asked(request)[1]
        return cut("chunked, cut inside a chunk", request, len(body))

    server = serve(answer)
    with rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    assert len(server.requests) == 2  # nothing was missing: nothing asked again
    assert_path(server, data_path)


def test_a_body_until_close_whose_server_never_closes_is_used_after_the_read_timeout(
    serve: Callable[..., RawServer], data_path: str
) -> None:
    options = rt.HttpOptions(read_timeout_seconds=0.3, max_attempts=3, backoff_initial_seconds=0.01)
    holder: list[RawServer] = []
    seen = Seen()

    def answer(request: Request, number: int) -> Reply:
        span, body = asked(request)
        if number == 0:
            return framed("chunked", request)
        answer = head("206 Partial Content", [("Content-Range", span), ETAG]) + body
        return stall(answer, stop=holder[0].stopping, seen=seen)  # every byte, then no close

    holder.append(serve(answer))
    server = holder[0]
    with rt.safe_open(f"{server.url}/m.safetensors", http_options=options) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    assert len(server.requests) == 2
    assert seen.client_left.wait(5)  # the client gave the connection up
    assert_path(server, data_path)


@pytest.mark.parametrize("framing", ["chunked", "until close"])
def test_a_body_longer_than_its_content_range_is_refused(
    serve: Callable[..., RawServer], framing: str
) -> None:
    def answer(request: Request, number: int) -> Reply:
        if number == 0:
            return framed("chunked", request)
        span, body = asked(request)
        if framing == "chunked":
            fields = [("Content-Range", span), ("Transfer-Encoding", "chunked"), ETAG]
            return head("206 Partial Content", fields) + chunked(body + b"surplus")
        return closing(head("206 Partial Content", [("Content-Range", span), ETAG]) + body + b"+")

    server = serve(answer)
    with (
        rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f,
        pytest.raises(rt.BadResponseError, match="is longer than the") as caught,
    ):
        f.get_tensor("w")
    assert str(caught.value).startswith(f"{server.url}/m.safetensors:")
    assert len(server.requests) == 2  # not retried: the server says more than it announced


# --- URLs: spaces and non-ASCII characters percent-encoded once, as httpx does ------------------


@pytest.mark.parametrize(
    "path",
    [
        "/dir with space/na\u00efve \u00fc.safetensors",
        "/already%20encoded/a%20b%C3%BC.safetensors",
        "/mixed %20 \u00fc%C3%BC/100%.safetensors?q=a b&t=\u00fc",
    ],
    ids=["raw", "encoded", "mixed"],
)
def test_a_url_with_spaces_and_non_ascii_is_encoded_once_as_httpx_sends_it(
    serve: Callable[..., RawServer], path: str, data_path: str
) -> None:
    server = serve(good())
    url = f"{server.url}{path}"
    with rt.safe_open(url, http_options=FAST) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    sent = httpx.URL(url).raw_path.decode("ascii")
    assert " " not in sent
    assert "%2520" not in sent  # a %20 is never encoded again
    assert [r.target for r in server.requests] == [sent, sent]
    assert_path(server, data_path)


def test_a_redirect_to_a_location_with_spaces_and_non_ascii_is_encoded_once(
    serve: Callable[..., RawServer], data_path: str
) -> None:
    location = b"/cdn/a b/\xc3\xbc%20x.safetensors"  # UTF-8, as servers send it

    def answer(request: Request, number: int) -> Reply:
        if request.target == "/m.safetensors":
            return head(
                "302 Found", [("Content-Length", "0")], raw=b"Location: " + location + b"\r\n"
            )
        return good()(request, number)

    server = serve(answer)
    url = f"{server.url}/m.safetensors"
    with rt.safe_open(url, http_options=FAST) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    sent = httpx.URL(url).join(location.decode()).raw_path.decode("ascii")
    assert sent == "/cdn/a%20b/%C3%BC%20x.safetensors"
    assert [r.target for r in server.requests] == ["/m.safetensors", sent, sent]
    assert_path(server, data_path)
