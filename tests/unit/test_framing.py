"""Bodies by their framing (``sources/http/framing.py``), without a socket.

Chunked bodies are read against h11, the parser under httpx, as the oracle: every body here,
hand-written or mutated at random, fed in pieces of every size through the two steps a receive
takes (``buffer``, then ``updated``), must be refused by both, or give the same bytes and the
same verdict on whether it ended. The one difference is the RFC's: whitespace before a chunk
extension's ``;``, which h11 refuses and RFC 9112 7.1.1 tells a recipient to accept.
"""

from __future__ import annotations

import random
import re

import h11
import httpx
import pytest

from remotetensors.sources.http.direct import _address
from remotetensors.sources.http.framing import (
    BodyOverrun,
    ChunkedBody,
    FramingError,
    LengthBody,
    UntilCloseBody,
    body_for,
)
from remotetensors.sources.http.head import Fields, announced_length

ROOM = 1 << 20  # the target's length: more than any body here holds

CHUNKED = [
    b"5\r\nhello\r\n0\r\n\r\n",
    b"A\r\n0123456789\r\na\r\n0123456789\r\n0\r\n\r\n",
    b"0005\r\nhello\r\n0000\r\n\r\n",
    b"5;a=b;c\r\nhello\r\n0;last\r\n\r\n",
    b'5;q="x;y"\r\nhello\r\n0\r\n\r\n',
    b"5; n = v\r\nhello\r\n0\r\n\r\n",
    b"5 \t\r\nhello\r\n0\r\n\r\n",
    b"5;a\rb\r\nhello\r\n0\r\n\r\n",  # a lone CR inside an extension: h11 passes it
    b"5\r\nhello\r\n0\r\nX-A: 1\r\nX-B:  two \r\n\r\n",
    b"5\r\nhello\r\n0\r\nX-A: 1\r\n  more\r\n\r\n",
    b"5\r\nhello\r\n0\r\nX: 1\n\n",
    b"5\r\nhello\r\n0\r\n\n",
    b"0\r\n\r\n",
    b"0\r\n\r\nGARBAGE",
    b"1\r\n\x00\r\n2\r\n\r\n\r\n0\r\n\r\n",  # chunk bytes that look like framing
    # refused
    b"\r\nhello",
    b"-5\r\nhello\r\n0\r\n\r\n",
    b"0x5\r\nhello\r\n0\r\n\r\n",
    b"g\r\n",
    b" 5\r\nhello\r\n0\r\n\r\n",
    b"1" * 21 + b"\r\n",
    b"5\r\nhelloXX0\r\n\r\n",
    b"5\r\nhello\n0\r\n\r\n",
    b"5\nhello\r\n0\r\n\r\n",
    b"5;a\nb\r\nhello\r\n",
    b"5\r\nhello\r\n0\r\nBad Name: x\r\n\r\n",
    b"5\r\nhello\r\n0\r\n  folded-first\r\n\r\n",
    b"5\r\nhello\r\n0\r\nNo-Colon\r\n\r\n",
    # incomplete
    b"5\r\nhel",
    b"5\r\nhello\r",
    b"5\r\nhello\r\n",
    b"5\r\nhello\r\n0\r\n",
    b"5\r\nhello\r\n0\r\nX: 1\r\n",
    b"",
]


def h11_verdict(encoded: bytes) -> tuple[bytes, bool] | str:
    """What h11 reads of a chunked body: its bytes and whether it ended, or "refused"."""
    connection = h11.Connection(h11.CLIENT)
    connection.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    connection.send(h11.EndOfMessage())
    connection.receive_data(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + encoded)
    data = bytearray()
    try:
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                return bytes(data), False
            if isinstance(event, h11.EndOfMessage):
                return bytes(data), True
            if isinstance(event, h11.Data):
                data += event.data
    except h11.RemoteProtocolError:
        return "refused"


def our_verdict(
    encoded: bytes, rng: random.Random, *, scratch_bytes: int = 64
) -> tuple[bytes, bool] | str:
    """What a ChunkedBody reads of ``encoded``, received in pieces of random sizes into the
    buffers it names (a small scratch, so that framing is split between receives)."""
    target = memoryview(bytearray(ROOM))
    body = ChunkedBody(target)
    scratch = memoryview(bytearray(scratch_bytes))
    data = memoryview(encoded)
    try:
        while data and not body.done:
            into = body.buffer(scratch)
            count = min(len(into), len(data), rng.randint(1, 40))
            into[:count] = data[:count]
            body.updated(count)
            data = data[count:]
    except FramingError:
        return "refused"
    except BodyOverrun:
        return "overrun"
    return bytes(target[: body.received]), body.done


