"""Progress bars (tqdm.auto) for work long enough to matter.

A bar appears only after ``SHOW_AFTER_SECONDS``, so quick reads print nothing. ``progress=None``
means: show bars when stderr is a terminal.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

SHOW_AFTER_SECONDS = 1.0


class Progress(Protocol):
    def update(self, n: int = 1) -> Any: ...

    def close(self) -> None: ...


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def wanted(progress: bool | None) -> bool:
    """Whether to show bars: ``progress`` itself, or when None, whether stderr is a terminal."""
    if progress is None:
        return sys.stderr.isatty()
    return progress


def bar(*, total: int, unit: str, description: str, enabled: bool) -> Progress:
    """A bar over ``total`` units, or a silent stand-in when disabled."""
    if not enabled:
        return _Silent()
    from tqdm.auto import tqdm

    result: Progress = tqdm(
        total=total,
        unit=unit,
        unit_scale=unit == "B",
        unit_divisor=1024 if unit == "B" else 1000,
        desc=description,
        delay=SHOW_AFTER_SECONDS,
        leave=False,
    )
    return result
