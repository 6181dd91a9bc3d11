"""One rate limiter per host, shared by every request of the process.

Every HTTP request of every model, scan and sync call asks the limiter of its host for a slot
before it is sent (:meth:`HostLimiter.acquire`) and reports the answer's status and headers
afterwards (:meth:`HostLimiter.observe`). The limiter learns from:

- ``429`` (and ``503``) with ``Retry-After``: nothing more goes to the host until then;
- the IETF ``RateLimit`` header (``"name";r=<remaining>;t=<seconds to reset>``, also the older
  ``RateLimit-Remaining`` / ``RateLimit-Reset`` pair) with ``RateLimit-Policy``
  (``"name";q=<quota>;w=<window seconds>``): when few requests remain, the rest of the window is
  spread over them (one every ``t / r`` seconds), so the limit is not hit at all; with none left
  nothing is sent until the reset.

The state is a few floats of ``time.monotonic()`` guarded by a thread lock (never held across an
``await``), so one limiter serves any number of event loops and threads. Time spent waiting is
added to the tallies of :func:`tally_waits` (a context variable, inherited by tasks), which is
how a scan reports its waiting per location and in total.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

log = logging.getLogger(__name__)

SLOW_DOWN_BELOW_FRACTION = 0.1
"""Pace requests once fewer than this fraction of the policy's quota remain, or fewer than
:data:`SLOW_DOWN_BELOW_REQUESTS` (whichever is larger)."""

SLOW_DOWN_BELOW_REQUESTS = 16

MAX_WAIT_SECONDS = 300.0
"""Longest single wait the limiter imposes (the hub's windows are 5 minutes)."""

_ITEM = re.compile(r'(?:"([^"]*)"|([A-Za-z0-9_.-]+))\s*((?:;\s*[A-Za-z_]+\s*=\s*[^;,]+)*)')
_PARAM = re.compile(r";\s*([A-Za-z_]+)\s*=\s*([^;,]+)")


@dataclass
class WaitTally:
    """Seconds spent waiting for limiters, and how many waits (mutable, one per scope)."""

    seconds: float = 0.0
    waits: int = 0


_tallies: ContextVar[tuple[WaitTally, ...]] = ContextVar("remotetensors_wait_tallies", default=())


@contextlib.contextmanager
def tally_waits(tally: WaitTally) -> Iterator[WaitTally]:
    """Add every limiter wait in this context (and tasks created in it) to ``tally``."""
    token = _tallies.set((*_tallies.get(), tally))
    try:
        yield tally
    finally:
        _tallies.reset(token)


def parse_structured(value: str) -> dict[str, float]:
    """The numeric parameters of the first item of a ``RateLimit``-style header.

    ``'"default";r=50;t=30'`` -> ``{"r": 50.0, "t": 30.0}``; also accepts ``"50"`` alone
    (returned as ``{"": 50.0}``). Unparseable values give ``{}``.
    """
    value = value.strip()
    try:
        return {"": float(value)}
    except ValueError:
        pass
    match = _ITEM.match(value)
    if match is None:
        return {}
    params: dict[str, float] = {}
    for key, raw in _PARAM.findall(match.group(3) or ""):
        with contextlib.suppress(ValueError):
            params[key.lower()] = float(raw.strip().strip('"'))
    return params


_DELAY_SECONDS = re.compile(r"[0-9]+")


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds of a ``Retry-After`` value (delta seconds or an HTTP date), or None when it is
    absent or malformed (RFC 9110 lets a recipient ignore it; the caller's backoff applies).

    Only ASCII digits count as delta seconds: ``str.isdigit()`` also takes "²", and ``float``
    takes "1e3" and "inf", none of which RFC 9110 allows."""
    if value is None:
        return None
    value = value.strip()
    if _DELAY_SECONDS.fullmatch(value):
        return float(value)
    import email.utils

    try:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError, IndexError):
        return None


class HostLimiter:
    """The limiter of one host (scheme and authority). Get it with :func:`limiter_for`."""

    def __init__(self, host: str) -> None:
        self.host = host
        self._lock = threading.Lock()
        self._blocked_until = 0.0  # monotonic seconds: nothing is sent before this
        self._interval_seconds = 0.0  # pacing between requests while few remain
        self._next_slot = 0.0
        self._quota: float | None = None
        self._window_seconds: float | None = None
        self.waited_seconds = 0.0
        """Total seconds requests to this host waited (all scopes)."""
        self.throttled = 0
        """429 answers seen from this host."""

    async def acquire(self) -> None:
        """Wait until a request may be sent (returns at once when nothing is known)."""
        with self._lock:
            now = time.monotonic()
            start = max(now, self._blocked_until, self._next_slot)
            if self._interval_seconds:
                self._next_slot = start + self._interval_seconds
            wait = min(start - now, MAX_WAIT_SECONDS)
        if wait <= 0:
            return
        log.debug("%s: waiting %.3f s for the rate limit", self.host, wait)
        await asyncio.sleep(wait)
        with self._lock:
            self.waited_seconds += wait
        for tally in _tallies.get():
            tally.seconds += wait
            tally.waits += 1

    def observe(self, status: int, headers: Mapping[str, str]) -> None:
        """Learn from an answer: ``Retry-After`` on 429/503, and ``RateLimit`` headers."""
        now = time.monotonic()
        policy = headers.get("RateLimit-Policy")
        with self._lock:
            if policy:
                params = parse_structured(policy)
                if params.get("q"):
                    self._quota = params["q"]
                    self._window_seconds = params.get("w") or self._window_seconds
            if status in (429, 503):
                if status == 429:
                    self.throttled += 1
                delay = retry_after_seconds(headers.get("Retry-After"))
                if delay is None and status == 429:
                    delay = 1.0
                if delay is not None:
                    self._blocked_until = max(
                        self._blocked_until, now + min(delay, MAX_WAIT_SECONDS)
                    )
                    self._interval_seconds = max(self._interval_seconds, self._policy_pace())
            remaining, reset = self._remaining_and_reset(headers)
            if remaining is None or reset is None:
                return
            threshold = max(
                (self._quota or 0) * SLOW_DOWN_BELOW_FRACTION, float(SLOW_DOWN_BELOW_REQUESTS)
            )
            if remaining <= 0:
                # Wait for the reset, then go at the policy's average pace: requests queued
                # meanwhile would otherwise all leave at the reset and exhaust it again.
                self._blocked_until = max(self._blocked_until, now + min(reset, MAX_WAIT_SECONDS))
                self._interval_seconds = self._policy_pace()
            elif remaining < threshold:
                self._interval_seconds = min(reset / remaining, MAX_WAIT_SECONDS)
            else:
                self._interval_seconds = 0.0

    def _policy_pace(self) -> float:
        """Seconds per request of the announced policy (window / quota), 0 when unknown."""
        if self._quota and self._window_seconds:
            return min(self._window_seconds / self._quota, MAX_WAIT_SECONDS)
        return 0.0

    @staticmethod
    def _remaining_and_reset(headers: Mapping[str, str]) -> tuple[float | None, float | None]:
        combined = headers.get("RateLimit")
        if combined:
            params = parse_structured(combined)
            return params.get("r"), params.get("t")
        remaining = headers.get("RateLimit-Remaining")
        reset = headers.get("RateLimit-Reset")
        if remaining is None or reset is None:
            return None, None
        return parse_structured(remaining).get(""), parse_structured(reset).get("")


_registry: dict[str, HostLimiter] = {}
_registry_lock = threading.Lock()


def limiter_for(url: str) -> HostLimiter:
    """The process-wide limiter of ``url``'s host (created on first use)."""
    parts = urlsplit(url)
    host = f"{parts.scheme.lower()}://{parts.netloc.lower()}"
    with _registry_lock:
        limiter = _registry.get(host)
        if limiter is None:
            limiter = _registry[host] = HostLimiter(host)
        return limiter
