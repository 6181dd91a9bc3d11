"""Offline mode: ``HF_HUB_OFFLINE=1`` (huggingface_hub's switch, so one covers both tools) or
``REMOTETENSORS_OFFLINE=1``. Then no request is sent at all: what the cache holds is served,
and anything else raises :class:`~remotetensors.errors.OfflineError`, naming the location.

The variables are read at every check (a few dictionary lookups), so a test or a notebook can
switch offline mode on and off without restarting.
"""

from __future__ import annotations

import os

from ...errors import OfflineError

__all__ = ["OFFLINE_VARIABLES", "offline", "offline_error"]

OFFLINE_VARIABLES = ("REMOTETENSORS_OFFLINE", "HF_HUB_OFFLINE")
"""The variables that switch offline mode on, in the order a message names them."""

_TRUE = frozenset({"1", "on", "yes", "true"})  # huggingface_hub's spelling of true


def offline_variable() -> str | None:
    """The variable that switches offline mode on now, or None when online."""
    for name in OFFLINE_VARIABLES:
        if os.environ.get(name, "").strip().lower() in _TRUE:
            return name
    return None


def offline() -> bool:
    """Whether offline mode is on (see the module)."""
    return offline_variable() is not None


def offline_error(location: str, what: str = "the file") -> OfflineError:
    """The error for ``what`` at ``location`` (redacted already), which offline mode would need
    to fetch: it is not in the cache."""
    variable = offline_variable() or OFFLINE_VARIABLES[0]
    return OfflineError(
        f"{location}: offline ({variable} is set) and {what} is not in the cache; run once "
        f"online to cache it (unset {variable}), or point REMOTETENSORS_CACHE at the folder "
        "that holds it"
    )
