"""The worker-thread side of the direct reader's large bodies (``sources/http/direct.py``,
``_receive``), on socket pairs: it fills the target exactly in every framing, reports every
byte, and never waits past its bounds."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from remotetensors.sources.http import direct as rawhttp
from remotetensors.sources.http.framing import (
    BodyOverrun,
    ChunkedBody,
    FramingError,
    LengthBody,
    UntilCloseBody,
)
from tests.rawservers import chunked
from tests.waiting import HANG_SECONDS, started, until


def pair() -> tuple[socket.socket, socket.socket]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)  # as the event loop leaves a connection
    return ours, theirs


def test_the_body_lands_in_the_target_and_every_byte_is_counted() -> None:
    ours, theirs = pair()
    payload = bytes(range(256)) * 40_000  # 10 MB, more than a socket buffer holds
    target = memoryview(bytearray(len(payload)))
    body = LengthBody(target)
    body.feed(memoryview(payload[:100]))  # what came with the head
    moved: list[int] = []
    counted: list[int] = []
    sender = threading.Thread(target=theirs.sendall, args=(payload[100:],))
    sender.start()
    rawhttp._receive(ours, body, moved.append, counted.append, threading.Event(), 5.0)
    sender.join()
    assert (body.received, body.done) == (len(payload), True)
    assert target == payload
    assert sum(moved) == sum(counted) == len(payload) - 100
    assert ours.fileno() == -1  # the thread closes its duplicate, whatever the loop does
    theirs.close()


def test_a_closed_connection_ends_it_with_what_arrived() -> None:
    ours, theirs = pair()
    theirs.sendall(b"x" * 1000)
    theirs.close()
    body = LengthBody(memoryview(bytearray(5000)))
    rawhttp._receive(ours, body, lambda n: None, lambda n: None, threading.Event(), 5.0)
    assert (body.received, body.done) == (1000, False)
    ours.close()


def test_a_shutdown_from_the_loop_wakes_it_while_it_waits() -> None:
    ours, theirs = pair()
    theirs.sendall(b"z" * 10)
    body = LengthBody(memoryview(bytearray(5000)))
    stop = threading.Event()
    receiving = threading.Event()
    # Each wait for bytes lasts an hour and it never gives up on its own: only the shutdown
    # can end it within the bound (a poll that the shutdown did not wake would hang).
    outcome = started(
        lambda: rawhttp._receive(
            ours,
            body,
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
    outcome()
    assert (body.received, body.done) == (10, False)
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
    body = LengthBody(memoryview(bytearray(100)))
    clock = SteppingClock(0.25)  # exact in binary: no rounding at the bound
    idle = 1.0
    outcome = started(
        lambda: rawhttp._receive(
            ours,
            body,
            lambda n: None,
            lambda n: None,
            threading.Event(),
            idle,
            poll_seconds=0.001,
            clock=clock,
        )
    )
    outcome()
    assert (body.received, body.done) == (10, False)
    start, last_byte, *checks = clock.readings
    assert last_byte - start == 0.25  # read when the 10 bytes came
    # It went on waiting up to the bound and gave up at the first check past it.
    assert [c - last_byte for c in checks] == [0.25, 0.5, 0.75, 1.0, 1.25]
    ours.close()
    theirs.close()


def test_a_chunked_body_lands_in_the_target_and_its_framing_does_not() -> None:
    ours, theirs = pair()
    payload = bytes(range(251)) * 40_000  # 10 MB in chunks of odd sizes, some beyond a receive
    encoded = chunked(
        payload, (1024 * 1024 + 3, 7, 65536), extensions=(b"", b";a=b"), trailer=b"X: 1\r\n"
    )
    body = ChunkedBody(memoryview(bytearray(len(payload))))
    body.feed(memoryview(encoded[:100]))  # what came with the head
    with_head = body.received
    moved: list[int] = []
    counted: list[int] = []
    sender = threading.Thread(target=theirs.sendall, args=(encoded[100:],))
    sender.start()
    rawhttp._receive(ours, body, moved.append, counted.append, threading.Event(), 5.0)
    sender.join()
    assert body.done
    assert body.reusable
    assert body.target == payload
    assert sum(moved) == len(encoded) - 100  # every byte received
    assert sum(counted) == len(payload) - with_head  # the file's bytes, not the framing
    theirs.close()


def test_a_body_until_close_ends_when_the_peer_closes() -> None:
    ours, theirs = pair()
    payload = b"u" * 100_000
    body = UntilCloseBody(memoryview(bytearray(len(payload))))

    def send_and_close() -> None:
        theirs.sendall(payload)
        theirs.close()

    sender = threading.Thread(target=send_and_close)
    sender.start()
    rawhttp._receive(ours, body, lambda n: None, lambda n: None, threading.Event(), 5.0)
    sender.join()
    assert (body.done, body.received) == (True, len(payload))
    assert body.target == payload


def test_a_shutdown_from_the_loop_is_not_taken_for_the_end_of_a_body_until_close() -> None:
    ours, theirs = pair()
    theirs.sendall(b"12345")  # every byte, but the peer does not close
    body = UntilCloseBody(memoryview(bytearray(5)))
    stop = threading.Event()
    outcome = started(
        lambda: rawhttp._receive(
            ours, body, lambda n: None, lambda n: None, stop, 3600.0, poll_seconds=3600.0
        )
    )
    assert until(lambda: body.received == 5)
    stop.set()
    ours.shutdown(socket.SHUT_RDWR)
    outcome()
    assert (body.received, body.done) == (5, False)  # the loop stopped it: not an end
    ours.close()
    theirs.close()


@pytest.mark.parametrize(
    ("body", "sent", "error"),
    [
        (UntilCloseBody(memoryview(bytearray(5))), b"hello, and more", BodyOverrun),
        (ChunkedBody(memoryview(bytearray(5))), b"9\r\nhello, an", BodyOverrun),
        (ChunkedBody(memoryview(bytearray(5))), b"2\r\nheXX", FramingError),
    ],
    ids=["until-close-longer", "chunk-beyond-the-target", "malformed-chunk"],
)
def test_a_body_that_breaks_its_framing_raises_in_the_thread(
    body: UntilCloseBody | ChunkedBody, sent: bytes, error: type[Exception]
) -> None:
    ours, theirs = pair()
    theirs.sendall(sent)
    with pytest.raises(error):
        rawhttp._receive(ours, body, lambda n: None, lambda n: None, threading.Event(), 5.0)
    assert ours.fileno() == -1  # closed all the same
    theirs.close()
