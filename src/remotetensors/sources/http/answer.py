"""What an answer to a ranged GET means, decided once for both transports; no IO.

:func:`decide` reads an answer's head (status, headers, the URL that gave it; its body not yet
read) against the request, the version pinned by the first answer and the options, and says
what it is:

- :class:`Partial`: a 206 whose ``Content-Range`` matches the request (and, on a later
  request, whose size and validators match the version opened); its body is the bytes asked;
- :class:`Whole`: a first 200, the server having ignored ``Range``, small enough to accept
  whole (opt-in: ``accept_whole_body_below_bytes``); a 200 that is not is refused with
  :class:`RangeNotSupportedError`, its body never read;
- :class:`Empty`: an empty file (a first 416 with ``Content-Range: bytes */0``, or a first 200
  from 0 with ``Content-Length: 0``);
- :class:`Unchanged`: a first 304, the answer to a request made conditional on the file no
  longer being a version a persistent cache holds (``If-None-Match``);
- :class:`Follow`: a redirect to follow (no transport follows any itself: every hop, on the
  first request and on later ones, is judged here by :func:`follow`, and its headers chosen by
  :func:`.policy.headers_for`); a redirect that must not be followed is :class:`Failed` with a
  :class:`~remotetensors.errors.RedirectError`;
- :class:`Retry`: 408, 429 and 5xx, with the wait that ``Retry-After`` asks for;
- :class:`Reresolve`: a redirected URL that stopped working (401/403/404/410, as an expired
  signed URL does): the URL named is resolved again;
- :class:`Refused` and :class:`Failed`: an error; :func:`status_error` says which for a status.

A 206 or 200 whose head cannot be used raises at once (its body must not be read); every other
answer's body holds none of the file's bytes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import SplitResult, urlsplit

import httpx

from ...errors import (
    BadResponseError,
    NotFoundError,
    PermissionDeniedError,
    RangeNotSupportedError,
    RedirectError,
    RemoteFileChangedError,
    TransportError,
)
from ...redact import redact_url
from .head import ResponseHeaders, announced_length
from .pin import VersionPin
from .policy import MAX_REDIRECTS, RETRY_STATUSES, retry_after
from .transport import Head

if TYPE_CHECKING:
    from .client import HttpOptions

_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)
_UNSATISFIED_RANGE = re.compile(r"^\s*bytes\s+\*/(\d+)\s*$", re.IGNORECASE)
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
"""The answers whose ``Location`` is followed (a GET stays a GET after any of them)."""
_RERESOLVE_STATUSES = frozenset({401, 403, 404, 410})


class Asked(NamedTuple):
    """One request: bytes ``[start, end)``, the file's first request or a later one, and the
    URLs it was redirected from so far, oldest first (``()`` before any redirect).

    On the first request ``end`` may lie beyond the file: the answer then stops at its end.
    A ``suffix`` request (a first one only) asks for the file's last ``end`` bytes
    (``Range: bytes=-end``; ``start`` is 0), all of it when it is shorter.
    (This and the decisions are named tuples: immutable, and a third of a frozen dataclass's
    cost to build, which every request pays.)"""

    start: int
    end: int
    first: bool
    visited: tuple[str, ...] = ()
    suffix: bool = False

    def range_text(self) -> str:
        """The bytes asked, in words for messages (``bytes 10-19``, ``the last 64 bytes``)."""
        if self.suffix:
            return f"the last {self.end} bytes"
        return f"bytes {self.start}-{self.end - 1}"


@dataclass(frozen=True, slots=True)
class Terms:
    """What every answer about one file is judged by: the URL named (without userinfo; an
    answer from any other came by redirect), the file's name in messages, the options."""

    named: str
    shown: str
    options: HttpOptions


class Partial(NamedTuple):
    """A 206 to use: ``length`` body bytes, the asked ones; ``total`` is the file's size."""

    length: int
    total: int


class Whole(NamedTuple):
    """A first 200 accepted whole: ``length`` body bytes, the whole file."""

    length: int


