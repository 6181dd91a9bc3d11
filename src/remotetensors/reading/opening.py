"""Opening one file: read its header window, then the reader for its format (GGUF files get
:class:`~.gguf.AsyncGGUFFile`, the others :class:`~.file.AsyncTensorFile`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..options import ReadOptions
from ..sources.base import CountingSource
from .file import AsyncTensorFile
from .frameworks import check_framework
from .gguf import AsyncGGUFFile
from .window import read_index, read_index_now

if TYPE_CHECKING:
    from ..sources.base import ByteSource

__all__ = ["open_tensor_file", "open_tensor_file_now"]


async def open_tensor_file(
    source: ByteSource, *, options: ReadOptions | None = None, framework: str = "numpy"
) -> AsyncTensorFile:
    """Read the header of ``source`` and return the open file."""
    options = options or ReadOptions()
    check_framework(framework)
    if not isinstance(source, CountingSource):
        source = CountingSource(source)
    try:
        index, prefix = await read_index(source, options)
    except BaseException:
        await source.aclose()
        raise
    if index.format == "gguf":
        return AsyncGGUFFile(source, index, prefix, options=options, framework=framework)
    return AsyncTensorFile(source, index, prefix, options=options, framework=framework)


def open_tensor_file_now(
    source: ByteSource, *, options: ReadOptions | None = None, framework: str = "numpy"
) -> AsyncTensorFile | None:
    """:func:`open_tensor_file` in the calling thread when ``source`` has a blocking twin (a
    local file); None otherwise, and for a GGUF file (its header is read in growing windows).
    Its reads are counted in ``traffic`` as the async path counts them."""
    if not isinstance(source, CountingSource):
        source = CountingSource(source)
    blocking = source.blocking()
    if blocking is None:
        return None
    options = options or ReadOptions()
    check_framework(framework)
    try:
        read = read_index_now(blocking, options)
    except BaseException:
        blocking.close_now()
        raise
    if read is None:
        blocking.close_now()
        return None
    index, prefix = read
    return AsyncTensorFile(source, index, prefix, options=options, framework=framework)
