"""The array that fetched bytes are written into, and its completion into a numpy result.

Bytes land in the final array's own buffer at their offset, in C order: no full-size intermediate
copy. Only sub-byte dtypes (F4, F6) need a second step, unpacking values into one byte each.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt  # numpy.typing costs ~10 ms to import; annotations only

from ..dtypes import DType, unpack


class OutputArray:
    """A result array under construction.

    ``buffer`` is a writable byte view of exactly ``nbytes`` bytes; byte ``k`` of the tensor's data
    in C order goes to ``buffer[k]``. :meth:`result` returns the finished array (writable,
    C-contiguous, of the dtype's numpy type and the given shape).
    """

    def __init__(self, dt: DType, shape: tuple[int, ...]) -> None:
        self.dtype = dt
        self.shape = shape
        self.num_elements = math.prod(shape)
        # Bytes first, typed view at the end: one allocation, and the byte view is free.
        self._storage: npt.NDArray[np.uint8] = np.empty(
            dt.nbytes(self.num_elements), dtype=np.uint8
        )
        self.buffer: memoryview = self._storage.data

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor data in the file's encoding."""
        return self.buffer.nbytes

    def result(self) -> npt.NDArray[Any]:
        """The finished array; sub-byte dtypes are unpacked to one ml_dtypes value per element."""
        if self.dtype.packed:
            return unpack(self._storage, self.dtype, self.num_elements).reshape(self.shape)
        return self._storage.view(self.dtype.numpy).reshape(self.shape)
