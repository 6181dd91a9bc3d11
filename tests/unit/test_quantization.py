"""True parameter counts from headers and config (pure): every layout against the float model."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from remotetensors.index import TensorInfo, TensorTable
from remotetensors.quantization import (
    AUXILIARY,
    WEIGHT,
    count_parameters,
    describe_quantization,
    layouts,
)
from tests import quantized as q


def infos(spec: q.Spec) -> dict[str, TensorInfo]:
    """TensorInfos for a spec, laid out one after another (offsets do not matter here)."""
    result: dict[str, TensorInfo] = {}
    offset = 0
    for name, (dtype, shape) in spec.items():
        size = math.prod(shape) * np.dtype(q.NUMPY[dtype]).itemsize if dtype in q.NUMPY else 0
        result[name] = TensorInfo(name, dtype, shape, offset, offset + size)
        offset += size
    return result


ARCH = q.Arch()
MOE = replace(q.Arch(), experts=4, shared_experts=True)


def check_exact(spec: q.Spec, config: dict[str, Any] | None, oracle: int, **kw: Any) -> Any:
    result = count_parameters(infos(spec), config, **kw)
    assert result.problems == ()
    assert result.total == oracle
    assert result.exact
    return result


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("desc_act", [False, True])
def test_gptq(bits: int, desc_act: bool) -> None:
    spec, config = q.gptq(ARCH, bits=bits, desc_act=desc_act)
    result = check_exact(spec, config, q.float_count(ARCH))
    assert result.quantization is not None
    assert (result.quantization.method, result.quantization.bits) == ("gptq", bits)
    assert result.quantization.group_size == 128
    name = "model.layers.0.mlp.down_proj"
    logical = result.tensors[f"{name}.qweight"]
    assert logical.shape == q.float_model(ARCH)[f"{name}.weight"]
    assert logical.role == WEIGHT
    assert logical.packing
    for leaf in ("qzeros", "scales", "g_idx"):
        assert result.tensors[f"{name}.{leaf}"].role == AUXILIARY
    assert result.stored_total < result.total


def test_gptq_without_g_idx_and_a_width_that_does_not_divide_is_an_upper_bound() -> None:
    spec, config = q.gptq(ARCH, bits=3)
    for name in [n for n in spec if n.endswith(".g_idx")]:
        del spec[name]
    result = count_parameters(infos(spec), config)
    assert result.total == q.float_count(ARCH)  # 3-bit GPTQ packs whole groups of 32 inputs
    assert not result.exact
    spec4, config4 = q.gptq(ARCH, bits=4)
    for name in [n for n in spec4 if n.endswith(".g_idx")]:
        del spec4[name]
    check_exact(spec4, config4, q.float_count(ARCH))


@pytest.mark.parametrize("bits", [4, 8])
def test_awq(bits: int) -> None:
    spec, config = q.awq(ARCH, bits=bits)
    result = check_exact(spec, config, q.float_count(ARCH))
    assert result.quantization is not None
    assert result.quantization.method == "awq"
    assert result.quantization.modules_not_converted == ("lm_head",)
    name = "model.layers.1.self_attn.k_proj"
    assert result.tensors[f"{name}.qweight"].shape == q.float_model(ARCH)[f"{name}.weight"]


def test_gptq_and_awq_without_config_infer_width_and_orientation() -> None:
    for spec, _ in (q.gptq(ARCH, bits=8), q.awq(ARCH, bits=4)):
        check_exact(spec, None, q.float_count(ARCH))


@pytest.mark.parametrize("double", [False, True])
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
def test_bitsandbytes_4bit(double: bool, quant_type: str) -> None:
    spec, config = q.bnb4(ARCH, quant_type=quant_type, double=double)
    result = check_exact(spec, config, q.float_count(ARCH))
    assert result.quantization is not None
    assert (result.quantization.method, result.quantization.bits) == ("bitsandbytes", 4)
    assert result.quantization.format == quant_type
    state = f"model.layers.0.mlp.up_proj.weight.quant_state.bitsandbytes__{quant_type}"
    assert result.tensors[state].role == AUXILIARY


def test_bitsandbytes_8bit() -> None:
    spec, config = q.bnb8(ARCH)
    result = check_exact(spec, config, q.float_count(ARCH))
    assert result.quantization is not None
    assert result.quantization.bits == 8
    assert result.tensors["model.layers.0.mlp.up_proj.SCB"].role == AUXILIARY
    assert result.tensors["model.layers.0.mlp.up_proj.weight_format"].role == AUXILIARY


def test_compressed_tensors_pack_quantized_uses_the_stored_shapes() -> None:
    odd = replace(ARCH, intermediate=372)  # 372 inputs do not fill the last int32 of a row
    spec, config = q.compressed_pack(odd, bits=4, group=32)
    header_only = count_parameters(infos(spec), config)
    assert not header_only.exact
    assert header_only.total >= q.float_count(odd)
    shapes = {n: tuple(int(x) for x in v) for n, v in q.weight_shape_values(odd).items()}
    result = check_exact(spec, config, q.float_count(odd), logical_shapes=shapes)
    assert result.quantization is not None
    assert result.quantization.format == "pack-quantized"
    assert result.quantization.modules_not_converted == ("lm_head", "re:.*mlp.gate$")
    assert result.tensors["model.layers.0.mlp.down_proj.weight_shape"].role == AUXILIARY


def test_compressed_tensors_nvfp4_and_float() -> None:
    for build in (q.compressed_nvfp4, q.compressed_float):
        spec, config = build(ARCH)
        check_exact(spec, config, q.float_count(ARCH))


def test_fine_grained_fp8() -> None:
    spec, config = q.fp8_blocks(ARCH)
    result = check_exact(spec, config, q.float_count(ARCH))
    assert result.quantization is not None
    assert result.quantization.method == "fp8"
    assert result.tensors["model.layers.0.self_attn.q_proj.weight_scale_inv"].role == AUXILIARY


def test_mxfp4_gpt_oss() -> None:
    spec, config, oracle = q.gpt_oss(replace(ARCH, experts=4, expert_intermediate=64))
    result = check_exact(spec, config, oracle)
    blocks = result.tensors["model.layers.0.mlp.experts.down_proj_blocks"]
    assert blocks.shape == (4, ARCH.hidden, 64)


@pytest.mark.parametrize("bits", [3, 4, 6, 8])
def test_mlx(bits: int) -> None:
    overrides: dict[str, Any] = {
        "lm_head": {"bits": 8, "group_size": 32},
        "model.layers.0.mlp.down_proj": {"bits": 6, "group_size": 64},
        "model.layers.1.self_attn.v_proj": False,
    }
    spec, config = q.mlx(ARCH, bits=bits, overrides=overrides)
    result = check_exact(spec, config, q.float_count(ARCH))
    assert result.quantization is not None
    assert (result.quantization.method, result.quantization.bits) == ("mlx", bits)
    assert "model.layers.1.self_attn.v_proj" in result.quantization.modules_not_converted
    assert result.tensors["lm_head.weight"].shape == (ARCH.vocab, ARCH.hidden)


def test_mlx_without_quantization_block_infers_widths_from_scales() -> None:
    spec, config = q.mlx(ARCH, bits=4)
    del config["quantization"], config["quantization_config"]
    result = count_parameters(infos(spec), config)
    # No group size: each width is a guess, flagged as such rather than trusted.
    assert result.problems
    assert not result.exact


def test_moe_with_experts_in_another_width_through_regex_targets() -> None:
    spec, config = q.moe_compressed(MOE)
    shapes = {n: tuple(int(x) for x in v) for n, v in q.weight_shape_values(MOE).items()}
    check_exact(spec, config, q.float_count(MOE), logical_shapes=shapes)
    header_only = count_parameters(infos(spec), config)
    assert header_only.total == q.float_count(MOE)  # every width here fills its int32


def test_routed_experts_in_fp4_beside_fp8() -> None:
    spec, config = q.fp8_fp4_experts(MOE)
    result = check_exact(spec, config, q.float_count(MOE))
    assert result.quantization is not None
    assert result.quantization.expert_dtype == "fp4"
    shared = "model.layers.0.mlp.shared_experts.up_proj.weight"
    assert result.tensors[shared].packing is None  # shared experts stay FP8, one per byte
    scale = "model.layers.0.mlp.experts.1.up_proj.weight_scale"
    assert result.tensors[scale].role == AUXILIARY


def test_e8m0_is_never_a_weight() -> None:
    spec = q.float_spec(ARCH)
    spec["model.layers.0.mlp.down_proj.scales_e8m0"] = ("F8_E8M0", (ARCH.hidden, 12))
    result = count_parameters(infos(spec), None)
    assert result.total == q.float_count(ARCH)
    assert result.quantization is None


def test_unquantized_model_counts_as_stored() -> None:
    spec = q.float_spec(ARCH)
    result = count_parameters(infos(spec), ARCH.config())
    assert result.quantization is None
    assert result.total == result.stored_total == q.float_count(ARCH)
    assert result.auxiliary == []
    assert result.unpacked == []


# --- configs that cannot be believed ----------------------------------------------------------


def test_unknown_method_warns_and_counts_from_the_layout() -> None:
    spec, config = q.gptq(ARCH)
    config["quantization_config"]["quant_method"] = "fancy-new-thing"
    result = count_parameters(infos(spec), config)
    assert result.total == q.float_count(ARCH)
    assert any("unknown quantization method 'fancy-new-thing'" in p for p in result.problems)
    assert all("config.json" in p for p in result.problems)


def test_gptq_config_over_float_weights_is_reported() -> None:
    _, config = q.gptq(ARCH)
    result = count_parameters(infos(q.float_spec(ARCH)), config)
    assert result.total == q.float_count(ARCH)
    assert len(result.problems) == 1
    assert "says gptq" in result.problems[0]
    assert "config.json" in result.problems[0]


def test_where_the_block_is_found() -> None:
    _, config = q.gptq(ARCH)
    nested = {"model_type": "llava", "text_config": config}
    found, _ = describe_quantization(nested)
    assert found is not None
    assert found.source == "config.json: text_config: quantization_config"
    separate, _ = describe_quantization(ARCH.config(), {"quant_method": "AWQ", "bits": 4})
    assert separate is not None
    assert separate.method == "awq"
    assert separate.source == "quantization_config.json"
    assert describe_quantization(None) == (None, ())


def test_declared_total_is_reported_beside_ours() -> None:
    spec, config = q.awq(ARCH)
    result = count_parameters(infos(spec), config, metadata={"total_parameters": "12345"})
    assert result.declared_total == 12345
    assert result.total == q.float_count(ARCH)


def test_mlx_top_level_quantization_block_alone() -> None:
    spec, config = q.mlx(ARCH, bits=8, group=32)
    del config["quantization_config"]
    result = check_exact(spec, config, q.float_count(ARCH))
    assert result.quantization is not None
    assert result.quantization.source == "config.json: quantization"
    assert (result.quantization.method, result.quantization.group_size) == ("mlx", 32)


@pytest.mark.parametrize("build", [q.gptq, q.awq])
def test_a_width_the_tensors_contradict_is_reported_once(build: Any) -> None:
    spec, config = build(ARCH, bits=4)
    config["quantization_config"]["bits"] = 8  # the tensors hold 4-bit values
    result = count_parameters(infos(spec), config)
    assert result.total == q.float_count(ARCH)  # the zero points' packing gives the width
    assert len(result.problems) == 1
    assert "says 8-bit" in result.problems[0]
    assert f"{len(q.linears(ARCH)):,} tensors" in result.problems[0]


def test_stored_shapes_the_packed_weights_cannot_hold_are_not_believed() -> None:
    spec, config = q.compressed_pack(ARCH, bits=4, group=32)
    shapes = {n: (v[0], v[1] * 3) for n, v in q.weight_shape_values(ARCH).items()}
    result = count_parameters(infos(spec), config, logical_shapes=shapes)
    assert result.total == q.float_count(ARCH)  # from the packed tensors: these rows are full
    assert not result.exact
    assert len(result.problems) == 1
    assert "weight_shape" in result.problems[0]


@given(
    hidden=st.integers(1, 6).map(lambda n: 128 * n),
    intermediate=st.integers(1, 8).map(lambda n: 128 * n),
    heads=st.sampled_from([2, 4, 8]),
    kv_heads=st.sampled_from([1, 2]),
    layers=st.integers(1, 3),
    vocab=st.integers(1, 1000),
    layout=st.sampled_from(
        [
            "gptq",
            "awq",
            "awq-gemv",
            "awq-gemv-fast",
            "bnb4",
            "bnb8",
            "nvfp4",
            "modelopt",
            "fp8",
            "mlx",
        ]
    ),
    bits=st.sampled_from([2, 3, 4, 8]),
)
def test_any_shape_counts_as_its_float_model(
    hidden: int,
    intermediate: int,
    heads: int,
    kv_heads: int,
    layers: int,
    vocab: int,
    layout: str,
    bits: int,
) -> None:
    arch = q.Arch(
        hidden=hidden,
        intermediate=intermediate,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=64,
        vocab=vocab,
        layers=layers,
    )
    builds = {
        "gptq": lambda: q.gptq(arch, bits=bits),
        "awq": lambda: q.awq(arch, bits=4 if bits == 3 else bits),
        "awq-gemv": lambda: q.awq_gemv(arch, bits=4 if bits == 3 else bits),
        "awq-gemv-fast": lambda: q.awq_gemv_fast(arch),
        "modelopt": lambda: q.modelopt_nvfp4(arch),
        "bnb4": lambda: q.bnb4(arch),
        "bnb8": lambda: q.bnb8(arch),
        "nvfp4": lambda: q.compressed_nvfp4(arch),
        "fp8": lambda: q.fp8_blocks(arch),
        "mlx": lambda: q.mlx(arch, bits=bits, group=64),
    }
    spec, config = builds[layout]()
    check_exact(spec, config, q.float_count(arch))


@given(intermediate=st.integers(1, 300), bits=st.sampled_from([4, 8]))
def test_pack_quantized_with_any_row_width(intermediate: int, bits: int) -> None:
    arch = q.Arch(intermediate=intermediate)
    spec, config = q.compressed_pack(arch, bits=bits, group=4)
    header_only = count_parameters(infos(spec), config)
    assert header_only.total >= q.float_count(arch)  # an upper bound, flagged as one
    assert not header_only.exact
    shapes = {n: tuple(int(x) for x in v) for n, v in q.weight_shape_values(arch).items()}
    check_exact(spec, config, q.float_count(arch), logical_shapes=shapes)


def test_blocks_without_a_method_name() -> None:
    autogptq = {"bits": 4, "group_size": 128, "desc_act": False, "sym": True}
    found, _ = describe_quantization(ARCH.config(), autogptq)
    assert found is not None
    assert (found.method, found.bits) == ("gptq", 4)
    autoawq = {"w_bit": 4, "q_group_size": 128, "zero_point": True, "version": "GEMM"}
    found, _ = describe_quantization(ARCH.config(), autoawq)
    assert found is not None
    assert (found.method, found.bits, found.group_size, found.format) == ("awq", 4, 128, "gemm")
    spelled = ARCH.config(quantization_config={"quant_method": "Compressed_Tensors"})
    found, problems = describe_quantization(spelled)
    assert found is not None
    assert found.method == "compressed-tensors"
    assert problems == ()
    kept = ARCH.config(quantization_config={"quant_method": "FP_Quant"})
    found, problems = describe_quantization(kept)
    assert found is not None
    assert found.method == "fp_quant"  # as the config says, lowercased
    assert "unknown quantization method 'FP_Quant'" in problems[0]


# --- the plain path: a model no layout applies to, counted at C speed -------------------------


def assert_both_paths_agree(spec: q.Spec, config: dict[str, Any] | None = None) -> Any:
    """The count from a :class:`TensorTable` (which may take the plain path) equals the one the
    layout pass gives the same tensors as a dict, object for object."""
    tensors = infos(spec)
    slow = count_parameters(tensors, config, metadata={"total_parameters": "7"})
    fast = count_parameters(TensorTable.of(tensors), config, metadata={"total_parameters": "7"})
    assert fast == slow
    assert list(fast.tensors.raw_items()) == list(slow.tensors.raw_items())
    return fast


def test_plain_models_take_the_plain_path_with_the_same_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(layouts._Counter, "run", lambda self: calls.append(1))
    spec = q.float_spec(ARCH)
    count_parameters(TensorTable.of(infos(spec)), ARCH.config())
    assert calls == []  # the layout pass never ran
    monkeypatch.undo()
    result = assert_both_paths_agree(spec, ARCH.config())
    assert result.total == q.float_count(ARCH)


@pytest.mark.parametrize(
    "extra",
    [
        ("model.layers.0.mlp.down_proj.scales_e8m0", ("F8_E8M0", (ARCH.hidden, 12))),
        ("model.layers.0.mlp.down_proj.weight_packed", ("F16", (ARCH.hidden, 12))),
        ("model.layers.0.mlp.experts.gate_up_proj_blocks", ("U8", (4, 8, 16))),
        ("model.layers.0.self_attn.q_proj.qweight", ("I32", (8, ARCH.hidden))),
        ("model.layers.0.self_attn.q_proj.weight", ("U32", (ARCH.hidden, 8))),
        ("model.layers.0.self_attn.k_proj.weight", ("F8_E4M3", (8, ARCH.hidden))),
    ],
)
def test_anything_a_layout_looks_at_leaves_the_plain_path(extra: tuple[str, Any]) -> None:
    spec = q.float_spec(ARCH)
    name, value = extra
    spec[name] = value
    assert_both_paths_agree(spec)


def test_a_config_naming_a_method_leaves_the_plain_path() -> None:
    spec, config = q.gptq(ARCH)
    assert_both_paths_agree(q.float_spec(ARCH), config)
    assert_both_paths_agree(spec, config)


# --- counts that were wrong and still called exact (issue 31) -----------------------------


@pytest.mark.parametrize("group", [32, 64, 128])
def test_awq_gemv_as_autoawq_writes_it(group: int) -> None:
    spec, config = q.awq_gemv(ARCH, group=group)
    result = check_exact(spec, config, q.float_count(ARCH))
    name = "model.layers.0.mlp.down_proj"
    assert result.tensors[f"{name}.qweight"].shape == q.float_model(ARCH)[f"{name}.weight"]
    assert result.tensors[f"{name}.scales"].role == AUXILIARY
    del config["quantization_config"]
    check_exact(spec, config, q.float_count(ARCH))  # the shapes alone say GEMV


def test_the_issues_awq_gemv_layer() -> None:
    # Llama-2-7B's gate_proj (out 11008, in 4096) as AutoAWQ's WQLinear_GEMV stores it at 4
    # bits, group 128: it was counted as 352,256 parameters (11008 x the scales' width), exact.
    out, inp = 11008, 4096
    spec: q.Spec = {
        "mlp.gate_proj.qweight": ("I32", (out, inp // 8)),
        "mlp.gate_proj.qzeros": ("I32", (out, 4)),
        "mlp.gate_proj.scales": ("F16", (out, 32)),
    }
    config = {"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}
    config["quantization_config"]["version"] = "gemv"
    check_exact(spec, config, out * inp)


def test_awq_gemv_fast_as_autoawq_writes_it() -> None:
    spec, config = q.awq_gemv_fast(ARCH)
    result = check_exact(spec, config, q.float_count(ARCH))
    name = "model.layers.1.self_attn.k_proj"
    assert result.tensors[f"{name}.qweight"].shape == q.float_model(ARCH)[f"{name}.weight"]
    assert result.tensors[f"{name}.qzeros"].role == AUXILIARY


@pytest.mark.parametrize("with_config", [True, False])
def test_modelopt_nvfp4_is_recognised_from_its_tensors(with_config: bool) -> None:
    spec, config = q.modelopt_nvfp4(ARCH)
    if not with_config:
        del config["quantization_config"]
    result = check_exact(spec, config, q.float_count(ARCH))
    name = "model.layers.0.mlp.up_proj"
    logical = result.tensors[f"{name}.weight"]
    assert logical.shape == q.float_model(ARCH)[f"{name}.weight"]
    assert logical.packing == "nvfp4, 2 per U8"
    for leaf in ("weight_scale", "weight_scale_2", "input_scale"):
        assert result.tensors[f"{name}.{leaf}"].role == AUXILIARY
    assert result.tensors["model.layers.0.self_attn.k_proj.k_scale"].role == AUXILIARY
    if with_config:
        assert result.quantization is not None
        assert (result.quantization.method, result.quantization.bits) == ("modelopt", 4)
        assert result.quantization.format == "nvfp4"
        assert result.quantization.modules_not_converted == ("lm_head",)


def test_an_unknown_method_is_never_exact() -> None:
    spec, config = q.exl2(ARCH)
    result = count_parameters(infos(spec), config)
    assert not result.exact
    assert result.total < q.float_count(ARCH)  # counted as stored: what it is, not exact
    assert any(
        "unknown quantization method 'exl2'" in p and "not exact" in p for p in result.problems
    )
    # Even when every tensor is in a layout we know, the method may mean something else.
    spec, config = q.gptq(ARCH)
    config["quantization_config"]["quant_method"] = "fancy-new-thing"
    result = count_parameters(infos(spec), config)
    assert result.total == q.float_count(ARCH)
    assert not result.exact


def test_packed_integers_counted_as_stored_in_a_quantized_model_are_not_exact() -> None:
    spec, config = q.gptq(ARCH)
    # One module stores a U8 weight (two 4-bit values per byte) beside nothing we know.
    out, inp = q.float_model(ARCH)["lm_head.weight"]
    spec["lm_head.weight"] = ("U8", (out, inp // 2))
    result = count_parameters(infos(spec), config)
    assert not result.exact
    assert not result.tensors["lm_head.weight"].exact
    assert any("lm_head.weight" in p and "as stored" in p for p in result.problems)
    # A model that says nothing of quantization keeps its integer tensors as they are.
    plain = q.float_spec(ARCH)
    plain["model.layers.0.mlp.router_ids.weight"] = ("I32", (4, 4))
    assert count_parameters(infos(plain), ARCH.config()).exact


@pytest.mark.parametrize("class_group_first", [True, False])
def test_compressed_tensors_names_win_over_classes(class_group_first: bool) -> None:
    spec, config = q.compressed_two_widths(ARCH, class_group_first=class_group_first)
    shapes = {n: tuple(int(x) for x in v) for n, v in q.weight_shape_values(ARCH).items()}
    result = check_exact(spec, config, q.float_count(ARCH), logical_shapes=shapes)
    down = "model.layers.0.mlp.down_proj.weight_packed"
    assert result.tensors[down].packing == "pack-quantized 8-bit, 4 per I32"
    header_only = count_parameters(infos(spec), config)
    assert header_only.total == q.float_count(ARCH)  # every row here fills its int32s


def test_a_stored_weight_shape_wins_over_the_config() -> None:
    spec, config = q.compressed_two_widths(ARCH)
    config["quantization_config"]["config_groups"]["group_1"]["targets"] = ["re:.*nothing$"]
    shapes = {n: tuple(int(x) for x in v) for n, v in q.weight_shape_values(ARCH).items()}
    result = count_parameters(infos(spec), config, logical_shapes=shapes)
    assert result.total == q.float_count(ARCH)
    assert result.exact
    assert len(result.problems) == 1
    assert "down_proj.weight_packed" in result.problems[0]
    assert "counted as the tensors say" in result.problems[0]
