"""Sans-IO file formats: bytes in, frozen index values out. No network, no asyncio."""

from __future__ import annotations

from ..index import FileIndex
from . import bintensors, safetensors


def parse_any_header(header: bytes, *, file_size: int, location: str = "<bytes>") -> FileIndex:
    """Parse a header of either format, told apart by how it starts (``.bt`` as a hint).

    A safetensors header starts with ``{`` after optional JSON whitespace; a bintensors header
    with its metadata option tag, 0 or 1.

    Raises:
        HeaderError: as the format's own parser does.
    """
    if bintensors.looks_like_bintensors(header, location):
        return bintensors.parse_header(header, file_size=file_size, location=location)
    return safetensors.parse_header(header, file_size=file_size, location=location)