class Empty(NamedTuple):
    """An empty file; ``body`` when the answer's (empty) body is the file's (a 200)."""

    body: bool


class Unchanged(NamedTuple):
    """A first 304: the file is still the version the request named; no body."""

    etag: str | None


class Follow(NamedTuple):
    """A redirect to follow, to ``url`` (a relative ``Location`` joined as httpx does), which
    :func:`follow` allowed."""

    url: str


class Retry(NamedTuple):
    """A failure worth another attempt: after ``wait_seconds`` (from ``Retry-After``) or a
    backoff."""

    reason: str
    wait_seconds: float | None


class Reresolve(NamedTuple):
    """The redirected URL answered ``status``: resolve the URL named once more."""

    status: int


class Refused(NamedTuple):
    """An error status; :func:`status_error` (or a source's own words) says which error."""

    status: int


class Failed(NamedTuple):
    """An answer that ends the read with ``error``."""

    error: Exception


Decision = Partial | Whole | Empty | Unchanged | Follow | Retry | Reresolve | Refused | Failed


def decide(head: Head, asked: Asked, pin: VersionPin, terms: Terms) -> Decision:
    """What the answer ``head`` to ``asked`` means (see the module), its body not yet read.

    A redirect (a 3xx of :data:`REDIRECT_STATUSES` with a ``Location``) is judged by
    :func:`follow`, on the first request and on later ones alike; another 3xx is refused.

    Raises:
        BadResponseError: a 206 or 200 whose head does not fit the request (a wrong or missing
            ``Content-Range``, an encoded body).
        RemoteFileChangedError: a later 206 from another version than ``pin``'s.
        RangeNotSupportedError: a 200 that cannot be accepted whole.
    """
    status, headers, url = head.status, head.headers, head.url
    if status == 206:
        return _partial(headers, asked, pin, terms.shown)
    if status == 200:
        return _whole(headers, asked, terms)
    if status == 416 and asked.first:
        return _empty(headers, terms.shown)
    if status == 304 and asked.first:
        return Unchanged(headers.get("ETag"))
    if status in REDIRECT_STATUSES and "Location" in headers:
        return follow(url, headers["Location"], asked.visited, terms.shown)
    if status in RETRY_STATUSES:
        return retry_of(status, headers, url, terms.options)
    if status == 412:
        return Failed(
            RemoteFileChangedError(
                f"{terms.shown}: the file changed since it was opened (HTTP 412 for "
                f"{pin.condition}); open it again to read the new version"
            )
        )
    if url != terms.named and status in _RERESOLVE_STATUSES:
        return Reresolve(status)
    return Refused(status)


def retry_of(
    status: int, headers: ResponseHeaders, url: str, options: HttpOptions
) -> Retry | Failed:
    """A retryable ``status`` (see :data:`.policy.RETRY_STATUSES`) from ``url``: retry after
    the wait its ``Retry-After`` asks for, or fail when that is longer than the options allow."""
    try:
        return Retry(f"HTTP {status}", retry_after(status, headers, url, options))
    except TransportError as exc:
        return Failed(exc)


def status_error(
    status: int, url: str, headers: ResponseHeaders | None, shown: str
) -> NotFoundError | PermissionDeniedError | BadResponseError:
    """The error for an answer ``status`` from ``url`` (``X-Error-Code`` named when sent): the
    one mapping of statuses to errors for every request (the hub adds its own words for the
    codes it sends, see :func:`..hub.repo.hub_status_error`). ``url`` is named redacted."""
    code = headers.get("X-Error-Code") if headers is not None else None
    detail = f" ({code})" if code else ""
    where = redact_url(url)
    if status in (404, 410):
        return NotFoundError(f"{shown}: not found (HTTP {status}{detail} from {where})")
    if status in (401, 403):
        return PermissionDeniedError(
            f"{shown}: access denied (HTTP {status}{detail} from {where}); a "
            "private or gated file needs a token, e.g. an Authorization header or HF_TOKEN"
        )
    return BadResponseError(f"{shown}: unexpected HTTP {status}{detail} from {where}")


