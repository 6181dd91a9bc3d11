"""The requests in flight of one file or one model: how many may run, measured as they run.

A :class:`RequestsInFlight` is what a file's reads (or, shared, a model's) wait on before each
request, as they once waited on a semaphore of ``max_concurrency``. Its size is the
:class:`~.streams.StreamController`'s current setting: the budget measures what its requests
deliver in windows and hands each window to the controller, which answers with the streams and
part size to use next. The controller decides; the budget only counts and keeps time.

Each request is timed on its own, from the stream it was given (:meth:`RequestsInFlight.acquire`
returns a :class:`Ticket`) to its end. A window is the first ``streams`` requests begun after
the one before closed (after a change, the first at the new setting); it closes when all of
them have ended, or at once on a failure. Closing on the first ``streams`` to end, whichever
began when, measured the fastest (on HTTPS with one core decrypting, the requests that held it
longest: twice what the link gave), and requests begun before a change end during the next
setting's first moments, their bytes mostly moved before it (on a link that caps each
connection, the window after eight streams became sixteen measured less than the eight had:
487 against 630 MB/s); neither is counted. What the setting delivers is, by Little's law, what
each of the window's requests delivered per second of its own times the requests in flight on
average while it ran (the window's seconds are each request's seconds divided by that average,
summed); idle time between reads is nobody's. A window is *saturated* when every stream
allowed was busy for at least :data:`SATURATED_SHARE` of the time any was (otherwise the reads
asked for less than the budget allowed, and the window says nothing of the link).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ..options import ReadOptions
from .links import LinkMemory, memory_for, origin_of
from .streams import Setting, StreamController, Window

log = logging.getLogger("remotetensors")

SHARE_FLOOR = 2
"""The last requests' shares go no lower than the part size divided by this."""

SATURATED_SHARE = 0.75
"""Share of a window's busy time with every stream in use for it to count as saturated."""


@dataclass(frozen=True, slots=True)
class Ticket:
    """A stream handed out: when the request that holds it began (the budget's clock,
    seconds), in which window, and how far the budget's streams-in-flight integral stood."""

    started: float
    window: int
    """The window whose measure the request is part of, or -1 (begun after the window had its
    ``streams`` requests)."""
    stream_seconds: float
    """The budget's integral of requests in flight over time when the request began."""


