"""The values a true count is made of: the quantization a config describes, each tensor's role
and logical size, and the model's total. Pure."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..index import TensorInfo

WEIGHT = "weight"
"""Role of a tensor that holds model parameters (packed or not)."""
AUXILIARY = "auxiliary"
"""Role of quantization bookkeeping: scales, zero points, ``g_idx``, ``absmax``, shapes, …"""

ACTIVE_CONVENTION = (
    "active = total - sum over MoE layers of (routed experts - experts used per token) x the "
    "parameters of one routed expert; embeddings, head, attention, routers and shared experts "
    "count as active"
)
"""How :attr:`MixtureOfExperts.inactive` is counted; stated in ``params --json`` too."""


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


RawLogical = tuple[str, int, "tuple[int, ...] | None", bool, "str | None"]
"""(role, parameters, logical shape, exact, packing): a LogicalTensor before it is built."""


class LogicalTensors(Mapping[str, LogicalTensor]):
    """name -> :class:`LogicalTensor`, in the order of the model's tensors; read-only.

    Values are built when asked for, so counting a model of 200,000 tensors does not build
    200,000 objects that nobody looks at.
    """

    __slots__ = ("_raw",)

    def __init__(self, raw: Mapping[str, RawLogical]) -> None:
        self._raw = raw

    def __getitem__(self, name: str) -> LogicalTensor:
        return LogicalTensor(name, *self._raw[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __contains__(self, name: object) -> bool:
        return name in self._raw

    def raw_items(self) -> Iterator[tuple[str, RawLogical]]:
        """(name, (role, parameters, shape, exact, packing)) without building objects."""
        return iter(self._raw.items())

    def __repr__(self) -> str:
        return f"<LogicalTensors: {len(self._raw)} tensors>"


@dataclass(frozen=True, slots=True)
class ExpertLayer:
    """The routed experts of one MoE layer.

    Attributes:
        name: the experts' container (``model.layers.3.mlp.experts``, GGUF's ``blk.3``).
        layer: the layer's number (the last number in ``name``), or ``None``.
        experts: routed experts stored (numbered modules found, or the config's count when
            they are fused).
        parameters: parameters of all of them (logical: packed weights unpacked).
        nbytes: their bytes as stored, quantization scales included.
    """

    name: str
    layer: int | None
    experts: int
    parameters: int
    nbytes: int

    @property
    def expert_parameters(self) -> int:
        """Parameters of one routed expert (rounded down when they do not divide evenly)."""
        return self.parameters // self.experts

    @property
    def expert_bytes(self) -> int:
        """Bytes of one routed expert as stored (rounded up)."""
        return -(-self.nbytes // self.experts)

    @property
    def even(self) -> bool:
        """Whether the parameters divide evenly among the experts."""
        return self.parameters % self.experts == 0


@dataclass(frozen=True, slots=True)
class MixtureOfExperts:
    """A model's mixture of experts.

    Attributes:
        experts: routed experts per MoE layer (the config's count; the tensors' when it has
            none).
        experts_per_token: experts each token is routed to; ``None`` when the config does not
            say (the active count is then unknown).
        shared_experts: experts every token uses, per MoE layer (counted as active).
        layers: the MoE layers, in the tensors' order; empty when the config describes
            routed experts but no tensor is named as one (the active count is then unknown).
    """

    experts: int
    experts_per_token: int | None
    shared_experts: int
    layers: tuple[ExpertLayer, ...]

    @property
    def inactive(self) -> int | None:
        """Parameters a token does not use: the sum over MoE layers of (experts - used) x one
        expert's parameters; ``None`` when the config does not say how many are used, or when
        no tensor was recognised as a routed expert."""
        k = self.experts_per_token
        if k is None or not self.layers:
            return None
        return sum(max(layer.experts - k, 0) * layer.expert_parameters for layer in self.layers)

    @property
    def exact(self) -> bool:
        """Whether every layer's parameters divide evenly among its experts and the config
        says how many a token uses."""
        return (
            self.experts_per_token is not None
            and bool(self.layers)
            and all(layer.even for layer in self.layers)
        )

    @property
    def expert_parameters(self) -> int:
        """Parameters of one routed expert, in the layer where it is largest."""
        return max((layer.expert_parameters for layer in self.layers), default=0)

    @property
    def expert_bytes(self) -> int:
        """Bytes of one routed expert as stored, in the layer where it is largest."""
        return max((layer.expert_bytes for layer in self.layers), default=0)

    @property
    def layer_experts_bytes(self) -> int:
        """Bytes of one layer's routed experts as stored, in the largest such layer: what an
        expert-parallel server spreads over its devices, layer by layer."""
        return max((layer.nbytes for layer in self.layers), default=0)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (layers summarised, not listed)."""
        return {
            "experts": self.experts,
            "experts_per_token": self.experts_per_token,
            "shared_experts": self.shared_experts,
            "moe_layers": len(self.layers),
            "expert_parameters": self.expert_parameters,
            "expert_bytes": self.expert_bytes,
            "layer_experts_bytes": self.layer_experts_bytes,
            "inactive_parameters": self.inactive,
        }


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
        moe: the mixture of experts, or ``None`` for a dense model (found by :mod:`.moe`).
    """

    total: int
    exact: bool
    stored_total: int
    quantization: Quantization | None
    tensors: LogicalTensors
    declared_total: int | None = None
    problems: tuple[str, ...] = ()
    moe: MixtureOfExperts | None = None

    @property
    def active(self) -> int | None:
        """Parameters used per token: the total for a dense model; for a mixture of experts
        the total minus the routed experts a token does not use (the convention is
        :data:`ACTIVE_CONVENTION`); ``None`` when the config
        does not say how many experts a token uses."""
        if self.moe is None:
            return self.total
        inactive = self.moe.inactive
        return None if inactive is None else self.total - inactive

    @property
    def active_exact(self) -> bool:
        """Whether :attr:`active` is exact: the total is, and so are the experts' figures."""
        return self.exact and (self.moe is None or self.moe.exact)

    @property
    def unpacked(self) -> list[str]:
        """Names of tensors whose values were unpacked (several per stored element)."""
        return [
            n
            for n, (role, _, _, _, packing) in self.tensors.raw_items()
            if role == WEIGHT and packing
        ]

    @property
    def auxiliary(self) -> list[str]:
        """Names of bookkeeping tensors left out of the count."""
        return [n for n, (role, _, _, _, _) in self.tensors.raw_items() if role == AUXILIARY]

    def by_dtype(self, tensors: Mapping[str, TensorInfo]) -> dict[str, int]:
        """True parameters per stored dtype (bookkeeping left out), sorted by dtype."""
        counts: dict[str, int] = {}
        for name, (role, parameters, *_) in self.tensors.raw_items():
            if role == WEIGHT:
                key = tensors[name].dtype
                counts[key] = counts.get(key, 0) + parameters
        return dict(sorted(counts.items()))
