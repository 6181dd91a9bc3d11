"""The HTTP source's options, and the client remotetensors makes from them.

:class:`HttpClient` carries what every file read through it shares: a turn for each of its
connections, the direct reader (:mod:`.direct`) with its pool of kept-alive connections, and
an httpx client for what the direct reader does not do. Files of one model share one client.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

import httpx

from ...redact import REDACTED
from .direct import RawRangeClient
from .head import HeadError, check_field
from .tls import shared_ssl_context

if TYPE_CHECKING:
    from collections.abc import Mapping


@dataclass(frozen=True, slots=True)
class HttpOptions:
    """Knobs of the HTTP source. Defaults are defined here once.

    Attributes:
        connect_timeout_seconds: time to establish a connection.
        read_timeout_seconds: longest wait for the next bytes of a response.
        max_attempts: tries per request (the first one included) for retryable failures.
        backoff_initial_seconds: upper bound of the first random wait; doubles per attempt.
        backoff_max_seconds: upper bound of any single wait.
        max_retry_after_seconds: a ``Retry-After`` longer than this fails at once instead of
            waiting.
        max_connections: connections kept to all hosts by a client this source creates.
        headers: extra request headers (for example ``Authorization``): names that are tokens,
            values of visible ASCII characters and inner spaces or tabs, checked here once for
            both transports. Their values never appear in a repr or an error message. They
            are sent to the origin of the URL named; a redirect to another origin carries only
            the harmless ones (:data:`.policy.CARRIED_ACROSS_ORIGINS`: ``Range``, ``If-*``,
            ``Accept*``, ``User-Agent``, ``Cache-Control``), and ``Proxy-Authorization`` is
            never sent (a proxy's credentials go in its URL,
            ``HTTPS_PROXY=http://user:password@host:port``).
        accept_whole_body_below_bytes: opt-in: when a server ignores ``Range`` and the whole
            file is smaller than this, use the whole body instead of failing. 0 (the default)
            never accepts a whole body.
        resume_progress_bytes: a cut body resumes from its first missing byte; the attempt
            counts against ``max_attempts`` unless it delivered at least this many bytes or
            half of what was still missing (so a server that sends a few bytes per
            connection fails after ``max_attempts`` requests instead of never).
        min_bytes_per_second: throughput floor of a request, measured over every
            ``throughput_window_seconds`` (head and body bytes): a request below it is
            cancelled with :class:`RequestTimeoutError` (``bound="min_bytes_per_second"``),
            which a trickling server never trips through the read timeout. 0 disables it.
        throughput_window_seconds: the window of ``min_bytes_per_second``.
        request_deadline_seconds: total time for one range read, all attempts, waits and
            resumes included; ``None`` (the default) sets none. Exceeding it raises
            :class:`RequestTimeoutError` with ``bound="request_deadline_seconds"``.
        direct_reads: send ranged GETs with the built-in HTTP/1.1 reader (:mod:`.direct`),
            which receives bodies straight into the destination array and costs a sixth of
            httpx's CPU per request; httpx copies every 64 KiB piece and runs at a fraction of
            the speed. With a client remotetensors made (:meth:`new_client`), every request
            goes direct, the first one of a file included (it follows redirects itself); with
            a client the caller passed, the first request of a file goes through that client
            and only later data requests go direct. With a proxy configured in the
            environment, everything goes through httpx.
        ca_bundle: a PEM file of CA certificates (or a folder of them, prepared with
            ``openssl rehash``) that HTTPS servers are verified with, in place of those the
            environment names (``SSL_CERT_FILE``, ``SSL_CERT_DIR``, ``REQUESTS_CA_BUNDLE``,
            ``CURL_CA_BUNDLE``) and of certifi's bundle; see :mod:`.tls`. A handshake that
            fails verification raises :class:`~remotetensors.TlsError` at once (not retried).
            A client the caller passes keeps its own ``verify``.

    Raises:
        ValueError: on construction, for a header that cannot be sent (named; its value is
            not shown).
    """

    connect_timeout_seconds: float = 10.0
    read_timeout_seconds: float = 60.0
    max_attempts: int = 5
    backoff_initial_seconds: float = 0.25
    backoff_max_seconds: float = 8.0
    max_retry_after_seconds: float = 60.0
    max_connections: int = 64
    headers: Mapping[str, str] = field(default_factory=dict)
    accept_whole_body_below_bytes: int = 0
    resume_progress_bytes: int = 1024 * 1024
    min_bytes_per_second: float = 1024.0
    throughput_window_seconds: float = 30.0
    request_deadline_seconds: float | None = None
    direct_reads: bool = True
    ca_bundle: str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        # Checked before any request: httpx's own refusal of a value (h11's) quotes it, and a
        # header's value is often a credential.
        for name, value in self.headers.items():
            try:
                check_field(name, value)
            except HeadError as exc:
                raise ValueError(
                    f"HttpOptions(headers=...): {exc} (the value is not shown: it may be a "
                    "credential)"
                ) from None

    def __repr__(self) -> str:
        """Every field, with the headers' values masked: they carry credentials."""
        masked = dict.fromkeys(self.headers, REDACTED)
        shown = (
            f"{f.name}={masked if f.name == 'headers' else getattr(self, f.name)!r}"
            for f in fields(self)
        )
        return f"HttpOptions({', '.join(shown)})"

    def new_client(self) -> HttpClient:
        """A client configured with these options (close it with ``aclose``)."""
        return HttpClient(self)

    def client_key(self) -> tuple[float, float, int, bool, str | None]:
        """What a client made by :meth:`new_client` depends on (the rest is read per request):
        options with equal keys can share one client."""
        return (
            self.connect_timeout_seconds,
            self.read_timeout_seconds,
            self.max_connections,
            self.direct_reads,
            None if self.ca_bundle is None else os.fspath(self.ca_bundle),
        )


class HttpClient:
    """What the files read through it share: connection turns, the direct reader, and an httpx
    client made on first use.

    Most opens never need httpx (every request goes direct); making its client imports httpcore
    and builds the TLS context, about 75 ms the first time in a process, so that waits until a
    request needs it (a proxy, the hub's JSON API, ``direct_reads=False``).

    Args:
        options: timeouts and ``max_connections`` for both httpx and the direct reader.

    Attributes:
        turns: one turn per connection. A request holds one while it runs, whichever way it
            goes, so httpx and the direct reader together keep at most ``max_connections``
            requests in flight. The rest wait here rather than in httpcore's pool: httpcore
            1.0 hands each connection that frees up to every queued request, all but one
            wake, fail and queue again, and each pass scans every connection
            (encode/httpcore#1035); with a few requests queued behind 64 connections, that
            churn took half the CPU of opening a 72-shard model.
        direct: the direct reader, its idle connections kept per host.
        goes_direct: whether requests may use ``direct``: ``direct_reads`` is on and no proxy
            was configured in the environment when the client was made (httpx too reads the
            proxy variables once, when its client is made).
    """

    def __init__(self, options: HttpOptions) -> None:
        self.options = options
        self.turns = asyncio.Semaphore(options.max_connections)
        self.direct = RawRangeClient(
            connect_timeout_seconds=options.connect_timeout_seconds,
            read_timeout_seconds=options.read_timeout_seconds,
            max_idle_per_host=options.max_connections,
            ca_bundle=options.ca_bundle,
        )
        self.goes_direct = options.direct_reads and not proxy_in_environment()
        self._httpx: httpx.AsyncClient | None = None

    @property
    def httpx(self) -> httpx.AsyncClient:
        """The httpx client (made now if it was not yet).

        Raises:
            TlsError: the CA bundle named cannot be loaded.
        """
        if self._httpx is None:
            from .cancelsafe import mend  # here: it imports httpcore, as making a client does

            options = self.options
            self._httpx = httpx.AsyncClient(
                timeout=httpx.Timeout(
                    options.read_timeout_seconds, connect=options.connect_timeout_seconds
                ),
                limits=httpx.Limits(
                    max_connections=options.max_connections,
                    max_keepalive_connections=options.max_connections,
                ),
                # Redirects are followed by the source, hop by hop, under the rules of every
                # path (see .policy and .answer.follow); httpx's own following breaks them.
                follow_redirects=False,
                verify=shared_ssl_context(options.ca_bundle),
            )
            mend(self._httpx)  # a handshake cancelled half way closes its connection
        return self._httpx

    async def aclose(self) -> None:
        """Close every connection, direct and httpx."""
        await self.direct.aclose()
        if self._httpx is not None:
            await self._httpx.aclose()
            self._httpx = None


def proxy_in_environment() -> bool:
    """Whether a proxy variable is set (every request then goes through httpx, which uses it)."""
    return any(os.environ.get(name) for name in _PROXY_VARIABLES)


_PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


Client = HttpClient | httpx.AsyncClient
"""A client to read through: one remotetensors made, or an httpx client the caller brings."""


def httpx_of(client: Client) -> httpx.AsyncClient:
    """The httpx client to send ``client``'s httpx requests with."""
    return client.httpx if isinstance(client, HttpClient) else client


def turn_of(client: Client) -> contextlib.AbstractAsyncContextManager[object]:
    """Hold one of ``client``'s connections for a request (no limit for a client made
    elsewhere, whose pool size is not known)."""
    return client.turns if isinstance(client, HttpClient) else contextlib.nullcontext()
