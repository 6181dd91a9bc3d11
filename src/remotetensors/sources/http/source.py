"""HTTP(S) files read with single-range GETs, trusting only what can be checked.

What this source guarantees (see ``reference/remote-io.md`` for why each rule exists):

- every request sends ``Range`` and ``Accept-Encoding: identity``; only a 206 whose
  ``Content-Range`` matches the request and whose body has exactly the asked length is used;
- a 200 to a ranged request is abandoned at once (the connection is closed, the body not read)
  and raises :class:`RangeNotSupportedError`, unless the caller opted in to small whole bodies;
- redirects are followed by this module, hop by hop, whichever transport carries the request
  (:func:`.answer.follow`: at most :data:`.policy.MAX_REDIRECTS` hops, a relative ``Location``
  resolved as httpx does; a loop, a downgrade from ``https`` to ``http`` or another scheme is a
  :class:`RedirectError`); a hop to another origin than the URL named carries none of the
  caller's headers but the harmless ones (:func:`.policy.headers_for`: ``Range``, the
  validators, ``Accept*``, ``User-Agent``), so credentials (``Authorization``, the hub's token,
  an ``X-Api-Key``, a ``Cookie``) stay with the origin they were given for, and
  ``Proxy-Authorization`` is never sent to an origin. Later requests go straight to the final
  URL (a redirect met there is followed by the same rules), and if that URL stops working
  (401/403/404/410, as an expired signed URL does) the original URL is resolved once more;
- the first response's validators are kept: a strong ETag is sent as ``If-Match`` on later
  requests (else ``Last-Modified`` as ``If-Unmodified-Since``), and every later answer must carry
  the same total size, ETag and ``Last-Modified`` as the first; a changed or missing validator
  raises :class:`RemoteFileChangedError`, never mixes versions;
- a TLS handshake that fails for good (an untrusted, expired or misnamed certificate, a
  fatal alert, plain HTTP on the TLS port) raises :class:`TlsError` at once, saying how to
  trust a CA (:mod:`.tls`), never retried;
- connect and read errors, truncated bodies, 408, 429 and 5xx are retried with exponential
  backoff and full jitter, honouring a well-formed ``Retry-After`` (:mod:`.policy`, the policy of
  every request, the hub's API too); a truncated body resumes from its first missing byte, and a
  resume without real progress counts as a failed attempt;
- every attempt runs under a throughput floor and every range read under an optional deadline
  (:class:`RequestTimeoutError` says which bound tripped);
- the URL's userinfo is sent as Basic auth to its own origin only, and every message names the
  URL with its secrets masked (:func:`~remotetensors.redact.redact_url`);
- whatever httpx or the direct reader raises (a redirect loop, a malformed head) becomes one of
  our errors.

Requests go through the direct reader (:mod:`.via_direct`, a sixth of httpx's CPU per request)
whenever :attr:`HttpOptions.direct_reads` allows it, else through httpx (:mod:`.via_httpx`);
either way one request path sends them, :func:`.answer.decide` judges every answer, and
:class:`.pin.VersionPin` holds the version opened. This module holds the attempts: retries,
resumes, the throughput floor and the deadline.
"""

from __future__ import annotations

import asyncio
import base64
import time
from urllib.parse import unquote, urlsplit, urlunsplit

from ...errors import BadResponseError, RequestTimeoutError, TransportError
from ...ranges import ByteRange
from ...redact import redact_url
from ...status import Retrying, retrying
from ..base import ByteSource, Prefix, Suffix
from ..cache.offline import offline, offline_error
from ..ratelimit import RouteLimiter, limiter_for
from ..recipe import SourceRecipe
from . import client as client_module
from .answer import (
    Asked,
    Decision,
    Empty,
    Failed,
    Follow,
    Partial,
    Refused,
    Reresolve,
    Retry,
    Terms,
    Unchanged,
    Whole,
    decide,
    range_ignored,
    status_error,
)
from .client import Client, HttpClient, HttpOptions, turn_of
from .direct import RawRangeClient
from .head import ResponseHeaders
from .pin import VersionPin
from .policy import agent_header, backoff_seconds, carried, gave_up, origin, user_agent
from .selfcancel import Watch, withdraw_own_cancel
from .tls import tls_error
from .transport import (
    DISCARD,
    BadAnswer,
    BodyTooLong,
    Discard,
    Head,
    Interrupted,
    Meter,
    TlsFailed,
    Transport,
)
from .via_direct import DirectTransport
from .via_httpx import HttpxTransport

