"""Rate limits: one limiter per host, its state kept per policy, shared by the whole process.

Every HTTP request of every model, scan and sync call asks the limiter of its URL for a slot
before it is sent (:meth:`RouteLimiter.acquire`) and reports the answer's status and headers
afterwards (:meth:`RouteLimiter.observe`). The limiter reads:

- the IETF ``RateLimit`` and ``RateLimit-Policy`` fields (draft-ietf-httpapi-ratelimit-headers,
  RFC 9651 Lists; see :func:`parse_policies` and :func:`parse_remaining`): a policy ``"api"``
  with ``q`` requests per ``w`` seconds, and for the request just answered ``r`` requests left
  of it until ``t`` seconds from now. When few remain, the rest of the window is spread over
  them (one every ``t / r`` seconds), so the limit is not hit at all; with none left nothing
  counted against that policy is sent until the reset. The older ``RateLimit-Remaining`` /
  ``RateLimit-Reset`` pair counts as a policy without a name;
- ``429`` (and ``503``) with ``Retry-After``: nothing counted against the policies the answer
  named (or, naming none, nothing of the same route) goes out until then.

**Which policy a request counts against.** A host may count requests against several policies:
the Hugging Face Hub has one for its API (``/api/...``, ``q=500`` per 5 minutes anonymously) and
one for file downloads (every ``/resolve/`` URL, ``q=3000``). Only the answer says which one it
counted (``RateLimit: "api";r=5;t=200``), so the limiter sorts requests into *routes* by their
URL (:func:`route_of`: ``api`` for paths under ``/api/``, ``resolve`` for a path with a
``resolve`` segment, ``""`` for all else) and learns from each answer the policies that its
route's requests count against. A request waits only for those policies (and for a
``Retry-After`` that its own route was given): an exhausted API policy does not hold back a
download, and an answer about the download policy does not reset the API's pacing. A route
learns its policies from its first answer; until then nothing holds it back.

Policies counted in units other than requests (``qu`` other than ``"requests"``: bytes,
concurrent requests) are ignored: their ``r`` says nothing about how many requests may go.

The state is a few floats of a monotonic clock guarded by a thread lock (never held across an
``await``), so one limiter serves any number of event loops and threads. Time spent waiting is
added to the tallies of :func:`tally_waits` (a context variable, inherited by tasks), which is
how a scan reports its waiting per location and in total.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .structured_fields import Date, Item, parse_list

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

log = logging.getLogger(__name__)

SLOW_DOWN_BELOW_FRACTION = 0.1
"""Pace requests once fewer than this fraction of the policy's quota remain, or fewer than
:data:`SLOW_DOWN_BELOW_REQUESTS` (whichever is larger)."""

SLOW_DOWN_BELOW_REQUESTS = 16

MAX_WAIT_SECONDS = 300.0
"""Longest single wait the limiter imposes (the hub's windows are 5 minutes)."""

THROTTLED_WITHOUT_RETRY_AFTER_SECONDS = 1.0
"""How long a route waits after a 429 that does not say (no ``Retry-After``)."""

UNNAMED_POLICY = ""
"""The name of the policy of the older ``RateLimit-Remaining``/``RateLimit-Reset`` fields,
which name none (kept per route: nothing says that two routes share it)."""


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


# --- reading the fields (no IO) -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Policy:
    """One item of ``RateLimit-Policy``: ``quota`` units per ``window_seconds`` (None when not
    said), counted in ``unit`` (``"requests"`` unless the server says otherwise)."""

    name: str
    quota: float
    window_seconds: float | None = None
    unit: str = "requests"


@dataclass(frozen=True, slots=True)
class Remaining:
    """One item of ``RateLimit``: ``remaining`` units of policy ``name`` are left until
    ``reset_seconds`` from now (None when not said)."""

    name: str
    remaining: float
    reset_seconds: float | None = None


def parse_policies(value: str) -> list[Policy]:
    """The policies of a ``RateLimit-Policy`` field, in order.

    ``'"fixed window";"api";q=500;w=300'`` (the hub's form) gives
    ``[Policy("api", 500, 300)]``. Items that are no policy are skipped: a bare item that is
    not a String or Token (the older drafts' ``100;w=60``), an item without a non-negative
    number ``q`` (such as the hub's ``"fixed window"``), or with a ``w`` or ``qu`` of the
    wrong type. Never raises.
    """
    return list(_policies(value))


@functools.lru_cache(maxsize=64)
def _policies(value: str) -> tuple[Policy, ...]:
    # A host sends the same few policy fields with every answer: read each once (10 us).
    policies = []
    for item in parse_list(value):
        quota = _number(item, "q")
        window = _number(item, "w")
        unit = item.params.get("qu", "requests")
        if not isinstance(item.value, str) or quota is None or not isinstance(unit, str):
            continue
        if window is None and "w" in item.params:
            continue
        policies.append(Policy(str(item.value), quota, window, str(unit)))
    return tuple(policies)


def parse_remaining(value: str) -> list[Remaining]:
    """The items of a ``RateLimit`` field, in order.

    ``'"api";r=5;t=200'`` gives ``[Remaining("api", 5, 200)]``. Items that are not a String or
    Token with a non-negative number ``r`` (and ``t``, when given) are skipped. Never raises.
    """
    found = []
    for item in parse_list(value):
        remaining = _number(item, "r")
        reset = _number(item, "t")
        if not isinstance(item.value, str) or remaining is None:
            continue
        if reset is None and "t" in item.params:
            continue
        found.append(Remaining(str(item.value), remaining, reset))
    return found


def _number(item: Item, key: str) -> float | None:
    """The parameter ``key`` as a non-negative number; None when absent or anything else
    (Booleans and Dates are ``int`` in Python, but no counts)."""
    value = item.params.get(key)
    if isinstance(value, (bool, Date)) or not isinstance(value, (int, float)) or value < 0:
        return None
    return float(value)


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


def route_of(path: str) -> str:
    """The route of a request to ``path`` (see the module docstring): ``"api"`` under
    ``/api/``, ``"resolve"`` for a path with a ``resolve`` segment, else ``""``."""
    if path.startswith("/api/"):
        return "api"
    if "/resolve/" in path:
        return "resolve"
    return ""


# --- the state ------------------------------------------------------------------------------

_Key = tuple[str, str]
"""A policy's state: ``(name, "")`` for a named policy, ``(UNNAMED_POLICY, route)`` for what a
route learnt without a name (the older fields, a ``Retry-After`` naming no policy)."""


@dataclass(slots=True)
class _Bucket:
    """What is known of one policy; times are seconds of the limiter's clock."""

    blocked_until: float = 0.0  # nothing counted against it is sent before this
    interval_seconds: float = 0.0  # pacing between requests while few remain
    next_slot: float = 0.0
    quota: float | None = None
    window_seconds: float | None = None
    counts_requests: bool = True
    remaining: float | None = None  # the last answer's r, less the requests sent since
    reset_at: float | None = None  # the earliest end of the current window an answer said
    opens_at: float = 0.0  # when the window that ``remaining`` counts opens
    guessed: bool = False  # reset_at was guessed (a window ahead), no answer of it said yet

    @property
    def counted(self) -> bool:
        """Whether requests are counted against a known quota (a named policy whose answers
        said ``q``, ``r`` and ``t``): they then go while the window has room, never paced."""
        return self.quota is not None and self.remaining is not None and self.reset_at is not None

    def left(self, now: float) -> float | None:
        """Requests estimated to remain now (the quota again once the window said ended);
        None when no answer said."""
        if self.reset_at is not None and now >= self.reset_at:
            return self.quota
        return self.remaining

    def slot(self, start: float) -> float:
        """The earliest time from ``start`` that a counted request may go: at once while the
        window has room, else when it ends (then in the next one)."""
        assert self.reset_at is not None
        assert self.remaining is not None
        if start >= self.reset_at or self.remaining >= 1:
            return max(start, self.opens_at)
        return self.reset_at + self.guard_seconds()

    def guard_seconds(self) -> float:
        """A little past a window's end before the next one's requests go: requests of the
        last one still on their way must land in it, not in the next (2% of the window,
        between 50 ms and a second)."""
        return min(1.0, max(0.05, 0.02 * (self.window_seconds or 0.0)))

    def take(self, start: float) -> None:
        """Count a request sent at ``start`` (:meth:`slot`'s time) against the window."""
        assert self.reset_at is not None
        assert self.remaining is not None
        if start >= self.reset_at:  # the next window: as full as the quota says
            guard, window = self.guard_seconds(), self.window_seconds or 0.0
            self.opens_at = max(start, self.reset_at + guard)
            self.remaining = (self.quota or 1) - 1
            # A fixed window may open with its first request, which lands a little after it
            # leaves: its end is guessed a guard later (until an answer of it says; by then
            # the requests of the window after it may be counted already).
            self.reset_at = self.opens_at + window + guard
            self.guessed = True
        else:
            self.remaining = max(0.0, self.remaining - 1)

    def pace_seconds(self) -> float:
        """Seconds per request of the announced policy (window / quota), 0 when unknown."""
        if self.quota and self.window_seconds:
            return min(self.window_seconds / self.quota, MAX_WAIT_SECONDS)
        return 0.0

    def learn(self, remaining: float, reset_seconds: float, now: float) -> None:
        """Pace or block after an answer that left ``remaining`` until ``reset_seconds``."""
        quota = self.quota or 0
        # A small quota (a scaled test's, a mirror's) is not paced for most of its window.
        floor = SLOW_DOWN_BELOW_REQUESTS if not quota else min(SLOW_DOWN_BELOW_REQUESTS, quota / 4)
        threshold = max(quota * SLOW_DOWN_BELOW_FRACTION, floor)
        if remaining <= 0:
            # Wait for the reset, then go at the policy's average pace: requests queued
            # meanwhile would otherwise all leave at the reset and exhaust it again.
            self.block(reset_seconds, now)
            self.interval_seconds = self.pace_seconds()
        elif remaining < threshold:
            self.interval_seconds = min(reset_seconds / remaining, MAX_WAIT_SECONDS)
        else:
            self.interval_seconds = 0.0

    def block(self, seconds: float, now: float) -> None:
        self.blocked_until = max(self.blocked_until, now + min(seconds, MAX_WAIT_SECONDS))


class HostLimiter:
    """The limiter of one host (scheme and authority), its state per policy. Get a route's
    view of it with :func:`limiter_for`.

    Args:
        host: ``scheme://authority``, for the log.
        clock: seconds of a monotonic clock (tests pass their own).
    """

    def __init__(self, host: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.host = host
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[_Key, _Bucket] = {}
        self._counted_against: dict[str, tuple[_Key, ...]] = {}  # route -> its policies
        self.waited_seconds = 0.0
        """Total seconds requests to this host waited (all scopes)."""
        self.throttled = 0
        """429 answers seen from this host."""

    def policies_of(self, route: str) -> tuple[str, ...]:
        """The names of the policies that the last answer to ``route`` counted against."""
        with self._lock:
            return tuple(name for name, _ in self._counted_against.get(route, ()))

    def wait_seconds(self, route: str) -> float:
        """How long a request of ``route`` sent now would wait (nothing is reserved)."""
        with self._lock:
            return self._start(route, reserve=False)

    def reserve(self, route: str) -> float:
        """Take the next slot of ``route``: the seconds to wait before sending (0 at once)."""
        if not self._buckets:  # nothing learnt from this host: the common case, lock-free
            return 0.0
        with self._lock:
            return self._start(route, reserve=True)

    def _start(self, route: str, *, reserve: bool) -> float:
        now = self._clock()
        buckets = [self._buckets[key] for key in self._keys_of(route) if key in self._buckets]
        start = max([now, *(b.blocked_until for b in buckets)])
        for bucket in buckets:
            start = max(start, bucket.slot(start) if bucket.counted else bucket.next_slot)
        if reserve:
            for bucket in buckets:
                if bucket.counted:
                    bucket.take(start)
                elif bucket.interval_seconds:
                    bucket.next_slot = start + bucket.interval_seconds
        return min(start - now, MAX_WAIT_SECONDS)

    def room(self, route: str) -> float | None:
        """The share of its quota that the fullest-used policy of ``route`` has left now (0 to
        1; 0 while it waits for a reset), or None when no answer said (nothing is known)."""
        with self._lock:
            now = self._clock()
            shares = []
            for key in self._keys_of(route):
                bucket = self._buckets.get(key)
                if bucket is None:
                    continue
                left = bucket.left(now)
                if now < bucket.blocked_until:
                    left = 0.0
                if left is not None and bucket.quota:
                    shares.append(min(1.0, left / bucket.quota))
            return min(shares) if shares else None

    def quotas(self) -> dict[str, tuple[int, int]]:
        """Each named policy that answers counted against: ``name -> (requests left now, its
        quota)`` (estimates between answers: the last answer's count less the requests sent
        since)."""
        with self._lock:
            now = self._clock()
            out = {}
            for (name, _), bucket in self._buckets.items():
                left = bucket.left(now)
                if name and left is not None and bucket.quota is not None:
                    out[name] = (int(left), int(bucket.quota))
            return out

    def _keys_of(self, route: str) -> tuple[_Key, ...]:
        return (*self._counted_against.get(route, ()), (UNNAMED_POLICY, route))

    async def acquire(self, route: str) -> None:
        """Wait until a request of ``route`` may be sent (at once when nothing holds it)."""
        wait = self.reserve(route)
        if wait <= 0:
            return
        log.debug("%s: waiting %.3f s for the rate limit of %r", self.host, wait, route or "/")
        await asyncio.sleep(wait)
        with self._lock:
            self.waited_seconds += wait
        for tally in _tallies.get():
            tally.seconds += wait
            tally.waits += 1

    def observe(self, route: str, status: int, headers: Mapping[str, str]) -> None:
        """Learn from an answer to a request of ``route``: its policies, what remains of them,
        and ``Retry-After`` on 429/503. Never raises for malformed fields (they are skipped)."""
        policy_field = headers.get("RateLimit-Policy")
        remaining_field = headers.get("RateLimit")
        throttled = status in (429, 503)
        if (
            not throttled
            and policy_field is None
            and remaining_field is None
            and headers.get("RateLimit-Remaining") is None
        ):
            return  # the common case: an answer that says nothing of limits
        policies = _policies(policy_field) if policy_field else ()
        remaining = parse_remaining(remaining_field) if remaining_field else []
        with self._lock:
            now = self._clock()
            self._learn_policies(policies)
            counted = self._learn_remaining(route, remaining, headers, now)
            if counted:
                self._counted_against[route] = counted
            if throttled:
                self._throttled(route, status, headers, counted, now)

    def _learn_policies(self, policies: Iterable[Policy]) -> None:
        for policy in policies:
            bucket = self._buckets.setdefault((policy.name, ""), _Bucket())
            bucket.quota = policy.quota
            bucket.window_seconds = policy.window_seconds or bucket.window_seconds
            bucket.counts_requests = policy.unit == "requests"

    def _learn_remaining(
        self, route: str, items: list[Remaining], headers: Mapping[str, str], now: float
    ) -> tuple[_Key, ...]:
        """Pace the policies the answer names; returns their keys (the route's policies)."""
        keyed = [((item.name, ""), item) for item in items]
        if not keyed:
            keyed = [((UNNAMED_POLICY, route), item) for item in _legacy_remaining(headers)]
        counted = []
        for key, item in keyed:
            bucket = self._buckets.setdefault(key, _Bucket())
            if not bucket.counts_requests:
                continue
            counted.append(key)
            reset = item.reset_seconds if item.reset_seconds is not None else bucket.window_seconds
            if reset is not None:
                # The window's end, as late as this answer says (the hub rounds ``t`` up to
                # whole seconds): the earliest such bound seen in one window is the tightest,
                # and the one waited for (a second late of a scaled 5 s window is a fifth).
                ends = now + reset
                known = bucket.reset_at
                half = (bucket.window_seconds or 0.0) / 2
                if known is None or ends > known + half:  # an answer of a later window
                    bucket.reset_at, bucket.remaining = ends, item.remaining
                    bucket.opens_at = min(bucket.opens_at, now)
                elif ends >= known - half:  # the same window: the lowest count is the latest
                    bucket.reset_at = ends if bucket.guessed else min(known, ends)
                    bucket.remaining = min(bucket.remaining or 0.0, item.remaining)
                bucket.guessed = False
                # (else a late answer of an earlier window: it says nothing of this one)
                if bucket.counted:  # counted, not paced: an empty window waits (_Bucket.slot)
                    bucket.interval_seconds = 0.0
                else:
                    bucket.learn(item.remaining, reset, now)
        return tuple(counted)

    def _throttled(
        self,
        route: str,
        status: int,
        headers: Mapping[str, str],
        counted: tuple[_Key, ...],
        now: float,
    ) -> None:
        """A 429 or 503: block what the answer counted against (else the route) until its
        ``Retry-After``, then go at the policy's average pace."""
        if status == 429:
            self.throttled += 1
        delay = retry_after_seconds(headers.get("Retry-After"))
        if delay is None and status == 429:
            delay = THROTTLED_WITHOUT_RETRY_AFTER_SECONDS
        if delay is None:
            return
        for key in counted or ((UNNAMED_POLICY, route),):
            bucket = self._buckets.setdefault(key, _Bucket())
            bucket.block(delay, now)
            bucket.interval_seconds = max(bucket.interval_seconds, bucket.pace_seconds())


def _legacy_remaining(headers: Mapping[str, str]) -> list[Remaining]:
    """The older ``RateLimit-Remaining`` and ``RateLimit-Reset`` pair (plain integers) as an
    item of the route's unnamed policy, or ``[]``."""
    remaining = headers.get("RateLimit-Remaining")
    reset = headers.get("RateLimit-Reset")
    if remaining is None or reset is None:
        return []
    try:
        left, seconds = float(remaining.strip()), float(reset.strip())
    except ValueError:
        return []
    if not (0 <= left < float("inf") and 0 <= seconds < float("inf")):
        return []
    return [Remaining(UNNAMED_POLICY, left, seconds)]


@dataclass(frozen=True, slots=True)
class RouteLimiter:
    """A host's limiter as seen by the requests of one route (what :func:`limiter_for`
    gives): the methods of :class:`HostLimiter` with the route filled in."""

    host: HostLimiter
    route: str

    async def acquire(self) -> None:
        """Wait until a request of this route may be sent (see :meth:`HostLimiter.acquire`)."""
        await self.host.acquire(self.route)

    def observe(self, status: int, headers: Mapping[str, str]) -> None:
        """Learn from an answer to this route (see :meth:`HostLimiter.observe`)."""
        self.host.observe(self.route, status, headers)

    def wait_seconds(self) -> float:
        """How long a request of this route sent now would wait."""
        return self.host.wait_seconds(self.route)

    def policies(self) -> tuple[str, ...]:
        """The policies the last answer to this route counted against."""
        return self.host.policies_of(self.route)

    def room(self) -> float | None:
        """The share of its quota this route has left (see :meth:`HostLimiter.room`)."""
        return self.host.room(self.route)


def quotas_left() -> dict[str, tuple[int, int]]:
    """Every host's named policies (the hub's ``api``, ``resolvers``...): ``"host policy" ->
    (requests left now, quota)``, for a progress display."""
    with _registry_lock:
        limiters = list(_registry.values())
    out = {}
    for limiter in limiters:
        for name, pair in limiter.quotas().items():
            out[f"{limiter.host} {name}"] = pair
    return out


_registry: dict[str, HostLimiter] = {}
_registry_lock = threading.Lock()


def limiter_for(url: str) -> RouteLimiter:
    """The process-wide limiter of ``url``'s host, for ``url``'s route (created on first
    use)."""
    parts = urlsplit(url)
    # Without userinfo: a host's limits are the host's whoever asks, and the key is logged.
    host = f"{parts.scheme.lower()}://{parts.netloc.rpartition('@')[2].lower()}"
    with _registry_lock:
        limiter = _registry.get(host)
        if limiter is None:
            limiter = _registry[host] = HostLimiter(host)
    return RouteLimiter(limiter, route_of(parts.path))
