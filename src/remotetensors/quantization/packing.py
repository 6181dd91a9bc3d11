"""Arithmetic of packed integers: how many values a container holds, whether a stored logical
shape fits a packed tensor, and the words that describe a packing. Pure."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..index import TensorInfo

INT_CONTAINERS = {"I32": 32, "U32": 32, "I16": 16, "U16": 16}
"""Integer dtypes that hold packed values, and their bits."""


def some(names: list[str]) -> str:
    """``"a.qweight"`` or ``"1,024 tensors (a.qweight, b.qweight, …)"``."""
    if len(names) == 1:
        return names[0]
    return f"{len(names):,} tensors ({', '.join(names[:2])}, …)"


@functools.lru_cache(maxsize=64)
def packing_words(layout: str, bits: int, container: int, dtype: str) -> str:
    """``"gptq 4-bit, 8 per I32"``; ``"gptq 3-bit, 32/3 per I32"`` when the width does not
    divide the container."""
    per = f"{container // bits}" if container % bits == 0 else f"{container}/{bits}"
    return f"{layout} {bits}-bit, {per} per {dtype}"


def ratio(numerator: int, denominator: int) -> int | None:
    if denominator <= 0 or numerator % denominator:
        return None
    value = numerator // denominator
    return value if 1 <= value <= 16 else None


def unpack(elements: int, container: int, bits: int) -> tuple[int, bool]:
    """Values in ``elements`` containers of ``container`` bits: (count, exact)."""
    total = elements * container
    return total // bits, container % bits == 0


def holds(stored: tuple[int, ...], info: TensorInfo, bits: int, container: int) -> bool:
    """Whether a packed tensor of ``info``'s shape holds logical shape ``stored`` at ``bits``
    per value: the same leading dims, and the last one packed into whole containers."""
    return (
        len(stored) == len(info.shape)
        and tuple(stored[:-1]) == tuple(info.shape[:-1])
        and -(-stored[-1] * bits // container) == info.shape[-1]
    )


def stored_shape_bits(stored: tuple[int, ...] | None, info: TensorInfo) -> int | None:
    """The width at which a packed tensor holds its stored logical shape, if exactly one does.

    A row of ``n`` values at ``b`` bits fills ``ceil(n·b/container)`` containers; for rows
    longer than a container's bits that leaves one width at most.
    """
    container = INT_CONTAINERS.get(info.dtype)
    if not stored or not info.shape or container is None:
        return None
    widths = [b for b in range(1, container + 1) if holds(stored, info, b, container)]
    return widths[0] if len(widths) == 1 else None


def is_awq_gemv_fast(
    info: TensorInfo, scales: TensorInfo | None, qzeros: TensorInfo | None
) -> bool:
    """AutoAWQ's GEMV-fast: an I16 qweight whose rows are a quarter of the outputs (four
    interleaved), beside scales and floating zero points of one shape ``[groups, out]``."""
    return (
        info.dtype == "I16"
        and len(info.shape) == 2
        and scales is not None
        and qzeros is not None
        and len(scales.shape) == 2
        and qzeros.shape == scales.shape
        and qzeros.dtype not in INT_CONTAINERS
        and scales.shape[-1] == info.shape[0] * 4
    )
