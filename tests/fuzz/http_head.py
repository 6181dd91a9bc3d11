"""Fuzz target: the direct reader's HTTP/1.1 heads (``sources/http/head.py``) against h11, the
parser under httpx.

An input's first byte picks what is fuzzed:

- even: the rest is a response as it arrives. h11 and :func:`parse_response_head` must agree:
  both refuse it, or both read the same version, status and fields (inputs h11 finds
  incomplete are skipped, as ``tests/unit/test_http1.py`` does; a 101, which the parser reads
  and the reader then refuses, counts as refused). A head read must be taken off
  the buffer up to its blank line, leaving the rest, and :class:`~.head.Fields` must read its
  fields as ``httpx.Headers`` does.
- odd: the rest, split at each LF, is a request target, then header fields ``name:value``
  (bytes as Latin-1 text). :func:`request_head` must send what h11 sends, or refuse where h11
  refuses. ``Content-Length`` and ``Transfer-Encoding`` fields are left out: h11 applies a
  body's framing rules to them, which a GET without a body never meets.

Findings: a disagreement, or any exception but :class:`~.head.HeadError`.
"""

from __future__ import annotations

from remotetensors.sources.http.head import parse_response_head
from tests.unit.test_http1 import h11_request, h11_verdict, our_request, our_verdict, same_reading

DICTIONARY = (
    b"HTTP/1.1 ",
    b"HTTP/1.0 ",
    b"206 Partial Content",
    b"200 OK",
    b"100 Continue",
    b"\r\n",
    b"\r\n\r\n",
    b"\n\n",
    b"Content-Length:",
    b"Content-Range: bytes 0-9/100",
    b"Transfer-Encoding: chunked",
    b"Connection: close",
    b"ETag:",
    b"Location:",
    b" \t",
    b"\x00",
    b"\xff",
)
"""Tokens libFuzzer splices into inputs: status lines, line ends, the fields that frame."""

_FRAMING = frozenset({"content-length", "transfer-encoding"})


def check(data: bytes) -> None:
    """Judge one input (see the module).

    Raises:
        AssertionError: we disagree with h11 or httpx.
        Exception: any other error of the parser is a finding too.
    """
    if not data:
        return
    if data[0] % 2 == 0:
        _response(data[1:])
    else:
        _request(data[1:])


def _response(data: bytes) -> None:
    if not data:
        return  # h11 takes no bytes for the end of the stream, which the reader meets elsewhere
    theirs = h11_verdict(data)
    if theirs == "incomplete":
        return
    verdict = our_verdict(data)
    if isinstance(verdict, tuple) and verdict[1] == 101:
        verdict = "refused"  # as the reader refuses it, after the head (direct.py)
    assert verdict == theirs, f"h11 says {theirs!r}, we say {verdict!r}"
    if not isinstance(verdict, tuple):
        return
    buffer = bytearray(data)
    assert parse_response_head(buffer) is not None
    taken = data[: len(data) - len(buffer)]
    assert data.endswith(bytes(buffer)), "the body after the head was changed"
    assert taken.endswith((b"\n\n", b"\n\r\n")), f"the head taken ends in {taken[-4:]!r}"
    same_reading(verdict[2])


def _request(data: bytes) -> None:
    target, *lines = data.decode("latin-1").split("\n")
    fields = [("Host", "h")]
    for line in lines:
        name, _, value = line.partition(":")
        if name.lower() not in _FRAMING:
            fields.append((name, value))
    theirs = h11_request(target, fields)
    assert our_request(target, fields) == theirs, f"h11 sends {theirs!r}"


def seeds() -> list[bytes]:
    """Responses from the unit tests' table (each as sent, then with a body after it) and a
    few requests."""
    from tests.unit.test_http1 import HEADS

    responses = [b"\x00" + head for head in HEADS] + [b"\x00" + head + b"body" for head in HEADS]
    requests = [
        b"\x01/m.safetensors?x=1\nRange:bytes=0-7\nAuthorization:Bearer abc.def",
        b"\x01/a b\nX: leading",
        b"\x01/caf\xe9\nX:caf\xe9",
        b"\x01/a\nBad Name:x\nX:a\rInjected: yes",
    ]
    return responses + requests
