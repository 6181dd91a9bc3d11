"""True parameter counts of quantized checkpoints, from the headers and ``config.json``. Pure.

A quantized checkpoint stores several weights in one container element (eight 4-bit values per
``I32`` for GPTQ and AWQ, two per byte for bitsandbytes 4-bit, MXFP4 and NVFP4, ``32/bits`` per
``U32`` for MLX) and keeps bookkeeping tensors beside them (scales, zero points, ``g_idx``,
``absmax``, the stored logical shape). The model's true parameter count is what the unquantized
model had: each packed weight counted as the values it holds, bookkeeping left out.

:func:`describe_quantization` reads what the config says (``quantization_config``, a nested
``text_config``, MLX's top-level ``quantization``, or a separate ``quantization_config.json``);
:func:`count_parameters` gives every tensor its role and logical size. The layout is recognised
from the tensors themselves (names, dtypes and the shapes of siblings), so a checkpoint whose
config is missing is still counted right, and a config that contradicts the tensors is reported
instead of believed. For a mixture of experts, :mod:`.moe` finds the routed experts and the
parameters active per token. No IO here.
"""

from __future__ import annotations

from .config import (
    KNOWN_METHODS,
    CompressedGroup,
    compressed_groups,
    declared_total,
    describe_quantization,
)
from .layouts import count_parameters, stored_shape_tensors
from .values import (
    ACTIVE_CONVENTION,
    AUXILIARY,
    WEIGHT,
    ExpertLayer,
    LogicalTensor,
    LogicalTensors,
    MixtureOfExperts,
    ParameterCount,
    Quantization,
)

__all__ = [
    "ACTIVE_CONVENTION",
    "AUXILIARY",
    "KNOWN_METHODS",
    "WEIGHT",
    "CompressedGroup",
    "ExpertLayer",
    "LogicalTensor",
    "LogicalTensors",
    "MixtureOfExperts",
    "ParameterCount",
    "Quantization",
    "compressed_groups",
    "count_parameters",
    "declared_total",
    "describe_quantization",
    "stored_shape_tensors",
]
