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
instead of believed. No IO here.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

from .ctregex import SafePattern, UnsupportedPattern

if TYPE_CHECKING:
    from .index import TensorInfo

WEIGHT = "weight"
"""Role of a tensor that holds model parameters (packed or not)."""
AUXILIARY = "auxiliary"
"""Role of quantization bookkeeping: scales, zero points, ``g_idx``, ``absmax``, shapes, …"""

KNOWN_METHODS = frozenset(
    {
        "gptq",
        "awq",
        "bitsandbytes",
        "compressed-tensors",
        "fp8",
        "fbgemm_fp8",
        "mxfp4",
        "mlx",
    }
)
"""Methods whose layouts are understood (``quant_method`` as configs write it, lowercase)."""


@dataclass(frozen=True, slots=True)
class Quantization:
    """How a checkpoint was quantized, as its config says.

    Attributes:
        method: ``quant_method`` lowercased (``"gptq"``, ``"awq"``, ``"bitsandbytes"``,
            ``"compressed-tensors"``, ``"fp8"``, ``"mxfp4"``, ``"mlx"``, …).
        bits: bits per weight, when the config gives one width (``None`` when mixed or unsaid).
        group_size: weights per scale group; ``None`` when per channel or unsaid.
        modules_not_converted: modules left unquantized (``modules_to_not_convert``,
            ``llm_int8_skip_modules``, compressed-tensors' ``ignore``), as written.
        format: the storage format where the method has several (bitsandbytes ``"nf4"``/
            ``"fp4"``/``"int8"``, compressed-tensors ``"pack-quantized"``, AWQ ``"gemm"``, …).
        expert_dtype: the routed experts' dtype, when the config names one apart from the rest.
        source: where it was read (``"config.json: quantization_config"``).
        config: the quantization block itself.
    """

    method: str
    bits: int | None = None
    group_size: int | None = None
    modules_not_converted: tuple[str, ...] = ()
    format: str | None = None
    expert_dtype: str | None = None
    source: str = ""
    config: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (no raw config)."""
        return {
            "method": self.method,
            "bits": self.bits,
            "group_size": self.group_size,
            "format": self.format,
            "modules_not_converted": list(self.modules_not_converted),
            "expert_dtype": self.expert_dtype,
            "source": self.source,
        }


@dataclass(frozen=True, slots=True)
class LogicalTensor:
    """One tensor as the unquantized model would have it.

    Attributes:
        name: the stored tensor's name.
        role: :data:`WEIGHT` (parameters) or :data:`AUXILIARY` (quantization bookkeeping).
        num_parameters: the parameters it holds: the unpacked element count of a packed weight,
            the stored count of a plain one, 0 for bookkeeping.
        shape: the logical shape when known (``None`` when only the count is known).
        exact: False when ``num_parameters`` is an upper bound (a width that does not divide
            its container, and no logical shape stored).
        packing: how the values are packed (``"gptq 4-bit, 8 per I32"``); ``None`` when stored
            one per element, or for bookkeeping the reason it is bookkeeping.
    """

    name: str
    role: str
    num_parameters: int
    shape: tuple[int, ...] | None
    exact: bool = True
    packing: str | None = None


_Raw = tuple[str, int, "tuple[int, ...] | None", bool, "str | None"]
"""(role, parameters, logical shape, exact, packing): a LogicalTensor before it is built."""


class LogicalTensors(Mapping[str, LogicalTensor]):
    """name -> :class:`LogicalTensor`, in the order of the model's tensors; read-only.

    Values are built when asked for, so counting a model of 200,000 tensors does not build
    200,000 objects that nobody looks at.
    """

    __slots__ = ("_raw",)

    def __init__(self, raw: dict[str, _Raw]) -> None:
        self._raw = raw

    def __getitem__(self, name: str) -> LogicalTensor:
        return LogicalTensor(name, *self._raw[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __contains__(self, name: object) -> bool:
        return name in self._raw

    def raw_items(self) -> Iterator[tuple[str, _Raw]]:
        """(name, (role, parameters, shape, exact, packing)) without building objects."""
        return iter(self._raw.items())

    def __repr__(self) -> str:
        return f"<LogicalTensors: {len(self._raw)} tensors>"


@dataclass(frozen=True, slots=True)
class ParameterCount:
    """A model's true parameter count and how it was found.

    Attributes:
        total: parameters of the unquantized model (an upper bound when ``exact`` is False).
        exact: whether every tensor's count is exact.
        stored_total: elements as stored (the hub's naive count, for comparison).
        quantization: what the config says, or ``None`` for an unquantized model.
        tensors: name -> :class:`LogicalTensor`, for every tensor.
        declared_total: ``total_parameters`` as the file's or index's metadata declares it.
        problems: messages about the config (each naming the file); shown as warnings.
    """

    total: int
    exact: bool
    stored_total: int
    quantization: Quantization | None
    tensors: LogicalTensors
    declared_total: int | None = None
    problems: tuple[str, ...] = ()

    @property
    def unpacked(self) -> list[str]:
        """Names of tensors whose values were unpacked (several per stored element)."""
        return [n for n, t in self.tensors.raw_items() if t[0] == WEIGHT and t[4]]

    @property
    def auxiliary(self) -> list[str]:
        """Names of bookkeeping tensors left out of the count."""
        return [n for n, t in self.tensors.raw_items() if t[0] == AUXILIARY]

    def by_dtype(self, tensors: Mapping[str, TensorInfo]) -> dict[str, int]:
        """True parameters per stored dtype (bookkeeping left out), sorted by dtype."""
        counts: dict[str, int] = {}
        for name, (role, parameters, *_) in self.tensors.raw_items():
            if role == WEIGHT:
                key = tensors[name].dtype
                counts[key] = counts.get(key, 0) + parameters
        return dict(sorted(counts.items()))


# --- what the config says ------------------------------------------------------------------------


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _find_block(
    config: Mapping[str, Any] | None,
    quantization_config: Mapping[str, Any] | None,
    config_location: str,
    quantization_config_location: str,
) -> tuple[Mapping[str, Any] | None, str, bool]:
    """(the quantization block, where it was found, whether it is MLX's ``quantization``)."""
    places: list[tuple[Mapping[str, Any], str]] = []
    if config is not None:
        places.append((config, config_location))
        text = config.get("text_config")
        if isinstance(text, Mapping):
            places.append((text, f"{config_location}: text_config"))
    for where, label in places:
        block = where.get("quantization_config")
        if isinstance(block, Mapping) and block:
            return block, f"{label}: quantization_config", False
    for where, label in places:
        block = where.get("quantization")
        if isinstance(block, Mapping) and block:
            return block, f"{label}: quantization", True
    if quantization_config:
        return quantization_config, quantization_config_location, False
    return None, "", False


def describe_quantization(
    config: Mapping[str, Any] | None,
    quantization_config: Mapping[str, Any] | None = None,
    *,
    config_location: str = "config.json",
    quantization_config_location: str = "quantization_config.json",
) -> tuple[Quantization | None, tuple[str, ...]]:
    """What the config says about quantization: (description or None, problems).

    Never raises; a block that cannot be understood gives a problem message naming the file.
    """
    block, source, mlx = _find_block(
        config, quantization_config, config_location, quantization_config_location
    )
    if block is None:
        return None, ()
    raw_method = block.get("quant_method")
    if isinstance(raw_method, str) and raw_method:
        method = raw_method.strip().lower().replace("_", "-")
        # configs write both spellings; keep the ones the ecosystem uses
        method = {"compressed-tensors": "compressed-tensors", "fbgemm-fp8": "fbgemm_fp8"}.get(
            method, method
        )
    elif mlx or ("bits" in block and "group_size" in block and "quant_method" not in block):
        method = "mlx"
    elif block.get("load_in_4bit") or block.get("load_in_8bit"):
        method = "bitsandbytes"
    else:
        return None, (f"{source}: a quantization block without a method; counted from tensors",)
    problems: list[str] = []
    if method not in KNOWN_METHODS:
        problems.append(
            f"{source}: unknown quantization method {raw_method!r}; the count follows the "
            "tensors' layout"
        )
    bits, group_size, fmt = _bits_group_format(method, block)
    skipped: list[str] = []
    for key in ("modules_to_not_convert", "llm_int8_skip_modules", "ignore"):
        value = block.get(key)
        if isinstance(value, list):
            skipped.extend(str(v) for v in value)
    if method == "mlx":
        skipped.extend(k for k, v in block.items() if v is False)
    expert = block.get("expert_dtype")
    if expert is None and config is not None:
        expert = config.get("expert_dtype")
    description = Quantization(
        method=method,
        bits=bits,
        group_size=group_size,
        modules_not_converted=tuple(dict.fromkeys(skipped)),
        format=fmt,
        expert_dtype=str(expert) if expert is not None else None,
        source=source,
        config=MappingProxyType(dict(block)),
    )
    return description, tuple(problems)


def _bits_group_format(
    method: str, block: Mapping[str, Any]
) -> tuple[int | None, int | None, str | None]:
    bits = _int_or_none(block.get("bits") if "bits" in block else block.get("w_bit"))
    group = _int_or_none(block.get("group_size", block.get("q_group_size")))
    fmt: str | None = None
    if method == "awq":
        fmt = str(block.get("version", "gemm")).lower()
    elif method == "gptq":
        fmt = str(block["checkpoint_format"]) if "checkpoint_format" in block else None
    elif method == "bitsandbytes":
        if block.get("load_in_4bit") or block.get("_load_in_4bit"):
            bits, fmt = 4, str(block.get("bnb_4bit_quant_type", "fp4"))
        else:
            bits, fmt = 8, "int8"
        group = None
    elif method == "compressed-tensors":
        fmt = str(block["format"]) if "format" in block else None
        widths = {g.bits for g in compressed_groups(block)}
        sizes = {g.group_size for g in compressed_groups(block)}
        bits = widths.pop() if len(widths) == 1 else None
        group = sizes.pop() if len(sizes) == 1 else None
    elif method in ("fp8", "fbgemm_fp8"):
        bits, group = 8, None
    elif method == "mxfp4":
        bits, group = 4, 32
    if group is not None and group <= 0:
        group = None  # -1: one group per output channel
    return bits, group, fmt


@dataclass(frozen=True, slots=True)
class CompressedGroup:
    """One of compressed-tensors' ``config_groups``: which modules, and their weights' width."""

    targets: tuple[str, ...]
    bits: int | None
    group_size: int | None
    type: str | None


def compressed_groups(block: Mapping[str, Any]) -> list[CompressedGroup]:
    """compressed-tensors' ``config_groups``, in order."""
    groups = block.get("config_groups")
    found: list[CompressedGroup] = []
    if not isinstance(groups, Mapping):
        return found
    for group in groups.values():
        if not isinstance(group, Mapping):
            continue
        weights = group.get("weights")
        targets = group.get("targets")
        weights = weights if isinstance(weights, Mapping) else {}
        found.append(
            CompressedGroup(
                tuple(str(t) for t in targets) if isinstance(targets, list) else (),
                _int_or_none(weights.get("num_bits")),
                _int_or_none(weights.get("group_size")),
                str(weights["type"]) if "type" in weights else None,
            )
        )
    return found


def declared_total(metadata: Mapping[str, object] | None) -> int | None:
    """``total_parameters`` from a header's ``__metadata__`` or an index's metadata, if any."""
    if not metadata:
        return None
    value = metadata.get("total_parameters")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


# --- layouts -----------------------------------------------------------------------------------

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
_INT_CONTAINERS = {"I32": 32, "U32": 32, "I16": 16, "U16": 16}


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
        self.result: dict[str, _Raw | None] = dict.fromkeys(tensors)
        self.problems: list[str] = []
        self.layouts: set[str] = set()

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
        if q.method == "mlx":
            override = q.config.get(prefix)
            if isinstance(override, Mapping):
                return _int_or_none(override.get("bits"))
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
        prefix = _split(name)[0]
        if q.method == "mlx":
            override = q.config.get(prefix)
            if isinstance(override, Mapping):
                return _int_or_none(override.get("group_size"))
        return q.group_size

    def compressed_bits(self, module: str) -> int | None:
        assert self.q is not None
        groups = compressed_groups(self.q.config)
        widths = {g.bits for g in groups}
        if len(widths) == 1:
            return widths.pop()
        for group in groups:
            for target in group.targets:
                if _target_matches(target, module, self.problems, self.source):
                    return group.bits
        return None

    # -- layouts -------------------------------------------------------------------------------

    def run(self) -> None:
        for name, info in self.tensors.items():
            if self.result[name] is not None:
                continue
            prefix, leaf = _split(name)
            if leaf == "qweight" and info.dtype in _INT_CONTAINERS:
                self.qweight(name, info, prefix)
            elif leaf == "weight_packed":
                self.weight_packed(name, info, prefix)
            elif leaf.endswith("_blocks") and info.dtype == "U8":
                self.mxfp4_blocks(name, info, prefix, leaf)
            elif leaf == "weight" and info.dtype == "U8" and self.has_bnb4_state(name):
                self.layouts.add("bitsandbytes")
                count = info.num_elements * 2
                self.weight(name, count, None, "bitsandbytes 4-bit, 2 per U8")
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
                self.weight(name, info.num_elements, info.shape, None)

    def quantized_weight(self, prefix: str) -> bool:
        """Whether module ``prefix`` holds a weight in a quantized dtype (a ``scale`` leaf beside
        it is then bookkeeping, not a norm's parameter)."""
        weight = self.sibling(prefix, "weight")
        return weight is not None and weight.dtype in (_FLOAT8 | {"I8", "U8", "I32", "U32"})

    def has_bnb4_state(self, name: str) -> bool:
        return any(
            f"{name}.{leaf}" in self.tensors for leaf in ("absmax", "quant_map", "nested_absmax")
        ) or any(n.startswith(f"{name}.quant_state.") for n in self._state_names())

    def _state_names(self) -> list[str]:
        cached: list[str] | None = getattr(self, "_states", None)
        if cached is None:
            cached = [n for n in self.tensors if ".quant_state." in n]
            self._states = cached
        return cached

    def qweight(self, name: str, info: TensorInfo, prefix: str) -> None:
        """GPTQ (packed along the input dim) and AWQ (along the output dim)."""
        container = _INT_CONTAINERS[info.dtype]
        scales = self.sibling(prefix, "scales")
        qzeros = self.sibling(prefix, "qzeros")
        g_idx = self.sibling(prefix, "g_idx")
        bits = self.bits_for(name)
        if bits is None and scales is not None and qzeros is not None and scales.shape:
            # Both methods pack the zero points along the output dim, beside one scale each.
            bits = _ratio(container * qzeros.shape[-1], scales.shape[-1])
        method = self.q.method if self.q is not None and self.q.method in ("gptq", "awq") else None
        if bits is None:
            self.problems.append(
                f"{self.source}: no width for {name} in the config or its siblings; counted "
                "as 4-bit, an estimate"
            )
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
        self.layouts.add(layout or "gptq")
        packing = _packing(layout or "packed", bits, container, info.dtype)
        if layout == "gptq" and len(info.shape) == 2:
            inputs = g_idx.shape[0] if g_idx is not None and g_idx.shape else None
            exact = inputs is not None or (rows * container % bits == 0 and container % bits == 0)
            if inputs is None:
                inputs = rows * container // bits
            self.weight(name, cols * inputs, (cols, inputs), packing, exact=exact and not guessed)
        elif layout == "awq" and len(info.shape) == 2 and out is not None:
            self.weight(name, rows * out, (out, rows), packing, exact=not guessed)
        else:
            count, exact = _unpack(info.num_elements, container, bits)
            self.weight(name, count, None, packing, exact=exact and not guessed)
        self.aux(f"{prefix}.qzeros", "zero points of a packed weight")
        self.aux(f"{prefix}.scales", "scales of a packed weight")
        self.aux(f"{prefix}.g_idx", "input order of a packed weight")

    def weight_packed(self, name: str, info: TensorInfo, prefix: str) -> None:
        """compressed-tensors: ``weight_packed`` with its logical ``weight_shape`` beside it."""
        self.layouts.add("compressed-tensors")
        guessed = False
        if info.dtype == "U8":
            container, bits = 8, 4
            packing = "fp4, 2 per U8"
        else:
            container = _INT_CONTAINERS.get(info.dtype, info.dtype_info.bits)
            found = self.bits_for(name) or _infer_packed_bits(self, prefix, info, container)
            if found is None:
                self.problems.append(
                    f"{self.source}: no width for {name}; counted as 4-bit, an estimate"
                )
            bits, guessed = found or 4, found is None
            per = container // bits if container % bits == 0 else f"{container}/{bits}"
            packing = f"pack-quantized {bits}-bit, {per} per {info.dtype}"
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
            fits = (
                len(stored) == len(info.shape)
                and tuple(stored[:-1]) == tuple(info.shape[:-1])
                and -(-stored[-1] * bits // container) == info.shape[-1]
            )
            if fits:
                shape, exact = tuple(stored), True
            else:
                self.problems.append(
                    f"{self.source}: {prefix}.weight_shape says {list(stored)}, which "
                    f"{name} {list(info.shape)} {info.dtype} at {bits} bits cannot hold; "
                    "counted from the packed tensor"
                )
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
            bits = _ratio(cols * 32, inputs)
        guessed = bits is None
        if bits is None:
            self.problems.append(
                f"{self.source}: no width for {name}; counted as 4-bit, an estimate"
            )
            bits = 4
        packing = f"mlx {bits}-bit, {32 // bits if 32 % bits == 0 else f'32/{bits}'} per U32"
        if inputs is not None and inputs * bits == cols * 32:
            shape = (*info.shape[:-1], inputs)
            self.weight(name, math.prod(shape), shape, packing)
        else:
            count, exact = _unpack(info.num_elements, 32, bits)
            self.weight(name, count, None, packing, exact=exact and not guessed)
        self.aux(f"{prefix}.scales", f"scales of {name}")
        self.aux(f"{prefix}.biases", f"biases (zero points) of {name}")

    # -- the config against the tensors -----------------------------------------------------

    def check(self) -> None:
        q = self.q
        if q is None or q.method not in KNOWN_METHODS:
            return
        expected = {
            "gptq": {"gptq", "awq"},
            "awq": {"awq", "gptq"},
            "mxfp4": {"mxfp4"},
            "mlx": {"mlx"},
            "fp8": {"float8"},
            "fbgemm_fp8": {"float8"},
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


@functools.lru_cache(maxsize=64)
def _packing(layout: str, bits: int, container: int, dtype: str) -> str:
    """``"gptq 4-bit, 8 per I32"``; ``"gptq 3-bit, 32/3 per I32"`` when the width does not
    divide the container."""
    per = f"{container // bits}" if container % bits == 0 else f"{container}/{bits}"
    return f"{layout} {bits}-bit, {per} per {dtype}"


def _ratio(numerator: int, denominator: int) -> int | None:
    if denominator <= 0 or numerator % denominator:
        return None
    value = numerator // denominator
    return value if 1 <= value <= 16 else None


def _unpack(elements: int, container: int, bits: int) -> tuple[int, bool]:
    """Values in ``elements`` containers of ``container`` bits: (count, exact)."""
    total = elements * container
    return total // bits, container % bits == 0


def _infer_packed_bits(
    counter: _Counter, prefix: str, info: TensorInfo, container: int
) -> int | None:
    stored = counter.shapes.get(f"{prefix}.weight_shape")
    if stored and info.shape:
        return _ratio(container * info.shape[-1], stored[-1]) or None
    return None


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> SafePattern:
    return SafePattern(pattern)


def _target_matches(target: str, module: str, problems: list[str], source: str) -> bool:
    """A compressed-tensors target: ``re:`` + a pattern (matched safely), a module name, or a
    layer class (``Linear``), which every linear layer is."""
    if target.startswith("re:"):
        try:
            return _compiled(target[3:]).match(module)
        except UnsupportedPattern as exc:
            message = f"{source}: target {target!r} not understood ({exc}); not matched"
            if message not in problems:
                problems.append(message)
            return False
    if target[:1].isupper() and "." not in target:
        return True  # a class name; the packed tensor says it is a quantized linear layer
    return module == target or module.endswith(f".{target}")


def stored_shape_tensors(tensors: Mapping[str, TensorInfo]) -> list[str]:
    """Names of the small tensors that hold packed weights' logical shapes (compressed-tensors'
    ``*.weight_shape`` beside a ``*.weight_packed``), whose values make those counts exact."""
    names = []
    for name, info in tensors.items():
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
    source = quantization.source if quantization is not None else config_location
    counter = _Counter(tensors, quantization, logical_shapes or {}, source)
    counter.run()
    counter.check()
    results = cast("dict[str, _Raw]", counter.result)  # run() gave every tensor its role
    return ParameterCount(
        total=sum(t[1] for t in results.values()),
        exact=all(t[3] for t in results.values()),
        stored_total=sum(info.num_elements for info in tensors.values()),
        quantization=quantization,
        tensors=LogicalTensors(results),
        declared_total=declared_total(metadata),
        problems=tuple(dict.fromkeys([*problems, *counter.problems])),
    )
