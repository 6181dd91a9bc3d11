"""Memory estimates (pure): weights as stored, KV cache per attention kind, against hf-mem."""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import pytest
from hf_mem.safetensors.kv_cache import compute_safetensors_kv_cache_size
from hf_mem.safetensors.metadata import parse_safetensors_metadata

from remotetensors.quantization.memory import estimate_memory, kv_dtype_name
from tests import quantized as q


def llama(**extra: Any) -> dict[str, Any]:
    """Llama-3.1-8B's attention shape (GQA: 32 heads, 8 KV heads of 128)."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    }
    config.update(extra)
    return config


@pytest.mark.parametrize("context", [1, 4096, 131072])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize(("ours", "theirs"), [("bf16", "BF16"), ("fp8", "F8_E4M3"), ("f32", "F32")])
def test_standard_attention_equals_hf_mem(context: int, batch: int, ours: str, theirs: str) -> None:
    for config in (llama(), llama(num_key_value_heads=32), llama(num_key_value_heads=1)):
        estimate = estimate_memory(config, 10, context=context, batch=batch, kv_dtype=ours)
        assert estimate.kv_cache_bytes == compute_safetensors_kv_cache_size(
            config, theirs, context, batch
        )
        assert estimate.total_bytes == 10 + estimate.kv_cache_bytes
    assert estimate_memory(llama(), 0, context=8).attention == "gqa"
    assert estimate_memory(llama(num_key_value_heads=1), 0, context=8).attention == "mqa"
    assert estimate_memory(llama(num_key_value_heads=32), 0, context=8).attention == "mha"


def test_context_defaults_to_the_config_and_dtype_to_torch_dtype() -> None:
    estimate = estimate_memory(llama(), 0)
    assert estimate.context == 131072
    assert estimate.kv_dtype == "BF16"
    assert estimate.kv_cache_bytes == compute_safetensors_kv_cache_size(llama(), "BF16", 131072)


def test_weights_bytes_equal_hf_mem_for_the_same_headers() -> None:
    spec, config = q.gptq(q.Arch())
    data = q.files_for(spec, config)["model.safetensors"]
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    theirs = parse_safetensors_metadata({"Transformer": header})
    weights = sum(
        math.prod(s) * (4 if d in ("I32", "F32") else 2 if d in ("F16", "BF16") else 1)
        for d, s in spec.values()
    )
    assert theirs.bytes_count == weights
    # hf-mem counts packed I32 elements as parameters; the true count is 4x larger here.
    assert theirs.param_count < q.float_count(q.Arch())


def test_sliding_window_layers_keep_only_their_window() -> None:
    kinds = ["sliding_attention"] * 5 + ["full_attention"]
    config = llama(num_hidden_layers=12, layer_types=kinds * 2, sliding_window=1024)
    per_token_layer = 2 * 8 * 128 * 2
    for context in (512, 1024, 32768):
        estimate = estimate_memory(config, 0, context=context)
        expected = (2 * context + 10 * min(1024, context)) * per_token_layer
        assert estimate.kv_cache_bytes == expected
        assert (estimate.full_layers, estimate.window_layers) == (2, 10)
    # hf-mem reserves the whole context for every layer of a hybrid model: 5x more here.
    theirs = compute_safetensors_kv_cache_size(config, "BF16", 32768)
    assert theirs == 12 * 32768 * per_token_layer
    # The same hybrid written as a pattern (Gemma 3) and the older Gemma 2 alternation.
    pattern = llama(num_hidden_layers=12, sliding_window_pattern=6, sliding_window=1024)
    assert estimate_memory(pattern, 0, context=32768).kv_cache_bytes == expected
    gemma2 = llama(num_hidden_layers=12, model_type="gemma2", sliding_window=1024)
    assert estimate_memory(gemma2, 0, context=32768).window_layers == 6


def test_sliding_window_switches() -> None:
    mistral = llama(sliding_window=4096)
    assert estimate_memory(mistral, 0, context=32768).window_layers == 32
    qwen_off = llama(sliding_window=4096, use_sliding_window=False, max_window_layers=28)
    assert estimate_memory(qwen_off, 0, context=32768).window_layers == 0
    qwen_on = llama(sliding_window=4096, use_sliding_window=True, max_window_layers=28)
    assert estimate_memory(qwen_on, 0, context=32768).window_layers == 4


def test_linear_attention_layers_do_not_grow() -> None:
    kinds = ["linear_attention"] * 3 + ["full_attention"]
    config = llama(num_hidden_layers=8, layer_types=kinds * 2)
    estimate = estimate_memory(config, 0, context=1000)
    assert estimate.constant_layers == 6
    assert estimate.kv_cache_bytes == 2 * 1000 * 2 * 8 * 128 * 2


def test_multi_latent_attention_caches_the_compressed_kv() -> None:
    deepseek: dict[str, Any] = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "hidden_size": 7168,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "num_hidden_layers": 61,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "max_position_embeddings": 163840,
        "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
    }
    estimate = estimate_memory(deepseek, 0, context=32768, kv_dtype="bf16")
    assert estimate.attention == "mla"
    per_token = 61 * (deepseek["kv_lora_rank"] + deepseek["qk_rope_head_dim"]) * 2
    assert estimate.kv_bytes_per_token == per_token
    assert estimate.kv_cache_bytes == 32768 * per_token
    theirs = compute_safetensors_kv_cache_size(deepseek, "BF16", 32768)
    assert theirs > 20 * 32768 * per_token  # hf-mem treats MLA as 128 full KV heads


def test_nested_text_config_and_kv_cache_scheme() -> None:
    inner = llama()
    del inner["torch_dtype"]
    nested = {"architectures": ["X"], "torch_dtype": "float16", "text_config": inner}
    assert estimate_memory(nested, 0, context=10).kv_dtype == "F16"
    scheme = llama(
        quantization_config={
            "quant_method": "compressed-tensors",
            "kv_cache_scheme": {"num_bits": 8, "type": "float"},
        }
    )
    assert estimate_memory(scheme, 0, context=10).kv_dtype == "F8_E4M3"


def test_missing_fields_give_the_weights_and_the_reason() -> None:
    assert estimate_memory(None, 7).kv_cache_unknown == "no config.json beside the weights"
    unknown = estimate_memory({"torch_dtype": "bfloat16"}, 7, context=10)
    assert unknown.kv_cache_bytes is None
    assert unknown.total_bytes == 7
    assert "num_hidden_layers" in str(unknown.kv_cache_unknown)
    no_length = estimate_memory({k: v for k, v in llama().items() if "position" not in k}, 7)
    assert "context" in str(no_length.kv_cache_unknown)
    no_dtype = estimate_memory(
        {k: v for k, v in llama().items() if k != "torch_dtype"}, 7, context=1
    )
    assert "dtype" in str(no_dtype.kv_cache_unknown)


def test_kv_dtype_names_and_bad_input() -> None:
    assert kv_dtype_name("torch.bfloat16") == "BF16"
    assert kv_dtype_name("F8_E5M2") == "F8_E5M2"
    assert kv_dtype_name("fp4") == "F4"
    with pytest.raises(ValueError, match="unknown KV-cache dtype 'fp7'"):
        estimate_memory(llama(), 0, context=1, kv_dtype="fp7")
    with pytest.raises(ValueError, match="batch"):
        estimate_memory(llama(), 0, context=1, batch=0)
    fp4 = estimate_memory(llama(), 0, context=3, kv_dtype="fp4")
    assert fp4.kv_cache_bytes == compute_safetensors_kv_cache_size(llama(), "U8", 3) // 2


def test_chunked_and_sliding_layers_each_keep_their_own_cap() -> None:
    kinds = ["chunked_attention", "sliding_attention", "full_attention"]
    config = llama(
        num_hidden_layers=6, layer_types=kinds * 2, sliding_window=512, attention_chunk_size=2048
    )
    per_token_layer = 2 * 8 * 128 * 2
    estimate = estimate_memory(config, 0, context=8192)
    assert estimate.kv_cache_bytes == (2 * 8192 + 2 * 512 + 2 * 2048) * per_token_layer
    assert (estimate.full_layers, estimate.window_layers, estimate.window_tokens) == (2, 4, 512)
    short = llama(num_hidden_layers=6, layer_types=["sliding_attention"], sliding_window=512)
    # layers the list leaves out keep the whole context
    assert (
        estimate_memory(short, 0, context=8192).kv_cache_bytes == (5 * 8192 + 512) * per_token_layer
    )


# --- hybrid models: only the layers that attend keep a KV cache (issue 31) -------------------


def jamba_v01() -> dict[str, Any]:
    """ai21labs/Jamba-v0.1's config.json (the keys that shape its cache)."""
    return {
        "architectures": ["JambaForCausalLM"],
        "model_type": "jamba",
        "attn_layer_offset": 4,
        "attn_layer_period": 8,
        "expert_layer_offset": 1,
        "expert_layer_period": 2,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "mamba_conv_bias": True,
        "mamba_d_conv": 4,
        "mamba_d_state": 16,
        "mamba_dt_rank": 256,
        "mamba_expand": 2,
        "mamba_proj_bias": False,
        "max_position_embeddings": 262144,
        "num_attention_heads": 32,
        "num_experts": 16,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "sliding_window": None,
        "torch_dtype": "bfloat16",
        "vocab_size": 65536,
    }


