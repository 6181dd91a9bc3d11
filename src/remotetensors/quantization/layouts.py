"""Each tensor's role and logical size, recognised from names, dtypes and siblings' shapes.

The layouts of GPTQ, AWQ (GEMM, GEMV and GEMV-fast), bitsandbytes, compressed-tensors, FP8,
MXFP4, NVFP4 (ModelOpt) and MLX, checked against what the config says; the entry point is
:func:`count_parameters`. Pure.

A count is exact only when every tensor's layout is understood: a method we do not know, or an
integer tensor holding weights in a layout we do not recognise in a model that says it is
quantized, makes it ``exact=False`` with a problem saying why.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from ..index import TensorTable
from .config import (
    KNOWN_METHODS,
    compressed_groups,
    declared_total,
    describe_quantization,
    int_or_none,
)
from .gguf import GGUF_METHOD
from .moe import find_experts
from .packing import (
    INT_CONTAINERS,
    holds,
    is_awq_gemv_fast,
    packing_words,
    ratio,
    some,
    stored_shape_bits,
    unpack,
)
from .plain import plain_count, plainly_stored
from .targets import group_for
from .values import AUXILIARY, WEIGHT, LogicalTensors, ParameterCount, Quantization, RawLogical

if TYPE_CHECKING:
    from ..index import TensorInfo


# bitsandbytes 4-bit keeps its state beside the packed weight, under the weight's own name.
_BNB4_STATE = re.compile(
    r"\.weight\.(absmax|quant_map|nested_absmax|nested_quant_map|quant_state\.bitsandbytes__\w+)$"
)
# Bookkeeping leaves that only exist in quantized checkpoints.
_AUX_LEAVES = frozenset(
    {
        "qzeros",
        "g_idx",
        "weight_scale",
        "weight_scale_inv",
        "weight_zero_point",
        "weight_g_idx",
        "weight_shape",
        "weight_global_scale",
        "weight_scale_2",
        "input_global_scale",
        "input_scale",
        "output_scale",
        "activation_scale",
        "k_scale",
        "v_scale",
        "SCB",
        "weight_format",
    }
)
_FLOAT8 = frozenset({"F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ"})
# Integer dtypes that hold several packed values per element in some method or other: a weight
# stored in one of them and counted as stored is a guess in a model that says it is quantized.
_PACKED_INTEGERS = frozenset({*INT_CONTAINERS, "U8"})
# Microscaled fp4 beside its scales: two values per byte, one scale per ``group`` of them.
_FP4_SCALES = {"F8_E4M3": ("nvfp4", 16), "F8_E8M0": ("mxfp4", 32), "U8": ("mxfp4", 32)}


def _split(name: str) -> tuple[str, str]:
    prefix, _, leaf = name.rpartition(".")
    return prefix, leaf


def _is_expert(name: str) -> bool:
    return ".experts." in name and "shared_expert" not in name


def _dtype_bits(text: str | None) -> int | None:
    """Bits of a dtype name such as ``int4``, ``fp8``, ``mxfp4``, ``nvfp4``."""
    if not text:
        return None
    match = re.search(r"(\d+)(?!.*\d)", text)
    return int(match.group(1)) if match else None


class _Counter:
    """Gives each tensor its role and logical size; collects problems."""

    def __init__(
        self,
        tensors: Mapping[str, TensorInfo],
        quantization: Quantization | None,
        logical_shapes: Mapping[str, tuple[int, ...]],
        source: str,
    ) -> None:
        self.tensors = tensors
        self.q = quantization
        self.shapes = logical_shapes
        self.source = source
        # Filled in the tensors' order; None until a tensor's role is known.
        self.result: dict[str, RawLogical | None] = dict.fromkeys(tensors)
        self.problems: list[str] = []
        self.layouts: set[str] = set()
        self.unknown_width: list[str] = []  # packed weights counted at an assumed 4 bits
        self.bad_shapes: list[str] = []  # stored logical shapes their packed weight cannot hold
        self.stored_packed: list[str] = []  # integer weights in no known layout, counted as stored
        # packed weights whose shapes contradict the configured width (an ordered set)
        self.width_mismatch: dict[str, None] = {}
        # Weights with a ``<weight>.quant_state.bitsandbytes__*`` beside them, found in one pass.
        self.bnb4_weights = {
            n.partition(".quant_state.")[0] for n in tensors if ".quant_state." in n
        }

    # -- helpers -------------------------------------------------------------------------------

    def weight(
        self,
        name: str,
        count: int,
        shape: tuple[int, ...] | None,
        packing: str | None,
        *,
        exact: bool = True,
    ) -> None:
        self.result[name] = (WEIGHT, count, shape, exact, packing)

    def aux(self, name: str, why: str) -> None:
        info = self.tensors.get(name)
        if info is not None and self.result[name] is None:
            self.result[name] = (AUXILIARY, 0, info.shape, True, why)

    def sibling(self, prefix: str, leaf: str) -> TensorInfo | None:
        return self.tensors.get(f"{prefix}.{leaf}" if prefix else leaf)

    def expert_bits(self, name: str) -> int | None:
        """The width of a routed expert's weights when the config names an ``expert_dtype``."""
        if self.q is None or not self.q.expert_dtype or not _is_expert(name):
            return None
        return _dtype_bits(self.q.expert_dtype)

    def bits_for(self, name: str) -> int | None:
        """The configured width of the module holding ``name`` (per-module overrides first)."""
        q = self.q
        if q is None:
            return None
        prefix = _split(name)[0]
        override = self._mlx_override(prefix)
        if override is not None:
            return int_or_none(override.get("bits"))
        expert = self.expert_bits(name)
        if expert:
            return expert
        if q.method == "compressed-tensors":
            return self.compressed_bits(prefix)
        return q.bits

    def group_for(self, name: str) -> int | None:
        q = self.q
        if q is None:
            return None
        override = self._mlx_override(_split(name)[0])
        if override is not None:
            return int_or_none(override.get("group_size"))
        return q.group_size

    def _mlx_override(self, module: str) -> Mapping[str, Any] | None:
        """MLX's per-module block (``{"bits": …, "group_size": …}``) for ``module``, if any."""
        if self.q is None or self.q.method != "mlx":
            return None
        override = self.q.config.get(module)
        return override if isinstance(override, Mapping) else None

    def compressed_bits(self, module: str) -> int | None:
        assert self.q is not None
        groups = compressed_groups(self.q.config)
        widths = {g.bits for g in groups}
        if len(widths) == 1:
            return widths.pop()
        group = group_for(groups, module, self.problems, self.source)
        return group.bits if group is not None else None

    # -- layouts -------------------------------------------------------------------------------

    def run(self) -> None:
        for name, info in self.tensors.items():
            if self.result[name] is not None:
                continue
            prefix, leaf = _split(name)
            if leaf == "qweight" and info.dtype in INT_CONTAINERS:
                self.qweight(name, info, prefix)
            elif leaf == "weight_packed":
                self.weight_packed(name, info, prefix)
            elif leaf.endswith("_blocks") and info.dtype == "U8":
                self.mxfp4_blocks(name, info, prefix, leaf)
            elif leaf == "weight" and info.dtype == "U8" and self.has_bnb4_state(name):
                self.layouts.add("bitsandbytes")
                count = info.num_elements * 2
                self.weight(name, count, None, "bitsandbytes 4-bit, 2 per U8")
            elif leaf == "weight" and info.dtype == "U8" and self.fp4_kind(info, prefix):
                self.fp4_weight(name, info, prefix)
            elif (
                leaf == "weight"
                and info.dtype in ("U32", "I32")
                and self.sibling(prefix, "scales") is not None
            ):
                self.mlx_weight(name, info, prefix)
            elif leaf == "weight" and info.dtype in ("I8", "U8") and self.expert_bits(name) == 4:
                # Routed experts in fp4/int4 beside a model in another dtype, two per byte.
                self.layouts.add("packed-experts")
                shape = (*info.shape[:-1], info.shape[-1] * 2) if info.shape else None
                packing = f"{self.q.expert_dtype if self.q else 'fp4'} experts, 2 per {info.dtype}"
                self.weight(name, info.num_elements * 2, shape, packing)
        quantized = bool(self.layouts) or self.q is not None
        for name, info in self.tensors.items():
            if self.result[name] is not None:
                continue
            prefix, leaf = _split(name)
            if info.dtype == "F8_E8M0":
                self.aux(name, "F8_E8M0 holds scale exponents, never weights")
            elif quantized and _BNB4_STATE.search(name):
                self.aux(name, "bitsandbytes 4-bit quantization state")
            elif quantized and leaf in _AUX_LEAVES:
                self.aux(name, "quantization bookkeeping")
            elif quantized and leaf == "scale" and self.quantized_weight(prefix):
                self.aux(name, "scale of a quantized weight")
            else:
                if info.dtype in _FLOAT8:
                    self.layouts.add("float8")
                if info.dtype == "I8" and self.sibling(prefix, "SCB") is not None:
                    self.layouts.add("bitsandbytes-int8")
                # An integer weight in a quantized model, in no layout understood, may hold
                # several values per element: its stored count is then a guess.
                guess = self.q is not None and info.dtype in _PACKED_INTEGERS and "weight" in leaf
                if guess:
                    self.stored_packed.append(name)
                self.weight(name, info.num_elements, info.shape, None, exact=not guess)

    def quantized_weight(self, prefix: str) -> bool:
        """Whether module ``prefix`` holds a weight in a quantized dtype (a ``scale`` leaf beside
        it is then bookkeeping, not a norm's parameter)."""
        weight = self.sibling(prefix, "weight")
        return weight is not None and weight.dtype in (_FLOAT8 | {"I8", "U8", "I32", "U32"})

    def has_bnb4_state(self, name: str) -> bool:
        """Whether weight ``name`` has bitsandbytes 4-bit state beside it."""
        return name in self.bnb4_weights or any(
            f"{name}.{leaf}" in self.tensors for leaf in ("absmax", "quant_map", "nested_absmax")
        )

    def fp4_kind(self, info: TensorInfo, prefix: str) -> str | None:
        """``"nvfp4"`` for ModelOpt's NVFP4, a ``weight`` U8 ``[out, in/2]`` (two fp4 values per
        byte) beside a ``weight_scale`` of one F8_E4M3 per 16 values; ``"mxfp4"`` for the same
        with one E8M0 exponent per 32; None for any other U8 weight."""
        scale = self.sibling(prefix, "weight_scale")
        if scale is None or scale.dtype not in _FP4_SCALES or not info.shape:
            return None
        kind, group = _FP4_SCALES[scale.dtype]
        values = info.shape[-1] * 2
        if values % group or scale.shape != (*info.shape[:-1], values // group):
            return None
        return kind

    def fp4_weight(self, name: str, info: TensorInfo, prefix: str) -> None:
        """A weight :meth:`fp4_kind` recognised: two values per byte, its scales bookkeeping."""
        kind = self.fp4_kind(info, prefix)
        self.layouts.add(str(kind))
        shape = (*info.shape[:-1], info.shape[-1] * 2)
        self.weight(name, info.num_elements * 2, shape, f"{kind}, 2 per U8")
        self.aux(f"{prefix}.weight_scale", f"scales of {name}")

    def qweight(self, name: str, info: TensorInfo, prefix: str) -> None:
        """GPTQ (packed along the input dim) and AWQ (GEMM: along the output dim; GEMV: along
        the input dim, rows by output; GEMV-fast: int16, four outputs interleaved)."""
        container = INT_CONTAINERS[info.dtype]
        scales = self.sibling(prefix, "scales")
        qzeros = self.sibling(prefix, "qzeros")
        g_idx = self.sibling(prefix, "g_idx")
        if is_awq_gemv_fast(info, scales, qzeros):
            self.awq_gemv_fast(name, info, prefix, scales)
            return
        configured = self.bits_for(name)
        inferred = None
        if (
            scales is not None
            and qzeros is not None
            and scales.shape
            and qzeros.shape
            and qzeros.dtype in INT_CONTAINERS
        ):
            # Every integer layout packs the zero points as it packs the weights' groups, one
            # zero point per scale: a scale row holds container/bits times a zero-point row.
            inferred = ratio(container * qzeros.shape[-1], scales.shape[-1])
        bits = configured or inferred
        if configured is not None and inferred is not None and configured != inferred:
            self.width_mismatch[name] = None
            bits = inferred
        method = self.q.method if self.q is not None and self.q.method in ("gptq", "awq") else None
        if bits is None:
            self.unknown_width.append(name)
            bits, guessed = 4, True
        else:
            guessed = False
        rows, cols = (*info.shape, 1, 1)[:2] if len(info.shape) < 2 else info.shape[-2:]
        out = scales.shape[-1] if scales is not None and scales.shape else None
        layout = method
        if out is not None and len(info.shape) == 2:
            if cols == out and rows * container % bits == 0:
                layout = "gptq"
            elif cols * container == out * bits:
                layout = "awq"
            elif scales is not None and len(scales.shape) == 2 and scales.shape[0] == rows:
                layout = "awq-gemv"  # one row of scales per output, as the weights' rows
        self.layouts.add("awq" if layout == "awq-gemv" else layout or "gptq")
        packing = packing_words(layout or "packed", bits, container, info.dtype)
        if layout == "gptq" and len(info.shape) == 2:
            # g_idx holds one group index per input: the input width, whatever the packing.
            inputs = g_idx.shape[0] if g_idx is not None and g_idx.shape else None
            exact = inputs is not None or (rows * container % bits == 0 and container % bits == 0)
            if inputs is None:
                inputs = rows * container // bits
            elif rows * container != inputs * bits and not guessed:
                self.width_mismatch[name] = None
            self.weight(name, cols * inputs, (cols, inputs), packing, exact=exact and not guessed)
        elif layout == "awq" and len(info.shape) == 2 and out is not None:
            self.weight(name, rows * out, (out, rows), packing, exact=not guessed)
        elif layout == "awq-gemv":
            inputs, exact = unpack(cols, container, bits)
            self.weight(name, rows * inputs, (rows, inputs), packing, exact=exact and not guessed)
        else:
            count, exact = unpack(info.num_elements, container, bits)
            self.weight(name, count, None, packing, exact=exact and not guessed)
        self.aux(f"{prefix}.qzeros", "zero points of a packed weight")
        self.aux(f"{prefix}.scales", "scales of a packed weight")
        self.aux(f"{prefix}.g_idx", "input order of a packed weight")

    def awq_gemv_fast(
        self, name: str, info: TensorInfo, prefix: str, scales: TensorInfo | None
    ) -> None:
        """AutoAWQ's GEMV-fast: qweight I16 ``[out/4, in/4·4]`` (four outputs interleaved),
        scales and float zero points ``[groups, out]``; the outputs are the scales' columns."""
        assert scales is not None
        self.layouts.add("awq")
        bits = self.bits_for(name)
        guessed = bits is None
        if bits is None:  # GEMV-fast is 4-bit only, but the config did not say so
            self.unknown_width.append(name)
            bits = 4
        out = scales.shape[-1]
        count, exact = unpack(info.num_elements, 16, bits)
        shape = (out, count // out) if count % out == 0 else None
        packing = packing_words("awq-gemv-fast", bits, 16, info.dtype)
        self.weight(name, count, shape, packing, exact=exact and shape is not None and not guessed)
        self.aux(f"{prefix}.qzeros", "zero points of a packed weight")
        self.aux(f"{prefix}.scales", "scales of a packed weight")

    def weight_packed(self, name: str, info: TensorInfo, prefix: str) -> None:
        """compressed-tensors: ``weight_packed`` with its logical ``weight_shape`` beside it."""
        self.layouts.add("compressed-tensors")
        guessed = False
        if info.dtype == "U8":
            container, bits = 8, 4
            packing = "fp4, 2 per U8"
        else:
            container = INT_CONTAINERS.get(info.dtype, info.dtype_info.bits)
            configured = self.bits_for(name)
            stored_bits = stored_shape_bits(self.shapes.get(f"{prefix}.weight_shape"), info)
            found = configured or stored_bits
            if configured is not None and stored_bits is not None and configured != stored_bits:
                # The stored logical shape is the tensor's own word; the config's group may
                # have been matched to the wrong module, or written for another checkpoint.
                self.width_mismatch[name] = None
                found = stored_bits
            if found is None:
                self.unknown_width.append(name)
            bits, guessed = found or 4, found is None
            packing = packing_words("pack-quantized", bits, container, info.dtype)
        if not info.shape:
            self.weight(name, info.num_elements, info.shape, None)
            return
        values = info.shape[-1] * container // bits
        shape: tuple[int, ...] = (*info.shape[:-1], values)
        # An int32 row is padded to whole containers, so its last one may hold fewer values: an
        # upper bound, unless the stored logical shape says (read it with ``logical_shapes``).
        # fp4 in bytes is exact: its groups of 16 always fill whole bytes.
        exact = info.dtype == "U8"
        stored = self.shapes.get(f"{prefix}.weight_shape")
        if stored is not None:
            if holds(stored, info, bits, container):
                shape, exact = tuple(stored), True
            else:
                self.bad_shapes.append(f"{prefix}.weight_shape")
        self.weight(name, math.prod(shape), shape, packing, exact=exact and not guessed)

    def mxfp4_blocks(self, name: str, info: TensorInfo, prefix: str, leaf: str) -> None:
        """gpt-oss MXFP4: ``*_blocks`` U8 ``[..., groups, 16]``, 32 values per group."""
        stem = leaf[: -len("_blocks")]
        scales = self.sibling(prefix, f"{stem}_scales")
        if scales is None and not (self.q is not None and self.q.method == "mxfp4"):
            self.weight(name, info.num_elements, info.shape, None)
            return
        self.layouts.add("mxfp4")
        shape = (
            (*info.shape[:-2], info.shape[-2] * info.shape[-1] * 2)
            if len(info.shape) >= 2
            else None
        )
        self.weight(name, info.num_elements * 2, shape, "mxfp4, 2 per U8")
        self.aux(f"{prefix}.{stem}_scales" if prefix else f"{stem}_scales", f"scales of {name}")

    def mlx_weight(self, name: str, info: TensorInfo, prefix: str) -> None:
        """MLX: ``weight`` U32 ``[out, in·bits/32]`` beside ``scales`` and ``biases``."""
        self.layouts.add("mlx")
        scales = self.sibling(prefix, "scales")
        assert scales is not None
        group = self.group_for(name)
        bits = self.bits_for(name)
        inputs = scales.shape[-1] * group if group and scales.shape else None
        cols = info.shape[-1] if info.shape else 0
        if bits is None and inputs:
            bits = ratio(cols * 32, inputs)
        guessed = bits is None
        if bits is None:
            self.unknown_width.append(name)
            bits = 4
        packing = packing_words("mlx", bits, 32, info.dtype)
        if inputs is not None and inputs * bits == cols * 32:
            shape = (*info.shape[:-1], inputs)
            self.weight(name, math.prod(shape), shape, packing)
        else:
            count, exact = unpack(info.num_elements, 32, bits)
            self.weight(name, count, None, packing, exact=exact and not guessed)
        self.aux(f"{prefix}.scales", f"scales of {name}")
        self.aux(f"{prefix}.biases", f"biases (zero points) of {name}")

    # -- the config against the tensors -----------------------------------------------------

    def check(self) -> None:
        """Problems, one message per kind (a model has thousands of tensors)."""
        if self.unknown_width:
            self.problems.append(
                f"{self.source}: no width in the config or the tensors' shapes for "
                f"{some(self.unknown_width)}; counted as 4-bit, an estimate"
            )
        if self.bad_shapes:
            self.problems.append(
                f"{self.source}: {some(self.bad_shapes)} hold shapes their packed weights cannot "
                "hold; counted from the packed tensors"
            )
        if self.width_mismatch and self.q is not None:
            says = f"says {self.q.bits}-bit" if self.q.bits else "gives another width"
            self.problems.append(
                f"{self.q.source}: {says}, but {some(list(self.width_mismatch))} are packed at "
                "another width (their qzeros against their scales, g_idx, or their stored "
                "weight_shape); counted as the tensors say"
            )
        q = self.q
        if self.stored_packed and q is not None:
            self.problems.append(
                f"{q.source}: says {q.method}, but {some(self.stored_packed)} hold integers in "
                "no layout understood; counted as stored, not exact"
            )
        if q is None or q.method not in KNOWN_METHODS:
            return
        expected = {
            "gptq": {"gptq", "awq"},
            "awq": {"awq", "gptq"},
            "mxfp4": {"mxfp4"},
            "mlx": {"mlx"},
            "fp8": {"float8"},
            "fbgemm_fp8": {"float8"},
            "modelopt": {"nvfp4", "mxfp4", "float8"},
        }.get(q.method)
        if q.method == "bitsandbytes":
            expected = {"bitsandbytes"} if q.bits == 4 else {"bitsandbytes-int8"}
        if q.method == "compressed-tensors":
            fmt = (q.format or "").lower()
            if "pack" in fmt:
                expected = {"compressed-tensors"}
            elif "float" in fmt:
                expected = {"float8"}
        if expected is not None and not (expected & self.layouts):
            seen = ", ".join(sorted(self.layouts)) or "only unpacked tensors"
            self.problems.append(
                f"{q.source}: says {q.method}"
                + (f" ({q.format})" if q.format else "")
                + f", but no tensor is stored that way (seen: {seen}); the count follows "
                "the tensors"
            )


def stored_shape_tensors(tensors: Mapping[str, TensorInfo]) -> list[str]:
    """Names of the small tensors that hold packed weights' logical shapes (compressed-tensors'
    ``*.weight_shape`` beside a ``*.weight_packed``), whose values make those counts exact."""
    if isinstance(tensors, TensorTable) and not tensors.may_have_name_ending("weight_shape"):
        return []
    names = []
    for name in [n for n in tensors if n.endswith("weight_shape")]:
        info = tensors[name]
        prefix, leaf = _split(name)
        if (
            leaf == "weight_shape"
            and info.dtype in ("I64", "I32", "U64", "U32")
            and len(info.shape) == 1
            and 1 <= info.shape[0] <= 8
            and f"{prefix}.weight_packed" in tensors
        ):
            names.append(name)
    return names


def count_parameters(
    tensors: Mapping[str, TensorInfo],
    config: Mapping[str, Any] | None = None,
    *,
    quantization_config: Mapping[str, Any] | None = None,
    metadata: Mapping[str, object] | None = None,
    logical_shapes: Mapping[str, tuple[int, ...]] | None = None,
    config_location: str = "config.json",
    quantization_config_location: str = "quantization_config.json",
) -> ParameterCount:
    """The true parameter count of a model: each tensor's role and logical size.

    Args:
        tensors: name -> TensorInfo, for every tensor of the model.
        config: ``config.json`` as a dict, or ``None``.
        quantization_config: a separate ``quantization_config.json``, or ``None``.
        metadata: the header's or index's metadata (for the declared ``total_parameters``).
        logical_shapes: values of stored logical-shape tensors (compressed-tensors'
            ``*.weight_shape``), name -> shape, when they were read; they make those counts exact.
        config_location, quantization_config_location: named in problem messages.

    Never raises for a bad config: problems are returned in :attr:`ParameterCount.problems`.
    """
    quantization, problems = describe_quantization(
        config,
        quantization_config,
        config_location=config_location,
        quantization_config_location=quantization_config_location,
    )
    # GGUF dims count values, not blocks: every tensor is its elements, whatever its type.
    gguf = quantization is not None and quantization.method == GGUF_METHOD
    if gguf and quantization is not None:  # the file type, not a block of a config, says it
        quantization = replace(quantization, source=f"{config_location}: general.file_type")
    if gguf or (
        quantization is None and isinstance(tensors, TensorTable) and plainly_stored(tensors)
    ):
        table = TensorTable.of(tensors)
        plain = plain_count(table, declared_total(metadata), problems, quantization)
        return _with_experts(plain, table, None, config, config_location)
    source = quantization.source if quantization is not None else config_location
    counter = _Counter(tensors, quantization, logical_shapes or {}, source)
    counter.run()
    counter.check()
    results = cast("dict[str, RawLogical]", counter.result)  # run() gave every tensor its role
    ties = tensors.tied_names() if isinstance(tensors, TensorTable) else frozenset()
    for name in ties:  # a second name of a tied tensor (torch.save keeps both): counted once
        role, _, shape, exact, packing = results[name]
        results[name] = (role, 0, shape, exact, packing)
    # A method we do not know may pack values in a way no tensor shows: never call it exact.
    known = quantization is None or quantization.method in KNOWN_METHODS
    count = ParameterCount(
        total=sum(parameters for _, parameters, _, _, _ in results.values()),
        exact=known and all(exact for _, _, _, exact, _ in results.values()),
        stored_total=sum(info.num_elements for n, info in tensors.items() if n not in ties),
        quantization=quantization,
        tensors=LogicalTensors(results),
        declared_total=declared_total(metadata),
        problems=tuple(dict.fromkeys([*problems, *counter.problems])),
    )
    return _with_experts(count, tensors, results, config, config_location)


def _with_experts(
    count: ParameterCount,
    tensors: Mapping[str, TensorInfo],
    logical: Mapping[str, RawLogical] | None,
    config: Mapping[str, Any] | None,
    source: str,
) -> ParameterCount:
    """``count`` with its mixture of experts, when the tensors hold routed experts (or the
    config says they should)."""
    # Routed experts' names hold "experts." or GGUF's "_exps."; shared experts' "shared_expert"
    # or GGUF's "_shexp.": "expert" or "_exps." or "_shexp." finds them all.
    fragments = ("expert", "_exps.", "_shexp.")
    if isinstance(tensors, TensorTable) and not any(
        tensors.may_have_name_containing(f) for f in fragments
    ):
        names = []  # no name to look at: only the config may say more
    else:
        names = [n for n in tensors if any(f in n for f in fragments)]
    moe, problems = find_experts(names, tensors, logical, config, source=source)
    if moe is None and not problems:
        return count
    return replace(count, moe=moe, problems=tuple(dict.fromkeys([*count.problems, *problems])))
