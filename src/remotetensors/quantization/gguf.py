"""A GGUF file's metadata read as a ``config.json``, for counts and memory. Pure.

A GGUF file carries what a config says, under ``<architecture>.<key>`` names: block count,
attention heads and KV heads (a number, or one per layer where some layers do not attend),
key and value lengths, context length, sliding window, MLA's latent rank, expert counts. This
module renames them to the keys :mod:`.memory` and :mod:`.moe` read, so a GGUF model is counted
and sized from its own header, with or without a ``config.json`` beside it.

GGUF tensors are stored with their logical dims (a Q4_K block holds 256 values and the dims
count values, not blocks), so every tensor counts as its elements: the quantization, by
llama.cpp's file type name (``Q4_K_M``), is reported, never unpacked. The KV cache is sized in
F16, llama.cpp's default cache type (``--cache-type-k``/``--cache-type-v``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

from .kv_layers import KV_BOUND_KEY

GGUF_METHOD = "gguf"
"""The quantization method of a GGUF file whose file type is quantized."""

_UNQUANTIZED = frozenset({"F32", "F16", "BF16", "F64"})
# Which layers slide where llama.cpp sets the pattern in code rather than the file: every
# n-th layer attends globally (Gemma 2, gpt-oss: every other; Cohere 2: every 4th; Gemma 3:
# every 6th).
_SLIDING_PATTERNS = {"gemma2": 2, "gpt-oss": 2, "cohere2": 4, "gemma3": 6}
# GGUF key (after the architecture) -> the config key that says the same.
_RENAMED = {
    "block_count": "num_hidden_layers",
    "context_length": "max_position_embeddings",
    "embedding_length": "hidden_size",
    "attention.key_length": "head_dim",
    "attention.kv_lora_rank": "kv_lora_rank",
    "expert_count": "num_local_experts",
    "expert_used_count": "num_experts_per_tok",
    "expert_shared_count": "n_shared_experts",
    "expert_feed_forward_length": "moe_intermediate_size",
    "leading_dense_block_count": "first_k_dense_replace",
}


def config_from_gguf(metadata: Mapping[str, Any], *, file_type: str | None) -> dict[str, Any]:
    """The config a GGUF file's metadata amounts to.

    Args:
        metadata: the file's metadata (the first part's, for a split model).
        file_type: the model's quantization by llama.cpp's name (``Q4_K_M``), as
            :func:`remotetensors.formats.gguf_files.quantization` names it; ``None`` when
            unknown.

    Returns:
        A dict with the keys the count and the memory estimate read; a quantized file type
        adds ``quantization_config: {"quant_method": "gguf", "format": <file type>}``.
    """
    arch = metadata.get("general.architecture")
    prefix = f"{arch}." if isinstance(arch, str) else ""
    config: dict[str, Any] = {"model_type": arch, "torch_dtype": "float16"}

    def get(key: str) -> Any:
        return metadata.get(prefix + key)

    for key, name in _RENAMED.items():
        value = get(key)
        if _is_int(value):
            config[name] = value
    heads = get("attention.head_count")
    if isinstance(heads, tuple) and heads and all(_is_int(h) for h in heads):
        heads = max(heads)  # per layer (OpenELM): the widest
    if _is_int(heads):
        config["num_attention_heads"] = heads
    value_length = get("attention.value_length")
    if _is_int(value_length) and value_length != config.get("head_dim"):
        config["v_head_dim"] = value_length
    if "kv_lora_rank" in config and _is_int(get("rope.dimension_count")):
        config["qk_rope_head_dim"] = get("rope.dimension_count")
    _kv_heads(config, get("attention.head_count_kv"))
    _sliding(config, arch, get("attention.sliding_window"), get("attention.sliding_window_pattern"))
    if any(key.startswith(f"{prefix}ssm.") for key in metadata) and "layer_types" not in config:
        config["ssm_state_size"] = get("ssm.state_size")  # state-space layers, not placed
    if file_type is not None and file_type not in _UNQUANTIZED:
        config["quantization_config"] = {"quant_method": GGUF_METHOD, "format": file_type}
    return config


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _kv_heads(config: dict[str, Any], kv: Any) -> None:
    """KV heads: one number, or one per layer where 0 marks a layer that keeps no KV cache
    (llama.cpp writes hybrid models, Jamba, Nemotron-H, Granite hybrids, so)."""
    if _is_int(kv):
        config["num_key_value_heads"] = kv
        return
    if not (isinstance(kv, tuple) and kv and all(_is_int(h) for h in kv)):
        return
    attending = sorted({h for h in kv if h > 0})
    config["layer_types"] = ["full_attention" if h > 0 else "recurrent" for h in kv]
    if attending:
        config["num_key_value_heads"] = attending[-1]
    if len(attending) > 1:
        config[KV_BOUND_KEY] = (
            f"an upper bound: KV heads differ by layer ({', '.join(map(str, attending))}); "
            "every attending layer is counted with the most"
        )


def _sliding(config: dict[str, Any], arch: Any, window: Any, pattern: Any) -> None:
    """The sliding window and which layers use it: the file's per-layer flags, its period,
    or llama.cpp's own pattern for the architecture."""
    if not _is_int(window) or window <= 0:
        return
    layers = config.get("num_hidden_layers")
    kinds = config.get("layer_types")
    if isinstance(pattern, tuple) and pattern and all(isinstance(p, bool) for p in pattern):
        flags = list(pattern)
    elif _is_int(pattern) or arch in _SLIDING_PATTERNS:
        period = pattern if _is_int(pattern) else _SLIDING_PATTERNS[str(arch)]
        if not _is_int(layers) or period <= 0:
            return
        flags = [(i + 1) % period != 0 for i in range(layers)]
    else:
        config[KV_BOUND_KEY] = (
            f"an upper bound: the file sets a sliding window of {window} tokens but not which "
            "layers use it; every layer is counted over the whole context"
        )
        return
    config["sliding_window"] = window
    if isinstance(kinds, list):  # per-layer KV heads came first: keep their recurrent layers
        config["layer_types"] = [
            k if k != "full_attention" or not (i < len(flags) and flags[i]) else "sliding_attention"
            for i, k in enumerate(kinds)
        ]
    else:
        config["layer_types"] = ["sliding_attention" if f else "full_attention" for f in flags]
