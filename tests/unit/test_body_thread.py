"""The worker-thread side of the direct reader's large bodies (``sources/http/direct.py``, ``_receive``), on socket
pairs: it fills the target exactly, reports every byte, and never waits past its bounds."""

from __future__ import annotations

import socket
import threading
import time

from remotetensors.sources.http import direct as rawhttp


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


def test_a_shutdown_from_the_loop_wakes_it_at_once() -> None:
    ours, theirs = pair()
    target = memoryview(bytearray(5000))
    stop = threading.Event()

    def shut() -> None:
        time.sleep(0.2)
        stop.set()
        ours.shutdown(socket.SHUT_RDWR)

    threading.Thread(target=shut).start()
    started = time.monotonic()
    received, complete = rawhttp._receive(
        ours, target, 0, lambda n: None, lambda n: None, stop, 30.0
    )
    assert (received, complete) == (0, False)
    assert time.monotonic() - started < 0.9  # not the poll's one-second wait, nor 30 s
    ours.close()
    theirs.close()


def test_with_no_loop_to_stop_it_it_gives_up_after_its_idle_bound() -> None:
    ours, theirs = pair()  # the peer stays open and silent
    theirs.sendall(b"y" * 10)
    target = memoryview(bytearray(100))
    started = time.monotonic()
    received, complete = rawhttp._receive(
        ours, target, 0, lambda n: None, lambda n: None, threading.Event(), 0.3
    )
    assert (received, complete) == (10, False)
    assert time.monotonic() - started < 2.5  # the bound, plus at most one poll
    ours.close()
    theirs.close()
