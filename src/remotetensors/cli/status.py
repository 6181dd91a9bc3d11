"""A status line on the terminal while the command line waits: silence must not look like a hang.

When nothing has moved for ``SHOW_AFTER_SECONDS`` (no answer, no progress-bar update), one line
on stderr says what is being waited for, for how long, and the last retry and its reason. It is
redrawn in place, cleared as soon as work moves again or the command ends, and never shown when
stderr is not a terminal (pipes and logs get only the final result or the one-line error).
"""

from __future__ import annotations

import shutil
import sys
import threading
from typing import TextIO

from .. import status

SHOW_AFTER_SECONDS = 1.5
_TICK_SECONDS = 0.25


class StatusLine:
    """``with StatusLine("hf://org/model"):`` around the work of a command."""

    def __init__(self, what: str, *, stream: TextIO | None = None) -> None:
        self._what = what
        self._stream = stream or sys.stderr
        self._enabled = self._stream.isatty()
        self._retry = ""
        self._shown = ""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._subscription = status.subscribe(self._on_retry)

    def __enter__(self) -> StatusLine:
        if self._enabled:
            status.activity()
            self._subscription.__enter__()
            self._thread = threading.Thread(target=self._run, name="remotetensors-status")
            self._thread.daemon = True
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._subscription.__exit__(None, None, None)
            self._draw("")

    def _on_retry(self, event: status.Retrying) -> None:
        retries = event.max_attempts - 1
        self._retry = f", retry {event.attempt} of {retries} after: {event.reason}"

    def _run(self) -> None:
        while not self._stop.wait(_TICK_SECONDS):
            idle = status.seconds_since_activity()
            if idle < SHOW_AFTER_SECONDS:
                self._draw("")
                continue
            self._draw(f"remotetensors: waiting {idle:.0f} s{self._retry} ({self._what})")

    def _draw(self, text: str) -> None:
        columns = shutil.get_terminal_size().columns
        if len(text) >= columns:
            text = text[: columns - 4] + "..."  # one line only, or \r cannot redraw it
        with self._lock:
            if text == self._shown:
                return
            # \r and erase-line: the line is rewritten in place and leaves nothing behind.
            self._stream.write("\r\x1b[K" + text)
            self._stream.flush()
            self._shown = text
