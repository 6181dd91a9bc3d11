"""all-MiniLM-L6-v2 as the hub serves it: a BertModel state dict in one safetensors file.

``sentence-transformers/all-MiniLM-L6-v2``'s ``model.safetensors`` is a BERT of 6 layers,
hidden size 384, 12 heads, intermediate size 1536, a vocabulary of 30522 and 512 positions:
float32 weights (22.7 M parameters, about 87 MiB) and the int64 ``embeddings.position_ids``.
The names, shapes and dtypes here follow it (BertModel's naming); the values are seeded random
numbers, as tests never reach the real hub.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import numpy as np

from tests.reference import write_reference

REPO = "sentence-transformers/all-MiniLM-L6-v2"
HIDDEN, INTERMEDIATE, VOCAB, POSITIONS, LAYERS = 384, 1536, 30522, 512, 6
EMBEDDINGS = "embeddings.word_embeddings.weight"

CONFIG = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "hidden_size": HIDDEN,
    "intermediate_size": INTERMEDIATE,
    "num_attention_heads": 12,
    "num_hidden_layers": LAYERS,
    "max_position_embeddings": POSITIONS,
    "type_vocab_size": 2,
    "vocab_size": VOCAB,
    "torch_dtype": "float32",
}


def shapes() -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape, as the checkpoint names them."""
    found: dict[str, tuple[int, ...]] = {
        EMBEDDINGS: (VOCAB, HIDDEN),
        "embeddings.position_embeddings.weight": (POSITIONS, HIDDEN),
        "embeddings.token_type_embeddings.weight": (2, HIDDEN),
        "embeddings.LayerNorm.weight": (HIDDEN,),
        "embeddings.LayerNorm.bias": (HIDDEN,),
        "embeddings.position_ids": (1, POSITIONS),
        "pooler.dense.weight": (HIDDEN, HIDDEN),
        "pooler.dense.bias": (HIDDEN,),
    }
    for i in range(LAYERS):
        layer = f"encoder.layer.{i}"
        for part in ("attention.self.query", "attention.self.key", "attention.self.value"):
            found[f"{layer}.{part}.weight"] = (HIDDEN, HIDDEN)
            found[f"{layer}.{part}.bias"] = (HIDDEN,)
        found[f"{layer}.attention.output.dense.weight"] = (HIDDEN, HIDDEN)
        found[f"{layer}.attention.output.dense.bias"] = (HIDDEN,)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            found[f"{layer}.{norm}.weight"] = (HIDDEN,)
            found[f"{layer}.{norm}.bias"] = (HIDDEN,)
        found[f"{layer}.intermediate.dense.weight"] = (INTERMEDIATE, HIDDEN)
        found[f"{layer}.intermediate.dense.bias"] = (INTERMEDIATE,)
        found[f"{layer}.output.dense.weight"] = (HIDDEN, INTERMEDIATE)
        found[f"{layer}.output.dense.bias"] = (HIDDEN,)
    return found


@functools.cache
def tensors() -> dict[str, np.ndarray[Any, Any]]:
    """The tensors (seeded), built once per process."""
    rng = np.random.default_rng(2024)
    result: dict[str, np.ndarray[Any, Any]] = {}
    for name, shape in shapes().items():
        if name == "embeddings.position_ids":
            result[name] = np.arange(POSITIONS, dtype=np.int64).reshape(shape)
        else:
            result[name] = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
    return result


@functools.cache
def files() -> dict[str, bytes]:
    """The repo's files: ``model.safetensors`` (by the reference writer) and ``config.json``."""
    return {
        "model.safetensors": write_reference(tensors(), metadata={"format": "pt"}),
        "config.json": json.dumps(CONFIG).encode(),
    }
