"""Checkpoints of torch modules for the torch-loading tests: written with the reference writer
(``safetensors.torch``) from transformers models built with seeded random weights.

Importing this module skips the tests that use it when torch, transformers or accelerate is
missing (they are in the ``test`` extra; torch comes from the CPU wheel CI installs).
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the CPU wheel in CI)")
transformers = pytest.importorskip("transformers", reason="transformers is in the test extra")
accelerate = pytest.importorskip("accelerate", reason="accelerate is in the test extra")
safetensors_torch = pytest.importorskip("safetensors.torch")

# sentence-transformers/all-MiniLM-L6-v2's config.json: one copy, beside the .bin fixtures.
from tests.torch_bin_files import MINILM_CONFIG as MINILM_CONFIG  # noqa: E402 (re-exported)


def bert_config(**changes: Any) -> Any:
    """The MiniLM config as a ``BertConfig``, with ``changes`` applied."""
    return transformers.BertConfig(**{**MINILM_CONFIG, **changes})


def bert_checkpoint(config: Any, seed: int = 29) -> tuple[Any, bytes]:
    """A ``BertModel`` with seeded random weights (eval mode) and its checkpoint as the hub
    serves BERT checkpoints: the state dict plus ``embeddings.position_ids``, which
    transformers registers as a non-persistent buffer but the published files carry."""
    torch.manual_seed(seed)
    model = transformers.BertModel(config).eval()
    state = dict(model.state_dict())
    state["embeddings.position_ids"] = model.embeddings.position_ids.clone()
    return model, safetensors_torch.save(state)


def empty_bert(config: Any) -> Any:
    """A ``BertModel`` built under ``accelerate.init_empty_weights()`` (parameters on meta,
    buffers real), in eval mode."""
    with accelerate.init_empty_weights():
        return transformers.BertModel(config).eval()


_Module: Any = torch.nn.Module  # a base class mypy accepts from an optional import


class OneLayer(_Module):  # type: ignore[misc]
    """A module holding only ``encoder.layer.0`` of a BERT model, under its full names."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.encoder = torch.nn.Module()
        self.encoder.layer = torch.nn.ModuleList(
            [transformers.models.bert.modeling_bert.BertLayer(config)]
        )


def fixed_input(config: Any, length: int = 16) -> Any:
    """Token ids of one sequence, the same on every run."""
    generator = torch.Generator().manual_seed(7)
    return torch.randint(0, config.vocab_size, (1, length), generator=generator)


def gpt2_config() -> Any:
    """A small GPT-2 whose LM head is tied to its token embedding."""
    return transformers.GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        vocab_size=96,
        n_positions=32,
        bos_token_id=0,
        eos_token_id=0,
    )


def gpt2_checkpoint(seed: int = 3) -> tuple[Any, bytes, bytes]:
    """A tied GPT-2 (eval mode) and two checkpoints of it: ``safetensors.torch.save_model``'s
    (which keeps one name of the tied pair, ``lm_head.weight``) and one that keeps the other
    name (``transformer.wte.weight``)."""
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(gpt2_config()).eval()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    head_kept = {k: v for k, v in state.items() if k != "transformer.wte.weight"}
    embedding_kept = {k: v for k, v in state.items() if k != "lm_head.weight"}
    return model, safetensors_torch.save(head_kept), safetensors_torch.save(embedding_kept)


def layer_nbytes(model: Any, prefix: str) -> int:
    """Bytes of the persistent tensors under ``prefix`` in ``model``'s state dict."""
    return sum(
        t.numel() * t.element_size() for n, t in model.state_dict().items() if n.startswith(prefix)
    )
