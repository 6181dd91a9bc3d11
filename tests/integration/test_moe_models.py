"""Mixtures of experts opened where they live: Mixtral-8x7B, Qwen3-30B-A3B, DeepSeek-V3 and
gpt-oss-20b with their published configs and real shapes, as sparse sharded checkpoints on a
local disk and as headers served by the hub stand-in; totals, active parameters and the
experts' bytes through the library, ``params``, ``info``, ``memory`` and the notebook view."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from safetensors import safe_open

import remotetensors as rt
from remotetensors.cli import main
from tests import moe_models as mm
from tests.hub_standin import HubStandIn
from tests.unit.test_moe import FAMILIES, build, moe_layer_count, per_expert

SHARDS = {"mixtral": 4, "qwen3": 4, "deepseek": 8, "gpt-oss": 3}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any]]:
    """family -> (its folder, (config, logical, spec, total, active))."""
    root = tmp_path_factory.mktemp("moe")
    found = {}
    for family in FAMILIES:
        built = build(family)
        config, _, spec, _, _ = built
        found[family] = (mm.write_model(root / family, spec, config, shards=SHARDS[family]), built)
    return found


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_the_sparse_shards_are_what_the_reference_reads(models: dict[str, Any]) -> None:
    folder, (_, _, spec, _, _) = models["mixtral"]
    shard = folder / "model-00001-of-00004.safetensors"
    with safe_open(shard, framework="numpy") as f:
        names = list(f.keys())
        assert names
        for name in names:
            assert tuple(f.get_slice(name).get_shape()) == spec[name][1]
    assert shard.stat().st_size > 10 * 1024**3  # ten gigabytes of hole
    assert shard.stat().st_blocks * 512 < 64 * 1024**2  # on a few megabytes of disk


@pytest.mark.parametrize("family", list(FAMILIES))
def test_total_and_active_through_the_library(models: dict[str, Any], family: str) -> None:
    folder, (config, _, spec, total, active) = models[family]
    with rt.open_model(folder) as model:
        assert (model.num_parameters, model.num_active_parameters) == (total, active)
        assert model.true_count.exact
        assert model.true_count.active_exact
        moe = model.true_count.moe
        assert moe is not None
        assert len(moe.layers) == moe_layer_count(family, config)
        assert moe.expert_parameters == per_expert(family, config)
        estimate = model.memory(context=4096)
        assert estimate.moe is moe
        assert estimate.weights_bytes == mm.nbytes(spec, list(spec))


@pytest.mark.parametrize("family", ["mixtral", "gpt-oss"])
def test_params_info_and_memory_on_the_command_line(
    models: dict[str, Any], family: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, (config, _, spec, total, active) = models[family]
    data = json.loads(run(capsys, "params", str(folder), "--json"))
    assert (data["parameters"], data["active_parameters"]) == (total, active)
    assert data["active_exact"] is True
    assert data["active_convention"].startswith("active = total - sum over MoE layers")
    moe = data["moe"]
    experts = config.get("num_local_experts")
    assert (moe["experts"], moe["experts_per_token"]) == (experts, config["num_experts_per_tok"])
    assert moe["moe_layers"] == config["num_hidden_layers"]
    assert moe["expert_parameters"] == per_expert(family, config)
    assert moe["inactive_parameters"] == total - active
    text = run(capsys, "params", str(folder))
    used, routed = config["num_experts_per_tok"], experts
    assert f"active per token ({active:,}): {used} of {routed} routed experts in" in text
    info = json.loads(run(capsys, "info", str(folder), "--json"))
    assert info["active_parameters"] == active
    shown = f"active:     {active / 1e9:.1f}B per token ({active:,}): {used} of {routed}"
    assert shown in run(capsys, "info", str(folder))
    memory = json.loads(run(capsys, "memory", str(folder), "--context", "1024", "--json"))
    assert memory["active_parameters"] == active
    layer = [n for n in spec if n.startswith("model.layers.0.") and ".experts." in n]
    assert memory["experts"]["layer_experts_bytes"] == mm.nbytes(spec, layer)
    if family == "mixtral":  # one expert: three BF16 matrices of hidden x intermediate
        one = 3 * config["hidden_size"] * config["intermediate_size"] * 2
        assert memory["experts"]["expert_bytes"] == one
    text = run(capsys, "memory", str(folder), "--context", "1024")
    assert f"({active / 1e9:.1f}B active per token;" in text
    assert f"per layer's {routed} experts, in {config['num_hidden_layers']} MoE layer(s)" in text


def test_a_dense_model_reports_active_equal_to_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = mm.mixtral_8x7b()
    for key in ("num_local_experts", "num_experts_per_tok"):
        del config[key]
    logical = {
        n: s
        for n, s in mm.mixtral_logical(mm.mixtral_8x7b()).items()
        if "block_sparse_moe" not in n
    }
    folder = mm.write_model(tmp_path / "dense", logical, config, shards=2)
    data = json.loads(run(capsys, "params", str(folder), "--json"))
    assert data["active_parameters"] == data["parameters"] == mm.count(logical)
    assert data["moe"] is None
    assert "active per token" not in run(capsys, "params", str(folder))


def test_headers_served_by_the_hub_stand_in(
    hub: HubStandIn, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setattr("remotetensors.sources.hub.repo.resolve_token", lambda token: None)
    config, _, spec, total, active = build("qwen3")
    hub.add("Qwen/Qwen3-30B-A3B", mm.header_only_files(spec, config, shards=16))
    data = json.loads(run(capsys, "params", "hf://Qwen/Qwen3-30B-A3B", "--json"))
    assert (data["parameters"], data["active_parameters"]) == (total, active)
    assert data["moe"]["experts"] == config["num_experts"]
    # The headers alone: the one-call metadata endpoint and the configs, no shard touched.
    assert not [e.path for e in hub.log.entries if "/model-000" in e.path]


def test_the_notebook_view_says_the_active_figure(models: dict[str, Any]) -> None:
    folder, (_, _, _, _, active) = models["qwen3"]
    with rt.open_model(folder) as model:
        html = model._repr_html_()
        text = repr(model)
    assert "mixture of experts:" in html
    assert f"{active:,}" in html
    assert "8 of 128 routed experts in 48 MoE layer(s)" in html
    assert text


def test_a_scan_gives_each_models_active_count(
    models: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    folders = [str(models[f][0]) for f in ("mixtral", "gpt-oss")]
    assert main(["params", *folders, "--json"]) == 0
    lines = {
        json.loads(line)["location"]: json.loads(line)
        for line in capsys.readouterr().out.splitlines()
    }
    for family, folder in zip(("mixtral", "gpt-oss"), folders, strict=True):
        _, (_, _, _, total, active) = models[family]
        assert (lines[folder]["parameters"], lines[folder]["active_parameters"]) == (total, active)
