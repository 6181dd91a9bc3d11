"""Quantized checkpoints for the tests: a float model's shapes, packed the way each method packs.

Every builder starts from the tensors of an unquantized decoder (Qwen2-like: attention with
biases, gated MLP, optional routed and shared experts) and replaces the linear layers' weights
with what the method stores. The oracle of every test is :func:`float_count` of the unpacked
model, computed from its shapes, never a constant.

A spec is ``name -> (dtype, shape)``; :func:`files_for` writes it with the reference
``safetensors`` writer, as one file or as shards with an index.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any

import ml_dtypes
import numpy as np

from tests.reference import write_reference

Spec = dict[str, tuple[str, tuple[int, ...]]]

NUMPY = {
    "BF16": ml_dtypes.bfloat16,
    "F16": np.float16,
    "F32": np.float32,
    "I64": np.int64,
    "I32": np.int32,
    "U32": np.uint32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "F8_E4M3": ml_dtypes.float8_e4m3fn,
    "F8_E8M0": ml_dtypes.float8_e8m0fnu,
}


@dataclass(frozen=True)
class Arch:
    """The shapes of a small decoder; every dimension is one a real model could have."""

    hidden: int = 128
    intermediate: int = 384
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 32
    vocab: int = 256
    layers: int = 2
    experts: int = 0
    expert_intermediate: int = 64
    shared_experts: bool = False
    dtype: str = "BF16"

    def config(self, **extra: Any) -> dict[str, Any]:
        """A config.json for this architecture."""
        config: dict[str, Any] = {
            "architectures": ["Qwen2ForCausalLM"],
            "model_type": "qwen2",
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "num_hidden_layers": self.layers,
            "vocab_size": self.vocab,
            "max_position_embeddings": 4096,
            "torch_dtype": {"BF16": "bfloat16", "F16": "float16"}[self.dtype],
        }
        if self.experts:
            config["num_experts"] = self.experts
            config["moe_intermediate_size"] = self.expert_intermediate
            config["num_experts_per_tok"] = 2
        config.update(extra)
        return config


def float_model(arch: Arch) -> dict[str, tuple[int, ...]]:
    """name -> shape of the unquantized model (linear weights are ``[out, in]``)."""
    h, hd = arch.hidden, arch.head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (arch.vocab, h)}
    for i in range(arch.layers):
        p = f"model.layers.{i}"
        shapes[f"{p}.input_layernorm.weight"] = (h,)
        shapes[f"{p}.post_attention_layernorm.weight"] = (h,)
        for name, out in (
            ("q", arch.heads * hd),
            ("k", arch.kv_heads * hd),
            ("v", arch.kv_heads * hd),
        ):
            shapes[f"{p}.self_attn.{name}_proj.weight"] = (out, h)
            shapes[f"{p}.self_attn.{name}_proj.bias"] = (out,)
        shapes[f"{p}.self_attn.o_proj.weight"] = (h, arch.heads * hd)
        mlps = [f"{p}.mlp"]
        sizes = [arch.intermediate]
        if arch.experts:
            shapes[f"{p}.mlp.gate.weight"] = (arch.experts, h)
            mlps = [f"{p}.mlp.experts.{e}" for e in range(arch.experts)]
            sizes = [arch.expert_intermediate] * arch.experts
            if arch.shared_experts:
                mlps.append(f"{p}.mlp.shared_experts")
                sizes.append(arch.intermediate)
        for mlp, size in zip(mlps, sizes, strict=True):
            shapes[f"{mlp}.gate_proj.weight"] = (size, h)
            shapes[f"{mlp}.up_proj.weight"] = (size, h)
            shapes[f"{mlp}.down_proj.weight"] = (h, size)
    shapes["model.norm.weight"] = (h,)
    shapes["lm_head.weight"] = (arch.vocab, h)
    return shapes


def float_count(arch: Arch) -> int:
    """The oracle: parameters of the unquantized model, from its shapes."""
    return sum(math.prod(s) for s in float_model(arch).values())


def float_spec(arch: Arch) -> Spec:
    return {n: (arch.dtype, s) for n, s in float_model(arch).items()}


def linears(arch: Arch, *, skip: tuple[str, ...] = ("lm_head", "mlp.gate.")) -> list[str]:
    """Module names of the linear layers a method quantizes (lm_head and the router kept)."""
    return [
        n[: -len(".weight")]
        for n, s in float_model(arch).items()
        if len(s) == 2 and n.endswith("_proj.weight") and not any(k in n for k in skip)
    ]


def _swap(spec: Spec, module: str, tensors: Spec) -> None:
    del spec[f"{module}.weight"]
    spec.update(tensors)


# --- the methods ----------------------------------------------------------------------------


def gptq(
    arch: Arch, *, bits: int = 4, group: int = 128, desc_act: bool = False
) -> tuple[Spec, dict[str, Any]]:
    """GPTQ: qweight I32 [in·bits/32, out], qzeros [in/g, out·bits/32], scales, g_idx [in]."""
    spec = float_spec(arch)
    shapes = float_model(arch)
    for m in linears(arch):
        out, inp = shapes[f"{m}.weight"]
        groups = inp // group if group > 0 else 1
        _swap(
            spec,
            m,
            {
                f"{m}.qweight": ("I32", (inp * bits // 32, out)),
                f"{m}.qzeros": ("I32", (groups, out * bits // 32)),
                f"{m}.scales": ("F16", (groups, out)),
                f"{m}.g_idx": ("I32", (inp,)),
            },
        )
    quant = {
        "quant_method": "gptq",
        "bits": bits,
        "group_size": group,
        "desc_act": desc_act,
        "sym": True,
    }
    return spec, arch.config(quantization_config=quant)


def awq(arch: Arch, *, bits: int = 4, group: int = 128) -> tuple[Spec, dict[str, Any]]:
    """AWQ (GEMM): qweight I32 [in, out·bits/32], qzeros [in/g, out·bits/32], scales [in/g, out]."""
    spec = float_spec(arch)
    shapes = float_model(arch)
    for m in linears(arch):
        out, inp = shapes[f"{m}.weight"]
        _swap(
            spec,
            m,
            {
                f"{m}.qweight": ("I32", (inp, out * bits // 32)),
                f"{m}.qzeros": ("I32", (inp // group, out * bits // 32)),
                f"{m}.scales": ("F16", (inp // group, out)),
            },
        )
    quant = {
        "quant_method": "awq",
        "bits": bits,
        "group_size": group,
        "version": "gemm",
        "zero_point": True,
        "modules_to_not_convert": ["lm_head"],
    }
    return spec, arch.config(quantization_config=quant)


def _awq_zeros_width(inputs: int, group: int) -> int:
    """AutoAWQ's ``calculate_zeros_width``: groups per row, padded to whole int32s of eight
    zero points, then to a multiple that depends on the group size."""
    multiplier = 1 if group >= 128 else {64: 2, 32: 4}[group]
    base = -(-(inputs // group) // 8)
    return -(-base // multiplier) * multiplier


def awq_gemv(arch: Arch, *, bits: int = 4, group: int = 128) -> tuple[Spec, dict[str, Any]]:
    """AWQ GEMV, as AutoAWQ's ``WQLinear_GEMV`` (and llm-awq's ``WQLinear``) stores it: qweight
    I32 [out, in/(32/bits)], qzeros I32 [out, zw], scales F16 [out, zw·32/bits], where zw is
    :func:`_awq_zeros_width` (the scales padded to whole int32s of zero points)."""
    spec = float_spec(arch)
    shapes = float_model(arch)
    pack = 32 // bits
    for m in linears(arch):
        out, inp = shapes[f"{m}.weight"]
        width = _awq_zeros_width(inp, group)
        _swap(
            spec,
            m,
            {
                f"{m}.qweight": ("I32", (out, inp // pack)),
                f"{m}.qzeros": ("I32", (out, width)),
                f"{m}.scales": ("F16", (out, width * pack)),
            },
        )
    quant = {
        "quant_method": "awq",
        "bits": bits,
        "group_size": group,
        "version": "gemv",
        "zero_point": True,
    }
    return spec, arch.config(quantization_config=quant)


def awq_gemv_fast(arch: Arch, *, group: int = 128) -> tuple[Spec, dict[str, Any]]:
    """AWQ GEMV-fast (4-bit only), as AutoAWQ's ``WQLinear_GEMVFast`` stores it: qweight I16
    [out/4, in/4·4] (four outputs interleaved, four values per int16), scales and float zero
    points F16 [zw·8, out]."""
    spec = float_spec(arch)
    shapes = float_model(arch)
    interleave, per_int16 = 4, 16 // 4
    for m in linears(arch):
        out, inp = shapes[f"{m}.weight"]
        width = _awq_zeros_width(inp, group) * 8
        _swap(
            spec,
            m,
            {
                f"{m}.qweight": ("I16", (out // interleave, inp // per_int16 * interleave)),
                f"{m}.qzeros": ("F16", (width, out)),
                f"{m}.scales": ("F16", (width, out)),
            },
        )
    quant = {"quant_method": "awq", "bits": 4, "group_size": group, "version": "gemv_fast"}
    return spec, arch.config(quantization_config=quant)


def modelopt_nvfp4(arch: Arch) -> tuple[Spec, dict[str, Any]]:
    """NVIDIA ModelOpt NVFP4 (the ``nvidia/*-FP4`` repos): weight U8 [out, in/2] (two fp4
    values per byte), weight_scale F8_E4M3 [out, in/16], weight_scale_2 and input_scale F32
    scalars; the KV scales of attention beside them."""
    spec = float_spec(arch)
    shapes = float_model(arch)
    for m in linears(arch):
        out, inp = shapes[f"{m}.weight"]
        _swap(
            spec,
            m,
            {
                f"{m}.weight": ("U8", (out, inp // 2)),
                f"{m}.weight_scale": ("F8_E4M3", (out, inp // 16)),
                f"{m}.weight_scale_2": ("F32", ()),
                f"{m}.input_scale": ("F32", ()),
            },
        )
    for layer in range(arch.layers):
        for leaf in ("k_scale", "v_scale"):
            spec[f"model.layers.{layer}.self_attn.{leaf[0]}_proj.{leaf}"] = ("F32", ())
    quant = {
        "quant_method": "modelopt",
        "producer": {"name": "modelopt", "version": "0.29.0"},
        "quant_algo": "NVFP4",
        "kv_cache_quant_algo": "FP8",
        "group_size": 16,
        "exclude_modules": ["lm_head"],
    }
    return spec, arch.config(quantization_config=quant)


def exl2(arch: Arch, *, bits: int = 4) -> tuple[Spec, dict[str, Any]]:
    """ExLlamaV2's EXL2, whose layout we do not unpack: q_weight I32 [in·bits/32, out], q_scale
    I32, q_scale_max F16, q_groups I16 and q_invperm I32 per linear layer."""
    spec = float_spec(arch)
    shapes = float_model(arch)
    for m in linears(arch):
        out, inp = shapes[f"{m}.weight"]
        groups = inp // 32
        _swap(
            spec,
            m,
            {
                f"{m}.q_weight": ("I32", (inp * bits // 32, out)),
                f"{m}.q_scale": ("I32", (groups, out // 8)),
                f"{m}.q_scale_max": ("F16", (groups,)),
                f"{m}.q_groups": ("I16", (groups * 2,)),
                f"{m}.q_invperm": ("I32", (inp,)),
            },
        )
    quant = {"quant_method": "exl2", "version": "0.2.8", "bits": float(bits), "head_bits": 6}
    return spec, arch.config(quantization_config=quant)


def bnb4(
    arch: Arch, *, quant_type: str = "nf4", double: bool = True
) -> tuple[Spec, dict[str, Any]]:
    """bitsandbytes 4-bit: weight U8 [ceil(n/2), 1], absmax, quant_map, nested state, quant_state."""
    spec = float_spec(arch)
    shapes = float_model(arch)
    for m in linears(arch):
        n = math.prod(shapes[f"{m}.weight"])
        blocks = -(-n // 64)
        tensors: Spec = {
            f"{m}.weight": ("U8", ((n + 1) // 2, 1)),
            f"{m}.weight.quant_map": ("F32", (16,)),
            f"{m}.weight.quant_state.bitsandbytes__{quant_type}": ("U8", (117,)),
        }
        if double:
            tensors[f"{m}.weight.absmax"] = ("U8", (blocks,))
            tensors[f"{m}.weight.nested_absmax"] = ("F32", (-(-blocks // 256),))
            tensors[f"{m}.weight.nested_quant_map"] = ("F32", (256,))
        else:
            tensors[f"{m}.weight.absmax"] = ("F32", (blocks,))
        _swap(spec, m, tensors)
    quant = {
        "quant_method": "bitsandbytes",
        "load_in_4bit": True,
        "load_in_8bit": False,
        "bnb_4bit_quant_type": quant_type,
        "bnb_4bit_use_double_quant": double,
        "llm_int8_skip_modules": ["lm_head"],
    }
    return spec, arch.config(quantization_config=quant)


def bnb8(arch: Arch) -> tuple[Spec, dict[str, Any]]:
    """bitsandbytes 8-bit: weight I8 [out, in], SCB F32 [out], weight_format U8 scalar."""
    spec = float_spec(arch)
    shapes = float_model(arch)
    for m in linears(arch):
        out, inp = shapes[f"{m}.weight"]
        _swap(
            spec,
            m,
            {
                f"{m}.weight": ("I8", (out, inp)),
                f"{m}.SCB": ("F32", (out,)),
                f"{m}.weight_format": ("U8", ()),
            },
        )
    quant = {"quant_method": "bitsandbytes", "load_in_8bit": True, "load_in_4bit": False}
    return spec, arch.config(quantization_config=quant)


def compressed_pack(arch: Arch, *, bits: int = 4, group: int = 32) -> tuple[Spec, dict[str, Any]]:
    """compressed-tensors pack-quantized: weight_packed I32 [out, ceil(in·bits/32)] (the last
    int32 of a row padded), weight_scale [out, ceil(in/g)], weight_shape I64 [2]."""
    spec = float_spec(arch)
    shapes = float_model(arch)
    per = 32 // bits
    for m in linears(arch):
        out, inp = shapes[f"{m}.weight"]
        _swap(
            spec,
            m,
            {
                f"{m}.weight_packed": ("I32", (out, -(-inp // per))),
                f"{m}.weight_scale": ("BF16", (out, -(-inp // group))),
                f"{m}.weight_zero_point": ("I32", (-(-out // per), -(-inp // group))),
                f"{m}.weight_shape": ("I64", (2,)),
            },
        )
    quant = {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {
                    "num_bits": bits,
                    "type": "int",
                    "strategy": "group",
                    "group_size": group,
                },
            }
        },
        "ignore": ["lm_head", "re:.*mlp.gate$"],
    }
    return spec, arch.config(quantization_config=quant)


def compressed_two_widths(
    arch: Arch, *, class_group_first: bool = True
) -> tuple[Spec, dict[str, Any]]:
    """pack-quantized with two config groups, as llm-compressor writes a recipe that keeps the
    down projections at 8 bits: ``Linear`` at 4 bits and ``re:.*down_proj$`` at 8 bits. The
    module's name wins over its class (compressed-tensors' ``match_named_modules``, vLLM),
    whatever the groups' order in the config."""
    spec = float_spec(arch)
    shapes = float_model(arch)
    for m in linears(arch):
        out, inp = shapes[f"{m}.weight"]
        per = 32 // (8 if m.endswith("down_proj") else 4)
        _swap(
            spec,
            m,
            {
                f"{m}.weight_packed": ("I32", (out, -(-inp // per))),
                f"{m}.weight_scale": ("BF16", (out, 1)),
                f"{m}.weight_shape": ("I64", (2,)),
            },
        )
    weights = {"type": "int", "strategy": "channel", "symmetric": True}
    groups = {
        "group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, **weights}},
        "group_1": {"targets": ["re:.*down_proj$"], "weights": {"num_bits": 8, **weights}},
    }
    if not class_group_first:
        groups = dict(reversed(list(groups.items())))
    quant = {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": groups,
        "ignore": ["lm_head", "re:.*mlp.gate$"],
    }
    return spec, arch.config(quantization_config=quant)


def weight_shape_values(arch: Arch) -> dict[str, np.ndarray[Any, Any]]:
    """The values compressed-tensors stores in each ``weight_shape``: the logical shape."""
    shapes = float_model(arch)
    return {
        f"{m}.weight_shape": np.array(shapes[f"{m}.weight"], dtype=np.int64) for m in linears(arch)
    }


def compressed_nvfp4(arch: Arch) -> tuple[Spec, dict[str, Any]]:
    """nvfp4-pack-quantized: weight_packed U8 [out, in/2], F8 scales per 16, global scales."""
    spec = float_spec(arch)
    shapes = float_model(arch)
    for m in linears(arch):
        out, inp = shapes[f"{m}.weight"]
        _swap(
            spec,
            m,
            {
                f"{m}.weight_packed": ("U8", (out, inp // 2)),
                f"{m}.weight_scale": ("F8_E4M3", (out, inp // 16)),
                f"{m}.weight_global_scale": ("F32", (1,)),
                f"{m}.input_global_scale": ("F32", (1,)),
            },
        )
    quant = {
        "quant_method": "compressed-tensors",
        "format": "nvfp4-pack-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {
                    "num_bits": 4,
                    "type": "float",
                    "strategy": "tensor_group",
                    "group_size": 16,
                },
                "input_activations": {"num_bits": 4, "type": "float", "group_size": 16},
            }
        },
        "ignore": ["lm_head"],
    }
    return spec, arch.config(quantization_config=quant)


def compressed_float(arch: Arch) -> tuple[Spec, dict[str, Any]]:
    """float-quantized (FP8 per channel): weight F8_E4M3 [out, in], weight_scale, input_scale."""
    spec = float_spec(arch)
    shapes = float_model(arch)
    for m in linears(arch):
        out, inp = shapes[f"{m}.weight"]
        _swap(
            spec,
            m,
            {
                f"{m}.weight": ("F8_E4M3", (out, inp)),
                f"{m}.weight_scale": ("BF16", (out, 1)),
                f"{m}.input_scale": ("BF16", (1,)),
            },
        )
    quant = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
            }
        },
        "ignore": ["lm_head"],
    }
    return spec, arch.config(quantization_config=quant)


def fp8_blocks(arch: Arch, *, block: int = 128) -> tuple[Spec, dict[str, Any]]:
    """Fine-grained FP8 (DeepSeek-V3): weight F8_E4M3 [out, in], weight_scale_inv per block."""
    spec = float_spec(arch)
    shapes = float_model(arch)
    for m in linears(arch):
        out, inp = shapes[f"{m}.weight"]
        _swap(
            spec,
            m,
            {
                f"{m}.weight": ("F8_E4M3", (out, inp)),
                f"{m}.weight_scale_inv": ("F32", (-(-out // block), -(-inp // block))),
            },
        )
    quant = {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [block, block],
    }
    return spec, arch.config(quantization_config=quant)


def gpt_oss(arch: Arch) -> tuple[Spec, dict[str, Any], int]:
    """gpt-oss MXFP4: experts fused as gate_up_proj [E, H, 2I] and down_proj [E, I, H] in the
    float model; stored as ``*_blocks`` U8 [E, out, in/32, 16] and ``*_scales`` U8 [E, out, in/32].

    Returns the spec, the config and the float model's count (its expert layout differs).
    """
    h, e, i = arch.hidden, arch.experts, arch.expert_intermediate
    plain = {n: s for n, s in float_model(replace(arch, experts=0)).items() if ".mlp." not in n}
    spec: Spec = {n: ("BF16", s) for n, s in plain.items()}
    floats = dict(plain)
    for layer in range(arch.layers):
        p = f"model.layers.{layer}.mlp"
        floats[f"{p}.router.weight"] = (e, h)
        floats[f"{p}.router.bias"] = (e,)
        floats[f"{p}.experts.gate_up_proj"] = (e, h, 2 * i)
        floats[f"{p}.experts.gate_up_proj_bias"] = (e, 2 * i)
        floats[f"{p}.experts.down_proj"] = (e, i, h)
        floats[f"{p}.experts.down_proj_bias"] = (e, h)
        spec[f"{p}.router.weight"] = ("BF16", (e, h))
        spec[f"{p}.router.bias"] = ("BF16", (e,))
        spec[f"{p}.experts.gate_up_proj_blocks"] = ("U8", (e, 2 * i, h // 32, 16))
        spec[f"{p}.experts.gate_up_proj_scales"] = ("U8", (e, 2 * i, h // 32))
        spec[f"{p}.experts.gate_up_proj_bias"] = ("BF16", (e, 2 * i))
        spec[f"{p}.experts.down_proj_blocks"] = ("U8", (e, h, i // 32, 16))
        spec[f"{p}.experts.down_proj_scales"] = ("U8", (e, h, i // 32))
        spec[f"{p}.experts.down_proj_bias"] = ("BF16", (e, h))
    quant = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
    }
    config = arch.config(quantization_config=quant, model_type="gpt_oss")
    return spec, config, sum(math.prod(s) for s in floats.values())


def mlx(
    arch: Arch,
    *,
    bits: int = 4,
    group: int = 64,
    overrides: dict[str, Any] | None = None,
) -> tuple[Spec, dict[str, Any]]:
    """MLX: weight U32 [out, in·bits/32], scales and biases [out, in/g]; embeddings and
    lm_head quantized too; ``overrides`` maps a module to its own {bits, group_size} or False."""
    overrides = overrides or {}
    spec = float_spec(arch)
    shapes = float_model(arch)
    targets = [*linears(arch, skip=("mlp.gate.",)), "model.embed_tokens"]
    for m in targets:
        override = overrides.get(m, {})
        if override is False:
            continue
        b = override.get("bits", bits)
        g = override.get("group_size", group)
        out, inp = shapes[f"{m}.weight"]
        _swap(
            spec,
            m,
            {
                f"{m}.weight": ("U32", (out, inp * b // 32)),
                f"{m}.scales": (arch.dtype, (out, inp // g)),
                f"{m}.biases": (arch.dtype, (out, inp // g)),
            },
        )
    quant: dict[str, Any] = {"group_size": group, "bits": bits, **overrides}
    return spec, arch.config(quantization=quant, quantization_config=dict(quant))


def moe_compressed(arch: Arch) -> tuple[Spec, dict[str, Any]]:
    """A MoE whose routed experts are int4 (pack-quantized) and whose attention and shared
    experts are int8, chosen by two config groups with ``re:`` targets."""
    spec = float_spec(arch)
    shapes = float_model(arch)
    for m in linears(arch):
        out, inp = shapes[f"{m}.weight"]
        bits = 4 if (".experts." in m and "shared" not in m) else 8
        per = 32 // bits
        _swap(
            spec,
            m,
            {
                f"{m}.weight_packed": ("I32", (out, -(-inp // per))),
                f"{m}.weight_scale": ("BF16", (out, 1)),
                f"{m}.weight_shape": ("I64", (2,)),
            },
        )
    group = {"type": "int", "strategy": "channel"}
    quant = {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {
            "experts": {
                "targets": [r"re:.*mlp\.experts\.\d+\.(gate|up|down)_proj$"],
                "weights": {"num_bits": 4, **group},
            },
            "rest": {
                "targets": [r"re:.*self_attn\.[qkvo]_proj$", r"re:.*shared_experts\..*"],
                "weights": {"num_bits": 8, **group},
            },
        },
        "ignore": ["lm_head", "re:.*mlp.gate$"],
    }
    return spec, arch.config(quantization_config=quant)


def fp8_fp4_experts(arch: Arch) -> tuple[Spec, dict[str, Any]]:
    """FP8 blocks for attention and shared experts; routed experts packed fp4 (two per I8)
    with F8_E8M0 scales per 32, as a config with ``expert_dtype: "fp4"`` says."""
    spec, config = fp8_blocks(arch, block=32)
    shapes = float_model(arch)
    for m in linears(arch):
        if ".experts." in m and "shared" not in m:
            out, inp = shapes[f"{m}.weight"]
            del spec[f"{m}.weight_scale_inv"]
            spec[f"{m}.weight"] = ("I8", (out, inp // 2))
            spec[f"{m}.weight_scale"] = ("F8_E8M0", (out, inp // 32))
    config["quantization_config"]["expert_dtype"] = "fp4"
    config["quantization_config"]["scale_fmt"] = "ue8m0"
    return spec, config


# --- files --------------------------------------------------------------------------------


def arrays(spec: Spec, values: dict[str, np.ndarray[Any, Any]] | None = None) -> dict[str, Any]:
    """Zero arrays for a spec (``values`` override some)."""
    values = values or {}
    return {n: values.get(n, np.zeros(s, NUMPY[d])) for n, (d, s) in spec.items()}


def files_for(
    spec: Spec,
    config: dict[str, Any] | None,
    *,
    shards: int = 1,
    values: dict[str, np.ndarray[Any, Any]] | None = None,
    metadata: dict[str, str] | None = None,
) -> dict[str, bytes]:
    """The files of a checkpoint: model.safetensors (or shards and an index) and config.json."""
    tensors = arrays(spec, values)
    files: dict[str, bytes] = {}
    if config is not None:
        files["config.json"] = json.dumps(config).encode()
    meta = {"format": "pt", **(metadata or {})}
    if shards == 1:
        files["model.safetensors"] = write_reference(tensors, metadata=meta)
        return files
    names = sorted(tensors)
    weight_map: dict[str, str] = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::shards]}
        files[file] = write_reference(part, metadata=meta)
        weight_map.update(dict.fromkeys(part, file))
    index = {
        "metadata": {"total_size": sum(t.nbytes for t in tensors.values()), **(metadata or {})},
        "weight_map": weight_map,
    }
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    return files
