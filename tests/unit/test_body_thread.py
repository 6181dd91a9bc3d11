"""The worker-thread side of the direct reader's large bodies (``sources/http/direct.py``, ``_receive``), on socket
pairs: it fills the target exactly, reports every byte, and never waits past its bounds."""

from __future__ import annotations

import socket
import threading
import time

from remotetensors.sources.http import direct as rawhttp
from tests.waiting import HANG_SECONDS, started


def pair() -> tuple[socket.socket, socket.socket]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)  # as the event loop leaves a connection
    return ours, theirs


def test_the_body_lands_in_the_target_and_every_byte_is_counted() -> None:
    ours, theirs = pair()
    payload = bytes(range(256)) * 40_000  # 10 MB, more than a socket buffer holds
    target = memoryview(bytearray(len(payload)))
    target[:100] = payload[:100]  # what came with the head
    moved: list[int] = []
    counted: list[int] = []
    sender = threading.Thread(target=theirs.sendall, args=(payload[100:],))
    sender.start()
    received, complete = rawhttp._receive(
        ours, target, 100, moved.append, counted.append, threading.Event(), 5.0
    )
    sender.join()
    assert (received, complete) == (len(payload), True)
    assert target == payload
    assert sum(moved) == sum(counted) == len(payload) - 100
    assert ours.fileno() == -1  # the thread closes its duplicate, whatever the loop does
    theirs.close()


def test_a_closed_connection_ends_it_with_what_arrived() -> None:
    ours, theirs = pair()
    theirs.sendall(b"x" * 1000)
    theirs.close()
    target = memoryview(bytearray(5000))
    received, complete = rawhttp._receive(
        ours, target, 0, lambda n: None, lambda n: None, threading.Event(), 5.0
    )
    assert (received, complete) == (1000, False)
    ours.close()


def test_a_shutdown_from_the_loop_wakes_it_while_it_waits() -> None:
    ours, theirs = pair()
    theirs.sendall(b"z" * 10)
    target = memoryview(bytearray(5000))
    stop = threading.Event()
    receiving = threading.Event()
    # Each wait for bytes lasts an hour and it never gives up on its own: only the shutdown
    # can end it within the bound (a poll that the shutdown did not wake would hang).
    outcome = started(
        lambda: rawhttp._receive(
            ours,
            target,
            0,
            lambda n: receiving.set(),
            lambda n: None,
            stop,
            3600.0,
            poll_seconds=3600.0,
        )
    )
    assert receiving.wait(HANG_SECONDS)  # it is in its loop; the peer sends nothing more
    time.sleep(0.1)  # not a bound: lets it reach its wait (else it meets the shutdown sooner)
    stop.set()
    ours.shutdown(socket.SHUT_RDWR)
    assert outcome() == (10, False)
    ours.close()
    theirs.close()


class SteppingClock:
    """Monotonic seconds that move ``step`` on every reading; the readings are kept."""

    def __init__(self, step: float) -> None:
        self.step = step
        self.readings: list[float] = []

    def __call__(self) -> float:
        self.readings.append((len(self.readings) + 1) * self.step)
        return self.readings[-1]


def test_with_no_loop_to_stop_it_it_gives_up_after_its_idle_bound() -> None:
    ours, theirs = pair()  # the peer stays open and silent
    theirs.sendall(b"y" * 10)
    target = memoryview(bytearray(100))
    clock = SteppingClock(0.25)  # exact in binary: no rounding at the bound
    idle = 1.0
    outcome = started(
        lambda: rawhttp._receive(
            ours,
            target,
            0,
            lambda n: None,
            lambda n: None,
            threading.Event(),
            idle,
            poll_seconds=0.001,
            clock=clock,
        )
    )
    assert outcome() == (10, False)
    start, last_byte, *checks = clock.readings
    assert last_byte - start == 0.25  # read when the 10 bytes came
    # It went on waiting up to the bound and gave up at the first check past it.
    assert [c - last_byte for c in checks] == [0.25, 0.5, 0.75, 1.0, 1.25]
    ours.close()
    theirs.close()
