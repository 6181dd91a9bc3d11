"""Opening one file: read its header window, then the reader for its format (GGUF files get
:class:`~.gguf.AsyncGGUFFile`, PyTorch files :class:`~.torch_bin.AsyncTorchFile`, the others
:class:`~.file.AsyncTensorFile`).

A file named as a PyTorch file (``.bin``, ``.pt``, ``.pth``) is opened from its end, where a
zip keeps its index (one suffix request); any other from its start, and a zip found there (a
PyTorch file under another name) is then read from its end as well."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..formats.magic import looks_like_torch_file
from ..options import ReadOptions
from ..sources.base import CountingSource
from ..sources.names import names_torch_file
from .file import AsyncTensorFile
from .frameworks import check_framework
from .window import index_after_prefix, read_index_now

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
        # The GGUF and PyTorch readers (tens of milliseconds to import) only for their files.
        if names_torch_file(source.location):
            from .torch_bin import open_torch_file

            return await open_torch_file(source, options=options, framework=framework)
        first = await source.open_prefix(options.header_window_bytes)
        if looks_like_torch_file(first.data):
            from .torch_bin import open_torch_file

            return await open_torch_file(source, options=options, framework=framework, first=first)
        index, prefix = await index_after_prefix(source, first)
    except BaseException:
        await source.aclose()
        raise
    if index.format == "gguf":
        from .gguf import AsyncGGUFFile

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
    if blocking is None or names_torch_file(source.location):
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
