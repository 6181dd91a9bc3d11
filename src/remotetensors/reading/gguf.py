"""GGUF files over any source: the header in a few large reads, tensors dequantized on demand.

What crosses the network for a header: the first window (``ReadOptions.header_window_bytes``),
then, while the header is longer, reads that end where the parser estimates the header ends
(from the sizes of the vocabulary entries and tensor infos seen so far) plus a quarter of the
remaining estimate as margin, and at least half again what is held (see
:func:`~remotetensors.formats.gguf.next_read_end`). A 10 MB tokenizer header takes 3 requests
in all; tensor data is read only by the margin of the last request.

Tensors: F32, F16, BF16, F64 and I8..I64 come back in their own dtype; quantized types (Q4_K,
Q8_0, ...) as float32, dequantized by llama.cpp's ``gguf`` package (an optional dependency:
``pip install 'remotetensors[gguf]'``). ``get_tensor_bytes`` returns the raw blocks of any type.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import DTYPES
from ..errors import MissingDependencyError, SliceError, UnsupportedDtypeError
from ..formats.gguf import GGML_TYPES_BY_NAME, HeaderParser, NeedMore, next_read_end
from ..index import FileIndex
from ..ranges import ByteRange
from ..redact import redact_url
from ..sources.cache.source import read_metadata
from .fetch import Target
from .file import AsyncTensorFile
from .frameworks import convert
from .slicing import numpy_rows

if TYPE_CHECKING:
    from collections.abc import Iterable

    import numpy.typing as npt

    from ..index import TensorInfo
    from ..sources.base import ByteSource, Prefix


async def read_gguf_index(source: ByteSource, prefix: Prefix) -> tuple[FileIndex, bytes]:
    """Read the rest of a GGUF header after its first window.

    Returns:
        The index, and every byte of the file fetched so far (bytes ``[0, k)``).

    Raises:
        HeaderError: malformed, truncated or over a limit of :class:`GGUFLimits`.
    """
    parser = HeaderParser(file_size=prefix.size, location=source.location)
    parser.feed(prefix.data)
    step = parser.advance()
    while isinstance(step, NeedMore):
        have = parser.buffered
        parser.feed(await source.read(have, next_read_end(step, have, prefix.size)))
        step = parser.advance()
    index = step.to_index(file_size=prefix.size)
    # The header (up to the data, or the padding before it as far as it was fetched: the
    # parser had all it needed) is the file's metadata: kept by a persistent cache.
    end = min(index.data_offset, len(parser.data))
    await read_metadata(source, 0, end, held=parser.data)
    return index, parser.data


def is_quantized(dtype_name: str) -> bool:
    """Whether a dtype name is a GGML block type with no numpy equivalent (Q4_K, ...)."""
    return dtype_name not in DTYPES and dtype_name in GGML_TYPES_BY_NAME


def dequantize(raw: npt.NDArray[np.uint8], dtype_name: str, shape: tuple[int, ...]) -> Any:
    """Blocks of a quantized type -> a float32 array of ``shape``, by the ``gguf`` package.

    Raises:
        MissingDependencyError: the ``gguf`` package is not installed.
        UnsupportedDtypeError: the installed ``gguf`` package has no dequantizer for the type.
    """
    try:
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize as gguf_dequantize
    except ImportError:
        raise MissingDependencyError(
            f"dequantizing {dtype_name} needs llama.cpp's gguf package: "
            "pip install 'remotetensors[gguf]' (get_tensor_bytes returns the raw blocks without it)"
        ) from None
    ggml = GGML_TYPES_BY_NAME[dtype_name]
    try:
        qtype = GGMLQuantizationType(ggml.id)
    except ValueError:
        raise UnsupportedDtypeError(
            f"the installed gguf package does not know GGML type {dtype_name}"
        ) from None
    row_elements = shape[-1] if shape else 1
    byte_shape = (*shape[:-1], row_elements // ggml.block_size * ggml.type_size)
    try:
        values = gguf_dequantize(raw.reshape(byte_shape), qtype)
    except NotImplementedError:
        raise UnsupportedDtypeError(
            f"the gguf package cannot dequantize {dtype_name}; use get_tensor_bytes for its blocks"
        ) from None
    return np.ascontiguousarray(values, dtype=np.float32).reshape(shape)


class AsyncGGUFFile(AsyncTensorFile):
    """An open GGUF file: plain types read like safetensors, quantized ones dequantized.

    Slices of quantized tensors follow numpy's indexing rules, as on the dequantized tensor
    (``None``, boolean masks, integer arrays, negative steps and indexes), not the reference
    ``get_slice`` rules of plain types: the rows (first numpy axis) they select are fetched whole
    (a row is whole blocks), dequantized, and the other axes are cut in memory; a 1-D quantized
    tensor fetches the blocks spanning the selection.
    """

    def get_tensor_now(self, name: str) -> Any | None:
        """None, always: a GGUF tensor is read the async way, which decodes quantized blocks
        (the lean path of a local file reads safetensors dtypes only)."""
        return None

    def get_tensors_now(self, names: Iterable[str] | None = None) -> dict[str, Any] | None:
        """None, always (see :meth:`get_tensor_now`)."""
        return None

    async def get_tensors(self, names: Iterable[str] | None = None) -> dict[str, Any]:
        wanted = list(self.offset_keys() if names is None else dict.fromkeys(names))
        infos = [self.info(name) for name in wanted]
        raws = [np.empty(info.nbytes, dtype=np.uint8) for info in infos]
        await self._fetch(
            [
                Target(ByteRange(info.start, info.end), raw.data)
                for info, raw in zip(infos, raws, strict=True)
            ]
        )
        return {
            info.name: self._decoded(info, raw, info.shape)
            for info, raw in zip(infos, raws, strict=True)
        }

    def _decoded(self, info: TensorInfo, raw: npt.NDArray[np.uint8], shape: tuple[int, ...]) -> Any:
        if is_quantized(info.dtype):
            return convert(dequantize(raw, info.dtype, shape), "F32", self._framework)
        return convert(
            raw.view(DTYPES[info.dtype].numpy).reshape(shape), info.dtype, self._framework
        )

    async def _read_slice(self, info: TensorInfo, index: Any) -> Any:
        """``info[index]``; for a quantized tensor with numpy's indexing rules (``None``,
        boolean masks, integer arrays, negative steps), as numpy indexes the dequantized tensor.

        Raises:
            SliceError: the reference rejects the index (plain types), or numpy does
                (quantized types).
        """
        if not is_quantized(info.dtype):
            return await super()._read_slice(info, index)
        self._check_open()
        try:
            selection = numpy_rows(index, info.shape)
        except SliceError as exc:
            raise SliceError(f"{exc}: tensor {info.name} ({redact_url(self.location)})") from None
        if math.prod(selection.shape) == 0:
            return convert(np.empty(selection.shape, np.float32), "F32", self._framework)
        values = await self._dequantized_rows(info, selection.rows)
        # require, not ascontiguousarray: a scalar result stays 0-d, as numpy gives it.
        result = np.require(values[selection.key], requirements="C")
        return convert(result, "F32", self._framework)

    def read_slice_now(self, info: TensorInfo, index: Any) -> Any | None:
        if is_quantized(info.dtype):
            return None  # dequantized by rows on the async path
        return super().read_slice_now(info, index)

    async def _dequantized_rows(
        self, info: TensorInfo, rows: npt.NDArray[np.intp] | None
    ) -> npt.NDArray[np.float32]:
        """Fetch and dequantize ``rows`` of the first dimension (distinct, ascending; all when
        None): whole rows, as a row is whole blocks; for a 1-D tensor, whose elements share
        blocks, the blocks spanning them."""
        if rows is None:
            raw = await self.get_tensor_bytes(info.name)
            values: npt.NDArray[np.float32] = dequantize(raw, info.dtype, info.shape)
            return values
        ggml = GGML_TYPES_BY_NAME[info.dtype]
        if len(info.shape) == 1:
            first = int(rows[0]) // ggml.block_size
            count = int(rows[-1]) // ggml.block_size - first + 1
            start = info.start + first * ggml.type_size
            raw = np.empty(count * ggml.type_size, dtype=np.uint8)
            await self._fetch([Target(ByteRange(start, start + raw.size), raw.data)])
            span = dequantize(raw, info.dtype, (count * ggml.block_size,))
            picked: npt.NDArray[np.float32] = span[rows - first * ggml.block_size]
            return picked
        row_bytes = ggml.nbytes(math.prod(info.shape[1:]))
        runs = _runs(rows)
        raws = [np.empty((stop - begin) * row_bytes, dtype=np.uint8) for begin, stop in runs]
        await self._fetch(
            [
                Target(
                    ByteRange(info.start + begin * row_bytes, info.start + stop * row_bytes),
                    raw.data,
                )
                for (begin, stop), raw in zip(runs, raws, strict=True)
            ]
        )
        return np.concatenate(
            [
                dequantize(raw, info.dtype, (stop - begin, *info.shape[1:]))
                for (begin, stop), raw in zip(runs, raws, strict=True)
            ]
        )


def _runs(sorted_rows: npt.NDArray[Any]) -> list[tuple[int, int]]:
    """Sorted distinct row numbers -> ``[begin, stop)`` runs of consecutive rows."""
    breaks = np.flatnonzero(np.diff(sorted_rows) != 1) + 1
    return [(int(part[0]), int(part[-1]) + 1) for part in np.split(sorted_rows, breaks)]
