"""The one retry policy of every HTTP request remotetensors sends: file reads, the hub's API and
its file listings. No IO.

Which answers are worth another attempt (:data:`RETRY_STATUSES`), how long to wait before it
(the server's ``Retry-After`` up to ``max_retry_after_seconds``, else exponential backoff with
full jitter), and the error once the attempts are spent; every number comes from the caller's
:class:`~.client.HttpOptions`.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from ...errors import RequestTimeoutError, TransportError
from ...redact import redact_url
from ..ratelimit import retry_after_seconds

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .client import HttpOptions

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
"""Request Timeout, Too Many Requests and the server errors a retry may cure."""


def retry_after(
    status: int, headers: Mapping[str, str], url: str, options: HttpOptions
) -> float | None:
    """Seconds that the answer's ``Retry-After`` asks to wait, or None when it asks nothing
    (or nothing well formed: the backoff applies then).

    Raises:
        TransportError: the server asks for more than ``options.max_retry_after_seconds``.
    """
    seconds = retry_after_seconds(headers.get("Retry-After"))
    if seconds is None:
        return None
    if seconds > options.max_retry_after_seconds:
        raise TransportError(
            f"{redact_url(url)}: HTTP {status}, and the server asks to retry after "
            f"{seconds:.0f} s, more "
            f"than max_retry_after_seconds={options.max_retry_after_seconds}"
        )
    return seconds


def backoff_seconds(options: HttpOptions, attempt: int) -> float:
    """A random wait in seconds after failed attempt ``attempt`` (from 1): uniform below
    ``backoff_initial_seconds * 2 ** (attempt - 1)``, capped at ``backoff_max_seconds``."""
    ceiling = min(options.backoff_max_seconds, options.backoff_initial_seconds * 2 ** (attempt - 1))
    return random.uniform(0, ceiling)


def gave_up(shown: str, reason: str, attempts: int, *, timed_out: bool) -> TransportError:
    """The error once ``attempts`` attempts failed, the last for ``reason``; ``shown`` names
    the request (its URLs already redacted). A :class:`RequestTimeoutError` when the last
    attempt got no answer in time."""
    message = f"{shown}: {reason} (gave up after {attempts} attempts)"
    if timed_out:
        return RequestTimeoutError(message, bound="read_timeout_seconds")
    return TransportError(message)
