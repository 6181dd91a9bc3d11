"""Mixture-of-experts counts (pure): total and active parameters of four families with their real
configs and shapes, the oracle computed here from the config, never by the library."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from remotetensors.index import TensorTable
from remotetensors.quantization import count_parameters
from remotetensors.quantization.moe import moe_layers
from tests import moe_models as mm
from tests import quantized as q
from tests.unit.test_quantization import infos


def per_expert(family: str, c: dict[str, Any]) -> int:
    """Parameters of one routed expert, from the config's sizes alone."""
    h = int(c["hidden_size"])
    if family == "mixtral":
        return 3 * h * int(c["intermediate_size"])  # w1, w3: [I, H]; w2: [H, I]
    if family in ("qwen3", "deepseek"):
        return 3 * h * int(c["moe_intermediate_size"])  # gate, up: [I, H]; down: [H, I]
    i = int(c["intermediate_size"])  # gpt-oss: gate_up [2I, H] + bias 2I, down [H, I] + bias H
    return 2 * i * h + 2 * i + h * i + h


def moe_layer_count(family: str, c: dict[str, Any]) -> int:
    layers = int(c["num_hidden_layers"])
    if family == "deepseek":
        return sum(
            1
            for i in range(layers)
            if i >= c["first_k_dense_replace"] and i % c["moe_layer_freq"] == 0
        )
    if family == "qwen3":
        return sum(
            1
            for i in range(layers)
            if i not in c["mlp_only_layers"] and (i + 1) % c["decoder_sparse_step"] == 0
        )
    return layers


Family = tuple[
    Callable[[], dict[str, Any]],  # the config
    Callable[[dict[str, Any]], mm.Logical],  # the logical tensors
    Callable[[mm.Logical], q.Spec],  # as stored
    str,  # the config's key for routed experts
    tuple[float, float],  # the card's total and active, in billions
]
FAMILIES: dict[str, Family] = {
    "mixtral": (mm.mixtral_8x7b, mm.mixtral_logical, dict, "num_local_experts", (46.7, 12.9)),
    "qwen3": (mm.qwen3_30b_a3b, mm.qwen3_moe_logical, dict, "num_experts", (30.5, 3.3)),
    "deepseek": (
        mm.deepseek_v3,
        mm.deepseek_logical,
        mm.deepseek_stored,
        "n_routed_experts",
        (671, 37),
    ),
    "gpt-oss": (
        mm.gpt_oss_20b,
        mm.gpt_oss_logical,
        mm.gpt_oss_stored,
        "num_local_experts",
        (20.9, 3.6),
    ),
}


def build(family: str) -> tuple[dict[str, Any], mm.Logical, q.Spec, int, int]:
    """(config, logical tensors, stored spec, total oracle, active oracle)."""
    make_config, make_logical, store, experts_key, _ = FAMILIES[family]
    config = make_config()
    logical = make_logical(config)
    spec = store(logical)
    total = mm.count(logical)
    used = config.get("num_experts_per_tok", config.get("experts_per_token"))
    inactive = moe_layer_count(family, config) * (config[experts_key] - used)
    return config, logical, spec, total, total - inactive * per_expert(family, config)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_total_and_active_of_real_configs(family: str) -> None:
    config, _, spec, total, active = build(family)
    result = count_parameters(TensorTable.of(infos(spec)), config)
    assert result.problems == ()
    assert (result.total, result.active) == (total, active)
    assert result.exact
    assert result.active_exact
    assert result.moe is not None
    assert result.moe.experts_per_token == config.get("num_experts_per_tok")
    assert len(result.moe.layers) == moe_layer_count(family, config)
    assert result.moe.expert_parameters == per_expert(family, config)
    # The published figures, as the model cards show them (rounded, or cut, at the digit shown:
    # Qwen3's 3.35B active is "3.3B", DeepSeek-V3's 37.55B "37B", Mixtral's 12.88B "12.9B").
    published_total, published_active = FAMILIES[family][4]
    digits = 0 if family == "deepseek" else 1
    assert published_total in shown(total, digits)
    if family == "gpt-oss":  # its card leaves the input embedding out of the active figure
        embedding = math.prod(config[k] for k in ("vocab_size", "hidden_size"))
        assert published_active in shown(active - embedding, digits)
    else:
        assert published_active in shown(active, digits)


def shown(parameters: int, digits: int) -> set[float]:
    """Billions at ``digits`` decimals, rounded and cut."""
    scale = 10**digits
    return {round(parameters / 1e9, digits), math.floor(parameters / 1e9 * scale) / scale}


