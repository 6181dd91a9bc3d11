"""Progress bars (tqdm) for work long enough to matter, in terminals and notebooks.

A bar appears only after ``SHOW_AFTER_SECONDS``, so quick reads print nothing. ``progress=None``
means: show bars when stderr is a terminal or the code runs in a Jupyter kernel. In a notebook
the bar is tqdm's widget when ipywidgets is installed, else tqdm's text bar (which Jupyter shows
in the cell's output), never tqdm's warning about missing ipywidgets.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any, Protocol

from .. import status

SHOW_AFTER_SECONDS = 1.0


class Progress(Protocol):
    def update(self, n: int = 1) -> Any: ...

    def close(self) -> None: ...


class _Silent:
    def update(self, n: int = 1) -> None:
        status.activity()

    def close(self) -> None:
        pass


class _Shown:
    """A tqdm bar that also reports activity (so the command line's status line stays quiet)."""

    def __init__(self, bar: Any) -> None:
        self._bar = bar

    def update(self, n: int = 1) -> None:
        status.activity()
        self._bar.update(n)

    def close(self) -> None:
        self._bar.close()


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (ipykernel's shell), without importing IPython."""
    if "ipykernel" not in sys.modules:
        return False
    ipython = sys.modules.get("IPython")
    get_ipython = getattr(ipython, "get_ipython", None)
    shell = get_ipython() if get_ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def wanted(progress: bool | None) -> bool:
    """Whether to show bars: ``progress`` itself, or when None, whether stderr is a terminal
    or this is a notebook."""
    if progress is None:
        return sys.stderr.isatty() or in_notebook()
    return progress


def _tqdm_class() -> Any:
    if in_notebook() and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.notebook import tqdm as notebook_tqdm

        return notebook_tqdm
    from tqdm.std import tqdm

    return tqdm


def bar(*, total: int, unit: str, description: str, enabled: bool) -> Progress:
    """A bar over ``total`` units, or a silent stand-in when disabled."""
    if not enabled:
        return _Silent()
    shown = _tqdm_class()(
        total=total,
        unit=unit,
        unit_scale=unit == "B",
        unit_divisor=1024 if unit == "B" else 1000,
        desc=description,
        delay=SHOW_AFTER_SECONDS,
        leave=False,
        file=sys.stderr,
    )
    return _Shown(shown)
