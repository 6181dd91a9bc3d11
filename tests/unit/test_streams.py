"""The adaptive stream controller (``reading/streams.py``): its decisions, fed with windows
measured on model links, without a network, a loop or a clock; and the budget that measures
those windows as requests run (``reading/inflight.py``), on a clock the tests move by hand."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remotetensors.options import DEFAULT_MAX_BYTES_IN_FLIGHT, ReadOptions
from remotetensors.ranges import ByteRange
from remotetensors.reading.fetch import Target, fetch_into
from remotetensors.reading.inflight import SHARE_FLOOR, RequestsInFlight
from remotetensors.reading.streams import (
    GAIN,
    MAX_PART_BYTES,
    MAX_STREAMS,
    MIB,
    MIN_PART_BYTES,
    REPROBE_WINDOWS,
    RESUME_WINDOWS,
    START_PART_BYTES,
    START_STREAMS,
    Setting,
    StreamController,
    Window,
)
from remotetensors.sources.base import ByteSource, Prefix
from remotetensors.status import Retrying, counting_retries, retrying

Link = Callable[[Setting], float]
"""Bytes per second that a link gives at a setting."""


def capped(per_stream: float = 100e6, ceiling: float = 1.3e9) -> Link:
    """Each connection carries ``per_stream`` (nginx's limit_rate), the client's CPU
    ``ceiling`` in all."""
    return lambda s: min(s.streams * per_stream, ceiling)


def cpu_bound(best_streams: int = 4) -> Link:
    """Two cores on loopback: throughput rises to ``best_streams`` streams, then falls (the
    streams' threads contend for the cores)."""

    def rate(s: Setting) -> float:
        n = s.streams
        return 2.4e9 * (n / best_streams if n <= best_streams else (best_streams / n) ** 1.2)

    return rate


def round_trips(rtt_seconds: float = 0.05, per_stream: float = 100e6) -> Link:
    """Each request waits a round trip before its bytes flow: bigger parts pay."""

    def rate(s: Setting) -> float:
        part_seconds = s.part_size_bytes / per_stream
        return s.streams * s.part_size_bytes / (part_seconds + rtt_seconds)

    return rate


def run(controller: StreamController, link: Link, windows: int = 40) -> list[Setting]:
    """Feed ``windows`` windows of one second measured on ``link``; the settings used."""
    used = []
    for _ in range(windows):
        setting = controller.setting
        used.append(setting)
        controller.observe(Window(bytes=int(link(setting)), seconds=1.0))
    return used


def settled(used: list[Setting]) -> Setting:
    """The setting used most over the last windows (held, between probes upwards)."""
    return Counter(used[-2 * REPROBE_WINDOWS :]).most_common(1)[0][0]


def test_it_starts_with_a_few_streams_of_small_parts() -> None:
    assert StreamController().setting == Setting(START_STREAMS, START_PART_BYTES)
    assert START_STREAMS <= 8
    assert Setting(START_STREAMS, START_PART_BYTES).bytes_in_flight <= DEFAULT_MAX_BYTES_IN_FLIGHT


def test_streams_grow_while_they_pay_on_a_capped_link() -> None:
    controller = StreamController()
    used = run(controller, capped())
    # 100 MB/s per connection, 1.3 GB/s in all: 16 streams reach 1.3 GB/s (32 would add 0).
    assert settled(used).streams == 16
    # Doubling from the first window on, one step too far, undone; parts cannot grow under the
    # cap; fewer streams tried, and undone.
    assert [s.streams for s in used[:5]] == [8, 16, 32, 8, 16]
    assert max(s.streams for s in used) == 32  # tried, measured, undone


def test_growth_stops_at_the_knee_on_a_cpu_bound_link() -> None:
    controller = StreamController()
    used = run(controller, cpu_bound(best_streams=START_STREAMS))
    assert settled(used).streams == START_STREAMS  # twice as many tried, paid less, undone
    assert max(s.streams for s in used[:REPROBE_WINDOWS]) == 2 * START_STREAMS


def test_it_comes_down_where_fewer_streams_deliver_more() -> None:
    # HTTPS on two cores: fewer threads decrypting, less contention.
    controller = StreamController()
    used = run(controller, cpu_bound(best_streams=2))
    assert settled(used).streams == 2
    # Twice the streams undone; twice the parts kept (no loss: fewer requests); then fewer
    # streams while they deliver more; 1 tried, and undone.
    assert [s.streams for s in used[:6]] == [8, 16, 8, 4, 2, 1]
    assert used[2].part_size_bytes == 2 * START_PART_BYTES


def test_fewer_streams_are_kept_when_they_deliver_as_much() -> None:
    at_the_cap = Setting(START_STREAMS, DEFAULT_MAX_BYTES_IN_FLIGHT // START_STREAMS)
    controller = StreamController(start=at_the_cap)
    for _ in range(RESUME_WINDOWS):
        controller.observe(Window(100, 1.0))  # held, then twice the streams tried
    controller.observe(Window(100, 1.0))  # twice the streams: no gain, undone
    assert controller.setting.streams == START_STREAMS // 2  # (parts at the cap: fewer next)
    controller.observe(Window(99, 1.0))  # a little less: undone, and hold
    assert controller.setting.streams == START_STREAMS
    held = StreamController(start=at_the_cap)
    for _ in range(RESUME_WINDOWS + 2):
        held.observe(Window(100, 1.0))  # the last: as much with half the streams, kept
    assert held.setting.streams == START_STREAMS // 4  # and fewer again tried


def test_the_first_window_is_judged() -> None:
    controller = StreamController()
    start = controller.setting
    controller.observe(Window(100, 1.0))
    assert controller.setting.streams == 2 * start.streams  # the start measured: a step


def test_a_step_that_pays_less_than_the_gain_is_undone() -> None:
    controller = StreamController()
    start = controller.setting
    controller.observe(Window(100, 1.0))  # the start measured: try twice the streams
    assert controller.setting.streams == 2 * start.streams
    controller.observe(Window(int(100 * GAIN) - 1, 1.0))  # almost paid: not enough
    # Undone; larger parts tried next (kept unless they deliver less: fewer requests).
    assert controller.setting == Setting(start.streams, 2 * start.part_size_bytes)


def test_parts_grow_where_every_request_waits_a_round_trip() -> None:
    # With room in flight, once streams stop paying (the most there may be), parts grow where
    # a round trip is long beside a part's time: 200 ms, and 16 MiB take 168 ms at 100 MB/s.
    controller = StreamController(max_bytes_in_flight=2048 * MIB)
    used = run(controller, round_trips(rtt_seconds=0.2))
    assert settled(used) == Setting(MAX_STREAMS, 32 * MIB)  # 64 MiB paid 23% more


def test_under_the_cap_more_streams_of_smaller_parts_win() -> None:
    # A 50 ms link within the default bytes in flight: a round trip costs a request whatever
    # its size, so the bytes in flight go further as more, smaller requests.
    controller = StreamController()
    used = run(controller, round_trips(rtt_seconds=0.05))
    assert settled(used) == Setting(32, 4 * MIB)  # 64 x 2 MiB paid 29.5% more
    assert settled(used).bytes_in_flight == DEFAULT_MAX_BYTES_IN_FLIGHT


def test_parts_grow_under_pinned_streams() -> None:
    controller = StreamController(streams=4)
    used = run(controller, round_trips(rtt_seconds=0.2))
    assert settled(used) == Setting(4, 32 * MIB)  # 32 MiB paid 37% more; 64 would pass the cap


def test_parts_stay_put_where_they_do_not_pay() -> None:
    controller = StreamController()
    used = run(controller, capped(ceiling=1e12))  # only streams count here
    assert settled(used).part_size_bytes <= START_PART_BYTES


def test_failures_halve_the_streams_at_once() -> None:
    controller = StreamController()
    run(controller, capped(), windows=6)
    before = controller.setting.streams
    assert before >= 8
    controller.observe(Window(10**9, 1.0, failures=1))
    assert controller.setting.streams == before // 2
    controller.observe(Window(10**9, 1.0, failures=3))
    assert controller.setting.streams == before // 4


def test_failures_never_take_the_streams_below_one() -> None:
    controller = StreamController()
    for _ in range(10):
        controller.observe(Window(0, 1.0, failures=1))
    assert controller.setting.streams == 1


def test_a_slower_spell_at_an_unchanged_setting_keeps_the_streams() -> None:
    # Another process took the cores for a while: fewer streams would not give them back.
    controller = StreamController()
    held = settled(run(controller, capped()))
    rate = capped()(held)
    used = []
    for _ in range(3 * REPROBE_WINDOWS):
        used.append(controller.observe(Window(int(rate * 0.2), 1.0)))
    # Probes tried more and fewer streams, and kept neither: the spell is not the streams'.
    assert settled(used) == held
    assert min(s.streams for s in used) == held.streams // 2
    assert settled(run(controller, capped())) == held


def test_windows_limited_by_demand_teach_nothing() -> None:
    controller = StreamController()
    start = controller.setting
    for _ in range(10):
        # A trickle of small reads: a low rate, but because little was asked.
        assert controller.observe(Window(1000, 1.0, saturated=False)) == start
    assert controller.observe(Window(0, 0.0)) == start


def test_it_probes_upwards_again_after_holding() -> None:
    controller = StreamController()
    link = capped(per_stream=100e6, ceiling=1.3e9)
    assert settled(run(controller, link)).streams == 16
    # The link gets faster (the client's CPU frees up): the next probe finds it.
    faster = capped(per_stream=100e6, ceiling=3.2e9)
    assert settled(run(controller, faster, windows=4 * REPROBE_WINDOWS)).streams == 32


def test_pinned_streams_never_move() -> None:
    controller = StreamController(streams=3)
    used = run(controller, capped())
    used += [controller.observe(Window(10, 1.0, failures=5))]
    assert {s.streams for s in used} == {3}


def test_pinned_parts_never_move() -> None:
    controller = StreamController(part_size_bytes=5 * MIB)
    used = run(controller, round_trips())
    assert {s.part_size_bytes for s in used} == {5 * MIB}
    assert settled(used).streams > START_STREAMS  # streams still adapt (to the cap: 12)


def test_both_pinned_is_exactly_what_was_asked() -> None:
    # The cap bounds what adapts; an explicit choice of both knobs is the caller's.
    controller = StreamController(streams=32, part_size_bytes=128 * MIB)
    assert controller.pinned
    used = run(controller, cpu_bound())
    used += [controller.observe(Window(10, 1.0, failures=5))]
    assert set(used) == {Setting(32, 128 * MIB)}


def test_a_pinned_part_size_bounds_the_streams_under_the_cap() -> None:
    controller = StreamController(part_size_bytes=16 * MIB, max_bytes_in_flight=64 * MIB)
    run(controller, capped(ceiling=1e12))
    assert controller.setting == Setting(4, 16 * MIB)


def test_pinned_streams_shrink_the_parts_under_the_cap() -> None:
    controller = StreamController(streams=32, max_bytes_in_flight=64 * MIB)
    assert controller.setting == Setting(32, 2 * MIB)
    many = StreamController(streams=256, max_bytes_in_flight=64 * MIB)
    assert many.setting == Setting(256, 256 * 1024)  # below the smallest part, for the cap
    assert many.smallest_part_bytes == 256 * 1024


def test_growing_streams_shrinks_parts_to_stay_under_the_cap() -> None:
    controller = StreamController(max_bytes_in_flight=32 * MIB)
    used = run(controller, capped(ceiling=1e12))
    assert max(s.streams for s in used) == 32  # 32 parts of the smallest size
    assert all(s.part_size_bytes >= MIN_PART_BYTES for s in used)
    assert all(s.bytes_in_flight <= 32 * MIB for s in used)


def test_a_cap_below_the_smallest_part_is_still_kept() -> None:
    controller = StreamController(max_bytes_in_flight=256 * 1024)
    used = run(controller, capped(ceiling=1e12))
    assert set(used) == {Setting(1, 256 * 1024)}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"streams": 0}, "streams must be > 0"),
        ({"part_size_bytes": -1}, "part_size_bytes must be > 0"),
        ({"max_bytes_in_flight": 0}, "max_bytes_in_flight must be > 0"),
    ],
)
def test_nonsense_is_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StreamController(**kwargs)