def test_bytes_of_one_expert_and_of_a_layers_experts() -> None:
    config, _, spec, _, _ = build("deepseek")
    result = count_parameters(TensorTable.of(infos(spec)), config)
    assert result.moe is not None
    one = [n for n in spec if ".layers.3.mlp.experts.0." in n]
    assert len(one) == 6  # three F8 weights and their scales
    assert result.moe.expert_bytes == mm.nbytes(spec, one)
    layer = [n for n in spec if ".layers.3.mlp.experts." in n]
    assert result.moe.layer_experts_bytes == mm.nbytes(spec, layer)
    summary = result.moe.as_dict()
    assert summary["moe_layers"] == 58
    assert summary["shared_experts"] == 1
    assert result.active is not None
    assert summary["inactive_parameters"] == result.total - result.active
    _, _, oss, _, _ = build("gpt-oss")
    result = count_parameters(infos(oss), gpt_oss := mm.gpt_oss_20b())
    assert result.moe is not None
    fused = [n for n in oss if ".layers.0.mlp.experts." in n]  # blocks, scales and biases
    assert result.moe.layer_experts_bytes == mm.nbytes(oss, fused)
    assert result.moe.expert_bytes == mm.nbytes(oss, fused) // gpt_oss["num_local_experts"]


def test_a_dense_model_is_all_active() -> None:
    arch = q.Arch()
    result = count_parameters(TensorTable.of(infos(q.float_spec(arch))), arch.config())
    assert result.moe is None
    assert result.active == result.total == q.float_count(arch)
    spec, config = q.gptq(arch)
    result = count_parameters(infos(spec), config)
    assert result.active == result.total == q.float_count(arch)


def test_quantized_experts_count_as_the_weights_they_encode() -> None:
    moe = replace(q.Arch(), experts=4, shared_experts=True)
    per = 3 * moe.hidden * moe.expert_intermediate
    for spec, config in (q.gptq(moe), q.moe_compressed(moe), q.fp8_fp4_experts(moe)):
        shapes = {n: tuple(int(x) for x in v) for n, v in q.weight_shape_values(moe).items()}
        result = count_parameters(infos(spec), config, logical_shapes=shapes)
        assert result.total == q.float_count(moe)
        assert result.active == q.float_count(moe) - moe.layers * (4 - 2) * per
        assert result.moe is not None
        assert result.moe.shared_experts == 1  # the shared experts' tensors, always active


def llama4_like(step: int) -> tuple[q.Spec, dict[str, Any], int]:
    """A small Llama-4-shaped model: experts fused per MoE layer (``gate_up_proj`` [E, H, 2I],
    ``down_proj`` [E, I, H]) with a shared expert, every ``step``-th layer a MoE layer."""
    h, i, e, layers = 64, 32, 4, 4
    spec: q.Spec = {"language_model.model.embed_tokens.weight": ("BF16", (100, h))}
    for layer in range(layers):
        p = f"language_model.model.layers.{layer}.feed_forward"
        if (layer + 1) % step:
            for name, shape in (("gate_proj", (2 * i, h)), ("up_proj", (2 * i, h))):
                spec[f"{p}.{name}.weight"] = ("BF16", shape)
            spec[f"{p}.down_proj.weight"] = ("BF16", (h, 2 * i))
            continue
        spec[f"{p}.router.weight"] = ("BF16", (e, h))
        spec[f"{p}.experts.gate_up_proj"] = ("BF16", (e, h, 2 * i))
        spec[f"{p}.experts.down_proj"] = ("BF16", (e, i, h))
        for name, shape in (("gate_proj", (i, h)), ("up_proj", (i, h)), ("down_proj", (h, i))):
            spec[f"{p}.shared_expert.{name}.weight"] = ("BF16", shape)
    text = {
        "model_type": "llama4_text",
        "num_hidden_layers": layers,
        "num_local_experts": e,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": step,
    }
    config = {"model_type": "llama4", "text_config": text}
    moe_count = len(range(step - 1, layers, step))
    return spec, config, moe_count * (e - 1) * 3 * h * i


@pytest.mark.parametrize("step", [1, 2])
def test_fused_experts_and_interleaved_moe_layers(step: int) -> None:
    spec, config, inactive = llama4_like(step)
    result = count_parameters(infos(spec), config)
    total = sum(math.prod(s) for _, s in spec.values())
    assert result.problems == ()
    assert (result.total, result.active) == (total, total - inactive)
    assert result.moe is not None
    assert [layer.layer for layer in result.moe.layers] == list(range(step - 1, 4, step))
    assert result.moe.shared_experts == 1  # Llama-4's ``shared_expert``, always active


def test_fused_experts_without_a_count_in_the_config_take_their_leading_dim() -> None:
    spec, config, inactive = llama4_like(1)
    del config["text_config"]["num_local_experts"]
    result = count_parameters(infos(spec), config)
    assert result.problems == ()
    assert result.moe is not None
    assert result.moe.experts == 4
    assert result.active == sum(math.prod(s) for _, s in spec.values()) - inactive
    # Tensors that disagree on their leading dim: how many experts is unknown, and so is the
    # active count.
    p = "language_model.model.layers.0.feed_forward.experts"
    spec[f"{p}.down_proj"] = ("BF16", (8, 16, 64))
    result = count_parameters(infos(spec), config)
    assert result.active is None
    assert not result.active_exact
    assert any("no key says how many there are" in p for p in result.problems)


