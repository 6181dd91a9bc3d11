"""Where an answer's body ends, and its bytes into the buffer named for it: no IO.

RFC 9112 6.3 gives a response body one of three framings, and the direct reader (:mod:`.direct`)
reads each into the caller's buffer (:func:`body_for` picks):

- ``Content-Length``: exactly that many bytes (:class:`LengthBody`);
- ``Transfer-Encoding: chunked``, which overrides a ``Content-Length``: chunks, each a size line
  (hex digits, then extensions, which are ignored), its bytes and CRLF; then a chunk of size 0,
  a trailer section (fields, ignored) and a blank line (:class:`ChunkedBody`);
- neither: the bytes until the server closes the connection (:class:`UntilCloseBody`).

A body takes bytes in two steps, so that the event loop (a buffered protocol) and a worker
thread (``recv_into``) drive it alike: :meth:`Body.buffer` says where the next bytes go,
:meth:`Body.updated` is told how many went there. The file's bytes go straight into the caller's
buffer (the kernel writes them there); only the framing around them (size lines, trailers)
lands in a scratch buffer, with whatever file bytes came in the same receive, which are copied
out. The buffer's length is the body's expected length (from ``Content-Range``): more bytes are
:class:`BodyOverrun`; fewer, when the framing ends, are the caller's to judge (:attr:`received`).

The chunk syntax is h11's (the parser under httpx), so that both paths read the same bodies, with
one difference that RFC 9112 7.1.1 asks of a recipient: whitespace before a chunk extension's
``;`` (BWS) is accepted, where h11 refuses it.
"""

from __future__ import annotations

import re

from .head import MAX_HEAD_BYTES, HeadError, ResponseHeaders, parse_trailer_section

_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,20})(?:[ \t]*;[^\n]*)?[ \t]*")
"""A chunk's size line without its CRLF: the size in hex (at most 20 digits, as h11 allows),
extensions (``;name=value``, not read), optional whitespace."""


class FramingError(ValueError):
    """A chunked body broke the syntax of RFC 9112 7.1 (a size line, the CRLF after a chunk, a
    trailer field)."""


class BodyOverrun(Exception):
    """The body holds more bytes than the ``length`` of the buffer named for it."""

    def __init__(self, length: int) -> None:
        super().__init__(f"the body is longer than the {length} bytes expected")
        self.length = length


class Body:
    """A body going into ``target``: ``received`` bytes of it written there so far (from its
    start), ``done`` once its framing has ended (it may have ended short: compare ``received``
    with ``len(target)``)."""

    __slots__ = ("done", "received", "target")

    uses_scratch = True
    """Whether :meth:`buffer` may hand out the scratch it is given (a body whose bytes all go
    to ``target`` needs none: a receiving thread then allocates none)."""

    def __init__(self, target: memoryview) -> None:
        self.target = target
        self.received = 0
        self.done = False

    @property
    def reusable(self) -> bool:
        """Whether the connection may carry another request once the body is done."""
        return True

    def buffer(self, scratch: memoryview) -> memoryview:
        """Where the next bytes received go: a part of ``target``, or ``scratch`` (non-empty)
        for bytes that the body reads itself in :meth:`updated`."""
        raise NotImplementedError

    def updated(self, nbytes: int) -> None:
        """``nbytes`` bytes were received into the last :meth:`buffer`.

        Raises:
            FramingError: a chunked body broke its syntax (``received`` then counts only the
                bytes of chunks that ended as they must).
            BodyOverrun: more bytes came, or were announced, than ``target`` holds.
        """
        raise NotImplementedError

    def closed(self) -> None:
        """The server closed the connection: the end of a body that it delimits."""

    def feed(self, data: memoryview) -> None:
        """Take ``data``, bytes that came before the body had a buffer (with the head), as if
        they had been received into :meth:`buffer`; any beyond the body's end are left.

        Raises:
            FramingError, BodyOverrun: as :meth:`updated`.
        """
        while data and not self.done:
            into = self.buffer(data)
            if into is data:  # the body reads these bytes itself
                self.updated(len(data))
                return
            count = min(len(into), len(data))
            into[:count] = data[:count]
            self.updated(count)
            data = data[count:]


class LengthBody(Body):
    """A body of exactly ``len(target)`` bytes (its ``Content-Length``)."""

    __slots__ = ()

    uses_scratch = False

    def __init__(self, target: memoryview) -> None:
        super().__init__(target)
        self.done = not len(target)

    def buffer(self, scratch: memoryview) -> memoryview:
        return self.target[self.received :]

    def updated(self, nbytes: int) -> None:
        self.received += nbytes
        self.done = self.received == len(self.target)


class UntilCloseBody(Body):
    """A body that ends when the server closes the connection, which is then of no further use.
    Its bytes fill ``target``; a byte beyond is an overrun."""

    __slots__ = ("_scratched",)

    def __init__(self, target: memoryview) -> None:
        super().__init__(target)
        self._scratched = False

    @property
    def reusable(self) -> bool:
        return False

    def buffer(self, scratch: memoryview) -> memoryview:
        room = self.target[self.received :]
        self._scratched = not room
        return scratch if self._scratched else room

    def updated(self, nbytes: int) -> None:
        if self._scratched and nbytes:
            raise BodyOverrun(len(self.target))
        self.received += nbytes

    def closed(self) -> None:
        self.done = True


