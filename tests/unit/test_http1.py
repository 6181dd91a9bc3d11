"""The direct reader's HTTP/1.1 heads against h11, the parser under httpx, as the oracle.

Every head here, hand-written or mutated at random, must get the same verdict from
``sources/http/head.py`` as from h11: refused by both, or read by both into the same status,
version and fields (Content-Length normalised as h11 does). Request heads must be the bytes
h11 sends, and refused where h11 refuses them.
"""

from __future__ import annotations

import random

import h11
import httpx
import pytest

from remotetensors.sources.http.head import (
    MAX_HEAD_BYTES,
    Fields,
    HeadError,
    ResponseHead,
    parse_response_head,
    request_head,
)

GOOD = (
    b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/100\r\nContent-Length: 10\r\n"
    b'ETag: "v1"\r\n\r\n'
)

HEADS = [
    GOOD,
    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n",
    b"HTTP/1.1 404\r\n\r\n",  # no reason phrase
    b"HTTP/1.1 404 \r\n\r\n",
    b"HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 5\r\n\r\n",
    b"HTTP/1.1 200 OK\nContent-Length: 3\n\n",  # bare LF
    b"HTTP/1.1 200 OK\r\nX-A: one\r\n  two\r\n\tthree\r\nContent-Length: 1\r\n\r\n",  # obs-fold
    b"HTTP/1.1 200 OK\r\n  folded-first: x\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 21 + b"\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: CHUNKED\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\n",  # space before the colon
    b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nNo-Colon\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX:\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX:   spaced value  \r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: caf\xc3\xa9\r\n\r\n",
    b"HTTP/1.1 20 OK\r\n\r\n",
    b"HTTP/1.1 099 OK\r\n\r\n",
    b"HTTP/1.1 2000 OK\r\n\r\n",
    b"HTTP/1 200 OK\r\n\r\n",
    b"HTTP/2.0 200 OK\r\n\r\n",
    b"http/1.1 200 OK\r\n\r\n",
    b"HTTP/1.1  200 OK\r\n\r\n",
    b"HTTP/1.1 200 O\x00K\r\n\r\n",
    b"HTTP/1.1 200 OK\tfine\r\n\r\n",
    b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    b"\r\nHTTP/1.1 200 OK\r\n\r\n",
    b"\nHTTP/1.1 200 OK\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\n",
    b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nVary: a\r\nX-A: 1\r\nvary: B\r\nVARY: c\r\n\r\n",  # a repeated name
    b"HTTP/1.1 200 OK\r\nX-Latin: caf\xe9\r\nX-Plain: ok\r\n\r\n",  # not UTF-8
]


def h11_verdict(data: bytes) -> tuple[bytes, int, list[tuple[bytes, bytes]]] | str:
    """What h11 makes of ``data`` as the first answer to a GET: the head, or "refused"."""
    connection = h11.Connection(h11.CLIENT)
    connection.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    connection.send(h11.EndOfMessage())
    try:
        connection.receive_data(data)
        event = connection.next_event()
    except h11.RemoteProtocolError:
        return "refused"
    if event is h11.NEED_DATA:
        return "incomplete"
    assert isinstance(event, h11.InformationalResponse | h11.Response), event
    return event.http_version, event.status_code, list(event.headers.raw_items())


def our_verdict(data: bytes) -> tuple[bytes, int, list[tuple[bytes, bytes]]] | str:
    try:
        head = parse_response_head(bytearray(data))
    except HeadError:
        return "refused"
    if head is None:
        return "incomplete"
    assert isinstance(head, ResponseHead)
    return head.http_version, head.status, head.fields


@pytest.mark.parametrize("data", HEADS, ids=range(len(HEADS)))
def test_a_head_gets_h11s_verdict(data: bytes) -> None:
    assert our_verdict(data) == h11_verdict(data)


def test_random_mutations_of_heads_get_h11s_verdicts() -> None:
    rng = random.Random(20261123)
    alphabet = b" \t\r\n:,;\x00\x7f\x80\xffaZ09-/"
    checked = 0
    for _ in range(4000):
        data = bytearray(rng.choice(HEADS))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            action = rng.randrange(3)
            if action == 0:
                data[at] = rng.choice(alphabet)
            elif action == 1:
                data.insert(at, rng.choice(alphabet))
            else:
                del data[at]
        h11_says = h11_verdict(bytes(data))
        if h11_says == "incomplete":
            continue
        assert our_verdict(bytes(data)) == h11_says, bytes(data)
        checked += 1
    assert checked > 3000


