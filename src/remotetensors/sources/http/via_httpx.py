"""httpx as a :class:`~.transport.Transport`: for a configured proxy, for the first request of
a file read through the caller's own httpx client, for what the direct reader leaves (a redirect
met on a later request), and whenever ``direct_reads`` is off.

httpx follows redirects itself (also with a caller's client that would not), streams the body
in pieces that are copied into the named buffer, and never reads a body nobody needs; whatever
it raises becomes a failure in the source's words.
"""

from __future__ import annotations

import httpx

from ...redact import redact_text, redact_url
from ...status import activity, bytes_listener
from .client import Client, httpx_of
from .tls import handshake_failure, origin_of
from .transport import Accept, BadAnswer, BodyTooLong, Head, Interrupted, Meter, TlsFailed


class HttpxTransport:
    """Requests through ``client``'s httpx client (made on first use by a client of ours)."""

    __slots__ = ("client",)

    follows_redirects = True

    def __init__(self, client: Client) -> None:
        self.client = client

    async def get(self, url: str, headers: dict[str, str], accept: Accept, meter: Meter) -> bool:
        client = httpx_of(self.client)
        try:
            async with client.stream(
                "GET",
                url,
                headers=headers,
                follow_redirects=True,  # also with a caller's client that would not
            ) as response:
                hops = tuple(hop.headers for hop in response.history)
                head = Head(response.status_code, response.headers, str(response.url), hops)
                target = accept(head)
                if not isinstance(target, memoryview):
                    return False  # leaving the stream unread closes the connection
                await _read_body(response, target, meter)
                return True
        except httpx.TimeoutException as exc:
            raise Interrupted(f"request timed out ({type(exc).__name__})", timed_out=True) from None
        except httpx.TooManyRedirects:
            raise BadAnswer(
                f"more than {client.max_redirects} redirects (a redirect loop?); last URL "
                f"{redact_url(url)}"
            ) from None
        except httpx.UnsupportedProtocol as exc:
            raise BadAnswer(
                f"redirected to a URL that cannot be fetched over HTTP(S) ({redact_text(str(exc))})"
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
