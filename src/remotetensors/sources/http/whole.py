"""Small answers read whole, such as the hub's JSON API (its file listings, its one-call
metadata): one GET, retried by the policy that every file read follows (:mod:`.policy`).

The caller's :class:`~.client.HttpOptions` apply as they do to file reads: ``max_attempts``,
the backoff, ``max_retry_after_seconds``, ``request_deadline_seconds`` and the timeouts; every
attempt waits for the host's rate limiter and tells it what came back. The answer that ends the
retries is returned whatever its status, for the caller to judge (with
:func:`.answer.status_error`, or its own source's words for the statuses it knows).

Each hop goes through the client's direct reader when it can (no proxy, ``direct_reads`` on,
an answer with a ``Content-Length`` that is not encoded), else through httpx. Redirects are
followed here, hop by hop, under the rules of file reads: :func:`.answer.follow` judges each
(no downgrade from ``https``, no loop, at most :data:`.policy.MAX_REDIRECTS`), and a hop to
another origin carries only the harmless headers (:func:`.policy.headers_for`), so the hub's
token never follows its API to another host.
A body of a length not known before it ends (chunked, or until the connection closes) is read
by httpx: a whole answer's buffer is sized before its body comes.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from ...errors import BadResponseError, RequestTimeoutError
from ...redact import redact_text
from ...status import Retrying, retrying
from ..cache.offline import offline, offline_error
from ..ratelimit import limiter_for
from .answer import REDIRECT_STATUSES, Failed, follow, retry_of
from .client import Client, HttpClient, httpx_of, turn_of
from .direct import RawConnectionError, RawProtocolError, RawTimeoutError
from .head import ResponseHeaders, announced_length
from .policy import (
    RETRY_STATUSES,
    agent_header,
    backoff_seconds,
    gave_up,
    headers_for,
    origin,
    user_agent,
)
from .tls import tls_error
from .transport import TlsFailed
from .via_httpx import send_hop, tls_failed

if TYPE_CHECKING:
    from collections.abc import Coroutine, Mapping

    from .client import HttpOptions

MAX_DIRECT_BODY_BYTES = 256 * 1024 * 1024
"""A larger answer (or one without ``Content-Length``) is read by httpx instead."""


@dataclass(frozen=True, slots=True)
class WholeAnswer:
    """An answer read whole.

    Attributes:
        status: the HTTP status.
        headers: its headers (looked up by name in any case).
        body: its body, decoded when it came encoded (empty for a redirect).
        url: the URL that gave it (the last hop of the redirects followed).
    """

    status: int
    headers: ResponseHeaders
    body: bytes
    url: str


class _Failure(Exception):
    """An attempt without an answer: ``reason`` in words, ``timed_out`` when none came in time."""

    def __init__(self, reason: str, *, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.timed_out = timed_out


async def get_whole(
    url: str,
    headers: Mapping[str, str],
    *,
    client: Client | None,
    options: HttpOptions,
    shown: str,
    follow_redirects: bool = True,
) -> WholeAnswer:
    """GET ``url`` with ``headers``, retrying network failures, 408, 429 and 5xx as file reads
    are retried; ``shown`` names the request in messages and status events (its URLs redacted).
    With ``follow_redirects`` False a redirect is the answer (its headers are what is wanted:
    the hub's ``X-Repo-Commit``).

    ``client`` is shared with the caller's files (a new one is made and closed when None).

    Raises:
        TransportError: the attempts ran out (:class:`RequestTimeoutError` when the last got
            no answer in time), or a ``Retry-After`` asked for more than
            ``max_retry_after_seconds``.
        RequestTimeoutError: ``request_deadline_seconds`` passed.
        RedirectError: a redirect that is not followed (see :func:`.answer.follow`).
        BadResponseError: the request cannot be sent, or its answer is not HTTP.
        TlsError: the TLS handshake failed for good (not retried), or the CA bundle named
            cannot be loaded.
        OfflineError: offline mode is on (no request is sent).
    """
    if offline():
        raise offline_error(shown, "this answer")
    own = options.new_client() if client is None else None
    used = client if client is not None else own
    assert used is not None
    deadline = (
        None
        if options.request_deadline_seconds is None
        else time.monotonic() + options.request_deadline_seconds
    )
    limiter = limiter_for(url)
    try:
        attempt = 0
        while True:
            await limiter.acquire()
            try:
                attempt_once = _attempt(used, url, dict(headers), shown, hops=follow_redirects)
                answer = await _within(attempt_once, deadline, shown)
            except _Failure as failure:
                reason, wait, timed_out = failure.reason, None, failure.timed_out
            else:
                limiter.observe(answer.status, answer.headers)
                if answer.status not in RETRY_STATUSES:
                    return answer
                decision = retry_of(answer.status, answer.headers, answer.url, options)
                if isinstance(decision, Failed):
                    raise decision.error
                reason, wait, timed_out = decision.reason, decision.wait_seconds, False
            attempt += 1
            if attempt >= options.max_attempts:
                raise gave_up(shown, reason, attempt, timed_out=timed_out)
            wait = backoff_seconds(options, attempt) if wait is None else wait
            if deadline is not None and time.monotonic() + wait >= deadline:
                raise _deadline_passed(shown, options, reason)
            retrying(Retrying(shown, attempt, options.max_attempts, reason, wait))
            await asyncio.sleep(wait)
    finally:
        if own is not None:
            await own.aclose()


async def _within(
    attempt: Coroutine[Any, Any, WholeAnswer], deadline: float | None, shown: str
) -> WholeAnswer:
    """Await ``attempt``, cancelled when ``deadline`` (monotonic seconds) passes first."""
    if deadline is None:
        return await attempt
    try:
        return await asyncio.wait_for(attempt, max(deadline - time.monotonic(), 0.0))
    except asyncio.TimeoutError:
        raise RequestTimeoutError(
            f"{shown}: the request did not finish within request_deadline_seconds",
            bound="request_deadline_seconds",
        ) from None


def _deadline_passed(shown: str, options: HttpOptions, reason: str) -> RequestTimeoutError:
    return RequestTimeoutError(
        f"{shown}: the request did not finish within request_deadline_seconds="
        f"{options.request_deadline_seconds:g} ({reason})",
        bound="request_deadline_seconds",
    )


async def _attempt(
    client: Client, url: str, headers: dict[str, str], shown: str, *, hops: bool = True
) -> WholeAnswer:
    """One GET of ``url``, its redirects followed (unless ``hops`` is False): each hop with
    the headers its origin may see.

    Raises:
        _Failure: no answer (to be retried).
        RedirectError: a redirect that is not followed.
        BadResponseError: the request cannot be sent, or the answer is not HTTP.
    """
    hop = url
    visited: tuple[str, ...] = ()  # the URLs that redirected to hop, oldest first
    while True:  # follow() refuses a redirect past MAX_REDIRECTS
        foreign = origin(hop) != origin(url)
        sent = headers_for(headers, named=url, url=hop)
        sent.setdefault(agent_header(sent), user_agent())
        if foreign:  # a CDN: never gzip (CloudFront's whole-body quirk, huggingface_hub#3778)
            sent = {k: v for k, v in sent.items() if k.lower() != "accept-encoding"}
            sent["Accept-Encoding"] = "identity"
        answer = await _hop(client, hop, sent, shown, foreign)
        location = answer.headers.get("Location")
        if answer.status not in REDIRECT_STATUSES or location is None or not hops:
            return answer
        step = follow(hop, location, visited, shown)
        if isinstance(step, Failed):
            raise step.error
        hop, visited = step.url, (*visited, hop)


async def _hop(
    client: Client, url: str, headers: dict[str, str], shown: str, foreign: bool
) -> WholeAnswer:
    """One GET, no redirect followed: through the direct reader when it can take the answer,
    else httpx (``foreign``: ``url`` is of another origin than the one named, see
    :func:`.via_httpx.send_hop`).

    Raises:
        _Failure: no answer (to be retried).
        BadResponseError: the request cannot be sent, or the answer is not HTTP.
        TlsError: the TLS handshake failed for good.
    """
    try:
        async with turn_of(client):  # one of the client's connections, whichever way it goes
            answer = await _direct_get(client, url, headers)
            if answer is not None:
                return answer
            response = await send_hop(httpx_of(client), url, headers, foreign=foreign, stream=False)
    except RawProtocolError as exc:
        raise BadResponseError(f"{shown}: the answer is not valid HTTP/1.1: {exc}") from None
    except RawTimeoutError as exc:
        raise _Failure(f"request timed out ({exc})", timed_out=True) from None
    except RawConnectionError as exc:
        raise _Failure(f"network error: {redact_text(str(exc))}") from None
    except TlsFailed as exc:  # the direct reader's
        raise tls_error(shown, exc.origin, exc.failure) from None
    except httpx.TimeoutException as exc:
        raise _Failure(f"request timed out ({type(exc).__name__})", timed_out=True) from None
    except httpx.TransportError as exc:
        failed = tls_failed(exc, url)
        if failed is not None:
            raise tls_error(shown, failed.origin, failed.failure) from None
        raise _Failure(f"network error: {type(exc).__name__}: {redact_text(str(exc))}") from None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise BadResponseError(
            f"{shown}: HTTP request failed: {type(exc).__name__}: {redact_text(str(exc))}"
        ) from None
    return WholeAnswer(response.status_code, response.headers, response.content, url)


async def _direct_get(client: Client, url: str, headers: dict[str, str]) -> WholeAnswer | None:
    """GET ``url`` through the client's direct reader, the whole body in memory (a redirect's
    is left unread: only its head counts); None when httpx must ask instead: a client not ours,
    direct reads off or a proxy, a body without ``Content-Length`` (or chunked despite one),
    over :data:`MAX_DIRECT_BODY_BYTES` or encoded.

    Raises:
        RawConnectionError, RawTimeoutError: the network failed (the caller retries).
    """
    if not isinstance(client, HttpClient) or not client.goes_direct:
        return None
    bodies: list[bytearray] = []

    def accept(status: int, answer: ResponseHeaders) -> memoryview | None:
        length = announced_length(answer)  # a chunked answer's Content-Length says nothing
        if status in REDIRECT_STATUSES or length is None:
            return None  # a redirect's body is nobody's: its connection closes unread
        if length > MAX_DIRECT_BODY_BYTES:
            return None
        bodies.append(bytearray(length))
        return memoryview(bodies[-1])

    try:
        answer = await client.direct.get_into(
            url, {**headers, "Accept-Encoding": "identity"}, accept
        )
    except ValueError:  # a header that cannot be sent as it is: let httpx say so
        return None
    if answer.status in REDIRECT_STATUSES and "Location" in answer.headers:
        return WholeAnswer(answer.status, answer.headers, b"", url)
    encoding = answer.headers.get("Content-Encoding", "identity").strip().lower()
    if not answer.body_read or encoding not in ("", "identity"):
        return None
    return WholeAnswer(answer.status, answer.headers, bytes(bodies[-1]), url)
