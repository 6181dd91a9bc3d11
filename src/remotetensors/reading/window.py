"""The header window: one request for a file's first bytes, one more only for a header longer
than the window, then the sans-IO parser of the format they hold."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..formats import parse_any_header
from ..formats.magic import looks_like_gguf, looks_like_torch_file
from ..formats.safetensors import PREFIX_BYTES, header_length
from ..sources.cache.source import read_metadata

if TYPE_CHECKING:
    from ..index import FileIndex
    from ..options import ReadOptions
    from ..sources.base import BlockingSource, ByteSource, Prefix

__all__ = ["WHOLE_FILE_BYTES", "index_after_prefix", "read_index", "read_index_now"]


async def read_index(source: ByteSource, options: ReadOptions) -> tuple[FileIndex, bytes]:
    """Read and validate a file's header: one request, two when it is longer than the window.

    The format (safetensors or bintensors) is told by the header's first byte; GGUF by its
    magic, and its header may take a few more requests (see :mod:`.gguf`).

    Returns:
        The index, and the bytes of the file already fetched (bytes ``[0, k)``), which later
        reads reuse. A source with a persistent cache may hold the length and header already:
        then no request is made (see :func:`~..sources.cache.source.read_metadata`).

    Raises:
        HeaderError: the header is malformed (naming the location).
        and whatever the source raises.
    """
    return await index_after_prefix(source, await source.open_prefix(options.header_window_bytes))


async def index_after_prefix(source: ByteSource, prefix: Prefix) -> tuple[FileIndex, bytes]:
    """:func:`read_index` once the first window, ``prefix``, is in: the rest of the header,
    if any, and the parser of its format."""
    data = prefix.data
    if looks_like_gguf(data):
        from .gguf import read_gguf_index  # here: GGUF's parser only for GGUF files

        return await read_gguf_index(source, prefix)
    n = header_length(data, file_size=prefix.size, location=source.location)
    needed = PREFIX_BYTES + n
    # The length and header are the file's metadata: kept by a persistent cache (a later
    # opening of this version finds them without a request). Only the missing tail of the
    # header is read, not the whole header again.
    header = await read_metadata(source, 0, needed, held=data)
    if len(data) < needed:
        data = header
    index = parse_any_header(header[PREFIX_BYTES:], file_size=prefix.size, location=source.location)
    return index, data


WHOLE_FILE_BYTES = 4 * 1024 * 1024
"""A local file up to this size (bytes) is read whole when the sync API opens it (one more
``pread``, under a millisecond from the page cache): code that then reads its tensors one call at
a time makes no system call per tensor, and every tensor comes from the version of the file
whose header was read."""


def read_index_now(
    source: BlockingSource, options: ReadOptions
) -> tuple[FileIndex, bytes | bytearray] | None:
    """:func:`read_index` in the calling thread, for a source with a blocking twin; None for
    a GGUF file, whose header is read in growing windows by the async path, and for a PyTorch
    file (see :mod:`.torch_bin`)."""
    prefix = source.open_prefix_now(options.header_window_bytes)
    if looks_like_gguf(prefix.data) or looks_like_torch_file(prefix.data):
        return None
    n = header_length(prefix.data, file_size=prefix.size, location=source.location)
    needed = PREFIX_BYTES + n
    # A small file is read whole (see WHOLE_FILE_BYTES); of a bigger one, the header.
    wanted = prefix.size if prefix.size <= WHOLE_FILE_BYTES else needed
    data: bytes | bytearray = prefix.data
    if len(data) < wanted:
        # One buffer for the whole, read into in place: no copy of the rest, no second
        # allocation (fresh memory costs a page fault per 4 KiB).
        whole = bytearray(wanted)
        whole[: len(data)] = data
        source.read_into_now(len(data), memoryview(whole)[len(data) :])
        data = whole
    header = bytes(memoryview(data)[PREFIX_BYTES:needed])
    index = parse_any_header(header, file_size=prefix.size, location=source.location)
    return index, data
