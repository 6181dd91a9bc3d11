"""Mixture-of-experts checkpoints with the real configs and shapes of four families, as sparse
files: a safetensors header laid out as the reference writer lays it out, then a data section
of the right length that is never written (a hole in the file), so a 671B-parameter model
takes a few megabytes of disk.

Each builder returns the config (as the model's repo publishes it), the *logical* tensors
(name -> (dtype as stored, logical shape), before any packing) and the stored spec
(name -> (dtype, shape), packed weights and their scales as the method writes them). Oracles
are computed by the tests from the logical shapes and the config, never by the library.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np

from tests.quantized import NUMPY, Spec

# Bytes per element of the dtypes used here (F8_E4M3 and U8 one, BF16 two, F32 four).
_ITEMSIZE = {d: np.dtype(t).itemsize for d, t in NUMPY.items()}


def mixtral_8x7b() -> dict[str, Any]:
    """mistralai/Mixtral-8x7B-v0.1's config.json."""
    return {
        "architectures": ["MixtralForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": 4096,
        "initializer_range": 0.02,
        "intermediate_size": 14336,
        "max_position_embeddings": 32768,
        "model_type": "mixtral",
        "num_attention_heads": 32,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "output_router_logits": False,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.02,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.36.0.dev0",
        "use_cache": True,
        "vocab_size": 32000,
    }


def qwen3_30b_a3b() -> dict[str, Any]:
    """Qwen/Qwen3-30B-A3B's config.json."""
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "decoder_sparse_step": 1,
        "eos_token_id": 151645,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "initializer_range": 0.02,
        "intermediate_size": 6144,
        "max_position_embeddings": 40960,
        "max_window_layers": 48,
        "mlp_only_layers": [],
        "model_type": "qwen3_moe",
        "moe_intermediate_size": 768,
        "norm_topk_prob": True,
        "num_attention_heads": 32,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 48,
        "num_key_value_heads": 4,
        "output_router_logits": False,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.001,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    }


def deepseek_v3() -> dict[str, Any]:
    """deepseek-ai/DeepSeek-V3's config.json (without its ``auto_map``)."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "aux_loss_alpha": 0.001,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "ep_size": 1,
        "first_k_dense_replace": 3,
        "hidden_act": "silu",
        "hidden_size": 7168,
        "initializer_range": 0.02,
        "intermediate_size": 18432,
        "kv_lora_rank": 512,
        "max_position_embeddings": 163840,
        "model_type": "deepseek_v3",
        "moe_intermediate_size": 2048,
        "moe_layer_freq": 1,
        "n_group": 8,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": 128,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 61,
        "num_key_value_heads": 128,
        "num_nextn_predict_layers": 1,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "quantization_config": {
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
        },
        "rms_norm_eps": 1e-06,
        "rope_scaling": {
            "beta_fast": 32,
            "beta_slow": 1,
            "factor": 40,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
            "type": "yarn",
        },
        "rope_theta": 10000,
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "seq_aux": True,
        "tie_word_embeddings": False,
        "topk_group": 4,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.33.1",
        "use_cache": True,
        "v_head_dim": 128,
        "vocab_size": 129280,
    }


def gpt_oss_20b() -> dict[str, Any]:
    """openai/gpt-oss-20b's config.json."""
    return {
        "architectures": ["GptOssForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "eos_token_id": 200002,
        "experts_per_token": 4,
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 2880,
        "initial_context_length": 4096,
        "initializer_range": 0.02,
        "intermediate_size": 2880,
        "layer_types": ["sliding_attention", "full_attention"] * 12,
        "max_position_embeddings": 131072,
        "model_type": "gpt_oss",
        "num_attention_heads": 64,
        "num_experts_per_tok": 4,
        "num_hidden_layers": 24,
        "num_key_value_heads": 8,
        "num_local_experts": 32,
        "output_router_logits": False,
        "pad_token_id": 199999,
        "quantization_config": {
            "modules_to_not_convert": [
                "model.layers.*.self_attn",
                "model.layers.*.mlp.router",
                "model.embed_tokens",
                "lm_head",
            ],
            "quant_method": "mxfp4",
        },
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "rope_type": "yarn",
            "truncate": False,
        },
        "rope_theta": 150000,
        "router_aux_loss_coef": 0.9,
        "sliding_window": 128,
        "swiglu_limit": 7.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.55.0.dev0",
        "use_cache": True,
        "vocab_size": 201088,
    }


