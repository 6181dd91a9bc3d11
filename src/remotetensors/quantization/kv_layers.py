"""Which layers of a model keep a KV cache, and how much of the context each keeps. Pure.

Configs say it in their own words:

- ``layer_types`` (transformers' newer configs: ``full_attention``, ``sliding_attention``,
  ``chunked_attention``, ``linear_attention``, ``mamba``, ``conv``, …), or Jamba-style
  ``layers_block_type``;
- Jamba's ``attn_layer_period`` and ``attn_layer_offset``: layer ``i`` attends when
  ``i % period == offset``, the others are Mamba layers;
- Nemotron-H's ``hybrid_override_pattern``: one character per layer, ``*`` attention, ``M``
  Mamba-2, ``-`` MLP and ``E`` mixture of experts (neither keeps a cache);
- MiniMax's ``attn_type_list``: 1 softmax attention, 0 linear attention;
- Llama-4's ``attention_chunk_size`` with ``no_rope_layers`` (1 per RoPE layer, which attends
  within its chunk; 0 per NoPE layer, which sees the whole context; transformers fills an empty
  list with every ``no_rope_layer_interval``-th layer (4) NoPE);
- sliding windows: ``sliding_window_pattern`` (Gemma 3, Cohere 2), Gemma 2's alternation,
  Qwen2's ``use_sliding_window`` with ``max_window_layers``, Mistral's window on every layer.

When a config shows layers of another kind (state-space keys, a chunk size) without saying which
layers they are, every layer is counted as attending over the whole context: the estimate is
then an upper bound, and :attr:`Layers.bound` says why. A config translated from another format
(:mod:`.gguf`) may say so itself, under :data:`KV_BOUND_KEY`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

KV_BOUND_KEY = "kv_cache_bound"
"""A translated config's own reason why its layers' kinds give only an upper bound."""

# Zamba2's "hybrid" blocks run a shared attention block beside their Mamba layer.
_FULL = {"attention", "full_attention", "global_attention", "global", "full", "hybrid"}
_SLIDING = {"sliding_attention", "sliding_window_attention", "local_attention", "sliding", "local"}
_CHUNKED = {"chunked_attention"}
# Nemotron-H's pattern: attention, Mamba-2, and layers that keep nothing (MLP, MoE).
_PATTERN_FULL, _PATTERN_CONSTANT, _PATTERN_NONE = "*", "M", "-E"
# Keys only configs with state-space layers have.
_STATE_SPACE_PREFIXES = ("mamba", "ssm_")
# Models whose every layer runs attention beside its state-space mixer: all layers attend.
_PARALLEL_HYBRIDS = frozenset({"falcon_h1"})


@dataclass(frozen=True, slots=True)
class Layers:
    """How a model's layers keep their cache.

    Attributes:
        full: layers whose cache grows with the whole context.
        sliding: layers keeping at most ``window`` tokens.
        window: the sliding window in tokens.
        chunked: layers keeping at most ``chunk`` tokens.
        chunk: the attention chunk in tokens.
        constant: layers with a state that does not grow (linear attention, SSM, convolution).
        bound: why the counts are only an upper bound (some layers counted as attending over the
            whole context because the config does not say what they are); ``None`` when the
            config says.
    """

    full: int
    sliding: int = 0
    window: int | None = None
    chunked: int = 0
    chunk: int | None = None
    constant: int = 0
    bound: str | None = None

    def tokens(self, context: int) -> int:
        """Cached tokens over all layers, for one sequence of ``context`` tokens."""
        capped = self.sliding * min(self.window or context, context)
        capped += self.chunked * min(self.chunk or context, context)
        return self.full * context + capped


def positive_int(config: Mapping[str, Any], *keys: str) -> int | None:
    """The first of ``keys`` holding a positive integer (not a bool)."""
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def layer_kinds(config: Mapping[str, Any], layers: int) -> Layers:
    """How each of ``layers`` layers keeps its cache, from a (text) config."""
    kinds = _layer_kinds(config, layers)
    bound = config.get(KV_BOUND_KEY)
    if isinstance(bound, str) and kinds.bound is None:
        kinds = replace(kinds, bound=bound)
    return kinds


def _layer_kinds(config: Mapping[str, Any], layers: int) -> Layers:
    window = positive_int(config, "sliding_window")
    chunk = positive_int(config, "attention_chunk_size")
    for key in ("layer_types", "layers_block_type"):
        kinds = config.get(key)
        if isinstance(kinds, list) and kinds:
            return _from_types([str(k).lower() for k in kinds[:layers]], layers, window, chunk)
    found = _hybrid(config, layers)
    if found is not None:
        return found
    if chunk is not None:
        chunked = _chunked_layers(config, layers)
        if chunked is not None:
            return Layers(layers - chunked, chunked=chunked, chunk=chunk)
        return Layers(
            layers,
            bound=(
                f"an upper bound: the config sets attention_chunk_size {chunk} but not which "
                "layers attend in chunks (no_rope_layers or layer_types); every layer is "
                "counted over the whole context"
            ),
        )
    sliding = _sliding(config, layers, window)
    if sliding.sliding == 0 and _has_state_space_keys(config):
        return Layers(
            layers,
            bound=(
                "an upper bound: the config describes state-space layers but not which layers "
                "attend; every layer is counted as attention"
            ),
        )
    return sliding


def _from_types(names: list[str], layers: int, window: int | None, chunk: int | None) -> Layers:
    sliding = sum(k in _SLIDING for k in names)
    chunked = sum(k in _CHUNKED for k in names)
    constant = len(names) - sliding - chunked - sum(k in _FULL for k in names)
    full = layers - sliding - chunked - constant  # layers the list leaves out: full
    if window is None:  # no size given: those layers keep everything
        full, sliding = full + sliding, 0
    if chunk is None:
        full, chunked = full + chunked, 0
    return Layers(full, sliding, window, chunked, chunk, constant)


def _hybrid(config: Mapping[str, Any], layers: int) -> Layers | None:
    """Jamba's period and offset, Nemotron-H's pattern or MiniMax's list; None when the config
    has none of them."""
    period = positive_int(config, "attn_layer_period")
    offset = config.get("attn_layer_offset")
    if period is not None and isinstance(offset, int) and not isinstance(offset, bool):
        full = sum(1 for i in range(layers) if i % period == offset)
        return Layers(full, constant=layers - full)
    pattern = config.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        pattern = pattern[:layers]
        unknown = sorted(set(pattern) - {*_PATTERN_FULL, *_PATTERN_CONSTANT, *_PATTERN_NONE})
        full = sum(c == _PATTERN_FULL for c in pattern) + layers - len(pattern)
        bound = None
        if unknown:
            full += sum(c in unknown for c in pattern)
            bound = (
                f"an upper bound: hybrid_override_pattern has layer kinds {''.join(unknown)!r} "
                "that are not known; they are counted as attention"
            )
        return Layers(full, constant=pattern.count(_PATTERN_CONSTANT), bound=bound)
    types = config.get("attn_type_list")
    if isinstance(types, list) and types:
        flags = types[:layers]
        linear = sum(1 for t in flags if t == 0)
        return Layers(layers - linear, constant=linear)
    return None


def _chunked_layers(config: Mapping[str, Any], layers: int) -> int | None:
    """Llama-4: RoPE layers attend within their chunk, NoPE layers over the whole context."""
    flags = config.get("no_rope_layers")
    if isinstance(flags, list) and flags:
        return sum(1 for f in flags[:layers] if f)
    if str(config.get("model_type", "")).startswith("llama4"):
        interval = positive_int(config, "no_rope_layer_interval") or 4
        return sum(1 for i in range(layers) if (i + 1) % interval != 0)
    return None


def _sliding(config: Mapping[str, Any], layers: int, window: int | None) -> Layers:
    pattern = positive_int(config, "sliding_window_pattern")
    if pattern is None and config.get("model_type") == "gemma2":
        pattern = 2  # Gemma 2 alternates local and global layers; older configs do not say
    if pattern and window:
        full = layers // pattern  # every pattern-th layer is global (Gemma 2/3, Cohere 2)
        return Layers(full, layers - full, window)
    if not window or config.get("use_sliding_window") is False:
        return Layers(layers)
    limit = config.get("max_window_layers")
    if config.get("use_sliding_window") is True and isinstance(limit, int):
        full = min(max(limit, 0), layers)  # Qwen2: layers from max_window_layers on slide
        return Layers(full, layers - full, window)
    return Layers(0, layers, window)  # Mistral: every layer


def _has_state_space_keys(config: Mapping[str, Any]) -> bool:
    if config.get("model_type") in _PARALLEL_HYBRIDS:
        return False
    return any(key.startswith(_STATE_SPACE_PREFIXES) for key in config)
