"""How much memory a model needs to serve: its weights as stored, and its KV cache. Pure.

The weights' bytes are exact: the sum of the tensors' data as the headers describe it (packed
weights at their packed size, scales included), which is what an inference engine loads. For a
mixture of experts, the bytes of one routed expert and of one layer's routed experts are given
too (what expert-parallel serving spreads over devices).

The KV cache grows with the context. Per sequence and token, each attention layer keeps:

- standard attention (MHA, GQA, MQA): a key and a value per KV head,
  ``2 · num_key_value_heads · head_dim`` elements;
- multi-latent attention (DeepSeek-V2/V3 style, ``kv_lora_rank`` in the config): the compressed
  latent and the shared rotary key, ``kv_lora_rank + qk_rope_head_dim`` elements, as serving
  engines (vLLM, SGLang) cache it;
- sliding-window layers keep at most ``sliding_window`` tokens; chunked-attention layers at
  most ``attention_chunk_size``;
- linear-attention, recurrent and state-space layers keep a state that does not grow with the
  context; it is not counted. Which layer is which comes from the config's own keys
  (:mod:`.kv_layers`: ``layer_types``, Jamba's period and offset, Nemotron-H's pattern,
  Llama-4's ``no_rope_layers``, …); where a config does not say, every layer is counted and the
  estimate is labelled an upper bound (:attr:`MemoryEstimate.kv_cache_bound`).

A config that lacks what the formula needs gives the weights and says why the cache is unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .config import text_config
from .kv_layers import layer_kinds, positive_int

if TYPE_CHECKING:
    from .values import MixtureOfExperts

KV_DTYPE_BITS = {
    "F32": 32,
    "F16": 16,
    "BF16": 16,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "I8": 8,
    "F4": 4,
}
"""KV-cache dtypes, by safetensors name, and their bits per element."""

_KV_DTYPE_ALIASES = {
    "float32": "F32",
    "fp32": "F32",
    "f32": "F32",
    "float16": "F16",
    "fp16": "F16",
    "f16": "F16",
    "half": "F16",
    "bfloat16": "BF16",
    "bf16": "BF16",
    "fp8": "F8_E4M3",
    "fp8_e4m3": "F8_E4M3",
    "float8_e4m3fn": "F8_E4M3",
    "f8_e4m3": "F8_E4M3",
    "fp8_e5m2": "F8_E5M2",
    "float8_e5m2": "F8_E5M2",
    "f8_e5m2": "F8_E5M2",
    "int8": "I8",
    "i8": "I8",
    "fp4": "F4",
    "nvfp4": "F4",
    "f4": "F4",
}


def kv_dtype_name(text: str) -> str:
    """A KV dtype as a user or config writes it (``bf16``, ``torch.float16``, ``fp8``,
    ``F8_E4M3``) -> its safetensors name.

    Raises:
        ValueError: an unknown name, listing the known ones.
    """
    key = text.strip().removeprefix("torch.")
    if key in KV_DTYPE_BITS:
        return key
    found = _KV_DTYPE_ALIASES.get(key.lower())
    if found is None:
        known = ", ".join(sorted({*_KV_DTYPE_ALIASES, *KV_DTYPE_BITS}))
        raise ValueError(f"unknown KV-cache dtype {text!r}; expected one of: {known}")
    return found


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Memory to serve a model: weights and KV cache, in bytes.

    Attributes:
        weights_bytes: the tensors' data as stored (exact).
        kv_cache_bytes: the KV cache for ``context`` tokens and ``batch`` sequences, or ``None``
            when the config does not say enough (``kv_cache_unknown`` says why).
        context: tokens per sequence.
        batch: sequences.
        kv_dtype: the KV cache's dtype (safetensors name), or ``None`` when unknown.
        attention: ``"mha"``, ``"gqa"``, ``"mqa"`` or ``"mla"``; ``None`` when unknown.
        kv_bytes_per_token: per sequence, over every layer, at full context (sliding-window
            layers included as if they held the token).
        full_layers: layers whose cache grows with the whole context.
        window_layers: layers capped by a sliding window or attention chunk.
        window_tokens: the sliding window (the attention chunk when no layer slides).
        constant_layers: layers with a state of constant size (linear attention, SSM), not
            counted.
        kv_cache_unknown: why the cache could not be estimated, else ``None``.
        kv_cache_bound: why ``kv_cache_bytes`` is only an upper bound (the config does not say
            which layers attend), else ``None``.
        moe: the mixture of experts whose bytes :meth:`as_dict` gives, or ``None``.
    """

    weights_bytes: int
    kv_cache_bytes: int | None
    context: int | None
    batch: int
    kv_dtype: str | None = None
    attention: str | None = None
    kv_bytes_per_token: int | None = None
    full_layers: int = 0
    window_layers: int = 0
    window_tokens: int | None = None
    constant_layers: int = 0
    kv_cache_unknown: str | None = None
    kv_cache_bound: str | None = None
    moe: MixtureOfExperts | None = None

    @property
    def total_bytes(self) -> int:
        """Weights plus the KV cache (the weights alone when the cache is unknown)."""
        return self.weights_bytes + (self.kv_cache_bytes or 0)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "weights_bytes": self.weights_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "total_bytes": self.total_bytes,
            "context": self.context,
            "batch": self.batch,
            "kv_dtype": self.kv_dtype,
            "attention": self.attention,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "full_layers": self.full_layers,
            "window_layers": self.window_layers,
            "window_tokens": self.window_tokens,
            "constant_layers": self.constant_layers,
            "kv_cache_unknown": self.kv_cache_unknown,
            "kv_cache_bound": self.kv_cache_bound,
            "experts": None if self.moe is None else _experts_dict(self.moe),
        }