Logical = dict[str, tuple[str, tuple[int, ...]]]
"""name -> (dtype as stored, logical shape): the unpacked model, what a true count counts."""


def _attention(logical: Logical, p: str, c: dict[str, Any], dtype: str, bias: bool) -> None:
    h, heads, kv, hd = (
        c["hidden_size"],
        c["num_attention_heads"],
        c["num_key_value_heads"],
        c.get("head_dim", c["hidden_size"] // c["num_attention_heads"]),
    )
    for name, out, inp in (
        ("q_proj", heads * hd, h),
        ("k_proj", kv * hd, h),
        ("v_proj", kv * hd, h),
        ("o_proj", h, heads * hd),
    ):
        logical[f"{p}.self_attn.{name}.weight"] = (dtype, (out, inp))
        if bias:
            logical[f"{p}.self_attn.{name}.bias"] = (dtype, (out,))


def _ends(logical: Logical, c: dict[str, Any], dtype: str = "BF16") -> None:
    v, h = c["vocab_size"], c["hidden_size"]
    logical["model.embed_tokens.weight"] = (dtype, (v, h))
    logical["model.norm.weight"] = (dtype, (h,))
    logical["lm_head.weight"] = (dtype, (v, h))


def mixtral_logical(c: dict[str, Any]) -> Logical:
    """Mixtral's tensors: experts one module per expert, ``w1``/``w3`` up, ``w2`` down."""
    h, i, e = c["hidden_size"], c["intermediate_size"], c["num_local_experts"]
    logical: Logical = {}
    _ends(logical, c)
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        logical[f"{p}.input_layernorm.weight"] = ("BF16", (h,))
        logical[f"{p}.post_attention_layernorm.weight"] = ("BF16", (h,))
        _attention(logical, p, c, "BF16", bias=False)
        logical[f"{p}.block_sparse_moe.gate.weight"] = ("BF16", (e, h))
        for x in range(e):
            q = f"{p}.block_sparse_moe.experts.{x}"
            logical[f"{q}.w1.weight"] = ("BF16", (i, h))
            logical[f"{q}.w2.weight"] = ("BF16", (h, i))
            logical[f"{q}.w3.weight"] = ("BF16", (i, h))
    return logical


def qwen3_moe_logical(c: dict[str, Any]) -> Logical:
    """Qwen3-MoE's tensors: q/k norms per head dim, a router, one module per expert; layers in
    ``mlp_only_layers`` (or off the ``decoder_sparse_step``) keep a dense MLP."""
    h, e, mi, hd = c["hidden_size"], c["num_experts"], c["moe_intermediate_size"], c["head_dim"]
    logical: Logical = {}
    _ends(logical, c)
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        logical[f"{p}.input_layernorm.weight"] = ("BF16", (h,))
        logical[f"{p}.post_attention_layernorm.weight"] = ("BF16", (h,))
        _attention(logical, p, c, "BF16", bias=False)
        logical[f"{p}.self_attn.q_norm.weight"] = ("BF16", (hd,))
        logical[f"{p}.self_attn.k_norm.weight"] = ("BF16", (hd,))
        sparse = layer not in c["mlp_only_layers"] and (layer + 1) % c["decoder_sparse_step"] == 0
        if not sparse:
            _mlp(logical, f"{p}.mlp", h, c["intermediate_size"], "BF16")
            continue
        logical[f"{p}.mlp.gate.weight"] = ("BF16", (e, h))
        for x in range(e):
            _mlp(logical, f"{p}.mlp.experts.{x}", h, mi, "BF16")
    return logical


def _mlp(logical: Logical, p: str, h: int, i: int, dtype: str) -> None:
    logical[f"{p}.gate_proj.weight"] = (dtype, (i, h))
    logical[f"{p}.up_proj.weight"] = (dtype, (i, h))
    logical[f"{p}.down_proj.weight"] = (dtype, (h, i))


def deepseek_logical(c: dict[str, Any]) -> Logical:
    """DeepSeek-V3's tensors (main model, without the multi-token-prediction layer, as
    transformers' ``DeepseekV3ForCausalLM`` saves it): multi-latent attention, the first
    ``first_k_dense_replace`` layers dense, then a router with its correction bias, the routed
    experts and the shared experts. Linear weights in F8_E4M3, the rest BF16."""
    h, heads = c["hidden_size"], c["num_attention_heads"]
    nope, rope, vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    ql, kvl = c["q_lora_rank"], c["kv_lora_rank"]
    e, mi = c["n_routed_experts"], c["moe_intermediate_size"]
    f8 = "F8_E4M3"
    logical: Logical = {}
    _ends(logical, c)
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        a = f"{p}.self_attn"
        logical[f"{p}.input_layernorm.weight"] = ("BF16", (h,))
        logical[f"{p}.post_attention_layernorm.weight"] = ("BF16", (h,))
        logical[f"{a}.q_a_proj.weight"] = (f8, (ql, h))
        logical[f"{a}.q_a_layernorm.weight"] = ("BF16", (ql,))
        logical[f"{a}.q_b_proj.weight"] = (f8, (heads * (nope + rope), ql))
        logical[f"{a}.kv_a_proj_with_mqa.weight"] = (f8, (kvl + rope, h))
        logical[f"{a}.kv_a_layernorm.weight"] = ("BF16", (kvl,))
        logical[f"{a}.kv_b_proj.weight"] = (f8, (heads * (nope + vd), kvl))
        logical[f"{a}.o_proj.weight"] = (f8, (h, heads * vd))
        moe = layer >= c["first_k_dense_replace"] and layer % c["moe_layer_freq"] == 0
        if not moe:
            _mlp(logical, f"{p}.mlp", h, c["intermediate_size"], f8)
            continue
        logical[f"{p}.mlp.gate.weight"] = ("BF16", (e, h))
        logical[f"{p}.mlp.gate.e_score_correction_bias"] = ("F32", (e,))
        for x in range(e):
            _mlp(logical, f"{p}.mlp.experts.{x}", h, mi, f8)
        _mlp(logical, f"{p}.mlp.shared_experts", h, mi * c["n_shared_experts"], f8)
    return logical


def deepseek_stored(logical: Logical, block: int = 128) -> Spec:
    """DeepSeek-V3's fine-grained FP8: beside each F8 weight, ``weight_scale_inv`` F32, one per
    ``block x block`` tile."""
    spec: Spec = {}
    for name, (dtype, shape) in logical.items():
        spec[name] = (dtype, shape)
        if dtype == "F8_E4M3":
            out, inp = shape
            spec[f"{name}_scale_inv"] = ("F32", (-(-out // block), -(-inp // block)))
    return spec


def gpt_oss_logical(c: dict[str, Any]) -> Logical:
    """gpt-oss's tensors (unpacked): attention with biases and sinks, a router with a bias, and
    the experts fused per layer: ``gate_up_proj`` [E, 2I, H] and ``down_proj`` [E, H, I] as the
    checkpoint orders them (out before in), each with a bias per expert."""
    h, e, i = c["hidden_size"], c["num_local_experts"], c["intermediate_size"]
    logical: Logical = {}
    _ends(logical, c)
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        logical[f"{p}.input_layernorm.weight"] = ("BF16", (h,))
        logical[f"{p}.post_attention_layernorm.weight"] = ("BF16", (h,))
        _attention(logical, p, c, "BF16", bias=True)
        logical[f"{p}.self_attn.sinks"] = ("BF16", (c["num_attention_heads"],))
        logical[f"{p}.mlp.router.weight"] = ("BF16", (e, h))
        logical[f"{p}.mlp.router.bias"] = ("BF16", (e,))
        logical[f"{p}.mlp.experts.gate_up_proj"] = ("U8", (e, 2 * i, h))
        logical[f"{p}.mlp.experts.gate_up_proj_bias"] = ("BF16", (e, 2 * i))
        logical[f"{p}.mlp.experts.down_proj"] = ("U8", (e, h, i))
        logical[f"{p}.mlp.experts.down_proj_bias"] = ("BF16", (e, h))
    return logical


def gpt_oss_stored(logical: Logical) -> Spec:
    """gpt-oss's MXFP4 experts as the checkpoint stores them: ``*_blocks`` U8 [..., in/32, 16]
    (two fp4 values per byte) and ``*_scales`` U8 [..., in/32] (one E8M0 exponent per 32)."""
    spec: Spec = {}
    for name, (dtype, shape) in logical.items():
        if dtype != "U8":
            spec[name] = (dtype, shape)
            continue
        *outer, inp = shape
        spec[f"{name}_blocks"] = ("U8", (*outer, inp // 32, 16))
        spec[f"{name}_scales"] = ("U8", (*outer, inp // 32))
    return spec


def count(logical: Logical) -> int:
    """The oracle's total: every logical tensor's elements."""
    return sum(math.prod(shape) for _, shape in logical.values())


def nbytes(spec: Spec, names: list[str]) -> int:
    """Bytes of ``names`` as stored."""
    return sum(math.prod(spec[n][1]) * _ITEMSIZE[spec[n][0]] for n in names)


# --- sparse files -----------------------------------------------------------------------------


def safetensors_header(spec: Spec, metadata: dict[str, str] | None = None) -> tuple[bytes, int]:
    """(the 8-byte length and the header as the reference writer lays it out, data bytes).

    Tensors are ordered as ``safetensors.serialize`` orders them (larger alignment first, then
    by name), the data offsets follow each other without gaps, and the header is padded with
    spaces to a multiple of 8.
    """
    order = sorted(spec, key=lambda n: (-_ITEMSIZE[spec[n][0]], n))
    header: dict[str, Any] = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    for name in order:
        dtype, shape = spec[name]
        size = math.prod(shape) * _ITEMSIZE[dtype]
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, offset


def write_sparse(path: Path, spec: Spec) -> int:
    """A safetensors file of ``spec`` whose data is a hole: the header is written, the file is
    extended to its full length. Returns the file's size."""
    head, data = safetensors_header(spec)
    with path.open("wb") as f:
        f.write(head)
        f.truncate(len(head) + data)
    return len(head) + data


def write_model(folder: Path, spec: Spec, config: dict[str, Any], *, shards: int) -> Path:
    """A sharded checkpoint of sparse shards, its index and its config.json, in ``folder``.
    Tensors go to shards by layer, as transformers' ``save_pretrained`` groups them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    names = list(spec)
    per = -(-len(names) // shards)
    weight_map: dict[str, str] = {}
    total = 0
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: spec[n] for n in names[s * per : (s + 1) * per]}
        write_sparse(folder / file, part)
        total += sum(math.prod(shape) * _ITEMSIZE[d] for d, shape in part.values())
        weight_map.update(dict.fromkeys(part, file))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def header_only_files(spec: Spec, config: dict[str, Any], *, shards: int) -> dict[str, bytes]:
    """The same checkpoint for the hub stand-in: each shard is its header alone (the one-call
    metadata endpoint serves headers, and counting reads nothing else)."""
    names = list(spec)
    per = -(-len(names) // shards)
    files: dict[str, bytes] = {"config.json": json.dumps(config).encode()}
    weight_map: dict[str, str] = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: spec[n] for n in names[s * per : (s + 1) * per]}
        files[file] = safetensors_header(part)[0]
        weight_map.update(dict.fromkeys(part, file))
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {}, "weight_map": weight_map}
    ).encode()
    return files
