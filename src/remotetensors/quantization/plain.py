"""The plain path of a count: a model no layout applies to, every tensor a weight of its stored
size, counted at C speed without a Python step per tensor. Pure."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

from ..index import TensorTable
from .values import WEIGHT, LogicalTensors, ParameterCount, Quantization, RawLogical

# The dtypes the layouts of :mod:`.layouts` look at: integer containers of packed values,
# bitsandbytes' bytes, and scale exponents. A model with none of them, no config naming a
# quantization and no ``weight_packed`` tensor is counted as stored, tensor by tensor.
PACKING_DTYPES = frozenset({"I16", "U16", "I32", "U32", "U8", "F8_E8M0"})


def plainly_stored(tensors: TensorTable) -> bool:
    """Whether no layout can apply: then every tensor is a weight of its stored size."""
    if not PACKING_DTYPES.isdisjoint(tensors.dtype_names()):
        return False
    if not tensors.may_have_name_ending("weight_packed"):
        return True
    return not any(n.endswith("weight_packed") for n in tensors)


class StoredAsIs(Mapping[str, RawLogical]):
    """The raw logical entries of a model :func:`plainly_stored` cleared: every tensor a weight
    of its stored size, the entry made when asked (as :class:`LogicalTensors` makes its values),
    so counting a plain model takes no Python step per tensor."""

    __slots__ = ("_tensors", "_ties")

    def __init__(self, tensors: TensorTable) -> None:
        self._tensors = tensors
        self._ties = tensors.tied_names()  # a second name of a tied tensor: no parameters

    def __getitem__(self, name: str) -> RawLogical:
        shape = self._tensors[name].shape
        return (WEIGHT, 0 if name in self._ties else math.prod(shape), shape, True, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)


def plain_count(
    tensors: TensorTable,
    declared: int | None,
    problems: tuple[str, ...],
    quantization: Quantization | None = None,
) -> ParameterCount:
    """:func:`count_parameters` for a model that :func:`plainly_stored` cleared (the same
    result the layout pass gives it), or for a GGUF model (``quantization`` names its file
    type): every tensor a weight of its stored size."""
    total = tensors.num_parameters
    return ParameterCount(
        total=total,
        exact=True,
        stored_total=total,
        quantization=quantization,
        tensors=LogicalTensors(StoredAsIs(tensors)),
        declared_total=declared,
        problems=tuple(dict.fromkeys(problems)),
    )
