"""PEFT adapters are reported as adapters: kind, rank, alpha, target modules, base model and
their own parameter count.

The adapter is laid out as PEFT's ``save_pretrained`` writes a LoRA
(:func:`tests.pipelines.lora_adapter`) on a small transformers Llama; the oracle of its count
is ``r * (in + out)`` summed over the base model's adapted ``nn.Linear`` modules, read from
the torch model itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import remotetensors as rt
from remotetensors.cli.app import main
from tests.hub_standin import HubStandIn
from tests.integration.test_models import serve
from tests.pipelines import lora_adapter
from tests.servers import FaultyServer

RANK, ALPHA, TARGETS, BASE = 8, 16, ("q_proj", "v_proj"), "org/tiny-llama"


@pytest.fixture(scope="module")
def adapter() -> tuple[dict[str, bytes], int]:
    """The adapter's files, and the parameters it adds to the base model."""
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # v_proj is 32 -> 16: in and out differ
    )
    base = LlamaForCausalLM(config)
    return lora_adapter(base, rank=RANK, alpha=ALPHA, targets=TARGETS, base_name=BASE)


@pytest.fixture
def hub_env(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> HubStandIn:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return hub


def check_adapter(m: rt.Model, added: int) -> None:
    assert m.adapter is not None
    assert (m.adapter.kind, m.adapter.rank, m.adapter.alpha) == ("LORA", RANK, ALPHA)
    assert m.adapter.target_modules == TARGETS
    assert m.adapter.base_model == BASE
    assert m.num_parameters == added
    assert m.components == {}


def test_an_adapter_repo_is_reported_as_an_adapter(
    adapter: tuple[dict[str, bytes], int], hub_env: HubStandIn
) -> None:
    files, added = adapter
    hub_env.add("org/lora", files)
    with rt.open_model("hf://org/lora") as m:
        check_adapter(m, added)
        assert m.files == ["adapter_model.safetensors"]
        assert all(".lora_A." in n or ".lora_B." in n for n in m.tensors)
    # Named by its file, it is the same adapter: its config is read beside it.
    with rt.open_model("hf://org/lora/adapter_model.safetensors") as m:
        check_adapter(m, added)


def test_an_adapter_over_plain_http_is_found_by_its_config(
    adapter: tuple[dict[str, bytes], int], faulty: FaultyServer
) -> None:
    files, added = adapter
    with rt.open_model(serve(faulty, files)) as m:
        check_adapter(m, added)


def test_info_says_it_is_an_adapter_in_words(
    adapter: tuple[dict[str, bytes], int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    files, added = adapter
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    assert main(["info", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (
        f"LoRA adapter (PEFT): rank {RANK}, alpha {ALPHA}, on q_proj, v_proj; base model "
        f"{BASE}; {added / 1000:.1f}K parameters of its own"
    ) in out
    assert main(["info", str(tmp_path), "--json"]) == 0
    info: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert info["adapter"]["parameters"] == added
    assert main(["params", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["parameters"] == added
    assert report["adapter"] == {
        "kind": "LORA",
        "rank": RANK,
        "alpha": ALPHA,
        "target_modules": list(TARGETS),
        "base_model": BASE,
        "task_type": "CAUSAL_LM",
        "dora": False,
        "rslora": False,
        "rank_pattern": None,
        "modules_to_save": [],
        "parameters": added,
    }
    assert "components" not in report
