"""The torch guide's "Load into torch" section (once the README's), run as it is written: its
code blocks are taken from docs/guides/torch.md and executed one after another in one
namespace, against a hub stand-in that serves
the repos they name (seeded random weights in their architectures: all-MiniLM-L6-v2's real
config, and a Qwen2 of 80 small layers in 8 shards)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.hub_standin import HubStandIn
from tests.torch_checkpoints import (
    MINILM_CONFIG,
    bert_checkpoint,
    bert_config,
    safetensors_torch,
    torch,
    transformers,
)

# The section moved from the README to its guide in the documentation site.
README = Path(__file__).resolve().parents[2] / "docs" / "guides" / "torch.md"

QWEN_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 80,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 128,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


def section_code(title: str) -> list[str]:
    """The ```python blocks of the README section headed ``## {title}``, in order."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    body = text[start : end if end != -1 else len(text)]
    return re.findall(r"```python\n(.*?)```", body, flags=re.DOTALL)


def qwen_files() -> tuple[dict[str, bytes], dict[str, Any]]:
    """A sharded Qwen2 checkpoint (bf16, 8 shards, index) and its state dict."""
    torch.manual_seed(72)
    config = transformers.Qwen2Config(**QWEN_CONFIG)
    model = transformers.Qwen2ForCausalLM(config).to(torch.bfloat16)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    names = list(state)
    shards = 8
    files: dict[str, bytes] = {}
    weight_map: dict[str, str] = {}
    for s in range(shards):
        shard = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: state[n] for n in names[s::shards]}
        files[shard] = safetensors_torch.save(part)
        weight_map.update(dict.fromkeys(part, shard))
    files["model.safetensors.index.json"] = json.dumps({"weight_map": weight_map}).encode()
    files["config.json"] = json.dumps(QWEN_CONFIG).encode()
    return files, state


@pytest.fixture
def hub_env(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> HubStandIn:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setattr("remotetensors.sources.hub.repo.resolve_token", lambda token: None)
    return hub


def test_the_readme_torch_section_runs(hub_env: HubStandIn) -> None:
    blocks = section_code("Load into torch")
    assert len(blocks) == 3
    bert, bert_file = bert_checkpoint(bert_config())
    hub_env.add(
        "sentence-transformers/all-MiniLM-L6-v2",
        {"model.safetensors": bert_file, "config.json": json.dumps(MINILM_CONFIG).encode()},
    )
    files, qwen_state = qwen_files()
    hub_env.add("Qwen/Qwen2.5-72B-Instruct", files)
    namespace: dict[str, Any] = {"__name__": "readme"}

    exec(compile(blocks[0], "docs/guides/torch.md (Load into torch, 1)", "exec"), namespace)
    model, report = namespace["model"], namespace["report"]
    assert report.missing == ()
    assert report.unexpected == ()
    assert report.bytes_read <= len(bert_file)
    assert len(report.loaded) == len(bert.state_dict())
    tokens = torch.tensor([[101, 2023, 2003, 1037, 3231, 102]])
    with torch.no_grad():
        assert torch.equal(model(tokens).last_hidden_state, bert(tokens).last_hidden_state)

    hub_env.log.clear()
    exec(compile(blocks[1], "docs/guides/torch.md (Load into torch, 2)", "exec"), namespace)
    layer = namespace["layer"]
    assert namespace["report"].missing == ()
    assert namespace["report"].unexpected == ()
    wanted = {
        n.removeprefix("model.layers.40."): t
        for n, t in qwen_state.items()
        if n.startswith("model.layers.40.")
    }
    assert layer.state_dict().keys() == wanted.keys()
    for name, tensor in layer.state_dict().items():
        assert torch.equal(tensor, wanted[name]), name
    data = hub_env.cdn_entries()
    assert data
    layer_bytes = sum(t.numel() * t.element_size() for t in wanted.values())
    assert sum(e.sent_bytes for e in data) <= 1.1 * layer_bytes + 8 * 64 * 1024

    exec(compile(blocks[2], "docs/guides/torch.md (Load into torch, 3)", "exec"), namespace)
    half = namespace["half"]
    assert half.embeddings.word_embeddings.weight.dtype == torch.bfloat16
    assert torch.equal(
        half.embeddings.word_embeddings.weight,
        bert.embeddings.word_embeddings.weight.to(torch.bfloat16),
    )
    assert set(namespace["state"]) == set(safetensors_torch.load(bert_file))
    assert namespace["missing"] == set()
    assert namespace["unexpected"] == []
