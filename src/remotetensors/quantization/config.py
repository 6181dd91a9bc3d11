"""What a config says about quantization: the block, the method, widths and skipped modules.

Read from ``quantization_config`` (also in a nested ``text_config``), MLX's top-level
``quantization``, or a separate ``quantization_config.json``. Pure; a block that cannot be
understood gives a problem message naming the file, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .values import Quantization

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
        "modelopt",
        "gguf",
    }
)
"""Methods whose layouts are understood (``quant_method`` as configs write it, lowercase)."""


def int_or_none(value: Any) -> int | None:
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


_ALIASES = {"compressed_tensors": "compressed-tensors"}
"""Other spellings of known methods, seen in the wild."""


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
        method = raw_method.strip().lower()  # as the config says, lowercased
        method = _ALIASES.get(method, method)
    elif mlx:
        method = "mlx"
    elif block.get("load_in_4bit") or block.get("load_in_8bit"):
        method = "bitsandbytes"
    elif any(key in block for key in ("desc_act", "damp_percent", "true_sequential")):
        method = "gptq"  # AutoGPTQ's own file, which names no method
    elif any(key in block for key in ("w_bit", "zero_point")):
        method = "awq"  # AutoAWQ's
    elif "bits" in block and "group_size" in block:
        method = "mlx"  # MLX repeats its block as quantization_config, without a method
    else:
        return None, (f"{source}: a quantization block without a method; counted from tensors",)
    problems: list[str] = []
    if method not in KNOWN_METHODS:
        problems.append(
            f"{source}: unknown quantization method {raw_method!r}; the count follows the "
            "tensors' layout and is not exact"
        )
    bits, group_size, fmt = _bits_group_format(method, block)
    skipped: list[str] = []
    for key in ("modules_to_not_convert", "llm_int8_skip_modules", "ignore", "exclude_modules"):
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


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's part of a config: its ``text_config`` (or ``llm_config``) when it
    has one, with the top level's dtype and quantization filled in."""
    for key in ("text_config", "llm_config", "language_config"):
        inner = config.get(key)
        if isinstance(inner, Mapping) and inner:
            merged = dict(inner)
            for shared in ("torch_dtype", "dtype", "quantization_config"):
                if shared in config and shared not in merged:
                    merged[shared] = config[shared]
            return merged
    return config


def _bits_group_format(
    method: str, block: Mapping[str, Any]
) -> tuple[int | None, int | None, str | None]:
    bits = int_or_none(block.get("bits") if "bits" in block else block.get("w_bit"))
    group = int_or_none(block.get("group_size", block.get("q_group_size")))
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
    elif method == "gguf":  # llama.cpp's file type (Q4_K_M): mixed block types, no one width
        fmt = str(block["format"]) if "format" in block else None
    elif method == "modelopt":
        algo = str(block.get("quant_algo", "")).lower()
        fmt = algo or None
        bits = {"nvfp4": 4, "mxfp4": 4, "fp8": 8}.get(algo, bits)
        group = group or {"nvfp4": 16, "mxfp4": 32}.get(algo)
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
                int_or_none(weights.get("num_bits")),
                int_or_none(weights.get("group_size")),
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