@settings(max_examples=200, deadline=None)
@given(
    pinned=st.one_of(st.none(), st.integers(1, 512)),
    cap=st.integers(512, 512 * MIB),
    rates=st.lists(
        st.tuples(
            st.integers(0, 10**10),
            st.floats(0.0, 10.0, allow_nan=False),
            st.booleans(),
            st.integers(0, 2),
        ),
        max_size=80,
    ),
)
def test_the_cap_and_the_bounds_hold_whatever_is_measured(
    pinned: int | None, cap: int, rates: list[tuple[int, float, bool, int]]
) -> None:
    controller = StreamController(streams=pinned, max_bytes_in_flight=cap)
    for nbytes, seconds, saturated, failures in rates:
        setting = controller.observe(Window(nbytes, seconds, saturated, failures))
        assert setting == controller.setting
        if pinned is None:
            assert 1 <= setting.streams <= MAX_STREAMS
        else:
            assert setting.streams == pinned
        assert setting.part_size_bytes <= MAX_PART_BYTES
        assert setting.part_size_bytes >= controller.smallest_part_bytes
        assert setting.bytes_in_flight <= cap


# --- the budget that measures windows and hands them to the controller --------------------------


class Clock:
    """A clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Recording(StreamController):
    """A controller that records the windows it is shown."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.windows: list[Window] = []

    def observe(self, window: Window) -> Setting:
        self.windows.append(window)
        return super().observe(window)