_SIZE, _DATA, _CRLF, _TRAILER, _END = range(5)


class ChunkedBody(Body):
    """A body in chunked transfer coding (see the module), its chunks' bytes into ``target``.

    Args:
        target: where the chunks' bytes go; its length is the body's expected length.
        alone: whether chunked framing is the head's only one. A head that also carries a
            ``Content-Length`` may be an attempt to smuggle a response: its connection must be
            closed after the body (RFC 9112 6.3), as must one whose server sends bytes after
            the body's end.
    """

    __slots__ = ("_alone", "_chunk_start", "_left", "_line", "_scratch", "_state", "surplus")

    def __init__(self, target: memoryview, *, alone: bool = True) -> None:
        super().__init__(target)
        self._alone = alone
        self._state = _SIZE
        self._left = 0  # bytes of the current chunk not yet received (its CRLF not counted)
        self._chunk_start = 0  # where the current chunk's bytes begin in target
        self._line = bytearray()  # a size line, a chunk's CRLF or the trailer, in pieces
        self._scratch: memoryview | None = None  # the scratch buffer() last handed out
        self.surplus = False
        """Bytes came after the body's end."""

    @property
    def reusable(self) -> bool:
        return self._alone and not self.surplus

    def buffer(self, scratch: memoryview) -> memoryview:
        if self._state == _DATA:
            self._scratch = None
            return self.target[self.received : self.received + self._left]
        self._scratch = scratch
        return scratch

    def updated(self, nbytes: int) -> None:
        if self._scratch is None:
            self.received += nbytes
            self._left -= nbytes
            if not self._left:
                self._state = _CRLF
            return
        self._parse(bytes(self._scratch[:nbytes]))

    def _parse(self, data: bytes) -> None:
        """Read ``data``: framing, and chunk bytes (copied into ``target``)."""
        at = 0
        view = memoryview(data)
        while at < len(data):
            if self._state == _DATA:
                count = min(self._left, len(data) - at)
                self.target[self.received : self.received + count] = view[at : at + count]
                self.received += count
                self._left -= count
                at += count
                if not self._left:
                    self._state = _CRLF
            elif self._state == _CRLF:
                at = self._chunk_end(data, at)
            elif self._state == _SIZE:
                at = self._size_line(data, at)
            elif self._state == _TRAILER:
                self._trailer(data[at:])
                return
            else:
                self.surplus = True
                return

    def _chunk_end(self, data: bytes, at: int) -> int:
        """The CRLF after a chunk's bytes (h11 wants exactly that); returns where it ends."""
        wanted = b"\r\n"[len(self._line) :]
        seen = data[at : at + len(wanted)]
        if seen != wanted[: len(seen)]:
            self.received = self._chunk_start  # bytes not followed by CRLF are not trusted
            raise FramingError(f"malformed chunk end: {bytes(self._line) + seen!r}, not CRLF")
        self._line += seen
        if len(self._line) == 2:
            self._line.clear()
            self._state = _SIZE
        return at + len(seen)

    def _size_line(self, data: bytes, at: int) -> int:
        """A chunk's size line (ends in CRLF, h11 wants no bare LF); returns where it ends."""
        if self._line.endswith(b"\r") and data.startswith(b"\n", at):  # CRLF split in two
            line, at = bytes(self._line[:-1]), at + 1
        else:
            end = data.find(b"\r\n", at)
            if end < 0:
                self._line += data[at:]
                if len(self._line) > MAX_HEAD_BYTES:
                    raise FramingError(f"a chunk size line longer than {MAX_HEAD_BYTES} bytes")
                return len(data)
            line, at = bytes(self._line) + data[at:end], end + 2
        self._line.clear()
        match = _CHUNK_LINE.fullmatch(line)
        if match is None:
            raise FramingError(f"illegal chunk size line {line[:40]!r}")
        size = int(match.group(1), 16)
        if not size:
            self._state = _TRAILER
        elif size > len(self.target) - self.received:
            raise BodyOverrun(len(self.target))
        else:
            self._left = size
            self._chunk_start = self.received
            self._state = _DATA
        return at

    def _trailer(self, data: bytes) -> None:
        """The trailer section after the last chunk (fields, not read), then the end."""
        self._line += data
        try:
            fields = parse_trailer_section(self._line)
        except HeadError as exc:
            raise FramingError(f"a malformed trailer: {exc}") from None
        if fields is None:
            return
        self.surplus = bool(self._line)
        self._line.clear()
        self._state = _END
        self.done = True


def body_for(headers: ResponseHeaders, target: memoryview) -> Body | None:
    """The body that an answer with ``headers`` brings into ``target`` (see the module), or
    None when its head announces another length than ``len(target)`` (a ``Content-Length``),
    or a transfer coding other than chunked."""
    coding = headers.get("Transfer-Encoding")
    if coding is not None:
        if coding.strip().lower() != "chunked":
            return None
        return ChunkedBody(target, alone="Content-Length" not in headers)
    length = headers.get("Content-Length")
    if length is None:
        return UntilCloseBody(target)
    return LengthBody(target) if length.isdigit() and int(length) == len(target) else None