def range_ignored(declared: str | None, start: int, end: int, shown: str) -> RangeNotSupportedError:
    """The error for a 200 to a ranged GET (``declared``: its ``Content-Length``)."""
    return RangeNotSupportedError(
        f"{shown}: the server ignored the Range header (HTTP 200 with the whole file"
        f"{', ' + declared + ' bytes' if declared else ''}) when asked for bytes "
        f"{start}-{end - 1}; it cannot serve partial reads. Use a server or URL that "
        "supports byte ranges, or for small files opt in to whole bodies (HttpOptions("
        "accept_whole_body_below_bytes=...), on the command line --accept-whole-body-below)"
    )


def _partial(headers: ResponseHeaders, asked: Asked, pin: VersionPin, shown: str) -> Partial:
    """Check a 206's headers against the request (and a later one's against the pin)."""
    _check_identity(headers, shown)
    start, end = asked.start, asked.end
    header = headers.get("Content-Range", "")
    match = _CONTENT_RANGE.match(header)
    if match is None or match.group(3) == "*":
        raise BadResponseError(
            f"{shown}: asked for {asked.range_text()}, got HTTP 206 with "
            f"Content-Range {header!r}, which does not give the file size"
        )
    first_byte, last_byte, total = int(match.group(1)), int(match.group(2)), int(match.group(3))
    if not asked.first:
        pin.check(headers, total, shown)
    if asked.suffix:  # the last ``end`` bytes, or the whole file when it is shorter
        start, expected_last = max(0, total - end), total - 1
    else:
        expected_last = min(end, total) - 1 if asked.first else end - 1
    if first_byte != start or last_byte != expected_last:
        raise BadResponseError(
            f"{shown}: asked for {asked.range_text()}, got Content-Range {header!r} "
            f"(expected bytes {start}-{expected_last}/{total})"
        )
    return Partial(last_byte - first_byte + 1, total)


def _whole(headers: ResponseHeaders, asked: Asked, terms: Terms) -> Empty | Whole:
    """A 200 to a ranged GET: the server ignored Range. Never read a large body, nor one whose
    length the head does not announce (chunked, or until the connection closes)."""
    _check_identity(headers, terms.shown)
    length = announced_length(headers)
    if asked.first and asked.start == 0 and length == 0:
        return Empty(body=True)  # some servers (nginx) answer an empty file so, not with 416
    limit = terms.options.accept_whole_body_below_bytes
    if asked.first and length is not None and length < limit:
        return Whole(length)
    raise range_ignored(headers.get("Content-Length"), asked.start, asked.end, terms.shown)


def _empty(headers: ResponseHeaders, shown: str) -> Empty | Failed:
    """A first 416 (asked from byte 0): an empty file, if it says its size is 0."""
    match = _UNSATISFIED_RANGE.match(headers.get("Content-Range", ""))
    if match is None or int(match.group(1)) != 0:
        return Failed(
            BadResponseError(
                f"{shown}: HTTP 416 for bytes from 0 without 'Content-Range: bytes */0' "
                f"(saw {headers.get('Content-Range')!r})"
            )
        )
    return Empty(body=False)