@pytest.mark.parametrize("encoded", CHUNKED, ids=range(len(CHUNKED)))
def test_a_chunked_body_gets_h11s_verdict(encoded: bytes) -> None:
    expected = h11_verdict(encoded)
    for seed in range(20):
        assert our_verdict(encoded, random.Random(seed)) == expected
    # and fed whole, as bytes that came with the head
    body = ChunkedBody(memoryview(bytearray(ROOM)))
    try:
        body.feed(memoryview(encoded))
    except FramingError:
        assert expected == "refused"
    else:
        assert (bytes(body.target[: body.received]), body.done) == expected


BWS = re.compile(rb"(?:^|\n)[0-9A-Fa-f]+[ \t]+;")


def test_random_mutations_of_chunked_bodies_get_h11s_verdicts() -> None:
    rng = random.Random(33)
    pieces = [b"\r", b"\n", b";", b" ", b"\t", b"0", b"f", b"x", b":", b"\r\n", b"\x00"]
    good = [encoded for encoded in CHUNKED if h11_verdict(encoded) != "refused"]
    for _ in range(3000):
        encoded = bytearray(rng.choice(good))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(encoded) + 1)
            choice = rng.random()
            if choice < 0.4:
                encoded[at:at] = rng.choice(pieces)
            elif choice < 0.7:
                del encoded[at : at + rng.randint(1, 3)]
            else:
                encoded[at : at + 1] = rng.choice(pieces)
        mutated = bytes(encoded)
        if BWS.search(mutated):
            continue  # whitespace before ';': ours to accept, h11's to refuse (see the module)
        expected = h11_verdict(mutated)
        ours = our_verdict(mutated, rng)
        if ours == "overrun":  # a size beyond the room: h11 waits for its bytes
            assert expected != "refused", mutated
            assert expected[1] is False, mutated
            continue
        assert ours == expected, mutated


def test_whitespace_before_a_chunk_extension_is_accepted_as_rfc_9112_asks() -> None:
    encoded = b"5 ;a=b\r\nhello\r\n0\t;end\r\n\r\n"
    assert h11_verdict(encoded) == "refused"
    assert our_verdict(encoded, random.Random(0)) == (b"hello", True)


def test_large_chunks_go_straight_into_the_target() -> None:
    payload = bytes(range(256)) * 1024
    target = memoryview(bytearray(len(payload)))
    body = ChunkedBody(target)
    scratch = memoryview(bytearray(64))
    body.feed(memoryview(f"{len(payload):x}\r\n".encode() + payload[:10]))
    into = body.buffer(scratch)
    assert into.obj is target.obj  # the rest of the chunk: the kernel writes it in place
    assert len(into) == len(payload) - 10
    into[:] = payload[10:]
    body.updated(len(into))
    assert body.buffer(scratch) is scratch  # its CRLF and the last chunk: framing
    body.feed(memoryview(b"\r\n0\r\n\r\n"))
    assert body.done
    assert body.reusable
    assert target == payload


def test_bytes_of_a_chunk_not_followed_by_crlf_are_not_counted() -> None:
    body = ChunkedBody(memoryview(bytearray(ROOM)))
    with pytest.raises(FramingError, match="malformed chunk end"):
        body.feed(memoryview(b"5\r\nhello\r\n5\r\nworldXX"))
    assert body.received == 5  # "hello" ended as it must; "world" did not


def test_a_chunk_announced_beyond_the_target_is_an_overrun_at_once() -> None:
    body = ChunkedBody(memoryview(bytearray(10)))
    body.feed(memoryview(b"5\r\nhello\r\n"))
    with pytest.raises(BodyOverrun) as caught:
        body.feed(memoryview(b"6\r\n"))
    assert caught.value.length == 10


def test_bytes_after_a_chunked_body_or_a_content_length_beside_it_end_its_connection() -> None:
    alone = ChunkedBody(memoryview(bytearray(5)))
    alone.feed(memoryview(b"5\r\nhello\r\n0\r\n\r\n"))
    assert alone.done
    assert alone.reusable
    surplus = ChunkedBody(memoryview(bytearray(5)))
    surplus.feed(memoryview(b"5\r\nhello\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n"))
    assert surplus.done
    assert not surplus.reusable
    both = ChunkedBody(memoryview(bytearray(5)), alone=False)
    both.feed(memoryview(b"5\r\nhello\r\n0\r\n\r\n"))
    assert both.done
    assert not both.reusable


