"""What the IO layers are doing, for front ends that show it: retries and signs of progress.

Sources report here (:func:`retrying`, :func:`activity`) without knowing who listens; the
command line shows a status line on a terminal, and a program can :func:`subscribe` its own
listener. Retries are also logged on the ``remotetensors`` logger at INFO level.

Listeners are called on the IO thread and must return quickly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

log = logging.getLogger("remotetensors")


@dataclass(frozen=True, slots=True)
class Retrying:
    """A request failed and will be tried again after ``wait_seconds``.

    Attributes:
        location: the file (URL) being read.
        attempt: the attempt that failed, from 1.
        max_attempts: attempts allowed in all.
        reason: what went wrong, in words (``"request timed out"``, ``"HTTP 503"``).
        wait_seconds: the pause before the next attempt.
    """

    location: str
    attempt: int
    max_attempts: int
    reason: str
    wait_seconds: float


Listener = Callable[[Retrying], None]

_listeners: list[Listener] = []
_lock = threading.Lock()
_last_activity = time.monotonic()


def retrying(event: Retrying) -> None:
    """Report a retry to the log, every listener, and the current task's retry counter
    (:func:`counting_retries`)."""
    log.info(
        "%s: %s; attempt %d of %d in %.1f s",
        event.location,
        event.reason,
        event.attempt + 1,
        event.max_attempts,
        event.wait_seconds,
    )
    with _lock:
        listeners = list(_listeners)
    for listener in listeners:
        listener(event)
    counter = _retry_counter.get()
    if counter is not None:
        counter(event)


def activity() -> None:
    """Note that work moved forward (bytes arrived, a file was opened)."""
    global _last_activity
    _last_activity = time.monotonic()


def seconds_since_activity() -> float:
    """Seconds since the last :func:`activity` (monotonic clock)."""
    return time.monotonic() - _last_activity


BytesListener = Callable[[int], None]

_bytes_listener: ContextVar[BytesListener | None] = ContextVar(
    "remotetensors_bytes_listener", default=None
)


def bytes_listener() -> BytesListener | None:
    """Who wants to hear of body bytes received by the current task (a progress bar), or None.

    Sources ask in the task that reads (tasks inherit it from where they were created) and call
    it with each piece's size as bytes arrive, so a bar moves during a long request.
    """
    return _bytes_listener.get()


@contextmanager
def counting_bytes(listener: BytesListener) -> Iterator[None]:
    """Make ``listener`` the :func:`bytes_listener` of the current task while the block runs."""
    token = _bytes_listener.set(listener)
    try:
        yield
    finally:
        _bytes_listener.reset(token)


_retry_counter: ContextVar[Listener | None] = ContextVar(
    "remotetensors_retry_counter", default=None
)


@contextmanager
def counting_retries(listener: Listener) -> Iterator[None]:
    """Call ``listener`` with the retries of the current task (and the tasks it creates) while
    the block runs: the reader's stream budget backs off on them. Unlike :func:`subscribe`,
    no lock and no global list: a read's own retries only."""
    token = _retry_counter.set(listener)
    try:
        yield
    finally:
        _retry_counter.reset(token)


@contextmanager
def subscribe(listener: Listener) -> Iterator[None]:
    """Call ``listener`` with every :class:`Retrying` event while the block runs."""
    with _lock:
        _listeners.append(listener)
    try:
        yield
    finally:
        with _lock:
            _listeners.remove(listener)
