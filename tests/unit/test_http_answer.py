"""What an answer means (``sources/http/answer.decide``) and the version pin, without a server."""

from __future__ import annotations

import pytest

import remotetensors as rt
from remotetensors.sources.http.answer import (
    Asked,
    Decision,
    Empty,
    Failed,
    Follow,
    Partial,
    Refused,
    Reresolve,
    Retry,
    Terms,
    Unchanged,
    Whole,
    decide,
)
from remotetensors.sources.http.head import Fields
from remotetensors.sources.http.pin import VersionPin
from remotetensors.sources.http.transport import Head

NAMED = "http://host/f"
TERMS = Terms(NAMED, NAMED, rt.HttpOptions(accept_whole_body_below_bytes=100))
FIRST = Asked(0, 10, first=True)
LATER = Asked(20, 30, first=False)


def answer(
    status: int, *fields: tuple[str, str], url: str = NAMED, asked: Asked = FIRST
) -> Decision:
    pin = VersionPin()
    pin.adopt(1000, Fields([(b"ETag", b'"v1"')]))
    head = Head(status, Fields([(n.encode(), v.encode()) for n, v in fields]), url)
    return decide(head, asked, pin, TERMS)


def test_a_matching_206_is_partial_and_a_later_one_must_match_the_pin() -> None:
    assert answer(206, ("Content-Range", "bytes 0-9/1000")) == Partial(10, 1000)
    assert answer(206, ("Content-Range", "bytes 0-4/5")) == Partial(5, 5)  # the file is shorter
    later = ("Content-Range", "bytes 20-29/1000")
    assert answer(206, later, ("ETag", '"v1"'), asked=LATER) == Partial(10, 1000)
    with pytest.raises(rt.RemoteFileChangedError, match='now "v2"'):
        answer(206, later, ("ETag", '"v2"'), asked=LATER)
    with pytest.raises(rt.BadResponseError, match="expected bytes 0-9/1000"):
        answer(206, ("Content-Range", "bytes 1-10/1000"))


def test_a_suffix_206_must_end_at_the_end_of_the_file() -> None:
    last = Asked(0, 10, first=True, suffix=True)
    assert answer(206, ("Content-Range", "bytes 990-999/1000"), asked=last) == Partial(10, 1000)
    assert answer(206, ("Content-Range", "bytes 0-4/5"), asked=last) == Partial(5, 5)  # shorter
    for wrong in ("bytes 0-9/1000", "bytes 989-998/1000", "bytes 991-999/1000"):
        with pytest.raises(rt.BadResponseError, match=r"the last 10 bytes.*expected bytes 990-999"):
            answer(206, ("Content-Range", wrong), asked=last)


def test_a_200_is_whole_when_small_and_asked_first_else_refused() -> None:
    assert answer(200, ("Content-Length", "50")) == Whole(50)
    assert answer(200, ("Content-Length", "0")) == Empty(body=True)
    with pytest.raises(rt.RangeNotSupportedError):
        answer(200, ("Content-Length", "500"))
    with pytest.raises(rt.RangeNotSupportedError):
        answer(200, ("Content-Length", "50"), asked=LATER)
    with pytest.raises(rt.BadResponseError, match="gzip-encoded"):
        answer(200, ("Content-Length", "50"), ("Content-Encoding", "gzip"), asked=LATER)


def test_a_200_whose_length_a_transfer_coding_overrides_is_never_whole() -> None:
    # Its Content-Length says nothing of the body (RFC 9112 6.3): no buffer can be sized for it.
    chunked = ("Transfer-Encoding", "chunked")
    for length in ("50", "0"):
        with pytest.raises(rt.RangeNotSupportedError):
            answer(200, ("Content-Length", length), chunked)
    with pytest.raises(rt.RangeNotSupportedError):
        answer(200, chunked)


def test_empty_files_redirects_and_retries() -> None:
    assert answer(416, ("Content-Range", "bytes */0")) == Empty(body=False)
    assert isinstance(answer(416, ("Content-Range", "bytes */7")), Failed)
    assert answer(302, ("Location", "/g")) == Follow("http://host/g")
    assert isinstance(answer(302, ("Location", "ftp://x/y")), Failed)
    # A later request follows a redirect itself, by the same rules as the first.
    assert answer(307, ("Location", "/g"), asked=LATER) == Follow("http://host/g")
    assert answer(304, asked=LATER) == Refused(304)
    assert answer(302, asked=LATER) == Refused(302)  # no Location: nowhere to go
    assert answer(503, ("Retry-After", "2")) == Retry("HTTP 503", 2.0)
    too_long = answer(429, ("Retry-After", "3600"))
    assert isinstance(too_long, Failed)
    assert isinstance(too_long.error, rt.TransportError)


def test_errors_and_an_expired_redirect() -> None:
    changed = answer(412, asked=LATER)
    assert isinstance(changed, Failed)
    assert 'HTTP 412 for If-Match "v1"' in str(changed.error)
    assert answer(404) == Refused(404)
    assert answer(403, url="http://cdn/signed") == Reresolve(403)


def test_a_first_304_is_unchanged_a_later_one_an_error() -> None:
    # The first request of a file the persistent cache holds names its version (If-None-Match).
    assert answer(304, ("ETag", '"v1"')) == Unchanged('"v1"')
    assert answer(304, asked=LATER) == Refused(304)


def test_the_pin_sends_if_match_for_a_strong_etag_else_if_unmodified_since() -> None:
    pin = VersionPin()
    pin.adopt(
        5, Fields([(b"ETag", b'W/"w"'), (b"Last-Modified", b"Mon, 01 Jan 2024 00:00:00 GMT")])
    )
    headers: dict[str, str] = {}
    pin.add_conditions(headers)
    assert headers == {"If-Unmodified-Since": "Mon, 01 Jan 2024 00:00:00 GMT"}
    assert pin.validator == 'W/"w"'
    pin.adopt(5, Fields([(b"ETag", b'"s"')]))
    headers = {}
    pin.add_conditions(headers)
    assert headers == {"If-Match": '"s"'}
    assert pin.condition == 'If-Match "s"'