def test_a_size_line_or_trailer_without_end_is_refused_past_the_head_limit() -> None:
    body = ChunkedBody(memoryview(bytearray(ROOM)))
    with pytest.raises(FramingError, match="size line longer"):
        body.feed(memoryview(b"5;" + b"x" * 70_000))
    trailer = ChunkedBody(memoryview(bytearray(ROOM)))
    with pytest.raises(FramingError, match="trailer"):
        trailer.feed(memoryview(b"0\r\nX: " + b"y" * 70_000))


def test_a_body_until_close_ends_with_the_close_and_refuses_a_byte_more() -> None:
    target = memoryview(bytearray(5))
    body = UntilCloseBody(target)
    scratch = memoryview(bytearray(8))
    body.feed(memoryview(b"hel"))
    into = body.buffer(scratch)
    assert len(into) == 2
    into[:] = b"lo"
    body.updated(2)
    assert not body.done  # full, but only the close ends it
    assert body.buffer(scratch) is scratch
    body.updated(0)
    body.closed()
    assert body.done
    assert not body.reusable
    assert target == b"hello"
    longer = UntilCloseBody(memoryview(bytearray(5)))
    with pytest.raises(BodyOverrun):
        longer.feed(memoryview(b"hello!"))
    short = UntilCloseBody(memoryview(bytearray(5)))
    short.feed(memoryview(b"he"))
    short.closed()
    assert (short.done, short.received) == (True, 2)  # the caller sees it ended short


def test_a_length_body_is_done_at_its_length_and_leaves_what_follows() -> None:
    empty = LengthBody(memoryview(bytearray()))
    assert empty.done
    body = LengthBody(memoryview(bytearray(5)))
    body.feed(memoryview(b"hello, and more"))
    assert body.done
    assert body.target.tobytes() == b"hello"


@pytest.mark.parametrize(
    ("fields", "framing"),
    [
        ([(b"Content-Length", b"5")], LengthBody),
        ([(b"content-length", b"6")], None),  # another length than the buffer's
        ([(b"Transfer-Encoding", b"chunked")], ChunkedBody),
        ([(b"TRANSFER-ENCODING", b"Chunked"), (b"Content-Length", b"5")], ChunkedBody),
        ([(b"Transfer-Encoding", b"gzip")], None),
        ([], UntilCloseBody),
    ],
)
def test_the_head_picks_the_framing(
    fields: list[tuple[bytes, bytes]], framing: type | None
) -> None:
    body = body_for(Fields(fields), memoryview(bytearray(5)))
    assert type(body) is framing if framing else body is None


def test_a_transfer_coding_overrides_the_announced_length() -> None:
    assert announced_length(Fields([(b"Content-Length", b"5")])) == 5
    assert announced_length(httpx.Headers({"content-length": "7"})) == 7
    chunked = [(b"Content-Length", b"5"), (b"Transfer-Encoding", b"chunked")]
    assert announced_length(Fields(chunked)) is None
    assert announced_length(Fields([])) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://h/dir with space/na\u00efve \u00fc.safetensors",
        "http://h/a%20b/%C3%BC.safetensors",
        "http://h/mixed %20 \u00fc/100%.bin?q=a b&t=\u00fc#fragment",
        "http://h/a/../b/./c",
        # Plain URLs (sent as written, without httpx's parsing): a CDN's signed one, a port,
        # escapes, and a "%" that starts none.
        "https://us.aws.cdn.hf.co/xet-bridge-us/0a1b/9f8e?X-Amz-Date=20261128T000000Z"
        "&X-Amz-Expires=3600&Expires=1764288000&Policy=eyJTdGF0ZW1lbnQiOiBbXX0=&Signature="
        "AbC~d_e-f&Key-Pair-Id=K2L8F4GPSG1IFC",
        "http://127.0.0.1:8080/a/b?x=%2F&y=(b)*",
        "http://h/100%zz",
        "http://h",
        "http://u:p@H:80/x",
        "https://h:443/x",
        "http://[::1]:8080/x",
        "http://b\u00fccher.example/x",
    ],
)
def test_a_url_is_sent_as_httpx_sends_it(url: str) -> None:
    request = httpx.Request("GET", url)
    (scheme, host, port), target, authority = _address(url)
    assert target == request.url.raw_path.decode("ascii")
    assert authority == request.headers["Host"]
    assert (scheme, port) == (request.url.scheme, request.url.port or {"http": 80}.get(scheme, 443))
    assert host == request.url.raw_host.decode("ascii")


def test_a_url_httpx_refuses_cannot_be_sent() -> None:
    with pytest.raises(ValueError, match="invalid URL"):
        _address("http://h/a\tb")