__all__ = ["HttpSource"]


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


class _Truncated(Exception):
    """A body ended early; ``received`` bytes were written before the cut (or the stall)."""

    def __init__(self, received: int, reason: str, *, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.received = received
        self.reason = reason
        self.timed_out = timed_out


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
        self._origin = origin(self._url)  # where the caller's credentials may go
        self._shown = redact_url(url)
        self._options = options or HttpOptions()
        self._terms = Terms(self._url, self._shown, self._options)
        self._client = client
        self._owns_client = client is None
        self._data_url = self._url
        self._pin = VersionPin()
        self._whole_body: bytes | None = None
        self._unless: dict[str, str] = {}  # the first request's conditions (open_prefix_unless)
        self._unchanged = False  # the first request was answered 304
        self._verified = False  # _data_url answered a ranged GET (a caller's client: go direct)
        self._raw: RawRangeClient | None = None
        self._proxied: bool | None = None  # a proxy in the environment (a caller's client)
        self._distrusted = False  # the direct reader failed TLS where a caller's client did not
        self._via_direct: DirectTransport | None = None
        self._limiter: tuple[str, RouteLimiter] | None = None  # the data URL's, see _limiter_of
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

    @property
    def given_url(self) -> str:
        """The URL as given, secrets and all (what a persistent cache keys the file by: it
        keeps only a hash of it)."""
        return self._given_url

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
            return client.direct if client.goes_direct else None
        if first or not self._verified or self._distrusted:
            return None  # a caller's own client sees every first request: its auth, its hooks
        if self._proxied is None:  # read once, as for a client remotetensors makes
            self._proxied = client_module.proxy_in_environment()
        if not self._options.direct_reads or self._proxied:
            return None
        if self._raw is None:
            self._raw = RawRangeClient(
                connect_timeout_seconds=self._options.connect_timeout_seconds,
                read_timeout_seconds=self._options.read_timeout_seconds,
                max_idle_per_host=self._options.max_connections,
                ca_bundle=self._options.ca_bundle,
            )
        return self._raw

    def _limiter_of(self, url: str) -> RouteLimiter:
        """The process-wide limiter of ``url``'s host and route (see :mod:`..ratelimit`); the
        last one asked for is kept, since finding it parses the URL and every request asks
        twice."""
        kept = self._limiter
        if kept is None or kept[0] != url:
            kept = self._limiter = (url, limiter_for(url))
        return kept[1]

    def _transport(self, *, first: bool) -> Transport:
        """The direct reader where :meth:`_direct` allows it, else httpx."""
        direct = self._direct(first=first)
        if direct is None:
            return HttpxTransport(self._http())
        via = self._via_direct  # kept: most requests of a file go this way
        if via is None or via.reader is not direct:
            via = self._via_direct = DirectTransport(direct)
        return via

    # --- the ByteSource contract --------------------------------------------------------------

    def receives_in_threads(self) -> bool:
        """True when the direct reader serves the data and receives its large bodies in worker
        threads (see :meth:`RawRangeClient.receives_in_threads`)."""
        direct = None if self._whole_body is not None else self._direct(first=False)
        return direct is not None and direct.receives_in_threads(self._data_url)

    def recipe(self) -> SourceRecipe:
        return self._recipe_for(self._given_url)

    def _recipe_for(self, url: str) -> SourceRecipe:
        size = self._pin.size
        if size is None:
            raise RuntimeError("open_prefix must be called before recipe")
        return SourceRecipe("http", url, self.location, size, self._pin.validator, self._options)

    async def open_prefix(self, length: int) -> Prefix:
        if length <= 0:
            raise ValueError(f"the prefix length must be positive, got {length}")
        buffer = bytearray(length)
        received = await self._fetch(0, length, memoryview(buffer), first=True)
        assert self._pin.size is not None
        # A copy, not a resize: a retried attempt's traceback may still hold a view of buffer.
        return Prefix(bytes(buffer[:received]), self._pin.size, self._pin.validator)

    async def open_suffix(self, length: int) -> Suffix:
        """The file's last ``length`` bytes and its size in one request
        (``Range: bytes=-length``), judged as strictly as a prefix (see :func:`.answer.decide`).
        """
        if length <= 0:
            raise ValueError(f"the suffix length must be positive, got {length}")
        buffer = bytearray(length)
        received = await self._fetch(0, length, memoryview(buffer), first=True, suffix=True)
        assert self._pin.size is not None
        return Suffix(bytes(buffer[:received]), self._pin.size, self._pin.validator)

    async def open_prefix_unless(
        self, length: int, *, size: int, etag: str | None, last_modified: str | None
    ) -> Prefix | None:
        """:meth:`open_prefix`, unless the file is still exactly the version of ``size`` bytes
        with these validators: None then (the version is taken as opened, see
        :meth:`assume_version`), else the new version's prefix. One request either way (two
        when a 304 names another ETag than the one asked for, see below).

        With a strong ETag the request carries ``If-None-Match``; a 304 confirms the version
        (if it names an ETag, it must be that one: the comparison is weak, and ``W/"x"``
        does not promise the bytes of ``"x"``). A version known by its ``Last-Modified``
        alone is asked for plainly, never with ``If-Modified-Since``: a server answers that
        304 for any file not newer than the date, so an older version put back (a rollback)
        or one written within the same second would pass for the kept one. The answer is
        the version kept only when its size and validators are exactly the kept ones.

        Raises:
            ValueError: neither validator names the version.
            and what :meth:`open_prefix` raises.
        """
        strong = etag is not None and not etag.startswith("W/")
        if last_modified is None and not strong:
            raise ValueError(f"{self._shown}: no strong validator to revalidate with")
        self._unless = {"If-None-Match": etag} if strong and etag is not None else {}
        self._unchanged = False
        try:
            buffer = bytearray(length)
            received = await self._fetch(0, length, memoryview(buffer), first=True)
        finally:
            self._unless = {}
        if self._unchanged:
            answered = self.first_response_headers
            named = answered.get("ETag") if answered is not None else None
            if named is not None and named.strip() != etag:
                return await self.open_prefix(length)  # not that version: read it anew
        else:
            # A full answer (no 304: a version known by its date alone, or a server that does
            # not answer conditionals) is the version there now, read: its prefix serves,
            # whether or not it is the one kept (its tensor bytes are not read twice).
            assert self._pin.size is not None
            return Prefix(bytes(buffer[:received]), self._pin.size, self._pin.validator)
        self.assume_version(size, etag, last_modified)
        return None

    def version_validators(self) -> tuple[str | None, str | None]:
        """The ``ETag`` and ``Last-Modified`` of the version opened (None until opened, and
        for each the answer did not carry)."""
        return self._pin.etag, self._pin.last_modified

    def assume_version(self, size: int, etag: str | None, last_modified: str | None) -> None:
        """Take the version of ``size`` bytes with these validators as opened, without a
        request (a persistent cache holds its header): later reads are tied to it as to the
        version a first answer shows (conditions sent, every answer checked)."""
        self._pin.restore(size, etag, last_modified)

    async def read_into(self, start: int, buffer: memoryview) -> None:
        end = start + len(buffer)
        size = self._pin.size
        if size is None:
            raise RuntimeError("open_prefix must be called before read_into")
        if start < 0 or end > size:
            raise ValueError(
                f"{self._shown}: bytes [{start}, {end}) lie outside the file of {size} bytes"
            )
        if not len(buffer):
            return
        if self._whole_body is not None:
            buffer[:] = self._whole_body[start:end]
            return
        await self._fetch(start, end, buffer, first=False)

    # --- attempts, retries and resumes ----------------------------------------------------------

    async def _fetch(
        self, start: int, end: int, buffer: memoryview, *, first: bool, suffix: bool = False
    ) -> int:
        """Fill ``buffer`` with bytes [start, end), resuming and retrying; returns bytes written.

        On the first request ``end`` may exceed the file: the answer then stops at its end.
        A ``suffix`` request (a first one) fills it with the file's last ``end`` bytes instead
        (``start`` is 0). Every attempt runs under the throughput floor, and all of them under
        the deadline.

        Raises:
            OfflineError: offline mode is on (no request is sent).
        """
        if offline():
            raise offline_error(self._shown)
        options = self._options
        deadline = (
            None
            if options.request_deadline_seconds is None
            else time.monotonic() + options.request_deadline_seconds
        )
        received = 0
        attempt = 0
        reresolved = False  # each read resolves an expired redirect again once
        while True:
            # The host's rate limit is waited for outside the attempt, so that waiting is not
            # taken for a server that is too slow (see _guarded's throughput floor).
            await self._limiter_of(self._data_url).acquire()
            try:
                got = await self._guarded(
                    start + received,
                    end,
                    buffer[received:],
                    first=first,
                    suffix=suffix,
                    deadline=deadline,
                )
                return received + got
            except _Truncated as cut:
                received += cut.received
                if suffix and self._pin.size is not None:
                    # The answer said where the suffix starts: resume as a plain range.
                    start, end = max(0, self._pin.size - end), self._pin.size
                    suffix = False
                first = False
                missing = min(end, self._pin.size or end) - start - received
                end = min(end, self._pin.size or end)
                if missing <= 0:
                    # Every byte asked came before the answer broke off: a chunked body cut
                    # before its last chunk, a body until close whose server kept the
                    # connection open. Nothing is left to resume.
                    return received
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
                if reresolved:
                    raise self._refused_after_reresolve(expired) from None
                # A signed URL lives an hour on the hub's CDN, a model stays open for days:
                # every read that outlives one resolves the URL named again, and the refusal
                # of a URL just resolved (a CDN's "403 invalid range") gets one more try.
                reresolved = True
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
        self,
        start: int,
        end: int,
        buffer: memoryview,
        *,
        first: bool,
        deadline: float | None,
        suffix: bool = False,
    ) -> int:
        """One attempt, cancelled when it falls below the throughput floor or the deadline.

        Raises:
            RequestTimeoutError: naming the bound that tripped; not retried, since a server
                that is this slow for a whole window is not expected to recover at once.
        """
        options = self._options
        meter = Meter()
        window = options.throughput_window_seconds

        def too_slow(received: int) -> RequestTimeoutError:
            return RequestTimeoutError(
                f"{self._shown}: {Asked(start, end, first, suffix=suffix).range_text()} "
                f"arrived at {received / window:.0f} bytes/s over the last {window:g} s, below "
                f"min_bytes_per_second={options.min_bytes_per_second:g}; the server is too "
                "slow or stalling",
                bound="min_bytes_per_second",
            )

        def past_deadline(received: int) -> RequestTimeoutError:
            return self._deadline_passed(f"{received} bytes received by then")

        # One timer per window watches the attempt: when a bound trips it records why and
        # cancels this task, which runs the attempt itself (see .selfcancel).
        watch = Watch(
            meter,
            window=window,
            floor=options.min_bytes_per_second * window,
            deadline=deadline,
            too_slow=too_slow,
            past_deadline=past_deadline,
        )
        try:
            return await self._one_request(
                start, end, buffer, first=first, meter=meter, suffix=suffix
            )
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if watch.tripped and task is not None and withdraw_own_cancel(task):
                raise watch.tripped[0] from None
            raise
        finally:
            watch.stop()

    def _refused_after_reresolve(self, expired: _Reresolve) -> Exception:
        """The error once the URL a redirect gave refused a read twice, the second time just
        after the URL named was resolved again.

        A server of another origin than the URL named (a CDN) never saw the caller's
        credentials (:func:`.policy.headers_for`), so its 401 or 403 is no missing token: a
        :class:`BadResponseError` says so. Anything else is worded as the URL named would
        word it (a hub's 404 for a file that is gone)."""
        if expired.status in (401, 403) and self._foreign(expired.url):
            return BadResponseError(
                f"{self.location}: the server it redirects to refused the read twice (HTTP "
                f"{expired.status} from {redact_url(expired.url)} for a URL just resolved "
                "again); that server is not sent the caller's credentials, so no token can "
                "help: its signed URL or its own checks failed (a CDN's 'invalid range'). "
                "Retry later"
            )
        return self._status_error(expired.status, expired.url)

    def _deadline_passed(self, detail: str) -> RequestTimeoutError:
        return RequestTimeoutError(
            f"{self._shown}: the request did not finish within request_deadline_seconds="
            f"{self._options.request_deadline_seconds:g} ({detail})",
            bound="request_deadline_seconds",
        )

    def _wait_seconds(self, attempt: int, failure: _Retry) -> float:
        if failure.wait_seconds is not None:
            return failure.wait_seconds
        return backoff_seconds(self._options, attempt)

    def _give_up(self, failure: _Retry, attempts: int) -> TransportError:
        via = f" (via {redact_url(self._data_url)})" if self._data_url != self._url else ""
        return gave_up(f"{self._shown}{via}", failure.reason, attempts, timed_out=failure.timed_out)

    def _foreign(self, url: str) -> bool:
        """Whether ``url`` (where the URL named redirected to) is of another origin."""
        return url != self._url and origin(url) != self._origin

    def _headers(
        self, start: int, end: int, *, first: bool, foreign: bool, suffix: bool = False
    ) -> dict[str, str]:
        """The headers of a request to the URL named or where it redirected to, ``foreign``
        when that is another origin.

        The caller's headers, and the URL's userinfo as Basic auth unless an ``Authorization``
        is given, are for the origin of the URL named: another origin (a CDN) gets only the
        harmless ones (:func:`.policy.headers_for`'s rule, :func:`.policy.carried`)."""
        given = self._options.headers
        if self._basic_auth and not any(name.lower() == "authorization" for name in given):
            given = {**given, "Authorization": self._basic_auth}
        headers = {
            name: value
            for name, value in carried(given.items(), foreign=foreign)
            if name.lower() not in _SET_HERE
        }
        headers["Range"] = f"bytes=-{end}" if suffix else ByteRange(start, end).header_value()
        # Never a caller's gzip: CloudFront answers a ranged request that accepts it with the
        # whole file (huggingface_hub#3778), and an encoded body's offsets are not the file's.
        headers["Accept-Encoding"] = "identity"
        headers.setdefault(agent_header(given), user_agent())
        if not first:
            self._pin.add_conditions(headers)
        else:
            headers.update(self._unless)
        return headers

    # --- one request ----------------------------------------------------------------------------

    async def _one_request(
        self,
        start: int,
        end: int,
        buffer: memoryview,
        *,
        first: bool,
        meter: Meter,
        suffix: bool = False,
    ) -> int:
        """One attempt, through the transport :meth:`_transport` picks, following redirects
        hop by hop (:func:`.answer.follow` judges each, :meth:`_headers` chooses its headers).

        Every answer is judged from its head (:func:`.answer.decide`), which says where its body
        goes: a 206 that matches the request into ``buffer``; a first 200 accepted whole into a
        buffer of its own; any other body is discarded (a transport may read a small one to
        keep its connection), and a head that cannot be used leaves its body unread.
        """
        transport = self._transport(first=first)
        asked = Asked(start, end, first, suffix=suffix)
        url = self._data_url
        answers: list[tuple[Head, Decision | Exception]] = []  # the answer to the current hop
        whole: list[bytearray] = []

        def accept(head: Head) -> memoryview | Discard | None:
            try:  # nothing may escape: the direct reader calls this from its protocol
                self._limiter_of(head.url).observe(head.status, head.headers)
                if first:
                    self.first_responses.append(head.headers)
                self._check_answer(head)
                decision = decide(head, asked, self._pin, self._terms)
            except Exception as exc:  # a head that cannot be used: its body stays unread
                answers.append((head, exc))
                return None
            answers.append((head, decision))
            if isinstance(decision, Partial):
                if first:
                    self._pin.adopt(decision.total, head.headers)
                return buffer[: decision.length]
            if isinstance(decision, Whole):
                whole.append(bytearray(decision.length))
                return memoryview(whole[-1])
            if isinstance(decision, Empty) and decision.body:
                return memoryview(bytearray())
            return DISCARD

        async with turn_of(self._http()):
            if first:
                self.first_responses = []
            while True:  # follow() refuses a redirect past MAX_REDIRECTS
                url = self._data_url
                foreign = self._foreign(url)
                answers.clear()
                try:
                    body_read = await transport.get(
                        url,
                        self._headers(start, end, first=first, foreign=foreign, suffix=suffix),
                        accept,
                        meter,
                        foreign=foreign,
                    )
                except Interrupted as exc:
                    # Only a 206's body went into the caller's buffer: a resume starts after
                    # its bytes. A whole body, or one read only to keep the connection (an
                    # error's, a redirect's), is asked for again.
                    if exc.received and answers and isinstance(answers[-1][1], Partial):
                        raise _Truncated(
                            exc.received, exc.cut_reason, timed_out=exc.timed_out
                        ) from None
                    raise _Retry(exc.reason, timed_out=exc.timed_out) from None
                except BodyTooLong as exc:
                    at = 0 if whole else start  # a whole body is the file from its start
                    raise BadResponseError(
                        f"{self._shown}: the body for bytes {at}-{at + exc.length - 1} is longer "
                        f"than the {exc.length} bytes that Content-Range announced"
                    ) from None
                except BadAnswer as exc:
                    raise BadResponseError(f"{self._shown}: {exc.detail}") from None
                except TlsFailed as exc:
                    raise self._tls_failed(exc, transport) from None
                head, decision = answers[-1]  # a transport shows every answer to accept
                if isinstance(decision, Exception):
                    raise decision
                if isinstance(decision, Follow):
                    asked = asked._replace(visited=(*asked.visited, url))
                    self._data_url = decision.url
                    continue
                return self._conclude(decision, head, body_read, asked, buffer, whole)

    def _conclude(
        self,
        decision: Decision,
        head: Head,
        body_read: bool,
        asked: Asked,
        buffer: memoryview,
        whole: list[bytearray],
    ) -> int:
        """What a decided answer that is no redirect to follow gives: bytes, or an error."""
        headers = head.headers
        start, end = asked.start, asked.end
        if isinstance(decision, Partial):
            if not body_read:
                raise BadResponseError(
                    f"{self._shown}: the body announced for {asked.range_text()} "
                    f"(Content-Length {headers.get('Content-Length')}, Transfer-Encoding "
                    f"{headers.get('Transfer-Encoding')}) is longer than or differs from the "
                    f"{decision.length} bytes that Content-Range announced"
                )
            self._verified = True
            return decision.length
        if isinstance(decision, Whole):
            if not body_read:
                raise range_ignored(headers.get("Content-Length"), start, end, self._shown)
            body = bytes(whole[0])
            if asked.suffix:  # the tail of the whole body
                start = max(0, len(body) - end)
                end = len(body)
            return self._use_whole_body(body, headers, start, end, buffer)
        if isinstance(decision, Empty):
            self._pin.adopt(0, headers)
            return 0
        if isinstance(decision, Unchanged):
            if not self._unless:
                raise BadResponseError(
                    f"{self._shown}: HTTP 304 Not Modified to a request that named no version "
                    f"(bytes {start}-{end - 1}, no If-None-Match)"
                )
            self._unchanged = True
            return 0
        if isinstance(decision, Retry):
            raise _Retry(decision.reason, decision.wait_seconds)
        if isinstance(decision, Reresolve):
            raise _Reresolve(decision.status, head.url)
        if isinstance(decision, Refused):
            raise self._status_error(decision.status, head.url, headers)
        assert isinstance(decision, Failed), decision
        raise decision.error

    def _tls_failed(self, failed: TlsFailed, transport: Transport) -> Exception:
        """What a TLS handshake that failed for good means: :class:`TlsError`, not retried.

        Save one case: the caller's own httpx client opened the file, and the direct reader,
        which verifies with our CAs rather than the client's ``verify``, failed a later
        request. The rest of the file is then read through the caller's client, once more
        now (a retry without a wait)."""
        if not isinstance(self._http(), HttpClient) and isinstance(transport, DirectTransport):
            self._distrusted = True
            return _Retry(
                f"TLS with {failed.origin} failed on the direct reader "
                f"({failed.failure.reason}); reading through the caller's httpx client",
                0.0,
            )
        return tls_error(self._shown, failed.origin, failed.failure)

    def _status_error(
        self, status: int, url: str, headers: ResponseHeaders | None = None
    ) -> Exception:
        """The error for an answer ``status`` (a source may word its own, see HubSource)."""
        return status_error(status, url, headers, self._shown)

    def _check_answer(self, head: Head) -> None:
        """Called with every answer's head (a redirect's too) before
        :func:`.answer.decide` judges it; raising refuses the answer, its body unread. Nothing
        here: a source that learns more from answers checks it (see HubSource's commit)."""

    def _rename(self, url: str) -> None:
        """From now on, ask for the file at ``url`` instead of the URL named so far (the same
        file at the same version under a steadier name: a hub file at the commit its branch
        pointed to). A data URL that a redirect gave is kept; a URL that was the old name's
        follows it, and so does a re-resolution after an expired redirect."""
        self._given_url = url
        named, self._basic_auth = _split_userinfo(url)
        if self._data_url == self._url:
            self._data_url = named
        self._url = named
        self._origin = origin(named)
        self._terms = Terms(named, self._shown, self._options)

    def _use_whole_body(
        self, body: bytes, headers: ResponseHeaders, start: int, end: int, buffer: memoryview
    ) -> int:
        """Keep a whole file's body (accepted below the limit) and serve ``[start, end)``."""
        self._pin.adopt(len(body), headers)
        self._whole_body = body
        count = min(end, len(body)) - start
        buffer[:count] = body[start : start + count]
        return count


_SET_HERE = frozenset({"range", "accept-encoding"})
"""Request headers (lower-cased) every read sets itself, whatever the caller's headers say."""


def _split_userinfo(url: str) -> tuple[str, str | None]:
    """``url`` without ``user:password@``, and that userinfo as a Basic ``Authorization`` value.

    The credentials go to the URL's own origin only (see ``HttpSource._headers``), never to a
    redirect target, and never appear in messages.
    """
    if "@" not in url:
        return url, None  # most URLs: no parsing
    parts = urlsplit(url)
    user, at, host = parts.netloc.rpartition("@")
    if not at:
        return url, None
    name, _, password = user.partition(":")
    token = base64.b64encode(f"{unquote(name)}:{unquote(password)}".encode()).decode("ascii")
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment)), (
        f"Basic {token}"
    )