def nemotron_h_8b() -> dict[str, Any]:
    """nvidia/Nemotron-H-8B-Base-8K's config.json (the keys that shape its cache)."""
    return {
        "architectures": ["NemotronHForCausalLM"],
        "model_type": "nemotron_h",
        "hidden_size": 4096,
        "head_dim": 128,
        "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
        "mamba_num_heads": 128,
        "mamba_head_dim": 64,
        "ssm_state_size": 128,
        "max_position_embeddings": 8192,
        "num_attention_heads": 32,
        "num_hidden_layers": 52,
        "num_key_value_heads": 8,
        "torch_dtype": "bfloat16",
        "vocab_size": 131072,
    }


def llama4_scout(no_rope_layers: list[int] | None) -> dict[str, Any]:
    """meta-llama/Llama-4-Scout-17B-16E's config.json (its text_config's cache keys); its
    ``no_rope_layers`` as published (one flag per layer) or left to the default interval."""
    text: dict[str, Any] = {
        "model_type": "llama4_text",
        "attention_chunk_size": 8192,
        "head_dim": 128,
        "hidden_size": 5120,
        "interleave_moe_layer_step": 1,
        "max_position_embeddings": 10485760,
        "num_attention_heads": 40,
        "num_experts_per_tok": 1,
        "num_hidden_layers": 48,
        "num_key_value_heads": 8,
        "num_local_experts": 16,
        "torch_dtype": "bfloat16",
        "vocab_size": 202048,
    }
    if no_rope_layers is not None:
        text["no_rope_layers"] = no_rope_layers
    return {
        "architectures": ["Llama4ForConditionalGeneration"],
        "model_type": "llama4",
        "text_config": text,
        "torch_dtype": "bfloat16",
    }


