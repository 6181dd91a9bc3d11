"""Waiting in tests without timing them: wait for an event, and fail only at a bound that a hang
reaches and a slow machine does not.

Timings belong in ``benchmarks/``; a test asserts what happened (the error, the requests, the
connection the server saw closed), and these helpers only keep a broken run from hanging.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar, cast

T = TypeVar("T")

HANG_SECONDS = 60.0
"""The bound: far beyond what any event awaited here takes on a loaded machine."""


def until(condition: Callable[[], bool], seconds: float = HANG_SECONDS) -> bool:
    """Whether ``condition`` becomes true within ``seconds`` (checked every 20 ms)."""
    ends = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > ends:
            return False
        time.sleep(0.02)
    return True


def started(call: Callable[[], T]) -> Callable[[], T]:
    """Start ``call`` in a thread of its own; returns a function that waits for it and returns
    what it returned or raises what it raised, failing the test if it has not finished within
    :data:`HANG_SECONDS` (it would hang otherwise)."""
    outcome: list[tuple[bool, object]] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the waiting thread
            outcome.append((False, exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def result() -> T:
        thread.join(HANG_SECONDS)
        assert not thread.is_alive(), f"still running after {HANG_SECONDS:g} s: a hang"
        returned, value = outcome[0]
        if not returned:
            assert isinstance(value, BaseException)
            raise value
        return cast(T, value)

    return result


def finishes(call: Callable[[], T]) -> T:
    """``call()``, run in a thread and awaited with the bound of :func:`started`."""
    return started(call)()