class RequestsInFlight:
    """Requests in flight, sized by a controller (see the module).

    Args:
        controller: decides the streams and part size from the windows measured here.
        clock: seconds, monotonic (the controller has no clock of its own; this is it).
        memory: where the setting the controller keeps is remembered for ``origin`` (see
            :mod:`.links`), or None.
        origin: the origin the requests go to, as :func:`.links.origin_of` names it.
    """

    def __init__(
        self,
        controller: StreamController,
        *,
        clock: Callable[[], float] = time.perf_counter,
        memory: LinkMemory | None = None,
        origin: str = "",
    ) -> None:
        self._controller = controller
        self._memory = memory
        self._origin = origin
        self._clock = clock
        self._setting = controller.setting
        self._window = 0  # counts the windows
        self._issued = 0  # requests of the current window begun so far
        self._in_flight = 0
        self._waiters: deque[asyncio.Future[Ticket]] = deque()
        self._mark = clock()
        self._busy = 0.0
        self._full = 0.0
        self._stream_seconds = 0.0  # the integral of the requests in flight over time, ever
        self._bytes = 0
        self._request_seconds = 0.0
        self._completed = 0
        self._failures = 0
        self._queued = 0  # bytes that the reads sharing this budget still have to ask for

    @classmethod
    def for_options(cls, options: ReadOptions, location: str | None = None) -> RequestsInFlight:
        """The budget that ``options`` ask for: pinned where they name a number, adaptive
        elsewhere, starting from what the link of ``location`` taught before (see
        :mod:`.links`; not when ``options`` keep the cache out or pin a knob)."""
        origin = origin_of(location) if location is not None else None
        memory = memory_for(options) if origin is not None else None
        return cls(
            StreamController(
                streams=options.max_concurrency,
                part_size_bytes=options.part_size_bytes,
                max_bytes_in_flight=options.max_bytes_in_flight,
                start=memory.recall(origin) if memory is not None and origin else None,
            ),
            memory=memory,
            origin=origin or "",
        )

    @property
    def setting(self) -> Setting:
        """The streams and part size in use now."""
        return self._setting

    @property
    def granule_bytes(self) -> int:
        """The size reads are planned in: parts of at most this many bytes, which a request
        joins up to :attr:`setting`'s part size."""
        return self._controller.smallest_part_bytes

    def queue(self, nbytes: int) -> None:
        """A read planned ``nbytes`` that it will ask for through this budget."""
        self._queued += nbytes

    def unqueue(self, nbytes: int) -> None:
        """``nbytes`` of the queued bytes were asked for (or will never be)."""
        self._queued -= nbytes

    def request_limit(self) -> int:
        """The most bytes the next request may ask for: the setting's part size, or, once the
        bytes still queued by every read sharing this budget no longer fill each stream with a
        whole part, an even share of them per stream (guided self-scheduling: requests shrink
        as the reads end, so the streams end together). Without it, a read's last request
        could be a whole part begun when the others were nearly done: on a link that caps each
        connection at 100 MB/s, one 16 MiB request alone for its last 160 ms (a quarter of a
        512 MiB read at 1.2 GB/s). Counted over the budget, not per read: a model's reads
        share it, and one read's tail is not the streams' while others still queue."""
        part = self._setting.part_size_bytes
        share = -(-self._queued // self._setting.streams)
        # Not below half a part: the shares shrink geometrically, and down to a granule they
        # cost a request per stream per halving (30 for a 45 MiB tensor on 8 streams, 10
        # with this floor); the streams still end within half a part's time of each other.
        return max(1, min(part, max(share, part // SHARE_FLOOR)))

    async def acquire(self) -> Ticket:
        """Wait for a stream; the caller must :meth:`release` it with the ticket returned (or
        :meth:`give_back` it)."""
        if self._in_flight < self._setting.streams and not self._waiters:
            return self._enter()
        waiter: asyncio.Future[Ticket] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give_back(waiter.result())  # handed over as the wait was cancelled
            else:
                self._waiters.remove(waiter)
            raise

    def release(self, ticket: Ticket, nbytes: int, *, failed: bool = False) -> None:
        """The request holding ``ticket`` ended: ``nbytes`` delivered, or ``failed``; the
        window may close."""
        self._account()
        self._in_flight -= 1
        self._failures += failed
        if ticket.window == self._window and not failed:
            self._bytes += nbytes
            seconds = self._mark - ticket.started
            if seconds > 0:
                # Its seconds, shared with the requests in flight beside it on average.
                in_flight = (self._stream_seconds - ticket.stream_seconds) / seconds
                self._request_seconds += seconds / max(in_flight, 1.0)
            self._completed += 1
        if self._failures or self._completed >= self._setting.streams:
            self._close_window()
        self._wake()

    def give_back(self, ticket: Ticket) -> None:
        """A stream acquired but not used, or a request cancelled: nothing is learnt from it,
        and its place in the window goes to the next request (else the window, waiting for
        it, would never close)."""
        self._account()
        self._in_flight -= 1
        if ticket.window == self._window:
            self._issued -= 1
        self._wake()

    def count_retry(self, *_: object) -> None:
        """A request of this budget's reads was retried (a status listener): a failure."""
        self._failures += 1

    def _enter(self) -> Ticket:
        self._account()
        self._in_flight += 1
        counted = self._issued < self._setting.streams
        self._issued += counted
        return Ticket(self._mark, self._window if counted else -1, self._stream_seconds)

    def _account(self) -> None:
        """Add the time since the last change to the window: busy while a request is in
        flight, full while every stream allowed is."""
        now = self._clock()
        elapsed, self._mark = now - self._mark, now
        if self._in_flight:
            self._busy += elapsed
            self._stream_seconds += elapsed * self._in_flight
            if self._in_flight >= self._setting.streams:
                self._full += elapsed

    def _close_window(self) -> None:
        window = Window(
            bytes=self._bytes,
            seconds=self._request_seconds,
            saturated=self._full >= SATURATED_SHARE * self._busy,
            failures=self._failures,
        )
        self._bytes = self._completed = self._failures = self._issued = 0
        self._window += 1
        self._busy = self._full = self._request_seconds = 0.0
        before, self._setting = self._setting, self._controller.observe(window)
        learnt = self._controller.learnt
        if self._memory is not None and learnt is not None:
            self._memory.remember(self._origin, learnt)
        if self._setting != before:
            log.debug(
                "streams %d x %d KiB -> %d x %d KiB (%.0f MB/s over %.3f s%s)",
                before.streams,
                before.part_size_bytes >> 10,
                self._setting.streams,
                self._setting.part_size_bytes >> 10,
                window.bytes / window.seconds / 1e6 if window.seconds else 0.0,
                window.seconds,
                f", {window.failures} failed" if window.failures else "",
            )

    def _wake(self) -> None:
        """Hand free streams to the waiters, first come first served."""
        while self._waiters and self._in_flight < self._setting.streams:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(self._enter())
