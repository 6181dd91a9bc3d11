"""Bounding an await by cancelling the task that runs it, instead of running it in a task of
its own (``asyncio.wait_for`` before Python 3.12 makes one): a task costs two more turns of the
event loop, which a scan of 1,000 files pays per request and per connection.

A bound's timer calls :func:`asyncio.Task.cancel` on the current task; where the task catches
the :class:`asyncio.CancelledError`, :func:`withdraw_own_cancel` tells whether the cancellation
was the bound's alone, so that the bound's own error is raised and the task goes on unharmed.
"""

from __future__ import annotations

import asyncio


def withdraw_own_cancel(task: asyncio.Task[object]) -> bool:
    """Withdraw the one cancellation a bound asked of ``task``; False when someone else
    cancelled it too, so that theirs goes on (Python 3.11+ can tell; before, a cancellation
    that races a tripped bound gives the bound's error)."""
    uncancel = getattr(task, "uncancel", None)
    return uncancel is None or uncancel() == 0