def follow(url: str, location: str, visited: Sequence[str], shown: str) -> Follow | Failed:
    """Whether a redirect from ``url`` to ``location`` (relative ones joined as httpx does) is
    followed, ``visited`` being the URLs this request was redirected from before ``url``
    (oldest first); ``shown`` names the file in messages. The one judge of redirects for every
    request and transport (a file's reads, the hub's API, fsspec's HTTP filesystem).

    Followed: a redirect to an ``http`` or ``https`` URL, unless it is refused (a
    :class:`Failed` with a :class:`~remotetensors.errors.RedirectError` naming both URLs,
    redacted) because it

    - leads from ``https`` to ``http``: a downgrade would send the request, and whatever it
      carries, in clear text, and take bytes anyone on the way could change;
    - leads to another scheme (``ftp:``, ``file:``, ``data:``), to no host, or to no valid URL;
    - leads back to a URL already asked in this request: a loop, which no count need wait for;
    - would be redirect number ``MAX_REDIRECTS + 1`` (:data:`.policy.MAX_REDIRECTS`).

    Which headers the next hop carries is :func:`.policy.headers_for`'s decision.
    """
    plain = _plain_absolute(location)
    if plain is not None and _plain_absolute(url) is not None:
        return _follow_plain(url, location, plain, visited, shown)
    source = redact_url(url)
    try:
        here = httpx.URL(url)
        target = here.join(location)
    except httpx.InvalidURL as exc:
        return _refused(f"{shown}: redirected from {source} to an invalid URL ({exc})")
    where = str(target)
    step = f"from {source} to {redact_url(where)}"
    if target.scheme not in ("http", "https") or not target.host:
        return _refused(
            f"{shown}: a redirect {step} was not followed: only http and https URLs are fetched"
        )
    if target.scheme == "http" and here.scheme == "https":
        return _refused(
            f"{shown}: a redirect {step} was not followed: an https request is never "
            "downgraded to plain http, where it would cross the network in clear text; ask the "
            "server's owner to redirect to https"
        )
    if where == str(here) or where in {_normal(seen) for seen in visited}:
        return _refused(f"{shown}: a redirect loop: {step}, a URL already asked for")
    if len(visited) >= MAX_REDIRECTS:
        return _refused(
            f"{shown}: more than {MAX_REDIRECTS} redirects (the last {step}); a chain this "
            "long is taken for a loop"
        )
    return Follow(where)


_PLAIN_URL = re.compile(r"https?://[!-~]+\Z", re.IGNORECASE)
"""An absolute http(s) URL of visible ASCII (no space, no control character)."""


def _plain_absolute(url: str) -> SplitResult | None:
    """``url`` split, when it is an absolute http(s) URL that needs no normalising (visible
    ASCII, a lower-case scheme and host, a valid port, no fragment, no backslash): the form
    every hub and CDN redirect takes. Parsing such a URL with httpx, which checks it character
    by character, cost a sixth of a 300-repo scan's CPU (the CDN's signed URLs run to 600
    characters)."""
    if not _PLAIN_URL.match(url) or "\\" in url or "#" in url:
        return None
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname
    if not host or parts.netloc.lower() != parts.netloc or "@" in parts.netloc:
        return None
    if parts.scheme not in ("http", "https") or port == _DEFAULT_PORTS[parts.scheme]:
        return None
    return parts


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _follow_plain(
    url: str, location: str, target: SplitResult, visited: Sequence[str], shown: str
) -> Follow | Failed:
    """:func:`follow`'s rules for a plain absolute ``location`` (see :func:`_plain_absolute`)
    from a plain ``url``: the same refusals, without httpx's parsing."""
    step = f"from {redact_url(url)} to {redact_url(location)}"
    if target.scheme == "http" and url[:6].lower() == "https:":
        return _refused(
            f"{shown}: a redirect {step} was not followed: an https request is never "
            "downgraded to plain http, where it would cross the network in clear text; ask the "
            "server's owner to redirect to https"
        )
    seen = {v if _plain_absolute(v) is not None else _normal(v) for v in visited}
    if location == url or location in seen:
        return _refused(f"{shown}: a redirect loop: {step}, a URL already asked for")
    if len(visited) >= MAX_REDIRECTS:
        return _refused(
            f"{shown}: more than {MAX_REDIRECTS} redirects (the last {step}); a chain this "
            "long is taken for a loop"
        )
    return Follow(location)


def _refused(message: str) -> Failed:
    return Failed(RedirectError(message))


def _normal(url: str) -> str:
    """``url`` as httpx writes it (the form :func:`follow` returns), to compare URLs asked."""
    try:
        return str(httpx.URL(url))
    except httpx.InvalidURL:
        return url


def _check_identity(headers: ResponseHeaders, shown: str) -> None:
    encoding = headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise BadResponseError(
            f"{shown}: the server sent a {encoding}-encoded body although "
            "'Accept-Encoding: identity' was asked; its byte offsets cannot be trusted"
        )
