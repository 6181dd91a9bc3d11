"""How many requests to keep in flight, and how large a part each one fetches: decided from what
was measured, with no IO and no clock of its own.

No fixed layout wins on every link. Behind a server that caps each connection at 100 MB/s
(a WAN, S3), eight streams cap a read at 0.8 GB/s and sixteen reach twice that; on two cores
and plain loopback, more streams only add threads that contend for the cores, and 2 to 16
measure the same within the machine's noise (``benchmarks/results/2026-11-25-perf3.md``). So
the reader measures and adapts, as the AWS CRT S3 client sizes its connections from a
throughput target and xet-core's adaptive concurrency follows its success ratio.

:class:`StreamController` is a hill climb over two knobs, fed by the caller with one
:class:`Window` at a time (bytes, the seconds they took, whether every stream allowed was busy,
how many requests failed):

- it starts with :data:`START_STREAMS` streams of :data:`START_PART_BYTES`, and judges every
  window, the first too (the caller measures each request from its own start, so the new
  connections of a step weigh on it as the first ones weigh on the start);
- **streams**: it doubles them, and keeps the step while throughput rises by at least
  :data:`GAIN` (a step that pays less is undone, and the climb moves on to parts);
- **parts**: it doubles the part size, and keeps the step while throughput does not fall
  (bigger parts are fewer requests, each a head to parse and a thread's hop, and pay where
  each request waits a round trip; they hold no more memory than the bound allows);
- **fewer**: it halves the streams, and keeps the step while throughput does not fall (where
  the client's CPU is the bound, fewer streams are fewer threads contending for it: over
  HTTPS on two cores, one stream decrypted at 1.5 GB/s and eight at 0.7-1.0), then holds;
- while holding, it probes again every :data:`REPROBE_WINDOWS` windows, upwards first (the
  link may have changed);
- **back-off**: a step that does not pay is undone, and failed requests (retries, errors: a
  server under strain, a throttle) halve the streams at once. A throughput that merely drops
  at an unchanged setting is no reason to drop streams: on a machine shared with other work
  it halves and recovers within a second (another process took the cores), fewer streams
  would not give the cores back, and halving on it left reads on one or two streams;
- it never lets ``streams * part_size_bytes`` pass ``max_bytes_in_flight`` (a part that does
  not land straight in its destination holds that much memory; growing streams shrinks parts
  to stay under it, down to :data:`MIN_PART_BYTES`);
- an explicit ``ReadOptions(max_concurrency=...)`` or ``part_size_bytes=...`` pins what it
  names: the climb leaves that knob alone (the cap too: the caller chose).

A window in which demand, not the link, limited the streams (fewer parts wanted than streams
allowed: the tail of a read, a small read) says nothing about the link and is ignored.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..options import DEFAULT_MAX_BYTES_IN_FLIGHT

MIB = 1024 * 1024

START_STREAMS = 8
"""Streams of a fresh controller: round two's fixed eight. On two cores and plain loopback, 2
to 16 streams measure the same within the machine's noise (a fresh array's first touch costs
60 ms or 1 s per 512 MiB from one run to the next); on a link that caps each connection,
starting at eight reaches sixteen one window sooner than four would; where fewer do better
(HTTPS decrypted on two cores), it comes down after its first steps up fail."""

START_PART_BYTES = 8 * MIB
"""Part size of a fresh controller: half of round two's 16 MiB, so that the first window, the
one measured before anything is known, is 64 MiB rather than 128. On a link that caps each
connection at 100 MB/s that window runs at eight streams' 0.8 GB/s, and at 16 MiB it took 0.16
of a 512 MiB read's 0.45 s: fresh processes read at 0.88-1.24 GB/s, at 8 MiB 1.21-1.34
(against 1.24 for 16 curls). Where larger parts are no slower (loopback, where each request is
a thread's hop and a head to parse: 8 MiB parts cost 7-10% more CPU than 16), the climb's
parts step doubles them back."""

MIN_PART_BYTES = 1 * MIB
"""Smallest part the controller picks (parts shrink as streams grow under the cap)."""

MAX_PART_BYTES = 64 * MIB
"""Largest part the controller picks."""

MAX_STREAMS = 64
"""Most streams the controller picks (an HTTP client keeps 64 connections by default)."""

GAIN = 1.3
"""A step pays when the throughput after it is at least this many times the one before. Where
streams are what the link lacks, doubling them nearly doubles the throughput; where the CPU is
the bound, a window measures within 20-30% of the one before (page faults of fresh memory cost
2-4x more from one moment to the next on a virtual machine), which must not pass for a gain."""

FEWER_KEEPS = 1.0
"""A step to fewer streams is kept when the throughput after it is at least this many times the
one before: no gain is asked (fewer streams cost less), but no loss is allowed either."""

REPROBE_WINDOWS = 8
"""Windows held before the controller probes upwards again."""

RESUME_WINDOWS = 2
"""Windows held at a start that an earlier controller learnt (see :mod:`.links`) before the
climb resumes from it. The first window of a process is its slowest (new connections, the
first touch of fresh memory: 0.8-1.1 GB/s where the same setting then gave 1.3-1.5 on a
capped link): a step judged against it passes for a gain, and each process stepped one
further (16 streams learnt, 32 kept by the next, 64 tried by the third)."""


@dataclass(frozen=True, slots=True)
class Setting:
    """Requests in flight at once, and the largest part one of them fetches, in bytes."""

    streams: int
    part_size_bytes: int

    @property
    def bytes_in_flight(self) -> int:
        """The most bytes that the streams fetch at once."""
        return self.streams * self.part_size_bytes


@dataclass(frozen=True, slots=True)
class Window:
    """What the streams did between two decisions, as the caller measured it.

    Attributes:
        bytes: bytes of the parts that completed in the window.
        seconds: the window's length, counting only time when at least one request was in
            flight (idle time between two reads is not the link's).
        saturated: whether every stream allowed was busy for most of the window; when not, the
            caller's demand limited the throughput, and the window says nothing of the link.
        failures: requests that failed or were retried in the window.
    """

    bytes: int
    seconds: float
    saturated: bool = True
    failures: int = 0


class _Phase(enum.Enum):
    STREAMS = "streams"
    PARTS = "parts"
    FEWER = "fewer"
    HOLD = "hold"


_NEXT = {_Phase.STREAMS: _Phase.PARTS, _Phase.PARTS: _Phase.FEWER, _Phase.FEWER: _Phase.HOLD}
"""The climb's order: more streams, larger parts, fewer streams, then hold."""


class StreamController:
    """Decides streams and part size from measured windows (see the module).

    Args:
        streams: pinned number of streams (``ReadOptions.max_concurrency``), or None to adapt.
        part_size_bytes: pinned part size (``ReadOptions.part_size_bytes``), or None to adapt.
        max_bytes_in_flight: bound of ``streams * part_size_bytes`` for what adapts.
        start: where to start instead of :data:`START_STREAMS` x :data:`START_PART_BYTES`
            (what the link taught an earlier controller: see :mod:`.links`); fitted to the
            pins and bounds, held :data:`RESUME_WINDOWS` windows, then climbed from as from
            the default start.

    Raises:
        ValueError: a pinned value or the bound is not positive.
    """

    def __init__(
        self,
        *,
        streams: int | None = None,
        part_size_bytes: int | None = None,
        max_bytes_in_flight: int = DEFAULT_MAX_BYTES_IN_FLIGHT,
        start: Setting | None = None,
    ) -> None:
        for name, value in (("streams", streams), ("part_size_bytes", part_size_bytes)):
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if max_bytes_in_flight <= 0:
            raise ValueError(f"max_bytes_in_flight must be > 0, got {max_bytes_in_flight}")
        self._pinned_streams = streams
        self._pinned_part = part_size_bytes
        self._cap = max_bytes_in_flight
        begin = start or Setting(START_STREAMS, START_PART_BYTES)
        self._kept = self._fit(begin.streams, begin.part_size_bytes)
        self._kept_rate: float | None = None  # bytes per second the kept setting gave
        self._trial: Setting | None = None  # a step being measured
        # A learnt start is held a few windows (measured in earnest) before the climb resumes.
        self._phase = _Phase.STREAMS if start is None else _Phase.HOLD
        self._held = 0 if start is None else REPROBE_WINDOWS - RESUME_WINDOWS

    @property
    def setting(self) -> Setting:
        """What to use now: the step being tried, else the setting kept."""
        return self._trial or self._kept

    @property
    def learnt(self) -> Setting | None:
        """The setting kept once a window measured it (what this link taught, worth
        starting from next time); None before, and after a back-off until a window measures
        again."""
        return self._kept if self._kept_rate is not None else None

    @property
    def smallest_part_bytes(self) -> int:
        """The smallest part this controller ever picks (the pinned size, where pinned): reads
        are planned in parts of at most this size, and a request joins several of them."""
        if self._pinned_part is not None:
            return self._pinned_part
        # Below MIN_PART_BYTES only to keep the cap: a tiny one, or many pinned streams.
        return max(1, min(MIN_PART_BYTES, self._cap // (self._pinned_streams or 1)))

    @property
    def pinned(self) -> bool:
        """Whether both knobs are pinned (nothing adapts)."""
        return self._pinned_streams is not None and self._pinned_part is not None

    def observe(self, window: Window) -> Setting:
        """Learn from ``window`` (measured at :attr:`setting`); returns what to use next."""
        if self.pinned:
            return self.setting
        if window.failures:
            return self._back_off()
        if not window.saturated or window.seconds <= 0 or window.bytes <= 0:
            return self.setting
        rate = window.bytes / window.seconds
        if self._trial is not None:
            needed = GAIN if self._phase is _Phase.STREAMS else FEWER_KEEPS
            if self._kept_rate is not None and rate >= self._kept_rate * needed:
                self._kept, self._kept_rate, self._trial = self._trial, rate, None
            else:  # it did not pay: undo it, and climb the next knob
                self._trial = None
                self._phase = _NEXT[self._phase]
            return self._step()
        # What the kept setting gives: averaged while it holds, but never below the window just
        # measured (after a slow spell, one good window restores it: a step must beat the
        # setting at its best, or a spell's end would pass for the step's gain).
        if self._kept_rate is not None:
            rate = max(rate, (self._kept_rate + rate) / 2)
        self._kept_rate = rate
        if self._phase is _Phase.HOLD:
            self._held += 1
            if self._held < REPROBE_WINDOWS:
                return self._kept
            self._held = 0
            self._phase = _Phase.STREAMS
        return self._step()

    def _step(self) -> Setting:
        """Try the next step of the current phase; where it cannot move, the next phase."""
        while self._phase is not _Phase.HOLD:
            kept = self._kept
            if self._phase is _Phase.STREAMS:
                candidate = self._fit(kept.streams * 2, kept.part_size_bytes)
            elif self._phase is _Phase.PARTS:
                candidate = self._fit(kept.streams, kept.part_size_bytes * 2)
            else:
                candidate = self._fit(kept.streams // 2, kept.part_size_bytes)
            if candidate != kept:
                self._trial = candidate
                return candidate
            self._phase = _NEXT[self._phase]
        return self._kept

    def _back_off(self) -> Setting:
        """Halve the streams (unless pinned), forget the rate, and hold."""
        current = self.setting
        self._kept = self._fit(max(1, current.streams // 2), current.part_size_bytes)
        self._kept_rate = None
        self._trial = None
        self._phase = _Phase.HOLD
        self._held = 0
        return self._kept

    def _fit(self, streams: int, part_size_bytes: int) -> Setting:
        """The setting nearest to the one asked that the pins and bounds allow: pinned knobs
        as pinned; streams in [1, MAX_STREAMS]; parts in [MIN_PART_BYTES, MAX_PART_BYTES]
        (or the cap, if smaller); ``streams * part_size_bytes`` within the cap, by smaller
        parts first, then fewer streams (a pinned knob is never moved to make room)."""
        if self._pinned_streams is not None:
            streams = self._pinned_streams
        else:
            streams = max(1, min(streams, MAX_STREAMS))
        if self._pinned_part is not None:
            part = self._pinned_part
            if self._pinned_streams is None:
                streams = max(1, min(streams, self._cap // part))
            return Setting(streams, part)
        floor = self.smallest_part_bytes
        part = max(floor, min(part_size_bytes, MAX_PART_BYTES, self._cap // streams))
        if self._pinned_streams is None and streams * part > self._cap:
            streams = max(1, self._cap // part)
        return Setting(streams, part)
