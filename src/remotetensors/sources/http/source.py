"""HTTP(S) files read with single-range GETs, trusting only what can be checked.

What this source guarantees (see ``reference/remote-io.md`` for why each rule exists):

- every request sends ``Range`` and ``Accept-Encoding: identity``; only a 206 whose
  ``Content-Range`` matches the request and whose body has exactly the asked length is used;
- a 200 to a ranged request is abandoned at once (the connection is closed, the body not read)
  and raises :class:`RangeNotSupportedError`, unless the caller opted in to small whole bodies;
- redirects are followed on the first request (by httpx, or by this module when the request goes
  direct: at most 20 hops, relative ``Location`` resolved as httpx does, credentials kept for the
  URL's own origin); later requests go straight to the final URL, and if that URL stops working
  (401/403/404/410, as an expired signed URL does) the original URL is resolved once more;
- the first response's validators are kept: a strong ETag is sent as ``If-Match`` on later
  requests (else ``Last-Modified`` as ``If-Unmodified-Since``), and every later answer must carry
  the same total size, ETag and ``Last-Modified`` as the first; a changed or missing validator
  raises :class:`RemoteFileChangedError`, never mixes versions;
- connect and read errors, truncated bodies, 429 and 5xx are retried with exponential backoff and
  full jitter, honouring a well-formed ``Retry-After``; a truncated body resumes from its first
  missing byte, and a resume without real progress counts as a failed attempt;
- every attempt runs under a throughput floor and every range read under an optional deadline
  (:class:`RequestTimeoutError` says which bound tripped);
- the URL's userinfo is sent as Basic auth to its own origin only, and every message names the
  URL with its secrets masked (:func:`~remotetensors.redact.redact_url`);
- whatever httpx or the direct reader raises (a redirect loop, a malformed head) becomes one of
  our errors.

Requests go through the direct reader (:mod:`.direct`, a sixth of httpx's CPU per request)
whenever :attr:`HttpOptions.direct_reads` allows it; see there for when httpx is used instead.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import re
import time
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from ...errors import (
    BadResponseError,
    NotFoundError,
    PermissionDeniedError,
    RangeNotSupportedError,
    RemoteFileChangedError,
    RequestTimeoutError,
    TransportError,
)
from ...ranges import ByteRange
from ...redact import redact_url
from ...status import Retrying, activity, bytes_listener, retrying
from ..base import ByteSource, Prefix
from ..ratelimit import limiter_for, retry_after_seconds
from ..recipe import SourceRecipe
from . import client as httpclient
from .client import Client, HttpClient, HttpOptions, httpx_of
from .direct import (
    Meter,
    RawConnectionError,
    RawProtocolError,
    RawRangeClient,
    RawResponse,
    RawTimeoutError,
)
from .head import ResponseHeaders
from .selfcancel import withdraw_own_cancel

__all__ = ["HttpClient", "HttpOptions", "HttpSource"]

_MAX_REDIRECTS = 20  # as httpx's default
_DRAIN_BYTES = 64 * 1024  # error and redirect bodies up to this are read to keep the connection

_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)
_UNSATISFIED_RANGE = re.compile(r"^\s*bytes\s+\*/(\d+)\s*$", re.IGNORECASE)
_RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


def _turns(client: Client) -> contextlib.AbstractAsyncContextManager[object]:
    """Hold one of ``client``'s connections for a request (no limit for a client made
    elsewhere, whose pool size is not known)."""
    return client.turns if isinstance(client, HttpClient) else contextlib.nullcontext()


class _Retry(Exception):
    """A failure worth another attempt; ``wait_seconds`` from Retry-After when the server said,
    ``timed_out`` when no answer came in time (giving up then raises RequestTimeoutError)."""

    def __init__(
        self, reason: str, wait_seconds: float | None = None, *, timed_out: bool = False
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.wait_seconds = wait_seconds
        self.timed_out = timed_out


class _Reresolve(Exception):
    """The final (redirected) URL ``url`` stopped working; resolve the original URL again."""

    def __init__(self, status: int, url: str) -> None:
        super().__init__(status)
        self.status = status
        self.url = url


class HttpSource(ByteSource):
    """One file on an HTTP(S) server that honours single byte ranges.

    Args:
        url: the file's URL; redirects from it are followed on the first request.
        client: a client to share between files (one remotetensors made, or the caller's
            httpx client, see :mod:`.client`); when ``None`` the source creates one and
            closes it in :meth:`aclose`.
        options: timeouts, retries and the other knobs of :class:`HttpOptions`.
    """

    def __init__(
        self,
        url: str,
        *,
        client: Client | None = None,
        options: HttpOptions | None = None,
    ) -> None:
        self._given_url = url  # with its userinfo: what another process must open again
        self._url, self._basic_auth = _split_userinfo(url)
        self._shown = redact_url(url)
        self._options = options or HttpOptions()
        self._client = client
        self._owns_client = client is None
        self._data_url = self._url
        self._reresolved = False  # a file's redirect is resolved again at most once
        self._size: int | None = None
        self._etag: str | None = None
        self._last_modified: str | None = None
        self._whole_body: bytes | None = None
        self._verified = False  # _data_url answered a ranged GET itself (no redirect pending)
        self._raw: RawRangeClient | None = None
        self._proxied: bool | None = None  # a proxy in the environment (a caller's client)
        self.first_responses: list[ResponseHeaders] = []
        """Headers of every answer to the first request: the redirects in order, then the
        final answer (e.g. the hub's ``X-Repo-Commit``, which its redirect to a CDN carries)."""

    @property
    def first_response_headers(self) -> ResponseHeaders | None:
        """Headers of the final answer to the first request (after redirects)."""
        return self.first_responses[-1] if self.first_responses else None

    @property
    def location(self) -> str:
        """The URL without its secrets (password, signatures, tokens: ``***``)."""
        return self._shown

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._shown}>"

    def _http(self) -> Client:
        if self._client is None:
            self._client = self._options.new_client()
        return self._client

    async def aclose(self) -> None:
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._raw is not None:
            await self._raw.aclose()
            self._raw = None

    def _direct(self, *, first: bool) -> RawRangeClient | None:
        """The direct reader, when it may serve the next request (see ``direct_reads``)."""
        client = self._http()
        if isinstance(client, HttpClient):
            if not client.goes_direct:
                return None
            # A redirect met on a later request is left to httpx (see _one_direct_request).
            return client.direct if first or self._verified else None
        if first or not self._verified:
            return None  # a caller's own client sees every first request: its auth, its hooks
        if self._proxied is None:  # read once, as for a client remotetensors makes
            self._proxied = httpclient.proxy_in_environment()
        if not self._options.direct_reads or self._proxied:
            return None
        if self._raw is None:
            self._raw = RawRangeClient(
                connect_timeout_seconds=self._options.connect_timeout_seconds,
                read_timeout_seconds=self._options.read_timeout_seconds,
                max_idle_per_host=self._options.max_connections,
            )
        return self._raw

    # --- the ByteSource contract --------------------------------------------------------------

    def receives_in_threads(self) -> bool:
        """True when the direct reader serves the data and receives its large bodies in worker
        threads (see :meth:`RawRangeClient.receives_in_threads`)."""
        direct = None if self._whole_body is not None else self._direct(first=False)
        return direct is not None and direct.receives_in_threads(self._data_url)

    def recipe(self) -> SourceRecipe:
        return self._recipe_for(self._given_url)

    def _recipe_for(self, url: str) -> SourceRecipe:
        if self._size is None:
            raise RuntimeError("open_prefix must be called before recipe")
        validator = self._validator()
        return SourceRecipe("http", url, self.location, self._size, validator, self._options)

    async def open_prefix(self, length: int) -> Prefix:
        if length <= 0:
            raise ValueError(f"the prefix length must be positive, got {length}")
        buffer = bytearray(length)
        received = await self._fetch(0, length, memoryview(buffer), first=True)
        assert self._size is not None
        # A copy, not a resize: a retried attempt's traceback may still hold a view of buffer.
        return Prefix(bytes(buffer[:received]), self._size, self._validator())

    async def read_into(self, start: int, buffer: memoryview) -> None:
        end = start + len(buffer)
        if self._size is None:
            raise RuntimeError("open_prefix must be called before read_into")
        if start < 0 or end > self._size:
            raise ValueError(
                f"{self._shown}: bytes [{start}, {end}) lie outside the file of {self._size} bytes"
            )
        if not len(buffer):
            return
        if self._whole_body is not None:
            buffer[:] = self._whole_body[start:end]
            return
        await self._fetch(start, end, buffer, first=False)

    # --- requests, checks and retries -----------------------------------------------------------

    async def _fetch(self, start: int, end: int, buffer: memoryview, *, first: bool) -> int:
        """Fill ``buffer`` with bytes [start, end), resuming and retrying; returns bytes written.

        On the first request ``end`` may exceed the file: the answer then stops at its end.
        Every attempt runs under the throughput floor, and all of them under the deadline.
        """
        options = self._options
        deadline = (
            None
            if options.request_deadline_seconds is None
            else time.monotonic() + options.request_deadline_seconds
        )
        received = 0
        attempt = 0
        while True:
            # The host's rate limit is waited for outside the attempt, so that waiting is not
            # taken for a server that is too slow (see _guarded's throughput floor).
            await limiter_for(self._data_url).acquire()
            try:
                got = await self._guarded(
                    start + received, end, buffer[received:], first=first, deadline=deadline
                )
                return received + got
            except _Truncated as cut:
                received += cut.received
                first = False
                missing = min(end, self._size or end) - start - received
                end = min(end, self._size or end)
                # Resume from the first missing byte. Only real progress (a good share of
                # what was missing) earns a fresh attempt budget: a server that sends a few
                # bytes per connection must not keep us busy without end.
                progress = min(options.resume_progress_bytes, (cut.received + missing) // 2)
                if cut.received and cut.received >= max(progress, 1):
                    attempt = 0
                    continue
                failure: _Retry = _Retry(cut.reason, timed_out=cut.timed_out)
            except _Reresolve as expired:
                if expired.url != self._data_url:
                    continue  # a concurrent read already resolved the URL again
                if self._reresolved:
                    raise self._status_error(expired.status, expired.url) from None
                self._reresolved = True
                self._data_url = self._url
                self._verified = False
                continue
            except _Retry as retry:
                failure = retry
            attempt += 1
            if attempt >= options.max_attempts:
                raise self._give_up(failure, attempt) from None
            wait = self._wait_seconds(attempt, failure)
            if deadline is not None and time.monotonic() + wait >= deadline:
                raise self._deadline_passed(failure.reason) from None
            retrying(Retrying(self._shown, attempt, options.max_attempts, failure.reason, wait))
            await asyncio.sleep(wait)

    async def _guarded(
        self, start: int, end: int, buffer: memoryview, *, first: bool, deadline: float | None
    ) -> int:
        """One attempt, cancelled when it falls below the throughput floor or the deadline.

        Raises:
            RequestTimeoutError: naming the bound that tripped; not retried, since a server
                that is this slow for a whole window is not expected to recover at once.
        """
        options = self._options
        meter = Meter()
        window = options.throughput_window_seconds
        floor = options.min_bytes_per_second * window
        # One timer per window watches the attempt: when a bound trips it records why and
        # cancels this task, which runs the attempt itself (see .selfcancel).
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        tripped: list[RequestTimeoutError] = []
        mark = meter.bytes
        timer: asyncio.TimerHandle | None = None

        def arm() -> asyncio.TimerHandle:
            timeout = window if deadline is None else min(window, deadline - time.monotonic())
            return loop.call_later(max(timeout, 0.0), check)

        def check() -> None:
            # Runs only while the attempt is suspended (the timer is cancelled when it ends),
            # so the cancellation lands inside it.
            nonlocal mark, timer
            if deadline is not None and time.monotonic() >= deadline:
                tripped.append(self._deadline_passed(f"{meter.bytes} bytes received by then"))
            elif meter.bytes - mark < floor:
                tripped.append(
                    RequestTimeoutError(
                        f"{self._shown}: bytes {start}-{end - 1} arrived at "
                        f"{(meter.bytes - mark) / window:.0f} bytes/s over the last "
                        f"{window:g} s, below min_bytes_per_second="
                        f"{options.min_bytes_per_second:g}; the server is too slow or stalling",
                        bound="min_bytes_per_second",
                    )
                )
            else:
                mark = meter.bytes
                timer = arm()
                return
            task.cancel()

        timer = arm()
        try:
            return await self._one_request(start, end, buffer, first=first, meter=meter)
        except asyncio.CancelledError:
            if tripped and withdraw_own_cancel(task):
                raise tripped[0] from None
            raise
        finally:
            assert timer is not None
            timer.cancel()

    def _deadline_passed(self, detail: str) -> RequestTimeoutError:
        return RequestTimeoutError(
            f"{self._shown}: the request did not finish within request_deadline_seconds="
            f"{self._options.request_deadline_seconds:g} ({detail})",
            bound="request_deadline_seconds",
        )

    def _wait_seconds(self, attempt: int, failure: _Retry) -> float:
        if failure.wait_seconds is not None:
            return failure.wait_seconds
        ceiling = min(
            self._options.backoff_max_seconds,
            self._options.backoff_initial_seconds * 2 ** (attempt - 1),
        )
        return random.uniform(0, ceiling)

    def _give_up(self, failure: _Retry, attempts: int) -> Exception:
        via = f" (via {redact_url(self._data_url)})" if self._data_url != self._url else ""
        message = f"{self._shown}{via}: {failure.reason} (gave up after {attempts} attempts)"
        if failure.timed_out:
            return RequestTimeoutError(message, bound="read_timeout_seconds")
        return TransportError(message)

    def _headers(self, start: int, end: int, *, first: bool) -> dict[str, str]:
        # Credentials are for the URL the user named, never for where it redirected to (a CDN).
        # So is the userinfo of the URL, sent as Basic auth unless an Authorization is given.
        same_origin = self._data_url == self._url or _origin(self._data_url) == _origin(self._url)
        headers = dict(self._options.headers) if same_origin else {}
        if (
            same_origin
            and self._basic_auth
            and not any(name.lower() == "authorization" for name in headers)
        ):
            headers["Authorization"] = self._basic_auth
        headers["Range"] = ByteRange(start, end).header_value()
        headers["Accept-Encoding"] = "identity"
        if not first:
            # Conditions on the version opened: a server that honours them answers 412 when the
            # file changed. A weak ETag cannot be used for If-Match (RFC 9110 13.1.1).
            if self._etag is not None and not self._etag.startswith("W/"):
                headers["If-Match"] = self._etag
            elif self._last_modified is not None:
                headers["If-Unmodified-Since"] = self._last_modified
        return headers

    async def _one_request(
        self, start: int, end: int, buffer: memoryview, *, first: bool, meter: Meter
    ) -> int:
        direct = self._direct(first=first)
        client = self._http()
        if direct is not None:
            async with _turns(client):
                return await self._one_direct_request(
                    direct, start, end, buffer, meter, first=first
                )
        url = self._data_url
        limiter = limiter_for(url)  # shared by the whole process: see .ratelimit
        try:
            async with (
                _turns(client),
                httpx_of(client).stream(
                    "GET",
                    url,
                    headers=self._headers(start, end, first=first),
                    follow_redirects=True,  # also with a caller's client that would not
                ) as response,
            ):
                limiter.observe(response.status_code, response.headers)
                if str(response.url) != url:
                    self._data_url = str(response.url)
                if first:
                    self.first_responses = [
                        *(hop.headers for hop in response.history),
                        response.headers,
                    ]
                status = response.status_code
                if status == 206:
                    received = await self._read_partial(
                        response, start, end, buffer, first=first, meter=meter
                    )
                    self._verified = True
                    return received
                if status == 200:
                    return await self._read_whole(response, start, end, buffer, first=first)
                if status == 416 and first:
                    return self._empty_file(response.headers)
                raise self._status_failure(status, response.headers, str(response.request.url))
        except httpx.TimeoutException as exc:
            raise _Retry(f"request timed out ({type(exc).__name__})", timed_out=True) from None
        except httpx.TooManyRedirects:
            raise BadResponseError(
                f"{self._shown}: more than {httpx_of(client).max_redirects} redirects (a "
                f"redirect loop?); last URL {redact_url(url)}"
            ) from None
        except httpx.UnsupportedProtocol as exc:
            raise BadResponseError(
                f"{self._shown}: redirected to a URL that cannot be fetched over HTTP(S) ({exc})"
            ) from None
        except httpx.RemoteProtocolError as exc:
            if _malformed(exc):
                raise BadResponseError(
                    f"{self._shown}: the server's answer is not valid HTTP/1.1: {exc}"
                ) from None
            raise _Retry(f"network error: {type(exc).__name__}: {exc}") from None
        except httpx.TransportError as exc:
            raise _Retry(f"network error: {type(exc).__name__}: {exc}") from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise BadResponseError(
                f"{self._shown}: HTTP request failed: {type(exc).__name__}: {redact_url(str(exc))}"
            ) from None

    async def _one_direct_request(
        self,
        direct: RawRangeClient,
        start: int,
        end: int,
        buffer: memoryview,
        meter: Meter,
        *,
        first: bool,
    ) -> int:
        """One attempt through the direct reader, following redirects when ``first``.

        Decides from each answer's head where its body goes: a 206 that matches the request
        into ``buffer``; an accepted whole body (a first 200) into a buffer of its own; a small
        redirect or error body into scratch, read only to keep the connection; anything else
        is left unread, which closes the connection.
        """
        problems: list[Exception] = []
        whole: list[bytearray] = []
        if first:
            self.first_responses = []

        def accept(status: int, headers: ResponseHeaders) -> memoryview | None:
            try:
                if status == 206:
                    return buffer[: self._check_partial(headers, start, end, first=first)]
                if status == 200:
                    return self._whole_body_target(headers, start, whole) if first else None
            except Exception as exc:
                problems.append(exc)
                return None
            return _drained(headers)

        for _ in range(_MAX_REDIRECTS + 1):
            url = self._data_url
            headers = self._headers(start, end, first=first)
            try:
                answer = await direct.get_into(url, headers, accept, meter)
            except RawProtocolError as exc:
                raise BadResponseError(
                    f"{self._shown}: the server's answer is not valid HTTP/1.1: {exc}"
                ) from None
            except RawTimeoutError as exc:
                if exc.received and not whole:
                    raise _Truncated(
                        exc.received, f"body stalled after {exc.received} bytes", timed_out=True
                    ) from None
                raise _Retry(f"request timed out ({exc})", timed_out=True) from None
            except RawConnectionError as exc:
                if exc.received and not whole:
                    raise _Truncated(exc.received, f"body cut: {exc}") from None
                raise _Retry(f"network error: {exc}") from None
            except ValueError as exc:  # a header or URL that cannot be sent
                raise BadResponseError(f"{self._shown}: HTTP request failed: {exc}") from None
            if problems:
                raise problems[0]
            status, headers_in = answer.status, answer.headers
            limiter_for(url).observe(status, headers_in)
            if first:
                self.first_responses.append(headers_in)
            if first and status in _REDIRECTS and "Location" in headers_in:
                self._data_url = self._redirect_target(url, headers_in["Location"])
                continue
            return self._direct_outcome(answer, start, end, buffer, whole, first=first)
        raise BadResponseError(
            f"{self._shown}: more than {_MAX_REDIRECTS} redirects (a redirect loop?); last URL "
            f"{redact_url(self._data_url)}"
        )

    def _direct_outcome(
        self,
        answer: RawResponse,
        start: int,
        end: int,
        buffer: memoryview,
        whole: list[bytearray],
        *,
        first: bool,
    ) -> int:
        """What a direct answer that is not a redirect to follow means: bytes, or an error."""
        status, headers = answer.status, answer.headers
        if status == 206 and answer.body_read:
            self._verified = True
            return answer.received
        if status == 206:
            raise BadResponseError(
                f"{self._shown}: the body announced for bytes {start}-{end - 1} "
                f"(Content-Length {headers.get('Content-Length')}, Transfer-Encoding "
                f"{headers.get('Transfer-Encoding')}) is longer than or differs from the "
                f"{min(end, self._size or end) - start} bytes that Content-Range announced"
            )
        if status == 200 and first and start == 0 and headers.get("Content-Length") == "0":
            return self._empty_200(headers)
        if status == 200 and whole and answer.body_read:
            return self._use_whole_body(bytes(whole[0]), headers, start, end, buffer)
        if status == 200:
            raise self._range_ignored(headers.get("Content-Length"), start, end)
        if status == 416 and first:
            return self._empty_file(headers)
        if 300 <= status < 400 and not first:
            self._verified = False  # the URL moved: let httpx follow it
            raise _Retry(f"HTTP {status} redirect from a resolved URL", 0.0)
        raise self._status_failure(status, headers, self._data_url)

    def _redirect_target(self, url: str, location: str) -> str:
        """Where a redirect from ``url`` leads (a relative ``Location`` joined as httpx does).

        Raises:
            BadResponseError: the location is not a URL, or not an http(s) one.
        """
        try:
            target = httpx.URL(url).join(location)
        except httpx.InvalidURL as exc:
            raise BadResponseError(
                f"{self._shown}: redirected to an invalid URL ({exc}) from {redact_url(url)}"
            ) from None
        if target.scheme not in ("http", "https") or not target.host:
            raise BadResponseError(
                f"{self._shown}: redirected to a URL that cannot be fetched over HTTP(S) "
                f"({redact_url(str(target))})"
            )
        return str(target)

    def _status_failure(self, status: int, headers: ResponseHeaders, url: str) -> Exception:
        redirected = self._data_url != self._url
        if status in _RETRY_STATUSES:
            return _Retry(f"HTTP {status}", _retry_after(status, headers, url, self._options))
        if status == 412:
            return RemoteFileChangedError(
                f"{self._shown}: the file changed since it was opened (HTTP 412 for "
                f"{self._condition()}); open it again to read the new version"
            )
        if redirected and status in (401, 403, 404, 410):
            return _Reresolve(status, url)
        return self._status_error(status, url, headers)

    def _status_error(
        self, status: int, url: str, headers: ResponseHeaders | None = None
    ) -> Exception:
        code = headers.get("X-Error-Code") if headers is not None else None
        detail = f" ({code})" if code else ""
        if status in (404, 410):
            return NotFoundError(
                f"{self._shown}: not found (HTTP {status}{detail} from {redact_url(url)})"
            )
        if status in (401, 403):
            return PermissionDeniedError(
                f"{self._shown}: access denied (HTTP {status}{detail} from {redact_url(url)}); a "
                "private or gated file needs a token, e.g. an Authorization header or HF_TOKEN"
            )
        return BadResponseError(f"{self._shown}: unexpected HTTP {status}{detail} from {url}")

    def _empty_file(self, headers: ResponseHeaders) -> int:
        match = _UNSATISFIED_RANGE.match(headers.get("Content-Range", ""))
        if match is None or int(match.group(1)) != 0:
            raise BadResponseError(
                f"{self._shown}: HTTP 416 for bytes from 0 without 'Content-Range: bytes */0' "
                f"(saw {headers.get('Content-Range')!r})"
            )
        self._size = 0
        self._remember_validators(headers)
        return 0

    def _empty_200(self, headers: ResponseHeaders) -> int:
        """An empty file: some servers (nginx) answer 200 with no body instead of 416."""
        self._size = 0
        self._etag = headers.get("ETag")
        return 0

    def _check_identity(self, headers: ResponseHeaders) -> None:
        encoding = headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise BadResponseError(
                f"{self._shown}: the server sent a {encoding}-encoded body although "
                "'Accept-Encoding: identity' was asked; its byte offsets cannot be trusted"
            )

    def _validator(self) -> str | None:
        """What identifies the version opened: the ETag, else ``Last-Modified``."""
        return self._etag if self._etag is not None else self._last_modified

    def _remember_validators(self, headers: ResponseHeaders) -> None:
        etag = headers.get("ETag")
        self._etag = etag.strip() if etag else None
        modified = headers.get("Last-Modified")
        self._last_modified = modified.strip() if modified else None

    def _condition(self) -> str:
        if self._etag is not None and not self._etag.startswith("W/"):
            return f"If-Match {self._etag}"
        return f"If-Unmodified-Since {self._last_modified}"

    def _check_version(self, headers: ResponseHeaders, total: int) -> None:
        """A later answer must be tied to the version opened: same size and validators.

        An answer that lacks a validator the first answer had cannot be tied to that version
        (a CDN may have stripped it while the file changed), so it is refused, never used.
        """
        if self._size is not None and total != self._size:
            raise RemoteFileChangedError(
                f"{self._shown}: the file changed since it was opened (size {self._size} bytes, "
                f"now {total}); open it again to read the new version"
            )
        for name, opened in (("ETag", self._etag), ("Last-Modified", self._last_modified)):
            if opened is None:
                continue
            now = headers.get(name)
            now = now.strip() if now is not None else None
            if now is None:
                raise RemoteFileChangedError(
                    f"{self._shown}: the file was opened with {name} {opened}, but a later "
                    f"answer carries no {name}, so its bytes cannot be tied to that version; "
                    "open the file again (a proxy or CDN that strips validators cannot be "
                    "read safely)"
                )
            if name == "ETag" and now.startswith("W/") != opened.startswith("W/"):
                raise RemoteFileChangedError(
                    f"{self._shown}: the file was opened with ETag {opened}, but a later answer "
                    f"carries ETag {now}; a weak and a strong ETag do not identify the same "
                    "bytes; open the file again"
                )
            if now != opened:
                raise RemoteFileChangedError(
                    f"{self._shown}: the file changed since it was opened ({name} {opened}, "
                    f"now {now}); open it again to read the new version"
                )

    def _check_partial(self, headers: ResponseHeaders, start: int, end: int, *, first: bool) -> int:
        """Check a 206's headers against the request; returns the body length to expect."""
        self._check_identity(headers)
        header = headers.get("Content-Range", "")
        match = _CONTENT_RANGE.match(header)
        if match is None or match.group(3) == "*":
            raise BadResponseError(
                f"{self._shown}: asked for bytes {start}-{end - 1}, got HTTP 206 with "
                f"Content-Range {header!r}, which does not give the file size"
            )
        first_byte, last_byte, total = int(match.group(1)), int(match.group(2)), int(match.group(3))
        if not first:
            self._check_version(headers, total)
        expected_last = min(end, total) - 1 if first else end - 1
        if first_byte != start or last_byte != expected_last:
            raise BadResponseError(
                f"{self._shown}: asked for bytes {start}-{end - 1}, got Content-Range {header!r} "
                f"(expected bytes {start}-{expected_last}/{total})"
            )
        if first:
            self._size = total
            self._remember_validators(headers)
        return last_byte - first_byte + 1

    async def _read_partial(
        self,
        response: httpx.Response,
        start: int,
        end: int,
        buffer: memoryview,
        *,
        first: bool,
        meter: Meter,
    ) -> int:
        length = self._check_partial(response.headers, start, end, first=first)
        return await self._read_body(response, buffer[:length], start, meter)

    async def _read_body(
        self, response: httpx.Response, target: memoryview, start: int, meter: Meter | None = None
    ) -> int:
        """Stream exactly ``len(target)`` body bytes into ``target``."""
        length = len(target)
        received = 0
        listener = bytes_listener()
        try:
            async for chunk in response.aiter_raw():
                size = len(chunk)
                if received + size > length:
                    raise BadResponseError(
                        f"{self._shown}: the body for bytes {start}-{start + length - 1} is longer "
                        f"than the {length} bytes that Content-Range announced"
                    )
                target[received : received + size] = chunk
                received += size
                if meter is not None:
                    meter.bytes += size
                activity()
                if listener is not None:
                    listener(size)
        except (httpx.TransportError, httpx.TimeoutException) as exc:
            stalled = isinstance(exc, httpx.TimeoutException)
            raise _Truncated(
                received,
                f"body {'stalled' if stalled else 'cut'} after {received} of {length} bytes "
                f"({type(exc).__name__})",
                timed_out=stalled,
            ) from None
        if received != length:
            raise _Truncated(received, f"body cut after {received} of {length} bytes")
        return received

    async def _read_whole(
        self, response: httpx.Response, start: int, end: int, buffer: memoryview, *, first: bool
    ) -> int:
        """A 200 to a ranged GET: the server ignored Range. Never read a large body."""
        self._check_identity(response.headers)
        declared = response.headers.get("Content-Length")
        if first and start == 0 and declared == "0":
            return self._empty_200(response.headers)
        if not (first and self._whole_body_accepted(declared)):
            # Leaving the stream unread closes the connection: nothing more is downloaded.
            raise self._range_ignored(declared, start, end)
        assert declared is not None
        body = bytearray(int(declared))
        try:
            await self._read_body(response, memoryview(body), 0)
        except _Truncated as cut:
            # Its bytes went to the whole body, not to the caller's buffer: start over.
            raise _Retry(cut.reason, timed_out=cut.timed_out) from None
        return self._use_whole_body(bytes(body), response.headers, start, end, buffer)

    def _whole_body_accepted(self, declared: str | None) -> bool:
        limit = self._options.accept_whole_body_below_bytes
        return declared is not None and declared.isdigit() and int(declared) < limit

    def _whole_body_target(
        self, headers: ResponseHeaders, start: int, whole: list[bytearray]
    ) -> memoryview | None:
        """Where the body of a first 200 goes: nowhere (None) unless it is accepted whole."""
        self._check_identity(headers)
        declared = headers.get("Content-Length")
        if start == 0 and declared == "0":
            return memoryview(bytearray())  # an empty file
        if not self._whole_body_accepted(declared):
            return None
        assert declared is not None
        whole.append(bytearray(int(declared)))
        return memoryview(whole[-1])

    def _use_whole_body(
        self, body: bytes, headers: ResponseHeaders, start: int, end: int, buffer: memoryview
    ) -> int:
        """Keep a whole file's body (accepted below the limit) and serve ``[start, end)``."""
        self._size = len(body)
        self._remember_validators(headers)
        self._whole_body = body
        count = min(end, len(body)) - start
        buffer[:count] = body[start : start + count]
        return count

    def _range_ignored(self, declared: str | None, start: int, end: int) -> Exception:
        return RangeNotSupportedError(
            f"{self._shown}: the server ignored the Range header (HTTP 200 with the whole file"
            f"{', ' + declared + ' bytes' if declared else ''}) when asked for bytes "
            f"{start}-{end - 1}; it cannot serve partial reads. Use a server or URL that "
            "supports byte ranges, or for small files opt in to whole bodies (HttpOptions("
            "accept_whole_body_below_bytes=...), on the command line --accept-whole-body-below)"
        )


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


class _Truncated(Exception):
    """A body ended early; ``received`` bytes were written before the cut (or the stall)."""

    def __init__(self, received: int, reason: str, *, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.received = received
        self.reason = reason
        self.timed_out = timed_out


def _retry_after(
    status: int, headers: ResponseHeaders, url: str, options: HttpOptions
) -> float | None:
    """Seconds that ``Retry-After`` asks for, or None; raises when the wait is too long."""
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


def _drained(headers: ResponseHeaders) -> memoryview | None:
    """Scratch for a small body nobody needs, so that its connection can be used again."""
    length = headers.get("Content-Length", "")
    if length.isdigit() and int(length) <= _DRAIN_BYTES:
        return memoryview(bytearray(int(length)))
    return None


def _split_userinfo(url: str) -> tuple[str, str | None]:
    """``url`` without ``user:password@``, and that userinfo as a Basic ``Authorization`` value.

    The credentials go to the URL's own origin only (see ``HttpSource._headers``), never to a
    redirect target, and never appear in messages.
    """
    parts = urlsplit(url)
    user, at, host = parts.netloc.rpartition("@")
    if not at:
        return url, None
    name, _, password = user.partition(":")
    token = base64.b64encode(f"{unquote(name)}:{unquote(password)}".encode()).decode("ascii")
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment)), (
        f"Basic {token}"
    )


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