def _experts_dict(moe: MixtureOfExperts) -> dict[str, Any]:
    """The experts' counts and bytes, for ``memory --json``."""
    return {
        "experts": moe.experts,
        "experts_per_token": moe.experts_per_token,
        "shared_experts": moe.shared_experts,
        "moe_layers": len(moe.layers),
        "expert_bytes": moe.expert_bytes,
        "layer_experts_bytes": moe.layer_experts_bytes,
    }


def _auto_kv_dtype(config: Mapping[str, Any]) -> str | None:
    quant = config.get("quantization_config")
    if isinstance(quant, Mapping):
        scheme = quant.get("kv_cache_scheme")
        if isinstance(scheme, Mapping) and scheme.get("num_bits") == 8:
            return "F8_E4M3" if scheme.get("type", "float") == "float" else "I8"
    for key in ("torch_dtype", "dtype"):
        value = config.get(key)
        if isinstance(value, str):
            try:
                return kv_dtype_name(value)
            except ValueError:
                continue
    return None


def estimate_memory(
    config: Mapping[str, Any] | None,
    weights_bytes: int,
    *,
    context: int | None = None,
    batch: int = 1,
    kv_dtype: str | None = None,
    experts: MixtureOfExperts | None = None,
) -> MemoryEstimate:
    """Weights and KV-cache bytes for ``batch`` sequences of ``context`` tokens.

    Args:
        config: ``config.json`` as a dict (a nested ``text_config`` is used), or ``None``.
        weights_bytes: the tensors' bytes as stored.
        context: tokens per sequence; ``None`` takes the config's ``max_position_embeddings``.
        batch: sequences held at once.
        kv_dtype: ``"bf16"``, ``"fp8"``, ``"F8_E4M3"``, …; ``None`` or ``"auto"`` takes the
            config's ``kv_cache_scheme`` or its ``torch_dtype``.
        experts: the model's mixture of experts (:attr:`ParameterCount.moe`), whose bytes per
            expert and per layer the estimate carries.

    Raises:
        ValueError: a negative context or batch, or an unknown ``kv_dtype``.
    """
    estimate = _estimate(config, weights_bytes, context, batch, kv_dtype)
    return estimate if experts is None else replace(estimate, moe=experts)


def _estimate(
    config: Mapping[str, Any] | None,
    weights_bytes: int,
    context: int | None,
    batch: int,
    kv_dtype: str | None,
) -> MemoryEstimate:
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    if context is not None and context < 0:
        raise ValueError(f"context must not be negative, got {context}")
    explicit = kv_dtype_name(kv_dtype) if kv_dtype is not None and kv_dtype != "auto" else None

    def unknown(why: str, **known: Any) -> MemoryEstimate:
        return MemoryEstimate(weights_bytes, None, context, batch, kv_cache_unknown=why, **known)

    if config is None:
        return unknown("no config.json beside the weights")
    cfg = text_config(config)
    if context is None:
        context = positive_int(
            cfg, "max_position_embeddings", "n_positions", "max_seq_len", "seq_length"
        )
        if context is None:
            return unknown("no --context given and the config states no maximum length")
    dtype = explicit or _auto_kv_dtype(cfg)
    if dtype is None:
        return unknown("the config names no dtype (torch_dtype); give the KV dtype")
    layers = positive_int(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
    if layers is None:
        return unknown(
            "the config does not say how many layers (num_hidden_layers)", kv_dtype=dtype
        )
    heads = positive_int(cfg, "num_attention_heads", "n_head", "num_heads", "n_heads")
    latent = positive_int(cfg, "kv_lora_rank")
    if latent is not None:
        per_layer = latent + (positive_int(cfg, "qk_rope_head_dim") or 0)
        attention = "mla"
    else:
        hidden = positive_int(cfg, "hidden_size", "n_embd", "d_model", "dim")
        if heads is None:
            return unknown(
                "the config does not say how many attention heads (num_attention_heads)",
                kv_dtype=dtype,
            )
        kv_heads = positive_int(
            cfg, "num_key_value_heads", "n_head_kv", "num_kv_heads", "n_kv_heads"
        )
        if kv_heads is None:
            kv_heads = 1 if cfg.get("multi_query") else heads
        head_dim = positive_int(cfg, "head_dim", "attention_head_size")
        if head_dim is None:
            if hidden is None:
                return unknown("the config gives neither head_dim nor hidden_size", kv_dtype=dtype)
            head_dim = hidden // heads
        # Keys and values may differ in width (GGUF's key_length and value_length).
        per_layer = kv_heads * (head_dim + (positive_int(cfg, "v_head_dim") or head_dim))
        attention = "mqa" if kv_heads == 1 else ("mha" if kv_heads == heads else "gqa")
    kinds = layer_kinds(cfg, layers)
    bits = KV_DTYPE_BITS[dtype]
    kv_bits = kinds.tokens(context) * per_layer * bits * batch
    growing = kinds.full + kinds.sliding + kinds.chunked
    return MemoryEstimate(
        weights_bytes,
        (kv_bits + 7) // 8,
        context,
        batch,
        kv_dtype=dtype,
        attention=attention,
        kv_bytes_per_token=(growing * per_layer * bits + 7) // 8,
        full_layers=kinds.full,
        window_layers=kinds.sliding + kinds.chunked,
        window_tokens=kinds.window if kinds.sliding else kinds.chunk,
        constant_layers=kinds.constant,
        kv_cache_bound=kinds.bound,
    )
