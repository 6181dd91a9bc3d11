"""Counts and memory of GGUF models from their own metadata (no config.json), files written by
llama.cpp's ``gguf`` writer: the quantization by its file type, the KV cache from block count,
KV heads and key/value lengths, and mixtures of experts from ``expert_count`` and
``expert_used_count``. Oracles from the keys written and the tensors' shapes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import remotetensors as rt
from remotetensors.cli import main
from tests.gguf_files import Q, gguf, quantized
from tests.hub_standin import HubStandIn


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """What the command prints; it must succeed."""
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def write(
    path: Path,
    arch: str,
    keys: dict[str, Any],
    tensors: dict[str, tuple[np.ndarray, Any]],
    *,
    file_type: Any = gguf.LlamaFileType.MOSTLY_Q4_K_M,
) -> Path:
    """A GGUF file: ``keys`` (writer method name -> value) and ``tensors`` (name -> (array as
    the writer takes it, raw GGML type or None))."""
    writer = gguf.GGUFWriter(path, arch)
    writer.add_file_type(int(file_type))
    for method, value in keys.items():
        getattr(writer, f"add_{method}")(value)
    for name, (array, raw) in tensors.items():
        writer.add_tensor(name, array, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


H, FF, HEADS, KV, HEAD_DIM, LAYERS, VOCAB = 64, 128, 4, 2, 16, 3, 96


def dense_tensors(rng: np.random.Generator, layers: int = LAYERS) -> dict[str, tuple[Any, Any]]:
    """A llama-shaped model in Q4_K/Q6_K/Q8_0 blocks and F32 norms (numpy shapes: out, in)."""
    t: dict[str, tuple[Any, Any]] = {
        "token_embd.weight": (quantized(rng, Q.Q8_0, (VOCAB, H)), Q.Q8_0),
        "output_norm.weight": (np.ones(H, np.float32), None),
        "output.weight": (quantized(rng, Q.Q6_K, (VOCAB, 256)), Q.Q6_K),
    }
    for i in range(layers):
        b = f"blk.{i}"
        t[f"{b}.attn_norm.weight"] = (np.ones(H, np.float32), None)
        t[f"{b}.attn_q.weight"] = (quantized(rng, Q.Q8_0, (HEADS * HEAD_DIM, H)), Q.Q8_0)
        t[f"{b}.attn_k.weight"] = (quantized(rng, Q.Q8_0, (KV * HEAD_DIM, H)), Q.Q8_0)
        t[f"{b}.attn_v.weight"] = (quantized(rng, Q.Q8_0, (KV * HEAD_DIM, H)), Q.Q8_0)
        t[f"{b}.attn_output.weight"] = (quantized(rng, Q.Q8_0, (H, HEADS * HEAD_DIM)), Q.Q8_0)
        t[f"{b}.ffn_norm.weight"] = (np.ones(H, np.float32), None)
    return t


def shape_of(array: np.ndarray, raw: Any) -> tuple[int, ...]:
    """The logical (numpy) shape of a tensor given to the writer."""
    if raw is None:
        return tuple(array.shape)
    block, size = gguf.GGML_QUANT_SIZES[raw]
    return (*array.shape[:-1], array.shape[-1] // size * block)


def total(tensors: dict[str, tuple[Any, Any]]) -> int:
    return sum(math.prod(shape_of(a, r)) for a, r in tensors.values())


def attention_keys(layers: int = LAYERS) -> dict[str, Any]:
    return {
        "block_count": layers,
        "context_length": 4096,
        "embedding_length": H,
        "feed_forward_length": FF,
        "head_count": HEADS,
        "head_count_kv": KV,
        "key_length": HEAD_DIM,
        "value_length": HEAD_DIM,
    }


def test_a_quantized_gguf_says_so_and_its_memory_comes_from_its_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tensors = dense_tensors(np.random.default_rng(0))
    path = write(tmp_path / "m-Q4_K_M.gguf", "llama", attention_keys(), tensors)
    out = run(capsys, "params", str(path))
    assert "quantized: gguf, Q4_K_M" in out
    out = run(capsys, "memory", str(path), "--context", "1000")
    assert "not quantized" not in out
    assert "(gguf, Q4_K_M)" in out
    out = run(capsys, "memory", str(path), "--context", "1000", "--json")
    data = json.loads(out)
    # llama.cpp caches keys and values in F16 by default: 2 bytes each.
    assert data["kv_cache_bytes"] == LAYERS * 1000 * KV * (HEAD_DIM + HEAD_DIM) * 2
    assert data["kv_dtype"] == "F16"
    assert data["context"] == 1000
    assert data["parameters"] == total(tensors)
    out = run(capsys, "memory", str(path), "--json")
    assert json.loads(out)["context"] == 4096  # the file's context_length
    out = run(capsys, "params", str(path), "--json")
    data = json.loads(out)
    assert data["quantization"]["method"] == "gguf"
    assert data["quantization"]["format"] == "Q4_K_M"
    assert data["active_parameters"] == data["parameters"] == total(tensors)
    assert data["moe"] is None


def test_a_gguf_in_f16_is_not_called_quantized(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tensors = {"token_embd.weight": (np.ones((VOCAB, H), np.float16), None)}
    keys = {k: v for k, v in attention_keys().items() if k != "key_length"}
    path = write(
        tmp_path / "m.gguf", "llama", keys, tensors, file_type=gguf.LlamaFileType.MOSTLY_F16
    )
    out = run(capsys, "memory", str(path), "--context", "10", "--json")
    data = json.loads(out)
    assert data["quantization"] is None
    # Without key_length, a head is embedding_length / head_count wide.
    assert data["kv_cache_bytes"] == LAYERS * 10 * KV * 2 * (H // HEADS) * 2


def moe_tensors(rng: np.random.Generator, experts: int, ff: int) -> dict[str, tuple[Any, Any]]:
    """Qwen3-MoE as llama.cpp writes it: per block a router ``ffn_gate_inp`` and the experts
    fused in ``ffn_{gate,up,down}_exps`` (numpy shapes [E, out, in])."""
    t = dense_tensors(rng)
    for i in range(LAYERS):
        b = f"blk.{i}"
        t[f"{b}.ffn_gate_inp.weight"] = (rng.standard_normal((experts, H)).astype(np.float32), None)
        t[f"{b}.ffn_gate_exps.weight"] = (quantized(rng, Q.Q4_K, (experts, ff, 256)), Q.Q4_K)
        t[f"{b}.ffn_up_exps.weight"] = (quantized(rng, Q.Q4_K, (experts, ff, 256)), Q.Q4_K)
        t[f"{b}.ffn_down_exps.weight"] = (quantized(rng, Q.Q8_0, (experts, 256, ff)), Q.Q8_0)
    return t


def test_a_gguf_mixture_of_experts_from_expert_count_and_expert_used_count(
    tmp_path: Path,
    hub: HubStandIn,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    experts, used, ff = 8, 2, 64
    tensors = moe_tensors(np.random.default_rng(1), experts, ff)
    keys = {**attention_keys(), "expert_count": experts, "expert_used_count": used}
    keys["expert_feed_forward_length"] = ff
    path = write(tmp_path / "moe-Q4_K_M.gguf", "qwen3moe", keys, tensors)
    every = total(tensors)
    one_expert = 2 * ff * 256 + 256 * ff  # gate and up [ff, 256], down [256, ff]
    active = every - LAYERS * (experts - used) * one_expert
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setattr("remotetensors.sources.hub.repo.resolve_token", lambda token: None)
    hub.add("org/moe-GGUF", {"moe-Q4_K_M.gguf": path.read_bytes()})
    for where in (str(path), "hf://org/moe-GGUF"):
        with rt.open_model(where) as model:
            assert (model.num_parameters, model.num_active_parameters) == (every, active)
            assert model.true_count.active_exact
        out = run(capsys, "params", where, "--json")
        data = json.loads(out)
        assert (data["parameters"], data["active_parameters"]) == (every, active)
        assert data["moe"]["experts"] == experts
        assert data["moe"]["experts_per_token"] == used
        assert data["moe"]["moe_layers"] == LAYERS
    out = run(capsys, "memory", str(path), "--json")
    experts_bytes = json.loads(out)["experts"]
    layer = [t for n, t in tensors.items() if n.startswith("blk.0.ffn_") and "_exps" in n]
    layer_bytes = sum(a.nbytes for a, _ in layer)
    assert experts_bytes["layer_experts_bytes"] == layer_bytes
    assert experts_bytes["expert_bytes"] == layer_bytes // experts


def test_a_hybrid_gguf_caches_only_the_layers_with_kv_heads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Jamba as llama.cpp writes it: KV heads per layer, 0 for the Mamba layers.
    per_layer = [0, 0, KV, 0, 0, 0, KV, 0]
    keys = {**attention_keys(len(per_layer)), "head_count_kv": per_layer}
    keys["ssm_state_size"] = 16
    tensors = {"token_embd.weight": (np.ones((VOCAB, H), np.float32), None)}
    path = write(tmp_path / "jamba.gguf", "jamba", keys, tensors)
    out = run(capsys, "memory", str(path), "--context", "1000", "--json")
    data = json.loads(out)
    attending = sum(1 for h in per_layer if h)
    assert data["kv_cache_bytes"] == attending * 1000 * KV * 2 * HEAD_DIM * 2
    assert (data["full_layers"], data["constant_layers"]) == (attending, 6)
    assert data["kv_cache_bound"] is None


def test_a_gguf_sliding_window_follows_its_pattern_or_is_a_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tensors = {"token_embd.weight": (np.ones((VOCAB, H), np.float32), None)}
    layers, window, context = 12, 256, 4096
    per_token_layer = KV * 2 * HEAD_DIM * 2
    keys = {**attention_keys(layers), "sliding_window": window}
    gemma3 = write(tmp_path / "gemma3.gguf", "gemma3", keys, tensors)
    data = json.loads(run(capsys, "memory", str(gemma3), "--context", str(context), "--json"))
    # Gemma 3: five local layers, then a global one (llama.cpp's pattern for the architecture).
    assert data["kv_cache_bytes"] == (2 * context + 10 * window) * per_token_layer
    flags = [i % 3 != 2 for i in range(layers)]
    with_flags = write(
        tmp_path / "flags.gguf", "llama", {**keys, "sliding_window_pattern": flags}, tensors
    )
    data = json.loads(run(capsys, "memory", str(with_flags), "--context", str(context), "--json"))
    assert data["kv_cache_bytes"] == (4 * context + 8 * window) * per_token_layer
    assert data["kv_cache_bound"] is None
    unknown = write(tmp_path / "unknown.gguf", "llama", keys, tensors)
    data = json.loads(run(capsys, "memory", str(unknown), "--context", str(context), "--json"))
    assert data["kv_cache_bytes"] == layers * context * per_token_layer
    assert "upper bound" in data["kv_cache_bound"]
    out = run(capsys, "memory", str(unknown), "--context", str(context))
    assert "at most" in out