def test_which_layers_each_family_says_are_moe_layers() -> None:
    assert moe_layers(mm.deepseek_v3()) == set(range(3, 61))
    qwen = {"num_hidden_layers": 8, "decoder_sparse_step": 2, "mlp_only_layers": [3]}
    assert moe_layers(qwen) == {1, 5, 7}
    assert moe_layers({"num_hidden_layers": 6, "interleave_moe_layer_step": 2}) == {1, 3, 5}
    jamba = {"num_hidden_layers": 8, "expert_layer_period": 2, "expert_layer_offset": 1}
    assert moe_layers(jamba) == {1, 3, 5, 7}
    assert moe_layers({"num_hidden_layers": 4, "moe_layers": [0, 2, 9]}) == {0, 2}
    assert moe_layers(mm.mixtral_8x7b()) is None


def test_what_the_config_says_against_the_tensors() -> None:
    config, _, spec, total, active = build("qwen3")
    config["mlp_only_layers"] = [0, 1]  # the tensors hold experts in every layer
    result = count_parameters(infos(spec), config)
    assert (result.total, result.active) == (total, active)  # the tensors are counted
    assert len(result.problems) == 1
    assert "layers 2-47 MoE layers" in result.problems[0]
    assert "stored in layers 0-47" in result.problems[0]
    del config["num_experts_per_tok"]
    result = count_parameters(infos(spec), config)
    assert result.active is None
    assert not result.active_exact
    assert result.exact  # the total still is
    assert any("the active count is unknown" in p for p in result.problems)
    result = count_parameters(infos(spec), None)
    assert result.active is None
    assert result.total == total


def test_experts_the_config_describes_but_no_tensor_names_are_an_unknown_active_count() -> None:
    # Granite-MoE stores its experts fused as ``block_sparse_moe.input_linear``: a name we do
    # not read as experts. The active count is unknown, and said so, never the total.
    h, i, e = 64, 32, 4
    spec: q.Spec = {"model.embed_tokens.weight": ("BF16", (100, h))}
    for layer in range(2):
        p = f"model.layers.{layer}.block_sparse_moe"
        spec[f"{p}.router.layer.weight"] = ("BF16", (e, h))
        spec[f"{p}.input_linear.weight"] = ("BF16", (e, 2 * i, h))
        spec[f"{p}.output_linear.weight"] = ("BF16", (e, h, i))
    config = {"model_type": "granitemoe", "num_local_experts": e, "num_experts_per_tok": 2}
    for tensors in (infos(spec), TensorTable.of(infos(spec))):
        result = count_parameters(tensors, config)
        assert result.total == sum(math.prod(s) for _, s in spec.values())
        assert result.exact
        assert result.active is None
        assert not result.active_exact
        assert len(result.problems) == 1
        assert "no tensor is named as a routed expert" in result.problems[0]
    config["num_experts_per_tok"] = e  # every expert used: nothing is inactive
    assert count_parameters(infos(spec), config).active == result.total


def test_the_active_line_says_why_it_is_unknown() -> None:
    from remotetensors.views.reports import active_words

    moe = {"experts": 8, "experts_per_token": None, "shared_experts": 0, "moe_layers": 4}
    assert active_words(None, False, moe) == (
        "active per token: unknown (the config does not say how many experts a token uses); "
        "8 routed experts in 4 MoE layer(s)"
    )
    moe.update(experts_per_token=2, moe_layers=0)
    unknown = "unknown (the routed experts could not be found or counted in the tensors)"
    assert unknown in str(active_words(None, False, moe))
    moe.update(moe_layers=4, shared_experts=1)
    assert active_words(3_500_000, False, moe) == (
        "3.5M active per token (3,500,000, not exact): 2 of 8 routed experts and 1 shared in "
        "4 MoE layer(s)"
    )
    assert active_words(10, True, None) is None


@pytest.mark.parametrize("family", ["mixtral", "qwen3"])
def test_active_equals_what_hf_mem_finds_for_numbered_experts(family: str) -> None:
    # hf-mem 0.5.6 (--experimental) splits a model into a base and numbered experts, each
    # summed over the layers; base + used x one expert is then the active count. It only reads
    # experts numbered in their names, so the BF16 families are where it can answer.
    from hf_mem.safetensors.metadata import parse_moe_metadata

    config, _, spec, total, active = build(family)
    header = {n: {"dtype": d, "shape": list(s)} for n, (d, s) in spec.items()}
    theirs = parse_moe_metadata({"model.safetensors": header}, config)
    assert theirs is not None
    assert theirs.active_expert_count is not None
    their_active = (
        theirs.base_model.param_count
        + theirs.active_expert_count * theirs.expert_template.param_count
    )
    ours = count_parameters(infos(spec), config)
    assert (ours.total, ours.active) == (total, active)
    assert ours.active == their_active
    assert ours.moe is not None
    assert ours.moe.experts == theirs.expert_count
