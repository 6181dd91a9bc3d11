"""From a location string to the source that reads it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from .http import HttpOptions, HttpSource
from .local import LocalSource

if TYPE_CHECKING:
    import httpx

    from .base import ByteSource


def open_source(
    location: str | os.PathLike[str],
    *,
    http_options: HttpOptions | None = None,
    client: httpx.AsyncClient | None = None,
) -> ByteSource:
    """The source for ``location``: ``http(s)://`` URLs, ``file://`` URLs and local paths.

    Raises:
        ValueError: for a URL scheme that no source reads.
    """
    text = os.fspath(location)
    scheme = urlsplit(text).scheme.lower()
    if scheme in ("http", "https"):
        return HttpSource(text, client=client, options=http_options)
    if scheme == "file":
        return LocalSource(unquote(urlsplit(text).path), location=text)
    if scheme == "" or (len(scheme) == 1 and os.name == "nt"):
        return LocalSource(text)
    raise ValueError(f"{text}: no source reads {scheme}:// locations yet")