async def test_the_budget_measures_each_request_from_its_own_start() -> None:
    clock = Clock()
    controller = Recording()
    budget = RequestsInFlight(controller, clock=clock)
    streams = budget.setting.streams
    # Half the requests begin at 0, half at 0.25; all end at 0.5: requests of 0.5 s and 0.25 s.
    tickets = [await budget.acquire() for _ in range(streams // 2)]
    clock.now += 0.25
    tickets += [await budget.acquire() for _ in range(streams // 2)]
    clock.now += 0.25
    for ticket in tickets:
        budget.release(ticket, MIB)
    # Little's law: each request's seconds shared with those in flight beside it on average
    # (the early half ran with half the streams for half their time, the late half with all).
    half = streams // 2
    early = 0.5 / ((half * 0.25 + streams * 0.25) / 0.5)
    late = 0.25 / streams
    seconds = half * early + half * late
    assert controller.windows == [Window(streams * MIB, seconds, saturated=False, failures=0)]


async def test_idle_time_between_reads_is_not_the_links() -> None:
    clock = Clock()
    controller = Recording()
    budget = RequestsInFlight(controller, clock=clock)
    streams = budget.setting.streams
    tickets = [await budget.acquire() for _ in range(streams)]
    clock.now += 0.5
    for ticket in tickets:
        budget.release(ticket, MIB)
    clock.now += 100.0  # nothing asked for a while
    assert budget.setting.streams == 2 * streams  # the first window: a step
    tickets = [await budget.acquire() for _ in range(2 * streams)]
    clock.now += 0.5
    for ticket in tickets:
        budget.release(ticket, MIB)
    assert controller.windows == [
        Window(streams * MIB, 0.5, saturated=True, failures=0),
        Window(2 * streams * MIB, 0.5, saturated=True, failures=0),  # twice the rate: kept
    ]
    assert budget.setting.streams == 4 * streams


async def test_requests_begun_before_a_change_are_not_counted_after_it() -> None:
    clock = Clock()
    controller = Recording()
    budget = RequestsInFlight(controller, clock=clock)
    streams = budget.setting.streams
    old = [await budget.acquire() for _ in range(streams)]
    clock.now += 1.0
    budget.release(old.pop(), 0, failed=True)  # a failure: a window, and half the streams
    assert budget.setting.streams == streams // 2
    clock.now += 9.0
    for ticket in old:  # these began at the old setting: slow, and not the new one's
        budget.release(ticket, MIB)
    new = [await budget.acquire() for _ in range(streams // 2)]
    clock.now += 0.25
    for ticket in new:
        budget.release(ticket, 2 * MIB)
    assert controller.windows[-1] == Window(streams // 2 * 2 * MIB, 0.25, True, 0)


async def test_a_window_that_demand_limited_is_not_saturated() -> None:
    clock = Clock()
    controller = Recording()
    budget = RequestsInFlight(controller, clock=clock)
    for _ in range(2 * budget.setting.streams):  # one request at a time
        ticket = await budget.acquire()
        clock.now += 0.1
        budget.release(ticket, MIB)
    assert len(controller.windows) == 2
    assert not any(window.saturated for window in controller.windows)
    assert budget.setting == controller.setting == Setting(START_STREAMS, START_PART_BYTES)


async def test_the_budget_never_lets_more_than_its_streams_run() -> None:
    budget = RequestsInFlight(StreamController(streams=3))
    running = peak = 0

    async def request() -> None:
        nonlocal running, peak
        ticket = await budget.acquire()
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0)
        running -= 1
        budget.release(ticket, 1)

    await asyncio.gather(*(request() for _ in range(20)))
    assert peak == 3


async def test_more_streams_wake_the_waiters_at_once() -> None:
    clock = Clock()
    budget = RequestsInFlight(StreamController(), clock=clock)
    streams = budget.setting.streams
    tickets = [await budget.acquire() for _ in range(streams)]
    waiting = [asyncio.ensure_future(budget.acquire()) for _ in range(3 * streams)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiting)
    clock.now += 1.0
    for ticket in tickets:
        budget.release(ticket, MIB)  # a round: the last release closes the window, a step up
    await asyncio.sleep(0)
    assert budget.setting.streams == 2 * streams
    # The streams freed went to waiters one by one, and the new ones at once.
    assert sum(w.done() for w in waiting) == 2 * streams
    # Those woken before the window closed came after its requests: counted in none; the
    # rest are the next window's.
    assert Counter(w.result().window for w in waiting if w.done()) == {
        -1: streams - 1,
        1: streams + 1,
    }


async def test_a_failed_request_halves_the_streams() -> None:
    budget = RequestsInFlight(StreamController())
    streams = budget.setting.streams
    ticket = await budget.acquire()
    budget.release(ticket, 0, failed=True)
    assert budget.setting.streams == streams // 2


async def test_a_retried_request_halves_the_streams() -> None:
    budget = RequestsInFlight(StreamController())
    streams = budget.setting.streams
    ticket = await budget.acquire()
    with counting_retries(budget.count_retry):
        retrying(Retrying("http://x/m.safetensors", 1, 5, "HTTP 503", 0.0))
    budget.release(ticket, MIB)
    assert budget.setting.streams == streams // 2


async def test_a_request_given_back_leaves_its_place_in_the_window_to_the_next() -> None:
    # A read cancelled mid-way gives its streams back unmeasured: the window must still close.
    clock = Clock()
    controller = Recording()
    budget = RequestsInFlight(controller, clock=clock)
    streams = budget.setting.streams
    tickets = [await budget.acquire() for _ in range(streams)]
    budget.give_back(tickets.pop())  # cancelled
    tickets.append(await budget.acquire())  # the next request takes its place
    clock.now += 1.0
    for ticket in tickets:
        budget.release(ticket, MIB)
    assert controller.windows == [Window(streams * MIB, 1.0, saturated=True, failures=0)]


async def test_a_cancelled_wait_leaks_no_stream() -> None:
    budget = RequestsInFlight(StreamController(streams=1))
    ticket = await budget.acquire()
    waiter = asyncio.ensure_future(budget.acquire())
    await asyncio.sleep(0)
    budget.release(ticket, 1)  # hands the stream to the waiter...
    waiter.cancel()  # ... which is cancelled before it runs: it must give it back
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await asyncio.wait_for(budget.acquire(), 1)  # the one stream is free


class Endless(ByteSource):
    """A source whose reads never end (until cancelled)."""

    @property
    def location(self) -> str:
        return "endless"

    async def open_prefix(self, length: int) -> Prefix:
        return Prefix(b"", 1 << 30, None)

    async def read_into(self, start: int, buffer: memoryview) -> None:
        await asyncio.Event().wait()


async def test_a_read_cancelled_before_its_requests_began_gives_their_streams_back() -> None:
    budget = RequestsInFlight(StreamController(streams=2))
    buffer = memoryview(bytearray(8 * MIB))
    targets = [Target(ByteRange(0, 8 * MIB), buffer)]
    options = ReadOptions(part_size_bytes=MIB, max_concurrency=2)
    read = asyncio.ensure_future(fetch_into(Endless(), targets, options=options, budget=budget))
    await asyncio.sleep(0)  # two requests created (not begun), the third waits for a stream
    read.cancel()
    with pytest.raises(asyncio.CancelledError):
        await read
    for _ in range(2):
        await asyncio.wait_for(budget.acquire(), 1)  # both streams came back


class Recorded(ByteSource):
    """A source that fills reads with their offsets' low bytes and records each request's
    start and length, in the order they began."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, int]] = []

    @property
    def location(self) -> str:
        return "recorded"

    async def open_prefix(self, length: int) -> Prefix:
        return Prefix(b"", 1 << 30, None)

    async def read_into(self, start: int, buffer: memoryview) -> None:
        self.requests.append((start, buffer.nbytes))
        await asyncio.sleep(0)
        buffer[:] = (np.arange(start, start + buffer.nbytes) % 251).astype(np.uint8).tobytes()


async def test_a_reads_last_requests_shrink_so_its_streams_end_together() -> None:
    # Four streams of up to 16 MiB parts: without the shares, 80 MiB went as five 16 MiB
    # requests, the fifth alone on the link for a whole part's time after the others ended.
    # A clock that stands still: no window measures anything, the setting stays put.
    start = Setting(4, 16 * MIB)
    budget = RequestsInFlight(StreamController(streams=4, start=start), clock=lambda: 0.0)
    assert budget.setting == Setting(4, 16 * MIB)
    source = Recorded()
    size = 80 * MIB
    buffer = memoryview(bytearray(size))
    await fetch_into(
        source, [Target(ByteRange(0, size), buffer)], options=ReadOptions(), budget=budget
    )
    assert bytes(buffer[:1000]) == (np.arange(1000) % 251).astype(np.uint8).tobytes()
    queued = size
    for _, length in source.requests:
        # Each request at most an even share of what was still queued (to a granule's size).
        assert length <= max(16 * MIB // SHARE_FLOOR, -(-queued // 4))
        queued -= length
    assert queued == 0
    assert [length for _, length in source.requests][:2] == [16 * MIB] * 2  # whole parts first
    assert all(length <= 16 * MIB // SHARE_FLOOR for _, length in source.requests[-4:])
    assert len(source.requests) <= 5 + 4  # the floor bounds what the shares add


def test_the_shares_count_every_read_that_shares_the_budget() -> None:
    # A model's reads share one budget: one read's tail is no tail while others still queue.
    budget = RequestsInFlight(StreamController(streams=4, start=Setting(4, 16 * MIB)))
    budget.queue(40 * MIB)  # one read near its end: alone, a quarter each
    assert budget.request_limit() == 10 * MIB
    budget.queue(64 * MIB)  # another read of the model, planned beside it
    assert budget.request_limit() == 16 * MIB  # whole parts while the streams stay full
    budget.unqueue(80 * MIB)  # 24 MiB left: 6 MiB each, but
    assert budget.request_limit() == 16 * MIB // SHARE_FLOOR  # never below half a part
