"""`params` and `memory` on quantized models served on loopback, and the hub stand-in."""

from __future__ import annotations

import json

import pytest

import remotetensors as rt
from remotetensors.cli import main
from tests import quantized as q
from tests.hub_standin import HubStandIn
from tests.integration.test_models import serve
from tests.servers import FaultyServer

ARCH = q.Arch()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_params_shows_the_true_total_first(
    faulty: FaultyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, config = q.gptq(ARCH, bits=4)
    oracle = q.float_count(ARCH)
    base = serve(faulty, q.files_for(spec, config, shards=2))
    status, out, _ = run(capsys, "params", base, "--json")
    assert status == 0
    data = json.loads(out)
    assert data["parameters"] == oracle
    assert data["exact"] is True
    assert data["quantization"]["method"] == "gptq"
    assert data["quantization"]["bits"] == 4
    stored = sum(data["by_dtype"].values())
    assert data["total"] == data["stored_parameters"] == stored < oracle
    assert sum(data["parameters_by_dtype"].values()) == oracle
    assert data["bytes"] == sum(a.nbytes for a in q.arrays(spec).values())
    assert data["bits_per_parameter"] == data["bytes"] * 8 / oracle
    status, out, _ = run(capsys, "params", base)
    lines = out.splitlines()
    assert lines[0].startswith(f"{oracle / 1000:.1f}K parameters ({oracle:,})")
    assert lines[0].endswith(f"{data['bits_per_parameter']:.2f} bits per parameter")
    assert lines[1].startswith("quantized: gptq, 4-bit, group size 128")
    assert f"stored: {stored / 1000:.1f}K elements ({stored:,})" in out
    assert "I32" in out


def test_params_reports_the_declared_total_beside_ours(
    faulty: FaultyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, config = q.awq(ARCH)
    oracle = q.float_count(ARCH)
    files = q.files_for(spec, config, metadata={"total_parameters": str(oracle - 5)})
    status, out, _ = run(capsys, "params", serve(faulty, files))
    assert status == 0
    assert f"declared: {oracle - 5:,} (metadata total_parameters); ours differs by +5" in out


def test_memory_command(faulty: FaultyServer, capsys: pytest.CaptureFixture[str]) -> None:
    spec, config = q.awq(ARCH)
    base = serve(faulty, q.files_for(spec, config))
    status, out, _ = run(capsys, "memory", base, "--context", "4096", "--batch", "2", "--json")
    assert status == 0
    data = json.loads(out)
    with rt.open_model(base) as model:
        weights = model.nbytes
    per_token = ARCH.layers * 2 * ARCH.kv_heads * ARCH.head_dim * 2  # bf16 from torch_dtype
    assert data["weights_bytes"] == weights
    assert data["kv_cache_bytes"] == 4096 * 2 * per_token
    assert data["total_bytes"] == weights + 4096 * 2 * per_token
    assert data["kv_dtype"] == "BF16"
    assert data["parameters"] == q.float_count(ARCH)
    status, out, _ = run(capsys, "memory", base, "--context", "4096", "--kv-dtype", "fp8")
    assert status == 0
    assert "F8_E4M3" in out
    assert "KV cache" in out
    status, _, err = run(capsys, "memory", base, "--kv-dtype", "fp7")
    assert status == 1
    assert "unknown KV-cache dtype 'fp7'" in err


def test_memory_without_config_says_why(
    faulty: FaultyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    base = serve(faulty, q.files_for(q.float_spec(ARCH), None))
    status, out, _ = run(capsys, "memory", base, "--context", "100")
    assert status == 0
    assert "no config.json beside the weights" in out


def test_memory_on_the_hub(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setattr("remotetensors.sources.hub.repo.resolve_token", lambda token: None)
    spec, config = q.mlx(ARCH, bits=4)
    hub.add("org/mlx", q.files_for(spec, config, shards=2))
    with rt.open_model("hf://org/mlx") as model:
        estimate = model.memory(context=1000)
        assert estimate.weights_bytes == model.nbytes
        assert estimate.kv_cache_bytes == 1000 * ARCH.layers * 2 * ARCH.kv_heads * ARCH.head_dim * 2
        assert model.num_parameters == q.float_count(ARCH)
