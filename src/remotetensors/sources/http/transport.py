"""What the HTTP source asks of a way to send its requests: one GET, its status and headers
(:class:`Head`), and its body into a buffer that the source names once it has seen them.

Two transports implement it: :mod:`.via_direct` (the built-in reader of :mod:`.direct`, whose
bodies land in the caller's buffer) and :mod:`.via_httpx` (httpx). The source sends every
request the same way and judges every answer with one function (:func:`.answer.decide`),
whichever transport carried it. Neither follows redirects: the source follows them hop by hop,
each hop judged by :func:`.answer.follow` and its headers chosen by :func:`.policy.headers_for`,
so that one set of rules holds on every path. What differs between the transports is said
here: the texts of their failures.
"""

from __future__ import annotations

import enum
import ssl
from collections.abc import Callable
from typing import NamedTuple, Protocol

from .head import ResponseHeaders


class Meter:
    """Counts bytes received (head and body) across the requests it is passed to."""

    __slots__ = ("bytes",)

    def __init__(self) -> None:
        self.bytes = 0


class Discard(enum.Enum):
    """A body nobody needs (see :data:`DISCARD`)."""

    DISCARD = "discard"


DISCARD = Discard.DISCARD
"""What :data:`Accept` returns for a body that holds no bytes of the file (a redirect, an error):
a transport may read and drop a small one to keep its connection, or leave it unread."""


class Head(NamedTuple):
    """An answer's status and headers, and the URL that gave it (the URL asked: transports
    follow no redirects)."""

    status: int
    headers: ResponseHeaders
    url: str


Accept = Callable[[Head], memoryview | Discard | None]
"""Called with an answer's head, before its body; returns the buffer the body goes into (the
body must have exactly its length, whatever its framing: a ``Content-Length`` that says so,
chunks, or the bytes until the close), :data:`DISCARD`, or None to leave the body unread and
close the connection. Called once per answer that comes; it must not raise."""


class Transport(Protocol):
    """One GET at a time, no redirect followed: the head is shown to ``accept``, the body goes
    where it says."""

    async def get(
        self,
        url: str,
        headers: dict[str, str],
        accept: Accept,
        meter: Meter,
        *,
        foreign: bool,
    ) -> bool:
        """GET ``url`` with ``headers``, showing the answer's head to ``accept``; returns whether
        the body went completely into the buffer it named (False when it named none, or the
        answer did not fit it). Every byte received is counted in ``meter``.

        ``headers`` are sent as given (the source chose them, :func:`.policy.headers_for`);
        ``foreign`` says that ``url`` is of another origin than the URL the caller named (a
        redirect's target), so a transport that adds credentials of its own (a caller's httpx
        client: its auth, cookies and default headers) must not add them.

        Raises:
            Interrupted: no answer, or the connection failed or stalled, its body unfinished.
            BodyTooLong: the body ran past the buffer ``accept`` named.
            BadAnswer: the answer or the request cannot be used at all (not retried).
            TlsFailed: the TLS handshake failed for good (not retried).
        """
        ...


class Interrupted(Exception):
    """The exchange broke off: no answer in time, a failed connection, a body cut or stalled.

    Attributes:
        reason: what happened, when nothing of it can be kept.
        received: body bytes written into the buffer ``accept`` named before it broke off.
        cut_reason: what happened, said of those ``received`` bytes (when they are resumed).
        timed_out: no bytes came in time (as opposed to a connection that failed).
    """

    def __init__(
        self,
        reason: str,
        *,
        received: int = 0,
        cut_reason: str | None = None,
        timed_out: bool = False,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.received = received
        self.cut_reason = reason if cut_reason is None else cut_reason
        self.timed_out = timed_out


class BodyTooLong(Exception):
    """The body ran past the ``length`` bytes of the buffer named for it."""

    def __init__(self, length: int) -> None:
        super().__init__(length)
        self.length = length


class BadAnswer(Exception):
    """An answer that is not HTTP, a redirect that cannot be followed, a request that cannot be
    sent: ``detail`` says which (the source names the file before it)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class TlsFailed(Exception):
    """The TLS handshake with ``origin`` (``host:port``) failed with ``failure``, which another
    attempt cannot mend (see :func:`.tls.handshake_failure`); the source names the file and
    says what to do (:func:`.tls.tls_error`)."""

    def __init__(self, origin: str, failure: ssl.SSLError) -> None:
        super().__init__(origin, failure)
        self.origin = origin
        self.failure = failure
