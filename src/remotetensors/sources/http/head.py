"""HTTP/1.1 request heads out, response heads in: the bytes of the direct reader, no IO.

The rules are h11's (the parser under httpx), written out so that the direct reader and httpx
accept and refuse the same heads, at a fraction of h11's CPU per request (h11 is a general
state machine; a ranged GET needs one head each way). After RFC 9112:

- a request target of visible ASCII only; header names that are tokens, ASCII values of
  visible characters and inner spaces or tabs (no CR, LF or NUL, no leading or trailing space);
- a status line ``HTTP/d.d SP 3DIGIT [SP reason]`` with a status of at least 100; field lines
  ``token ":" OWS value OWS``;
- lines end in CRLF or a bare LF (RFC 9112 2.2 lets a recipient accept it); a line starting
  with space or tab continues the previous one (obs-fold, 5.2), joined by one space;
- ``Content-Length`` is digits (at most 20); repeated, or a list, its values must agree and it
  is kept once; ``Transfer-Encoding`` may appear once and only as ``chunked``;
- a head longer than :data:`MAX_HEAD_BYTES` is refused;
- a chunked body's trailer section is field lines as above (:func:`parse_trailer_section`).

Which body follows a head, and how long it is, is :mod:`.framing`'s (and
:func:`announced_length`'s, for those who size a buffer from a head).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar, overload

MAX_HEAD_BYTES = 64 * 1024

_T = TypeVar("_T")

_TOKEN = rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+"
_FIELD_VALUE = rb"(?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?"
_STATUS_LINE = re.compile(rb"HTTP/([0-9]\.[0-9]) ([0-9]{3})(?: (?:[ \t]|[^\x00\s])*)?")
_FIELD_LINE = re.compile(rb"(" + _TOKEN + rb"):[ \t]*(" + _FIELD_VALUE + rb")[ \t]*")
_OBS_FOLD = re.compile(rb"[ \t]+")
_BLANK_LINE = re.compile(rb"\n\r?\n")
_CONTENT_LENGTH = re.compile(rb"[0-9]+")
_NAME = re.compile(_TOKEN.decode())
# ASCII: as h11's bytes pattern, whose \s is space, tab, CR, LF, VT and FF only; a str
# pattern's \s would also take 0x1c-0x1f for whitespace and refuse a value h11 sends.
_VALUE = re.compile(_FIELD_VALUE.decode(), re.ASCII)
_TARGET = re.compile(r"[\x21-\x7e]+")


class HeadError(ValueError):
    """A head that breaks the rules above."""


ResponseHeaders = Mapping[str, str]
"""A response's headers, looked up by name in any case: ``httpx.Headers`` (from httpx), or
:class:`Fields` (from the direct reader)."""


class Fields(Mapping[str, str]):
    """A response's header fields, looked up by name in any case: what ``httpx.Headers`` gives
    for reading (values of a repeated name joined by ``", "``, names iterated in lower case,
    :meth:`get_list`), at a sixth of its cost per lookup (profiled in a scan), since it indexes
    the names once instead of scanning every field on each lookup.

    Values are decoded as httpx decodes them: UTF-8 (ASCII included) when every value is, else
    Latin-1 for all.

    Args:
        raw: the fields in order, as :func:`parse_response_head` returns them.
    """

    __slots__ = ("_all", "_joined")

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        try:
            decoded = [(n.decode("ascii").lower(), v.decode("utf-8")) for n, v in raw]
        except UnicodeDecodeError:
            decoded = [(n.decode("latin-1").lower(), v.decode("latin-1")) for n, v in raw]
        joined: dict[str, str] = {}
        for name, value in decoded:
            joined[name] = f"{joined[name]}, {value}" if name in joined else value
        self._all = decoded
        self._joined = joined

    def __getitem__(self, name: str) -> str:
        return self._joined[name.lower()]

    @overload
    def get(self, name: str, /) -> str | None: ...
    @overload
    def get(self, name: str, /, default: str | _T) -> str | _T: ...
    def get(self, name: str, /, default: object = None) -> object:
        return self._joined.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._joined

    def __iter__(self) -> Iterator[str]:
        return iter(self._joined)

    def __len__(self) -> int:
        return len(self._joined)

    def get_list(self, name: str) -> list[str]:
        """Every value of ``name``, in order, not joined."""
        lowered = name.lower()
        return [value for key, value in self._all if key == lowered]

    def __repr__(self) -> str:
        return f"Fields({self._all!r})"


@dataclass(frozen=True, slots=True)
class ResponseHead:
    """A parsed response head: version (``b"1.1"``), status, and its fields in order."""

    http_version: bytes
    status: int
    fields: list[tuple[bytes, bytes]]


def request_head(target: str, fields: list[tuple[str, str]]) -> bytes:
    """The bytes of ``GET target HTTP/1.1`` with ``fields``, as h11 would send them.

    Raises:
        HeadError: the target or a field cannot be sent as it is.
    """
    if not _TARGET.fullmatch(target):
        # Not quoted: a target's query may hold a signature or a token.
        bad = sorted({repr(c) for c in target if not _TARGET.fullmatch(c)})
        raise HeadError(f"illegal characters in the request target: {', '.join(bad)}")
    lines = [f"GET {target} HTTP/1.1"]
    lines += [_field_line(name, value) for name, value in fields]
    lines.append("\r\n")
    try:
        return "\r\n".join(lines).encode("ascii")
    except UnicodeEncodeError as exc:
        raise HeadError(f"a request head must be ASCII: {exc}") from None


def check_field(name: str, value: str) -> None:
    """Whether ``name: value`` can be sent as it is, by these rules and h11's: a token for a
    name; visible ASCII characters and inner spaces or tabs for a value.

    Raises:
        HeadError: naming the header and what is wrong, never quoting the value (it may be a
            credential: ``Authorization``, a cookie, an API key).
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise HeadError(f"illegal header name {name!r}")
    if not isinstance(value, str):
        raise HeadError(f"the value of header {name!r} is a {type(value).__name__}, not a str")
    if not value.isascii():
        raise HeadError(f"the value of header {name!r} is not ASCII")
    if not _VALUE.fullmatch(value):
        what = "CR or LF" if "\r" in value or "\n" in value else "illegal characters"
        raise HeadError(f"{what} in the value of header {name!r}")


