"""The one policy of every HTTP request remotetensors sends (file reads, the hub's API and its
file listings, whichever transport carries them). No IO.

- Retries: which answers are worth another attempt (:data:`RETRY_STATUSES`), how long to wait
  before it (the server's ``Retry-After`` up to ``max_retry_after_seconds``, else exponential
  backoff with full jitter), and the error once the attempts are spent; every number comes from
  the caller's :class:`~.client.HttpOptions`.
- Headers: which of the caller's headers go to which URL (:func:`headers_for`, :func:`carried`).
  A redirect to another origin carries only headers known to be harmless, an allow-list
  (:data:`CARRIED_ACROSS_ORIGINS`); ``Proxy-Authorization`` is never sent to an origin.
- Redirects: at most :data:`MAX_REDIRECTS` per request (where they lead is judged by
  :func:`.answer.follow`).
"""

from __future__ import annotations

import functools
import random
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ...errors import RequestTimeoutError, TransportError
from ...redact import redact_url
from ...version import __version__
from ..ratelimit import retry_after_seconds

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from .client import HttpOptions

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
"""Request Timeout, Too Many Requests and the server errors a retry may cure."""


def retry_after(
    status: int, headers: Mapping[str, str], url: str, options: HttpOptions
) -> float | None:
    """Seconds that the answer's ``Retry-After`` asks to wait, or None when it asks nothing
    (or nothing well formed: the backoff applies then).

    Raises:
        TransportError: the server asks for more than ``options.max_retry_after_seconds``.
    """
    seconds = retry_after_seconds(headers.get("Retry-After"))
    if seconds is None:
        return None
    if seconds > options.max_retry_after_seconds:
        raise TransportError(
            f"{redact_url(url)}: HTTP {status}, and the server asks to retry after "
            f"{seconds:.0f} s, more "
            f"than max_retry_after_seconds={options.max_retry_after_seconds}"
        )
    return seconds


def backoff_seconds(options: HttpOptions, attempt: int) -> float:
    """A random wait in seconds after failed attempt ``attempt`` (from 1): uniform below
    ``backoff_initial_seconds * 2 ** (attempt - 1)``, capped at ``backoff_max_seconds``."""
    ceiling = min(options.backoff_max_seconds, options.backoff_initial_seconds * 2 ** (attempt - 1))
    return random.uniform(0, ceiling)


def gave_up(shown: str, reason: str, attempts: int, *, timed_out: bool) -> TransportError:
    """The error once ``attempts`` attempts failed, the last for ``reason``; ``shown`` names
    the request (its URLs already redacted). A :class:`RequestTimeoutError` when the last
    attempt got no answer in time."""
    message = f"{shown}: {reason} (gave up after {attempts} attempts)"
    if timed_out:
        return RequestTimeoutError(message, bound="read_timeout_seconds")
    return TransportError(message)


@functools.cache
def user_agent() -> str:
    """The ``User-Agent`` of every request: the library and its version
    (``remotetensors/0.1.0``), so that a server can tell it apart from a default client
    (CloudFront strips the hub's ``X-Xet-Hash`` from cache hits served to default agents) and
    a hub's operators know who asks."""
    return f"remotetensors/{__version__}"


def agent_header(headers: Mapping[str, str]) -> str:
    """The name under which ``headers`` hold a ``User-Agent`` (in any case), else
    ``"User-Agent"``: the caller's own agent is kept, never sent twice."""
    return next((name for name in headers if name.lower() == "user-agent"), "User-Agent")


MAX_REDIRECTS = 10
"""Redirects one request follows; one more is a :class:`~remotetensors.errors.RedirectError`.

The hub needs one or two (a renamed repo's 307 on the hub itself, then the 302 to its CDN);
ten leaves a mirror room for a longer chain (aiohttp's ``max_redirects``, under fsspec's HTTP
filesystem, is 10 too). httpx allows 20, requests 30, curl 50: bounds made for browsing, where a
loop is caught by the count alone; here a loop is refused at its first repeated URL
(:func:`.answer.follow`), so the count only bounds chains that never repeat."""

CARRIED_ACROSS_ORIGINS = frozenset(
    {
        "range",
        "if-range",
        "if-match",
        "if-none-match",
        "if-modified-since",
        "if-unmodified-since",
        "accept",
        "accept-charset",
        "accept-encoding",
        "accept-language",
        "user-agent",
        "cache-control",
    }
)
"""The only request headers (lower-cased) that a redirect to another origin carries.

An allow-list, not a deny-list: urllib3 removes ``Authorization``, ``Cookie`` and
``Proxy-Authorization`` on a redirect to another host (``Retry.remove_headers_on_redirect``),
curl ``Authorization`` and ``Cookie`` when the scheme, host or port changes (CVE-2022-27776),
httpx ``Authorization`` and ``Cookie``; all of them forward every other header, and an API key
travels in headers no list can name (``X-Api-Key``, ``X-Auth-Token``, ``PRIVATE-TOKEN`` ...).
What stays says which bytes of which file to send and in what form: the byte range, the
validators of the version opened (a redirect leads to the same file elsewhere, so its ETag or
date still applies; a CDN that does not know them answers 412, never other bytes), content
negotiation, the client's name and caching directives. None of them authenticates."""

NEVER_SENT = frozenset({"proxy-authorization"})
"""Request headers (lower-cased) never sent to an origin, whatever the URL. A proxy's
credentials belong in its configuration (``HTTPS_PROXY=http://user:password@proxy:3128``),
which httpx turns into the proxy's own header: the direct reader uses no proxy at all, and over
a tunnel (``CONNECT``) a header given with the request would reach the origin itself."""

_DEFAULT_PORTS = {"http": 80, "https": 443}


@functools.lru_cache(maxsize=1024)
def origin(url: str) -> tuple[str, str, int | None]:
    """The origin of ``url``: scheme and host lower-cased, the port with the scheme's default
    filled in (``http://Host`` and ``http://host:80`` are one origin). No userinfo. Kept for
    the last 1,024 URLs: each request asks it of the URLs it meets, a few times."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:  # not a port: compared as written, so it matches only itself
        return scheme, parts.netloc.rpartition("@")[2].lower(), None
    return scheme, parts.hostname or "", port if port is not None else _DEFAULT_PORTS.get(scheme)


def carried(fields: Iterable[tuple[str, str]], *, foreign: bool) -> list[tuple[str, str]]:
    """The request header ``fields`` that may be sent: never ``Proxy-Authorization``
    (:data:`NEVER_SENT`), and to a ``foreign`` origin (not the one the caller named) only
    :data:`CARRIED_ACROSS_ORIGINS`. Order and repeated names are kept."""
    return [
        (name, value)
        for name, value in fields
        if (lower := name.lower()) not in NEVER_SENT
        and (not foreign or lower in CARRIED_ACROSS_ORIGINS)
    ]


def headers_for(headers: Mapping[str, str], *, named: str, url: str) -> dict[str, str]:
    """Which of the caller's ``headers`` (given for the URL ``named``) a request to ``url`` sends:
    all of them to ``named``'s own origin, only the harmless ones to another (a redirect's
    target, a CDN), ``Proxy-Authorization`` to none (see :func:`carried`).

    Each hop is compared with the origin named, not with the hop before it: the caller's
    credentials were given for that origin, so a chain that leaves it and comes back (A to B to
    A) sends them to A again, and never to B (curl's rule)."""
    return dict(carried(headers.items(), foreign=origin(url) != origin(named)))