def same_reading(fields: list[tuple[bytes, bytes]]) -> None:
    """``Fields`` reads ``fields`` as ``httpx.Headers`` does: every lookup in any case."""
    ours, theirs = Fields(fields), httpx.Headers(fields)
    assert list(ours) == list(theirs.keys())
    names = {name.decode("latin-1") for name, _ in fields} | {"absent", "Content-Length"}
    for name in names:
        for spelled in (name, name.lower(), name.upper()):
            assert ours.get(spelled) == theirs.get(spelled)
            assert ours.get(spelled, "-") == theirs.get(spelled, "-")
            assert (spelled in ours) == (spelled in theirs)
            assert ours.get_list(spelled) == theirs.get_list(spelled)
            if spelled in theirs:
                assert ours[spelled] == theirs[spelled]
            else:
                with pytest.raises(KeyError):
                    ours[spelled]


def test_fields_read_as_httpx_headers_read() -> None:
    # The direct reader hands Fields to the code that also reads httpx's headers.
    rng = random.Random(7)
    alphabet = b" \t:,\x80\xffaZ09-"
    read = 0
    for data in HEADS * 60:
        mutated = bytearray(data)
        if read >= len(HEADS):  # the heads as written first, then mutated
            at = rng.randrange(len(mutated))
            mutated[at : at + 1] = bytes([rng.choice(alphabet)])
        verdict = our_verdict(bytes(mutated))
        if isinstance(verdict, tuple):
            same_reading(verdict[2])
            read += 1
    assert read > 400


def test_a_head_is_taken_off_the_buffer_and_the_body_stays() -> None:
    buffer = bytearray(b"HTTP/1.1 100 Continue\r\n\r\n" + GOOD + b"0123456789")
    interim = parse_response_head(buffer)
    assert interim is not None
    assert interim.status == 100
    final = parse_response_head(buffer)
    assert final is not None
    assert final.status == 206
    assert buffer == b"0123456789"


def test_an_incomplete_head_waits_until_it_is_too_long() -> None:
    assert parse_response_head(bytearray(GOOD[:-2])) is None
    endless = bytearray(b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * (MAX_HEAD_BYTES // 6 + 1))
    with pytest.raises(HeadError, match="longer than"):
        parse_response_head(endless)


def h11_request(target: str, fields: list[tuple[str, str]]) -> bytes | str:
    connection = h11.Connection(h11.CLIENT)
    try:
        data = connection.send(h11.Request(method="GET", target=target, headers=fields))
    except (h11.LocalProtocolError, UnicodeEncodeError):
        return "refused"
    assert data is not None
    return data


def our_request(target: str, fields: list[tuple[str, str]]) -> bytes | str:
    try:
        return request_head(target, fields)
    except HeadError:
        return "refused"


@pytest.mark.parametrize(
    ("target", "fields"),
    [
        ("/m.safetensors?x=1", [("Host", "h:1"), ("Range", "bytes=0-7")]),
        ("/a b", [("Host", "h")]),
        ("/caf\u00e9", [("Host", "h")]),
        ("/a", [("Host", "h"), ("X", "a\r\nInjected: yes")]),
        ("/a", [("Host", "h"), ("X", " leading")]),
        ("/a", [("Host", "h"), ("X", "")]),
        ("/a", [("Host", "h"), ("Bad Name", "x")]),
        ("/a", [("Host", "h"), ("X", "caf\u00e9")]),
        ("/a", [("Host", "[::1]:8080"), ("Authorization", "Bearer abc.def")]),
        # Found by the fuzzer: ASCII's separators (0x1c-0x1f) are whitespace to a str regex,
        # not to h11's bytes one.
        ("/a", [("Host", "h"), ("X", "a\x1cb")]),
        ("/a", [("Host", "h"), ("X", "\x1f")]),
        ("/a", [("Host", "h"), ("X", "a\x85b")]),
    ],
)
def test_a_request_head_is_what_h11_sends(target: str, fields: list[tuple[str, str]]) -> None:
    assert our_request(target, fields) == h11_request(target, fields)