@functools.lru_cache(maxsize=1024)
def _field_line(name: str, value: str) -> str:
    """``name: value``, checked (cached: most fields repeat on every request of a client)."""
    check_field(name, value)
    return f"{name}: {value}"


def parse_response_head(buffer: bytearray) -> ResponseHead | None:
    """Take one response head off the front of ``buffer``; None while it is incomplete.

    Raises:
        HeadError: the head breaks the rules above, or is still incomplete beyond
            :data:`MAX_HEAD_BYTES`.
    """
    if buffer[:1] == b"\n" or buffer[:2] == b"\r\n":
        raise HeadError("no response line received")
    end = _BLANK_LINE.search(buffer)
    if end is None:
        if buffer and buffer[0] < 0x21:  # a status line never starts so: refuse at once
            raise HeadError(f"illegal status line starting {bytes(buffer[:20])!r}")
        if len(buffer) > MAX_HEAD_BYTES:
            raise HeadError(f"the response head is longer than {MAX_HEAD_BYTES} bytes")
        return None
    if end.end() > MAX_HEAD_BYTES:
        raise HeadError(f"the response head is longer than {MAX_HEAD_BYTES} bytes")
    lines = _lines(buffer, end)
    status_line = _STATUS_LINE.fullmatch(lines[0])
    if status_line is None:
        raise HeadError(f"illegal status line: {lines[0]!r}")
    status = int(status_line.group(2))
    if status < 100:
        raise HeadError(f"status {status} is not an HTTP status")
    return ResponseHead(status_line.group(1), status, _fields(lines[1:]))


def parse_trailer_section(buffer: bytearray) -> list[tuple[bytes, bytes]] | None:
    """Take a chunked body's trailer section (field lines, then a blank line) off the front of
    ``buffer``; None while it is incomplete. Its lines are read and checked as a head's field
    lines are (h11 reads them so); the rules of ``Content-Length`` and ``Transfer-Encoding``
    are a head's only.

    Raises:
        HeadError: a field line breaks the rules above, or the section is still incomplete
            beyond :data:`MAX_HEAD_BYTES`.
    """
    for blank in (b"\n", b"\r\n"):  # no field at all
        if buffer.startswith(blank):
            del buffer[: len(blank)]
            return []
    end = _BLANK_LINE.search(buffer)
    if (len(buffer) if end is None else end.end()) > MAX_HEAD_BYTES:
        raise HeadError(f"the trailer section is longer than {MAX_HEAD_BYTES} bytes")
    if end is None:
        return None
    return _field_pairs(_lines(buffer, end))


def announced_length(headers: ResponseHeaders) -> int | None:
    """The body length that an answer's head announces: its ``Content-Length``, unless a
    transfer coding overrides it (RFC 9112 6.3); None when it announces none (a chunked body,
    or one that ends when the server closes the connection)."""
    if "Transfer-Encoding" in headers:
        return None
    value = headers.get("Content-Length", "")
    return int(value) if value.isdigit() else None


def _lines(buffer: bytearray, end: re.Match[bytes]) -> list[bytes]:
    """The lines before the blank line ``end`` (taken off ``buffer``), without their ends."""
    lines = bytes(buffer[: end.start()]).split(b"\n")
    del buffer[: end.end()]
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def _unfolded(lines: list[bytes]) -> list[bytes]:
    joined: list[bytes] = []
    for line in lines:
        fold = _OBS_FOLD.match(line)
        if fold is None:
            joined.append(line)
        elif not joined:
            raise HeadError("continuation line at start of headers")
        else:
            joined[-1] += b" " + line[fold.end() :]
    return joined


def _field_pairs(lines: list[bytes]) -> list[tuple[bytes, bytes]]:
    """Name and value of each field line, folded lines joined."""
    pairs = []
    for line in _unfolded(lines):
        match = _FIELD_LINE.fullmatch(line)
        if match is None:
            raise HeadError(f"illegal header line: {line!r}")
        pairs.append((match.group(1), match.group(2)))
    return pairs


def _fields(lines: list[bytes]) -> list[tuple[bytes, bytes]]:
    fields: list[tuple[bytes, bytes]] = []
    length: bytes | None = None
    chunked = False
    for name, value in _field_pairs(lines):
        lowered = name.lower()
        if lowered == b"content-length":
            values = {part.strip() for part in value.split(b",")}
            if len(values) != 1:
                raise HeadError("conflicting Content-Length headers")
            value = values.pop()
            if not _CONTENT_LENGTH.fullmatch(value) or len(value) > 20:
                raise HeadError("bad Content-Length")
            if length is not None:
                if length != value:
                    raise HeadError("conflicting Content-Length headers")
                continue
            length = value
        elif lowered == b"transfer-encoding":
            if chunked:
                raise HeadError("multiple Transfer-Encoding headers")
            value = value.lower()
            if value != b"chunked":
                raise HeadError("Only Transfer-Encoding: chunked is supported")
            chunked = True
        fields.append((name, value))
    return fields
