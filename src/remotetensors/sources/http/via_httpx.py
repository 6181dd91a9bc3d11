"""httpx as a :class:`~.transport.Transport`: for a configured proxy, for the first request of
a file read through the caller's own httpx client, for a URL that stopped working and is
resolved again through that client, and whenever ``direct_reads`` is off.

httpx is told to follow no redirect (also with a client whose ``follow_redirects`` is on): the
source follows them hop by hop under the rules of every path (:func:`.answer.follow`,
:func:`.policy.headers_for`), which httpx's own following breaks (it forwards every header but
``Authorization`` and ``Cookie`` to another origin, and follows ``https`` to ``http``). Each
hop's request is built by :func:`hop_request`, so that what a caller's client adds on its own
obeys the same rules. The body streams in pieces that are copied into the named buffer, a body
nobody needs is never read, and whatever httpx raises becomes a failure in the source's words.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx

from ...redact import redact_text
from ...status import activity, bytes_listener
from .client import Client, httpx_of
from .policy import carried
from .tls import handshake_failure, origin_of
from .transport import Accept, BadAnswer, BodyTooLong, Head, Interrupted, Meter, TlsFailed

if TYPE_CHECKING:
    from collections.abc import Mapping


class HttpxTransport:
    """Requests through ``client``'s httpx client (made on first use by a client of ours)."""

    __slots__ = ("client",)

    def __init__(self, client: Client) -> None:
        self.client = client

    async def get(
        self,
        url: str,
        headers: dict[str, str],
        accept: Accept,
        meter: Meter,
        *,
        foreign: bool,
    ) -> bool:
        client = httpx_of(self.client)
        try:
            response = await send_hop(client, url, headers, foreign=foreign, stream=True)
            try:
                target = accept(Head(response.status_code, response.headers, url))
                if not isinstance(target, memoryview):
                    return False  # closing the stream unread closes the connection
                await _read_body(response, target, meter)
                return True
            finally:
                await response.aclose()
        except httpx.TimeoutException as exc:
            raise Interrupted(f"request timed out ({type(exc).__name__})", timed_out=True) from None
        except httpx.UnsupportedProtocol as exc:
            raise BadAnswer(
                f"a URL that cannot be fetched over HTTP(S) ({redact_text(str(exc))})"
            ) from None
        except httpx.RemoteProtocolError as exc:
            said = redact_text(str(exc))
            if _malformed(exc):
                raise BadAnswer(f"the server's answer is not valid HTTP/1.1: {said}") from None
            raise Interrupted(f"network error: {type(exc).__name__}: {said}") from None
        except httpx.TransportError as exc:
            failed = tls_failed(exc, url)
            if failed is not None:
                raise failed from None
            said = redact_text(str(exc))
            raise Interrupted(f"network error: {type(exc).__name__}: {said}") from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise BadAnswer(
                f"HTTP request failed: {type(exc).__name__}: {redact_text(str(exc))}"
            ) from None


def tls_failed(exc: httpx.TransportError, url: str) -> TlsFailed | None:
    """``exc`` as :class:`TlsFailed` when it is a TLS handshake that failed for good (httpx
    says so with a ``ConnectError`` caused by the ssl module's error), else None. The origin is
    that of the request that failed (a redirect's target, maybe), else ``url``'s."""
    failure = handshake_failure(exc) if isinstance(exc, httpx.ConnectError) else None
    if failure is None:
        return None
    try:
        failed = exc.request.url
    except RuntimeError:  # no request attached (raised outside a client)
        failed = httpx.URL(url)
    port = failed.port or (443 if failed.scheme == "https" else 80)
    return TlsFailed(origin_of(failed.host, port), failure)


async def send_hop(
    client: httpx.AsyncClient,
    url: str,
    headers: Mapping[str, str],
    *,
    foreign: bool,
    stream: bool,
) -> httpx.Response:
    """One GET through ``client``, no redirect followed; with ``stream`` its body is left to
    read (close the answer), else it is read whole.

    ``headers`` are the caller's choice (:func:`.policy.headers_for`); httpx adds the client's
    own (its default headers, the cookies of its jar) as it builds the request, and those obey
    the same rule (:func:`.policy.carried`): no ``Proxy-Authorization`` (a proxy's credentials
    go in the client's proxy configuration, which sends them to the proxy alone), and, when the
    hop is ``foreign`` (another origin than the URL the caller named), nothing but the harmless
    headers and no auth of the client: a caller's client made with ``headers={"X-Api-Key":
    ...}`` or ``auth=...`` for its host gives neither to the CDN that host redirects to.
    """
    request = client.build_request("GET", url, headers=headers)
    request.headers = httpx.Headers(carried(request.headers.multi_items(), foreign=foreign))
    if not foreign:
        return await client.send(request, stream=stream, follow_redirects=False)
    # The Host of the URL itself (httpx set it, or the caller's headers did for their origin).
    request.headers["Host"] = request.url.netloc.decode("ascii")
    return await client.send(request, stream=stream, auth=None, follow_redirects=False)


async def _read_body(response: httpx.Response, target: memoryview, meter: Meter) -> None:
    """Stream exactly ``len(target)`` body bytes into ``target``.

    Raises:
        BodyTooLong: more bytes came.
        Interrupted: fewer came (the connection failed, or stalled: ``timed_out``).
    """
    length = len(target)
    received = 0
    listener = bytes_listener()
    try:
        async for chunk in response.aiter_raw():
            size = len(chunk)
            if received + size > length:
                raise BodyTooLong(length)
            target[received : received + size] = chunk
            received += size
            meter.bytes += size
            activity()
            if listener is not None:
                listener(size)
    except (httpx.TransportError, httpx.TimeoutException) as exc:
        stalled = isinstance(exc, httpx.TimeoutException)
        raise Interrupted(
            f"body {'stalled' if stalled else 'cut'} after {received} of {length} bytes "
            f"({type(exc).__name__})",
            received=received,
            timed_out=stalled,
        ) from None
    if received != length:
        raise Interrupted(f"body cut after {received} of {length} bytes", received=received)


def _malformed(exc: BaseException) -> bool:
    """Whether httpx's protocol error came from h11 refusing the bytes (not a disconnect)."""
    import h11  # loaded by httpx already when this runs; not needed before

    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return False
        if isinstance(seen, h11.RemoteProtocolError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
