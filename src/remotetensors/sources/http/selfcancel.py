"""Bounding an await by cancelling the task that runs it, instead of running it in a task of
its own (``asyncio.wait_for`` before Python 3.12 makes one): a task costs two more turns of the
event loop, which a scan of 1,000 files pays per request and per connection.

A bound's timer calls :func:`asyncio.Task.cancel` on the current task; where the task catches
the :class:`asyncio.CancelledError`, :func:`withdraw_own_cancel` tells whether the cancellation
was the bound's alone, so that the bound's own error is raised and the task goes on unharmed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from .transport import Meter


def withdraw_own_cancel(task: asyncio.Task[object]) -> bool:
    """Withdraw the one cancellation a bound asked of ``task``; False when someone else
    cancelled it too, so that theirs goes on (Python 3.11+ can tell; before, a cancellation
    that races a tripped bound gives the bound's error)."""
    uncancel = getattr(task, "uncancel", None)
    return uncancel is None or uncancel() == 0


class Watch:
    """The bounds of one attempt, watched by a timer per throughput window: when the attempt
    received less than ``floor`` bytes in a window, or ``deadline`` passed, the error that
    ``too_slow(bytes in the window)`` or ``past_deadline(bytes received)`` makes is kept in
    :attr:`tripped` and the current task is cancelled (its ``except CancelledError`` asks
    :func:`withdraw_own_cancel`, then raises ``tripped[0]``).

    A class rather than two closures that name each other: those made a cycle per request
    that held the task (its frames, the buffer) and the source until the cyclic collector ran.
    :meth:`stop` leaves the watch naming neither the timer's callback nor the task.

    Args:
        meter: the attempt's byte count, read at each window's end.
        window: the throughput window, seconds.
        floor: bytes a window must bring.
        deadline: :func:`time.monotonic` by which the request must end, or None.
    """

    __slots__ = (
        "_deadline",
        "_floor",
        "_loop",
        "_mark",
        "_meter",
        "_past_deadline",
        "_task",
        "_timer",
        "_too_slow",
        "_window",
        "tripped",
    )

    def __init__(
        self,
        meter: Meter,
        *,
        window: float,
        floor: float,
        deadline: float | None,
        too_slow: Callable[[int], Exception],
        past_deadline: Callable[[int], Exception],
    ) -> None:
        self._task: asyncio.Task[object] | None = asyncio.current_task()
        assert self._task is not None
        self._loop = asyncio.get_running_loop()
        self._meter = meter
        self._window = window
        self._floor = floor
        self._deadline = deadline
        self._too_slow = too_slow
        self._past_deadline = past_deadline
        self._mark = meter.bytes
        self.tripped: list[Exception] = []
        self._timer = self._arm()

    def _arm(self) -> asyncio.TimerHandle:
        deadline = self._deadline
        timeout = (
            self._window if deadline is None else min(self._window, deadline - time.monotonic())
        )
        return self._loop.call_later(max(timeout, 0.0), self._check)

    def _check(self) -> None:
        # Runs only while the attempt is suspended (the timer is cancelled when it ends), so
        # the cancellation lands inside it.
        received = self._meter.bytes
        if self._deadline is not None and time.monotonic() >= self._deadline:
            self.tripped.append(self._past_deadline(received))
        elif received - self._mark < self._floor:
            self.tripped.append(self._too_slow(received - self._mark))
        else:
            self._mark = received
            self._timer = self._arm()
            return
        if self._task is not None:
            self._task.cancel()

    def stop(self) -> None:
        """The attempt ended: no more windows, and no reference left to its task."""
        self._timer.cancel()
        self._task = None
