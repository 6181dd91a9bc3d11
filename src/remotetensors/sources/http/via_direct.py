"""The direct reader (:mod:`.direct`) as a :class:`~.transport.Transport`.

It follows no redirects (the source follows them hop by hop, see :func:`.answer.follow`), sends
exactly the headers it is given (it adds no credentials of its own, so ``foreign`` changes
nothing here), reads a small body nobody needs (:data:`~.transport.DISCARD`: a redirect's, an
error's) so that its connection is kept, and says its failures in the source's words.
"""

from __future__ import annotations

from .direct import (
    RawBodyTooLongError,
    RawConnectionError,
    RawProtocolError,
    RawRangeClient,
    RawTimeoutError,
)
from .head import ResponseHeaders, announced_length
from .transport import DISCARD, Accept, BadAnswer, BodyTooLong, Head, Interrupted, Meter

_DRAIN_BYTES = 64 * 1024  # error and redirect bodies up to this are read to keep the connection


class DirectTransport:
    """Requests through ``reader``, the direct reader of a client (or of one source)."""

    __slots__ = ("reader",)

    def __init__(self, reader: RawRangeClient) -> None:
        self.reader = reader

    async def get(
        self,
        url: str,
        headers: dict[str, str],
        accept: Accept,
        meter: Meter,
        *,
        foreign: bool,
    ) -> bool:
        def target(status: int, fields: ResponseHeaders) -> memoryview | None:
            chosen = accept(Head(status, fields, url))
            return _drained(fields) if chosen is DISCARD else chosen

        try:
            answer = await self.reader.get_into(url, headers, target, meter)
        except RawBodyTooLongError as exc:
            raise BodyTooLong(exc.length) from None
        except RawProtocolError as exc:
            raise BadAnswer(f"the server's answer is not valid HTTP/1.1: {exc}") from None
        except RawTimeoutError as exc:
            raise Interrupted(
                f"request timed out ({exc})",
                received=exc.received,
                cut_reason=f"body stalled after {exc.received} bytes",
                timed_out=True,
            ) from None
        except RawConnectionError as exc:
            raise Interrupted(
                f"network error: {exc}", received=exc.received, cut_reason=f"body cut: {exc}"
            ) from None
        except ValueError as exc:  # a header or URL that cannot be sent
            raise BadAnswer(f"HTTP request failed: {exc}") from None
        return answer.body_read


def _drained(headers: ResponseHeaders) -> memoryview | None:
    """Scratch for a small body nobody needs, so that its connection can be used again; None
    (left unread) for a body whose length its head does not say (chunked, or until close)."""
    length = announced_length(headers)
    if length is not None and length <= _DRAIN_BYTES:
        return memoryview(bytearray(length))
    return None