def test_jamba_caches_only_its_attention_layers() -> None:
    config = jamba_v01()
    attending = [i for i in range(32) if i % config["attn_layer_period"] == 4]
    per_token_layer = 2 * 8 * 128 * 2
    estimate = estimate_memory(config, 0, context=262144)
    assert estimate.kv_cache_bytes == len(attending) * 262144 * per_token_layer
    assert (estimate.full_layers, estimate.constant_layers) == (len(attending), 32 - 4)
    assert estimate.kv_cache_bound is None


def test_nemotron_h_caches_only_the_layers_its_pattern_marks_with_a_star() -> None:
    config = nemotron_h_8b()
    pattern = config["hybrid_override_pattern"]
    assert len(pattern) == config["num_hidden_layers"]
    estimate = estimate_memory(config, 0, context=8192)
    assert estimate.kv_cache_bytes == pattern.count("*") * 8192 * 2 * 8 * 128 * 2
    assert estimate.full_layers == pattern.count("*")
    assert estimate.constant_layers == pattern.count("M")
    assert estimate.kv_cache_bound is None


@pytest.mark.parametrize("published", [True, False])
def test_llama4_chunks_the_rope_layers(published: bool) -> None:
    flags = [int((i + 1) % 4 != 0) for i in range(48)]  # transformers' default interval of 4
    config = llama4_scout(flags if published else None)
    context = 131072
    estimate = estimate_memory(config, 0, context=context)
    per_token_layer = 2 * 8 * 128 * 2
    chunked, full = sum(flags), 48 - sum(flags)
    assert estimate.kv_cache_bytes == (full * context + chunked * 8192) * per_token_layer
    assert (estimate.full_layers, estimate.window_layers) == (full, chunked)
    assert estimate.window_tokens == 8192
    assert estimate.kv_cache_bound is None


def test_an_estimate_that_is_only_a_bound_says_so() -> None:
    # State-space keys without any key saying which layers attend: every layer is counted.
    config = jamba_v01()
    del config["attn_layer_period"], config["attn_layer_offset"]
    estimate = estimate_memory(config, 0, context=1000)
    assert estimate.kv_cache_bytes == 32 * 1000 * 2 * 8 * 128 * 2
    assert estimate.kv_cache_bound is not None
    assert "upper bound" in estimate.kv_cache_bound
    assert estimate.as_dict()["kv_cache_bound"] == estimate.kv_cache_bound
    # A chunk size without the layers it applies to.
    chunked = llama(attention_chunk_size=8192)
    estimate = estimate_memory(chunked, 0, context=131072)
    assert estimate.kv_cache_bytes == compute_safetensors_kv_cache_size(llama(), "BF16", 131072)
    assert estimate.kv_cache_bound is not None
    assert estimate_memory(llama(), 0, context=10).kv_cache_bound is None


def test_the_memory_text_labels_a_bound() -> None:
    from remotetensors.views.reports import memory_text

    config = jamba_v01()
    del config["attn_layer_period"]
    bound = estimate_memory(config, 10, context=1000)
    report = {"location": "m", "parameters": 7, "quantization": None, **bound.as_dict()}
    text = "\n".join(memory_text(report))
    assert "KV cache  at most" in text
    assert "upper bound" in text
    exact = estimate_memory(jamba_v01(), 10, context=1000)
    report = {"location": "m", "parameters": 7, "quantization": None, **exact.as_dict()}
    text = "\n".join(memory_text(report))
    assert "at most" not in text
    assert "4 full-context layer(s), 28 of constant state" in text
